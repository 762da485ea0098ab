package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// CheckOptions are the qp-leaks options.
type CheckOptions struct {
	Device   string        // only this device; "" for all
	Watch    time.Duration // how long to observe (probes and scans)
	Interval time.Duration // time between netlink scans
	MinAge   time.Duration
	Rules    []string
	NoProbes bool
	MaxQP    map[string]uint64
	// Limit caps the findings reported QP by QP (0: all); the report's
	// summary counts them all.
	Limit int
	// AgentSocket is where Check asks the agent first ("" never asks);
	// AgentTimeout bounds the wait for its answer to begin (0: only ctx
	// does). An answer that has begun may take up to the agent's own
	// write timeout (AnswerWriteTimeout) more to arrive: one that lists
	// every finding of 60,000 QPs is 46 MB of JSON.
	AgentSocket  string
	AgentTimeout time.Duration
}

// CheckReport is what `rdmatool qp-leaks` prints.
type CheckReport struct {
	leakwatch.Report
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string `json:"probes"`
	ProbesError string `json:"probes_error"`
	LostEvents  uint64 `json:"lost_events"`
	// Scans counts the netlink QP dumps the report rests on, one per
	// device scanned.
	Scans   int      `json:"scans"`
	Devices []string `json:"devices"`
	// ScanError says which netlink listings or scans failed at their last
	// attempt ("" when none did): findings rest only on what was read.
	ScanError string `json:"scan_error"`
	// Source is "local" when this command observed the host itself for
	// --watch, "agent" when the agent answered from its longer history.
	Source string `json:"source"`
	// ObservedSince is when the observation began: the start of --watch,
	// or the agent's start (RFC 3339, UTC).
	ObservedSince time.Time `json:"observed_since"`
}

// Check answers `rdmatool qp-leaks`. When an agent listens on
// o.AgentSocket it answers from its history, which is longer than any
// --watch (Watch and Interval do not apply then). Only when no agent is
// there (the socket does not exist, or nobody accepts connections on it:
// ErrNoAgent) does Check observe the host itself with CheckOnce. Any other
// failure to get the agent's answer is an *AskError: the socket refused
// (permission), an error answer (HTTP 400 or 404), no answer within
// AgentTimeout, an answer that is not the agent's. An agent that cannot
// read RDMA netlink at all is an error too, not an empty report.
func Check(ctx context.Context, d Deps, o CheckOptions) (CheckReport, error) {
	d = d.withDefaults()
	if err := leakwatch.CheckRules(o.Rules); err != nil {
		return CheckReport{}, err
	}
	if o.AgentSocket != "" {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.AgentTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, o.AgentTimeout+AnswerWriteTimeout)
		}
		rep, err := Ask(actx, o.AgentSocket, o)
		cancel()
		switch {
		case err == nil && rep.ScanError != "" && len(rep.Devices) == 0:
			return CheckReport{}, fmt.Errorf("agent: the agent on %s cannot read RDMA netlink: %s", o.AgentSocket, rep.ScanError)
		case err == nil:
			d.Log.Debug("answered by the agent", "socket", o.AgentSocket, "duration_seconds", rep.ObservedSeconds)
			return rep, nil
		case ctx.Err() != nil:
			return CheckReport{}, ctx.Err()
		case errors.Is(err, ErrNoAgent):
			d.Log.Debug("no agent, observing locally", "socket", o.AgentSocket, "err", err)
		default:
			return CheckReport{}, err
		}
	}
	return CheckOnce(ctx, d, o)
}

// CheckOnce observes the host for o.Watch with the probes (when they load)
// and netlink scans every o.Interval, then evaluates the leak rules. The
// probe events are applied as they arrive, on a goroutine of their own
// that CheckOnce stops and waits for before it returns.
func CheckOnce(ctx context.Context, d Deps, o CheckOptions) (CheckReport, error) {
	d = d.withDefaults()
	if err := leakwatch.CheckRules(o.Rules); err != nil {
		return CheckReport{}, err
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	nl, err := d.Dial()
	if err != nil {
		return CheckReport{}, err
	}
	defer nl.Close()
	devs, err := nl.Devices(ctx)
	if err != nil {
		return CheckReport{}, err
	}
	if o.Device != "" {
		dev, err := rdmanl.FindDevice(devs, o.Device)
		if err != nil {
			return CheckReport{}, err
		}
		devs = []rdmanl.Device{dev}
	}
	if len(devs) == 0 {
		return CheckReport{}, fmt.Errorf("agent: check: %w", errNoDevices)
	}
	cfg := leakwatch.Config{MinAge: o.MinAge, Rules: o.Rules, MaxQP: o.MaxQP}
	var src EventSource
	switch {
	case o.NoProbes:
		cfg.ProbesReason = "disabled by --no-probes"
	case d.OpenProbes == nil:
		cfg.ProbesReason = "this build has no probes"
	default:
		if src, err = d.OpenProbes(ctx, d.Log); err != nil {
			cfg.ProbesReason = err.Error()
			d.Log.Warn("probes unavailable, netlink only", "err", err)
			src = nil
		}
	}
	st := NewState(cfg, d.Now, "")
	st.SetProcRoot(d.ProcRoot)
	st.setDevices(devs, nil, d.Now())

	watchCtx, cancel := context.WithTimeout(ctx, o.Watch)
	defer cancel()
	var probesDone chan error // nil without probes: never ready
	if src != nil {
		probesDone = make(chan error, 1)
		defer src.Close()
		st.SetProbes(true, "")
		probeCtx, stopProbes := context.WithCancel(ctx)
		defer stopProbes()
		go func() { probesDone <- followProbes(probeCtx, src, st, o.Device, o.Interval) }()
		// The probes stop at the end of the watch, once they applied
		// everything they read until then.
		context.AfterFunc(watchCtx, stopProbes)
	}
	sc := scanner{nl: nl, procRoot: d.ProcRoot, now: d.Now, zombies: true, facts: newFactsCache(d.LearnDevice)}
	scan := func() error {
		s, _, err := sc.scan(ctx, devs)
		if err != nil {
			return err
		}
		st.Scan(s)
		return nil
	}
	if err := scan(); err != nil {
		return CheckReport{}, err
	}
	d.Log.Info("watching", "probes", onOff(src != nil), "duration_seconds", o.Watch.Seconds(), "devices", len(devs))
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
loop:
	for {
		select {
		case err := <-probesDone:
			probesDone = nil
			if err != nil {
				d.Log.Warn("probe stream failed, netlink only from here", "err", err)
				st.SetProbes(false, "probe stream failed: "+err.Error())
			}
		case <-tick.C:
			if err := scan(); err != nil {
				return CheckReport{}, err
			}
		case <-watchCtx.Done():
			break loop
		}
	}
	if ctx.Err() != nil {
		return CheckReport{}, ctx.Err()
	}
	if probesDone != nil {
		<-probesDone // every event read before the end is applied
	}
	// One more scan, so the report reflects the end of the watch.
	if err := scan(); err != nil {
		return CheckReport{}, err
	}
	rep, _ := st.report(leakwatch.Query{MinAge: o.MinAge, Rules: o.Rules, Device: o.Device, Limit: o.Limit}, "local")
	return rep, nil
}

// errNoDevices is the cause when the host has no RDMA device to watch.
var errNoDevices = errors.New("no RDMA devices")
