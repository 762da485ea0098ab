package reset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
)

// Results.
const (
	ResultPlanned = "planned"
	ResultDone    = "done"
	ResultWaiting = "waiting"
	ResultFailed  = "failed"
)

// Run resets the device o names, or with o.DryRun or without o.Yes only
// says what a reset would do and what it would destroy. Every reset (not a
// plan) is logged as one audit record at Info ("reset") on o.Log.
//
// Run never blocks beyond o.Grace plus o.Timeout (and the few netlink and
// /proc reads before and after): the removal runs in a helper process
// (see RunHelper), and when it has not finished in time Run returns a
// report with Result "waiting", the holders it waits for, the state the
// device is in and how to finish or abandon, with an error matching
// ErrHolders.
func Run(ctx context.Context, c *rdmanl.Client, o Options) (Report, error) {
	start := time.Now()
	rep := Report{
		Time: start.UTC(), Who: o.Who, Device: o.Device, Method: o.Method, DryRun: o.DryRun,
		Netdevs: []string{}, ResetMethods: []string{}, Offered: []Method{}, Holders: []Holder{},
		Unreadable: []uint32{}, WaitingOn: []Holder{}, Events: []Event{},
	}
	if err := Check(o); err != nil {
		return rep, err
	}
	t, err := inspect(ctx, c, o.sysRoot(), o.Device)
	if err != nil {
		return rep, err
	}
	rep.Index, rep.NodeGUID, rep.Kind, rep.Offered = t.dev.Index, t.dev.NodeGUID, t.kind, t.offered
	for _, p := range t.ports {
		if p.NetdevName != "" && !slices.Contains(rep.Netdevs, p.NetdevName) {
			rep.Netdevs = append(rep.Netdevs, p.NetdevName)
		}
	}
	if t.fn != nil {
		rep.PCI, rep.Driver = t.fn.Addr, t.fn.Driver
		rep.ResetMethods = append(rep.ResetMethods, t.fn.ResetMethods...)
		rep.Disassociate = t.kind == "pci" && slices.Contains(disassociates, t.fn.Driver)
	}
	m, err := t.choose(o.Method)
	if err != nil {
		return rep, err
	}
	rep.Method = m
	if !o.DryRun && o.Yes {
		if err := privileged(m); err != nil {
			return rep, err
		}
	}
	if err := scanUsage(ctx, c, o, &t, &rep); err != nil {
		return rep, err
	}
	if err := persistentName(ctx, c, o, &rep); err != nil {
		return rep, err
	}
	if o.DryRun || !o.Yes {
		rep.Result = ResultPlanned
		if !o.DryRun {
			return rep, fmt.Errorf("reset: %s: %w", o.Device, ErrNotConfirmed)
		}
		return rep, nil
	}

	err = act(ctx, c, o, t, &rep)
	rep.DurationSeconds = time.Since(start).Seconds()
	if err != nil {
		rep.Error = err.Error()
		if rep.Result == "" {
			rep.Result = ResultFailed
		}
	}
	audit(o.log(), rep)
	return rep, err
}

// audit logs the reset's record: who, what, method, holders, duration,
// result.
func audit(log *slog.Logger, rep Report) {
	holders := make([]string, len(rep.Holders))
	for i, h := range rep.Holders {
		holders[i] = fmt.Sprintf("%d (%s)", h.PID, h.Comm)
	}
	log.Info("reset", "who", rep.Who, "device", rep.Device, "index", rep.Index,
		"node_guid", rep.NodeGUID.String(), "method", string(rep.Method), "qps", rep.QPs, "mrs", rep.MRs,
		"holders", holders, "duration_seconds", rep.DurationSeconds, "result", rep.Result,
		"state", rep.State, "err", rep.Error, "helper_pid", rep.HelperPID)
}

// persistentName asks the rename policies (dry run, as if forced) which
// name the device has: if they give it the name it has now, that name is
// persistent and is re-applied through them after the reset.
func persistentName(ctx context.Context, c *rdmanl.Client, o Options, rep *Report) error {
	ro := o.Rename
	ro.Devices, ro.All, ro.DryRun, ro.Force, ro.SysRoot = []string{o.Device}, false, true, true, o.SysRoot
	job, err := rename.Prepare(ctx, ro)
	if err != nil {
		return err
	}
	rr, err := job.Run(ctx, c)
	if err != nil {
		return err
	}
	for _, r := range rr.Renames {
		if r.Device == o.Device && r.To == o.Device && r.Policy != "" && r.Policy != rename.PolicyKeep {
			rep.PersistentName, rep.NamePolicy = r.To, r.Policy
		}
	}
	return nil
}

