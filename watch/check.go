package watch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
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
	// write timeout (agentapi.AnswerWriteTimeout) more to arrive: one that
	// lists every finding of 60,000 QPs is 46 MB of JSON.
	AgentSocket  string
	AgentTimeout time.Duration
}

// Check answers `rdmatool qp-leaks`. When an agent listens on
// o.AgentSocket it answers from its history, which is longer than any
// --watch (Watch and Interval do not apply then). Only when no agent is
// there (the socket does not exist, or nobody accepts connections on it:
// agentapi.ErrNoAgent) does Check observe the host itself with checkOnce.
// Any other failure to get the agent's answer is an *agentapi.AskError: the
// socket refused (permission), an error answer (HTTP 400 or 404), no
// answer within AgentTimeout, an answer that is not the agent's. An agent
// that cannot read RDMA netlink at all is an error too, not an empty
// report. Its own errors name the agent ("agent: ..."), as qp-leaks prints
// them.
func Check(ctx context.Context, d Deps, o CheckOptions) (agentapi.CheckReport, error) {
	d = d.WithDefaults()
	if err := leakwatch.CheckRules(o.Rules); err != nil {
		return agentapi.CheckReport{}, err
	}
	if o.AgentSocket != "" {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.AgentTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, o.AgentTimeout+agentapi.AnswerWriteTimeout)
		}
		rep, err := agentapi.Ask(actx, o.AgentSocket, o.query(), o.AgentTimeout)
		cancel()
		switch {
		case err == nil && rep.ScanError != "" && len(rep.Devices) == 0:
			return agentapi.CheckReport{}, fmt.Errorf("agent: the agent on %s cannot read RDMA netlink: %s", o.AgentSocket, rep.ScanError)
		case err == nil:
			d.Log.Debug("answered by the agent", "socket", o.AgentSocket, "duration_seconds", rep.ObservedSeconds)
			return rep, nil
		case ctx.Err() != nil:
			return agentapi.CheckReport{}, ctx.Err()
		case errors.Is(err, agentapi.ErrNoAgent):
			d.Log.Debug("no agent, observing locally", "socket", o.AgentSocket, "err", err)
		default:
			return agentapi.CheckReport{}, err
		}
	}
	return checkOnce(ctx, d, o)
}

// query is what the agent is asked: the options of a qp-leaks run but
// Watch and Interval, which do not apply (the agent has been observing
// since it started). NoProbes skips the rules that need probes.
func (o CheckOptions) query() leakwatch.Query {
	q := leakwatch.Query{Device: o.Device, MinAge: o.MinAge, Rules: o.Rules, MaxQP: o.MaxQP, Limit: o.Limit}
	if o.NoProbes {
		q.SkipProbeRules = noProbesReason
	}
	return q
}

// noProbesReason is why the probes are off with --no-probes.
const noProbesReason = "disabled by --no-probes"

// checkOnce observes the host for o.Watch with the probes (when they load)
// and netlink scans every o.Interval (each device's MRs dumped at the
// first, and at those whose resource summary counts another number of
// MRs), then evaluates the leak rules. The
// probe events are applied as they arrive, on a goroutine of their own,
// and the rdma_cm ID dumps they ask for made on another (FollowPeers);
// checkOnce stops and waits for both before it returns.
func checkOnce(ctx context.Context, d Deps, o CheckOptions) (agentapi.CheckReport, error) {
	d = d.WithDefaults()
	if err := leakwatch.CheckRules(o.Rules); err != nil {
		return agentapi.CheckReport{}, err
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	nl, err := d.Dial()
	if err != nil {
		return agentapi.CheckReport{}, err
	}
	defer nl.Close()
	devs, err := nl.Devices(ctx)
	if err != nil {
		return agentapi.CheckReport{}, err
	}
	if o.Device != "" {
		dev, err := rdmanl.FindDevice(devs, o.Device)
		if err != nil {
			return agentapi.CheckReport{}, err
		}
		devs = []rdmanl.Device{dev}
	}
	if len(devs) == 0 {
		return agentapi.CheckReport{}, fmt.Errorf("agent: check: %w", errNoDevices)
	}
	cfg := leakwatch.Config{MaxQP: o.MaxQP}
	var src EventSource
	switch {
	case o.NoProbes:
		cfg.ProbesReason = noProbesReason
	case d.OpenProbes == nil:
		cfg.ProbesReason = "this build has no probes"
	default:
		if src, err = d.OpenProbes(ctx, d.Log); err != nil {
			cfg.ProbesReason = err.Error()
			d.Log.Warn("probes unavailable, netlink only", "err", err)
			src = nil
		}
	}
	st := NewState(cfg, d.Now)
	st.SetProcRoot(d.ProcRoot)
	st.SetDevices(devs, nil, d.Now())

	watchCtx, cancel := context.WithTimeout(ctx, o.Watch)
	defer cancel()
	var probesDone chan error // nil without probes: never ready
	if src != nil {
		probesDone = make(chan error, 1)
		defer src.Close()
		st.SetProbes(true, "")
		probeCtx, stopProbes := context.WithCancel(ctx)
		peersDone := make(chan struct{})
		defer func() {
			stopProbes()
			<-peersDone
		}()
		sites := NewSites(d.Log, d.ProcRoot)
		go func() { probesDone <- FollowProbes(probeCtx, src, st, o.Device, o.Interval, sites, nil) }()
		// The peers of QPs that connect and fail between two scans.
		go func() {
			defer close(peersDone)
			FollowPeers(probeCtx, d, st)
		}()
		// The probes stop at the end of the watch, once they applied
		// everything they read until then.
		context.AfterFunc(watchCtx, stopProbes)
	}
	sc := Scanner{NL: nl, ProcRoot: d.ProcRoot, Now: d.Now, Facts: NewFactsCache(d.LearnDevice), zombies: true}
	mrs := map[uint32]MRMark{} // by device index
	scan := func() error {
		s, sums, err := sc.Scan(ctx, devs)
		if err != nil {
			return err
		}
		st.Scan(s)
		// The MRs at the first scan, and again where their number
		// changed.
		for _, sum := range sums {
			i := slices.IndexFunc(devs, func(dev rdmanl.Device) bool { return dev.Index == sum.DevIndex })
			if i < 0 {
				continue
			}
			mark, err := sc.UpdateMRs(ctx, st, devs[i], sum, mrs[sum.DevIndex], o.Watch)
			if err != nil && !errors.Is(err, rdmanl.ErrNoDevice) {
				return err
			}
			mrs[sum.DevIndex] = mark
		}
		return nil
	}
	if err := scan(); err != nil {
		return agentapi.CheckReport{}, err
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
				return agentapi.CheckReport{}, err
			}
		case <-watchCtx.Done():
			break loop
		}
	}
	if ctx.Err() != nil {
		return agentapi.CheckReport{}, ctx.Err()
	}
	if probesDone != nil {
		// Every event read before the end is applied. The stream ends
		// with the watch: an error then changes nothing in the report.
		if err := <-probesDone; err != nil {
			d.Log.Debug("probe stream ended with an error", "err", err)
		}
	}
	// One more scan, so the report reflects the end of the watch.
	if err := scan(); err != nil {
		return agentapi.CheckReport{}, err
	}
	rep, _ := st.Report(leakwatch.Query{MinAge: o.MinAge, Rules: o.Rules, Device: o.Device, Limit: o.Limit})
	rep.Source = "local"
	return rep, nil
}

// errNoDevices is the cause when the host has no RDMA device to watch.
var errNoDevices = errors.New("no RDMA devices")
