package agent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// EventSource is a stream of probe events (the bpf tracer).
type EventSource interface {
	Events(ctx context.Context) iter.Seq2[bpf.Event, error]
	Close() error
}

// Deps are what a check talks to; tests and the CLI pass their own.
type Deps struct {
	Log *slog.Logger
	// Dial opens the RDMA netlink client.
	Dial func() (*rdmanl.Client, error)
	// OpenProbes attaches the eBPF probes; nil or an error means the
	// check runs on netlink only and says which rules it skipped.
	OpenProbes func(ctx context.Context, log *slog.Logger) (EventSource, error)
	// ProcRoot is /proc, where QP owners are resolved.
	ProcRoot string
	// Now is the clock; time.Now unless a test says otherwise.
	Now func() time.Time
}

// CheckOptions are the qp-leaks options.
type CheckOptions struct {
	Device   string        // only this device; "" for all
	Watch    time.Duration // how long to observe (probes and scans)
	Interval time.Duration // time between netlink scans
	MinAge   time.Duration
	Rules    []string
	NoProbes bool
	MaxQP    map[string]uint64
	// AgentSocket is where Check asks the agent first ("" never asks);
	// AgentTimeout bounds the wait for its answer (0: only ctx does).
	AgentSocket  string
	AgentTimeout time.Duration
}

// CheckReport is what `rdmatool qp-leaks` prints.
type CheckReport struct {
	leakwatch.Report
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string   `json:"probes"`
	ProbesError string   `json:"probes_error"`
	LostEvents  uint64   `json:"lost_events"`
	Scans       int      `json:"scans"`
	Devices     []string `json:"devices"`
	// Source is "local" when this command observed the host itself for
	// --watch, "agent" when the agent answered from its longer history.
	Source string `json:"source"`
	// ObservedSince is when the observation began: the start of --watch,
	// or the agent's start (RFC 3339, UTC).
	ObservedSince time.Time `json:"observed_since"`
}

// ErrUnknownRule is returned for a --rule that names no rule.
var ErrUnknownRule = errors.New("unknown rule")

// Check answers `rdmatool qp-leaks`. When an agent listens on
// o.AgentSocket it answers from its history, which is longer than any
// --watch (Watch and Interval do not apply then). Otherwise Check observes
// the host itself with CheckOnce: silently (a Debug log) when no agent
// runs, with a Warn log when one is there but its answer is unusable.
func Check(ctx context.Context, d Deps, o CheckOptions) (CheckReport, error) {
	if err := validRules(o.Rules); err != nil {
		return CheckReport{}, err
	}
	if o.AgentSocket != "" {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.AgentTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, o.AgentTimeout)
		}
		rep, err := Ask(actx, o.AgentSocket, o)
		cancel()
		switch {
		case err == nil:
			d.Log.Debug("answered by the agent", "socket", o.AgentSocket, "duration_seconds", rep.ObservedSeconds)
			return rep, nil
		case ctx.Err() != nil:
			return CheckReport{}, ctx.Err()
		case errors.Is(err, ErrNoAgent):
			d.Log.Debug("no agent, observing locally", "socket", o.AgentSocket, "err", err)
		default:
			d.Log.Warn("the agent did not answer, observing locally", "socket", o.AgentSocket, "err", err)
		}
	}
	return CheckOnce(ctx, d, o)
}

func validRules(rules []string) error {
	for _, r := range rules {
		if !slicesContains(leakwatch.Rules(), r) {
			return fmt.Errorf("qp-leaks: %w %q (valid: %v)", ErrUnknownRule, r, leakwatch.Rules())
		}
	}
	return nil
}