// act carries out the reset whose plan rep holds.
func act(ctx context.Context, c *rdmanl.Client, o Options, t target, rep *Report) error {
	if o.Grace > 0 {
		gs := time.Now()
		left, err := awaitHolders(ctx, o, t, o.Grace)
		rep.GraceSeconds = time.Since(gs).Seconds()
		if err != nil {
			return err
		}
		rep.WaitingOn = left
	}
	if rep.Method == MethodNetdevBounce {
		return bounce(ctx, c, o, t, rep)
	}
	deadline := time.Now().Add(o.Timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	obs := startObserving(ctx, c, o, t)

	step := Step{Method: rep.Method, Device: t.dev.Name, Index: t.dev.Index, Kind: t.kind, Netdev: t.netdev,
		SysRoot: o.sysRoot(), Wait: 30 * time.Second}
	if t.fn != nil {
		step.PCI, step.Driver, step.FLR = t.fn.Addr, t.fn.Driver, t.fn.OffersReset("flr")
	}
	if t.devlink != nil {
		step.DevlinkBus, step.DevlinkDev = t.devlink.bus, t.devlink.dev
		if resolved, err := filepath.EvalSymlinks(t.devDir); err == nil {
			step.DevDir = resolved // the netdev's link goes with the netdev
		}
	}
	logDir := o.LogDir
	if logDir == "" {
		logDir = "/run/rdmatool"
	}
	h, err := startHelper(o.Helper, step, logDir)
	if err != nil {
		obs.stop()
		return err
	}
	rep.HelperPID, rep.HelperLog = h.pid, h.logPath
	removed, done := false, false
	var helperErr error
wait:
	for {
		select {
		case p, ok := <-h.progress:
			if !ok {
				helperErr = fmt.Errorf("reset: the helper (pid %d) ended without a result: see %s", h.pid, h.logPath)
				break wait
			}
			switch p.Stage {
			case stageRemoved:
				removed = true
			case stageDone:
				done = true
				break wait
			case stageFailed:
				helperErr = errors.New(p.Error)
				break wait
			}
		case <-ctx.Done():
			break wait
		}
	}
	_ = h.pipe.Close() // read only
	if helperErr != nil {
		rep.Events = obs.stop()
		if !removed && deletedMeanwhile(ctx, c, t.dev) {
			// Another process deleted the device before the helper
			// removed it: the reset changed nothing and brings back
			// nothing.
			rep.State = fmt.Sprintf("%s is gone: another process deleted it before the reset removed it", t.dev.Name)
			rep.Next = "nothing to undo; see the helper's log " + h.logPath
			return fmt.Errorf("reset: %s: deleted by another process before the reset removed it: %w", t.dev.Name, rdmanl.ErrNoDevice)
		}
		rep.State, rep.Next = failedState(t, rep, removed, h)
		return helperErr
	}
	if !done {
		rep.Events = obs.stop()
		return timedOut(o, t, rep, removed, h)
	}
	after, err := awaitBack(ctx, c, o, t, rep.PersistentName != "")
	rep.Events = obs.stop()
	rep.After = after
	if err != nil {
		rep.State = fmt.Sprintf("%s did not come back within --timeout: %v", t.dev.Name, err)
		rep.Next = fmt.Sprintf("check \"rdmatool dev show\" and the helper's log %s", h.logPath)
		return err
	}
	rep.Result = ResultDone
	return nil
}

// awaitHolders waits up to grace for the processes holding dev's uverbs
// device to close it, and returns those that still hold it.
func awaitHolders(ctx context.Context, o Options, t target, grace time.Duration) ([]Holder, error) {
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		scan, err := holdersOf(o.procRoot(), t.uverbs, t.hasUverbs)
		if err != nil {
			return nil, err
		}
		left := []Holder{}
		for _, oh := range scan.Holders {
			left = append(left, holderOf(oh))
		}
		if len(left) == 0 {
			return left, nil
		}
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
				return left, err
			}
			o.log().Info("grace period over", "device", t.dev.Name, "holders", len(left))
			return left, nil
		case <-tick.C:
		}
	}
}

// timedOut fills in the report of a reset whose helper did not finish in
// time, naming who it waits for.
func timedOut(o Options, t target, rep *Report, removed bool, h *helperProc) error {
	rep.Result = ResultWaiting
	rep.WaitingOn = rep.WaitingOn[:0]
	scan, err := holdersOf(o.procRoot(), t.uverbs, t.hasUverbs)
	if err != nil {
		o.log().Warn("holders not listed", "device", t.dev.Name, "err", err)
	}
	for _, oh := range scan.Holders {
		rep.WaitingOn = append(rep.WaitingOn, holderOf(oh))
	}
	var who []string
	for _, hh := range rep.WaitingOn {
		who = append(who, fmt.Sprintf("pid %d (%s)", hh.PID, hh.Comm))
	}
	if len(who) == 0 {
		who = append(who, "the kernel (no process holds the device any more)")
	}
	what := "remove " + t.dev.Name
	switch rep.Method {
	case MethodUnbind, MethodPCIReset:
		what = fmt.Sprintf("unbind %s from %s", t.fn.Addr, t.fn.Driver)
	case MethodDevlinkReload:
		what = "reload devlink " + t.devlink.String()
	}
	if removed {
		rep.State = fmt.Sprintf("%s was removed; the helper is bringing it back", t.dev.Name)
	} else {
		rep.State = fmt.Sprintf("half-removed: %s no longer accepts new users and the kernel is waiting to %s until its users close it", t.dev.Name, what)
	}
	recreate := fmt.Sprintf("rdmatool link add %s type %s netdev %s", t.dev.Name, t.kind, t.netdev)
	if t.kind == "pci" {
		recreate = fmt.Sprintf("echo %s > /sys/bus/pci/drivers/%s/bind", t.fn.Addr, t.fn.Driver)
	}
	rep.Next = fmt.Sprintf("to finish, end the holders (kill %s): the helper (pid %d) then completes the reset by itself and logs to %s; "+
		"to abandon, kill %d: the kernel still removes %s once the holders are gone, and \"%s\" brings it back",
		pidList(rep.WaitingOn), h.pid, h.logPath, h.pid, t.dev.Name, recreate)
	return fmt.Errorf("reset: %s: still waiting on %s after %s: %w", t.dev.Name, strings.Join(who, ", "), o.Timeout, ErrHolders)
}

func pidList(hs []Holder) string {
	if len(hs) == 0 {
		return "nothing left"
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = fmt.Sprint(h.PID)
	}
	return strings.Join(s, " ")
}

// deletedMeanwhile reports whether dev is no longer listed (by its index,
// which a device keeps until it is deleted), also after ctx ended.
func deletedMeanwhile(ctx context.Context, c *rdmanl.Client, dev rdmanl.Device) bool {
	devs, err := c.Devices(context.WithoutCancel(ctx))
	return err == nil && !slices.ContainsFunc(devs, func(d rdmanl.Device) bool { return d.Index == dev.Index })
}

// failedState says where a failed helper left the device.
func failedState(t target, rep *Report, removed bool, h *helperProc) (state, next string) {
	if !removed {
		return fmt.Sprintf("%s was not removed", t.dev.Name), "nothing to undo; see the helper's log " + h.logPath
	}
	switch rep.Method {
	case MethodUnbind, MethodPCIReset:
		return fmt.Sprintf("%s was removed and not brought back", t.dev.Name),
			fmt.Sprintf("bind the function (echo %s > /sys/bus/pci/drivers/%s/bind), then \"rdmatool link add %s type %s netdev %s\" for a software device; see %s",
				t.fn.Addr, t.fn.Driver, t.dev.Name, t.kind, t.netdev, h.logPath)
	}
	return fmt.Sprintf("%s was removed and not brought back", t.dev.Name),
		fmt.Sprintf("\"rdmatool link add %s type %s netdev %s\" brings it back; see %s", t.dev.Name, t.kind, t.netdev, h.logPath)
}