// CheckOnce observes the host for o.Watch with probes (when they load) and
// periodic netlink scans, then evaluates the leak rules.
func CheckOnce(ctx context.Context, d Deps, o CheckOptions) (CheckReport, error) {
	if err := validRules(o.Rules); err != nil {
		return CheckReport{}, err
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	c, err := d.Dial()
	if err != nil {
		return CheckReport{}, err
	}
	defer c.Close()
	devs, err := c.Devices(ctx)
	if err != nil {
		return CheckReport{}, err
	}
	if o.Device != "" {
		dev, err := c.Device(ctx, o.Device)
		if err != nil {
			return CheckReport{}, err
		}
		devs = []rdmanl.Device{dev}
	}
	if len(devs) == 0 {
		return CheckReport{}, errors.New("qp-leaks: no RDMA devices")
	}
	rep := CheckReport{Probes: "off"}
	for _, dv := range devs {
		rep.Devices = append(rep.Devices, dv.Name)
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
	if src != nil {
		defer src.Close()
		cfg.Probes, rep.Probes = true, "on"
	}
	rep.ProbesError = cfg.ProbesReason
	w := leakwatch.New(cfg, d.Now)

	watchCtx, cancel := context.WithTimeout(ctx, o.Watch)
	defer cancel()
	var events <-chan bpf.Event
	var probeErr <-chan error
	if src != nil {
		p := startPump(watchCtx, src, o.Device)
		events, probeErr = p.events, p.err
	}
	scan := func() error {
		s, err := scanDevices(ctx, c, devs, d.ProcRoot, d.Now)
		if err != nil {
			return err
		}
		w.Scan(s)
		rep.Scans++
		return nil
	}
	if err := scan(); err != nil {
		return CheckReport{}, err
	}
	d.Log.Info("watching", "probes", rep.Probes, "duration_seconds", o.Watch.Seconds(), "devices", len(devs))
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil // probes ended; keep scanning
				continue
			}
			w.Event(ev)
		case err := <-probeErr:
			d.Log.Warn("probe stream failed, netlink only from here", "err", err)
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
	// Drain what the probes delivered before the deadline, then scan once
	// more so the report reflects the end of the watch.
	if events != nil {
		cancel() // the reader stops at the deadline anyway; do not wait on it
		for ev := range events {
			w.Event(ev)
		}
	}
	if err := scan(); err != nil {
		return CheckReport{}, err
	}
	if st, ok := src.(interface{ Stats() (bpf.Stats, error) }); ok {
		if stats, err := st.Stats(); err == nil {
			rep.LostEvents = stats.Total()
		}
	}
	rep.Report = w.Findings()
	rep.Source, rep.ObservedSince = "local", w.Started().UTC()
	return rep, nil
}

// pump carries a probe stream's events, of one device or of all, from the
// reader goroutine to the loop that owns the watcher.
type pump struct {
	// events is closed when the stream ends: its context ended or it
	// failed. The owner drains it until then, which is how it waits for
	// the goroutine.
	events <-chan bpf.Event
	// err holds the stream's error when it failed.
	err <-chan error
}

// startPump reads src until ctx ends or the stream fails, keeping the
// events of device ("" keeps all).
func startPump(ctx context.Context, src EventSource, device string) pump {
	events := make(chan bpf.Event, 4096)
	errc := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range src.Events(ctx) {
			if err != nil {
				errc <- err
				return
			}
			if device == "" || ev.DevName == device {
				events <- ev
			}
		}
	}()
	return pump{events: events, err: errc}
}

// scanDevices dumps the QPs and counts the user contexts of each device,
// and resolves the QP owners through /proc: command name, cgroup and
// container.
func scanDevices(ctx context.Context, c *rdmanl.Client, devs []rdmanl.Device, procRoot string, now func() time.Time) (leakwatch.Scan, error) {
	var procs *sysfs.Procs
	if procRoot != "" {
		procs, _ = sysfs.NewProcs(procRoot) // without /proc, owners have no comm
	}
	s := leakwatch.Scan{Started: now()}
	sums, err := c.Summaries(ctx)
	if err != nil {
		return s, err
	}
	for _, dev := range devs {
		ds := leakwatch.DeviceScan{Device: dev, Owners: map[uint32]leakwatch.Process{}}
		for _, sum := range sums {
			if sum.DevIndex != dev.Index {
				continue
			}
			for _, cnt := range sum.Counts {
				if cnt.Name == "ctx" {
					ds.Contexts = cnt.Current
				}
			}
		}
		for qp, err := range c.QPs(ctx, dev, rdmanl.DumpOptions{}) {
			if err != nil {
				var pe *rdmanl.PartialError
				if errors.As(err, &pe) {
					continue
				}
				if errors.Is(err, rdmanl.ErrNoDevice) {
					break // the device went away during the scan
				}
				return s, err
			}
			ds.QPs = append(ds.QPs, qp)
			if pid := qp.Owner.PID; pid != 0 && procs != nil {
				if _, done := ds.Owners[pid]; !done {
					if p, ok := procs.Lookup(int(pid)); ok {
						ds.Owners[pid] = leakwatch.Process{TGID: uint32(p.PID), Comm: p.Comm, Cgroup: p.Cgroup, ContainerID: p.ContainerID}
					}
				}
			}
		}
		s.Devices = append(s.Devices, ds)
	}
	s.Time = now()
	return s, nil
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