// awaitBack waits for the device to be back: for a software device by
// its name, for a PCI device by its node GUID; then for its ports to be
// ACTIVE, and re-applies its persistent name.
func awaitBack(ctx context.Context, c *rdmanl.Client, o Options, t target, persistent bool) (*After, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var dev rdmanl.Device
	for {
		devs, err := c.Devices(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		found := false
		for _, d := range devs {
			if (t.kind != "pci" && d.Name == t.dev.Name) || (t.kind == "pci" && d.NodeGUID == t.dev.NodeGUID) {
				dev, found = d, true
			}
		}
		if found {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reset: wait for %s to return: %w", t.dev.Name, ctx.Err())
		case <-tick.C:
		}
	}
	a := &After{Device: dev.Name, Index: dev.Index, NodeGUID: dev.NodeGUID, SameGUID: dev.NodeGUID == t.dev.NodeGUID, Ports: []PortState{}}
	for {
		ports, err := c.Ports(ctx, dev)
		if err != nil && ctx.Err() == nil {
			return a, err
		}
		active := len(ports) > 0
		a.Ports = a.Ports[:0]
		for _, p := range ports {
			ps := PortState{Port: p.Index, State: p.State.String(), PhysState: p.PhysState.String(), Netdev: p.NetdevName}
			if p.State != rdmanl.PortStateActive {
				active = false
				ps.Why = portWhy(p)
			}
			a.Ports = append(a.Ports, ps)
		}
		if active || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	if !a.SameGUID {
		return a, fmt.Errorf("reset: %s came back with node GUID %s, not %s", dev.Name, dev.NodeGUID, t.dev.NodeGUID)
	}
	// The name: a persistent one is applied again through the rename
	// policies; any other is restored as it was (a PCI device comes back
	// under the kernel's name).
	if persistent {
		ro := o.Rename
		ro.Devices, ro.All, ro.DryRun, ro.Force, ro.SysRoot = []string{dev.Name}, false, false, true, o.SysRoot
		job, err := rename.Prepare(ctx, ro)
		if err != nil {
			return a, err
		}
		rr, err := job.Run(ctx, c)
		if err != nil {
			return a, err
		}
		if len(rr.Renames) == 1 {
			r := rr.Renames[0]
			a.Name, a.Device = &r, r.To
		}
	} else if dev.Name != t.dev.Name {
		if err := c.Rename(ctx, dev, t.dev.Name); err != nil {
			return a, err
		}
		a.Device = t.dev.Name
	}
	for _, p := range a.Ports {
		if p.Why != "" {
			return a, fmt.Errorf("reset: %s port %d is %s: %s", a.Device, p.Port, p.State, p.Why)
		}
	}
	return a, nil
}

// portWhy says why a port is not ACTIVE.
func portWhy(p rdmanl.Port) string {
	if p.NetdevName != "" {
		if st, err := readNetdev(p.NetdevName); err == nil && !st.Up {
			return "its netdev " + p.NetdevName + " is down"
		}
	}
	return "phys state " + p.PhysState.String()
}

// observation collects device events during the reset.
type observation struct {
	mu     sync.Mutex
	events []Event
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (ob *observation) add(e Event) {
	ob.mu.Lock()
	ob.events = append(ob.events, e)
	ob.mu.Unlock()
}

// stop ends the observation and returns what it saw.
func (ob *observation) stop() []Event {
	ob.cancel()
	ob.wg.Wait()
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return append([]Event{}, ob.events...)
}

// startObserving watches the device's events: with o.Observe, the kernel's
// (probes); without, netlink polled for the device leaving and returning.
func startObserving(ctx context.Context, c *rdmanl.Client, o Options, t target) *observation {
	ctx, cancel := context.WithCancel(ctx)
	ob := &observation{cancel: cancel}
	ob.wg.Add(1)
	if o.Observe != nil {
		go func() {
			defer ob.wg.Done()
			for e, err := range o.Observe.Events(ctx) {
				if err != nil {
					o.log().Warn("device events lost", "err", err)
					return
				}
				if e.Index == t.dev.Index || e.Device == t.dev.Name || e.Kind == "register" {
					ob.add(e)
				}
			}
		}()
		return ob
	}
	// Without probes: poll netlink on a connection of its own.
	go func() {
		defer ob.wg.Done()
		pc, err := rdmanl.Dial()
		if err != nil {
			o.log().Warn("device events not observed", "err", err)
			return
		}
		defer pc.Close()
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		// A relink can be over between two polls: a new index says the
		// device left and came back.
		present, index := true, t.dev.Index
		for final := false; ; {
			// The last look, after the reset's end, sees a return that
			// came after the previous poll.
			pctx := ctx
			if final {
				pctx = context.WithoutCancel(ctx)
			}
			devs, err := pc.Devices(pctx)
			if err == nil {
				here, idx := false, uint32(0)
				for _, d := range devs {
					if d.Name == t.dev.Name || (t.kind == "pci" && d.NodeGUID == t.dev.NodeGUID) {
						here, idx = true, d.Index
					}
				}
				now := time.Now().UTC()
				if present && (!here || idx != index) {
					ob.add(Event{Time: now, Kind: "gone", Device: t.dev.Name, Index: index, Source: "netlink"})
					present = false
				}
				if !present && here {
					ob.add(Event{Time: now, Kind: "back", Device: t.dev.Name, Index: idx, Source: "netlink"})
					present, index = true, idx
				}
			}
			if final {
				return
			}
			select {
			case <-ctx.Done():
				final = true
			case <-tick.C:
			}
		}
	}()
	return ob
}

// bounce sets the device's netdevs down and up: the ports follow, the
// device and its QPs stay.
func bounce(ctx context.Context, c *rdmanl.Client, o Options, t target, rep *Report) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for _, nd := range rep.Netdevs {
		st, err := readNetdev(nd)
		if err != nil {
			return err
		}
		if err := setLinkUp(nd, false); err != nil {
			return err
		}
		if st.Up {
			if err := setLinkUp(nd, true); err != nil {
				rep.State = nd + " is down"
				rep.Next = "ip link set " + nd + " up"
				return err
			}
		}
	}
	after, err := awaitBack(ctx, c, o, t, rep.PersistentName != "")
	rep.After = after
	if err != nil {
		return err
	}
	rep.Result = ResultDone
	return nil
}
