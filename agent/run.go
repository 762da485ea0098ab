package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/opfile"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/rdmatool/rdmatool/watch"
	"golang.org/x/sync/errgroup"
)

// zombieEvery is how often the agent looks at the host's processes for
// zombie contexts.
const zombieEvery = time.Minute

// DefaultInterval is RunOptions.Interval's default.
const DefaultInterval = 10 * time.Second

// DefaultReconcile is RunOptions.Reconcile's default.
const DefaultReconcile = 5 * time.Minute

// idleTimeout is how long the agent keeps an idle client connection open.
const idleTimeout = 30 * time.Second

// RunOptions configure the agent.
type RunOptions struct {
	// Socket is the unix socket the agent serves (agentapi.DefaultSocket
	// when "").
	Socket string
	// Interval is the time between listings of the devices and, without
	// probes (and on iWARP devices always), between netlink QP dumps of
	// each device (DefaultInterval when 0).
	Interval time.Duration
	// Reconcile is the time between netlink QP dumps of a device while the
	// probes feed the history (default 5 minutes); a device is dumped
	// sooner, at the next Interval, when probe events were lost.
	Reconcile time.Duration
	// NoProbes runs on netlink only.
	NoProbes bool
	// MaxQP is the QP limit per device name, for qp-exhaustion.
	MaxQP map[string]uint64
	// Retain is how long destroyed QPs are kept (leakwatch's default when 0).
	Retain time.Duration
	// ExhaustionThreshold is the share of max_qp in use that qp-exhaustion
	// reports (leakwatch's default, 0.8, when 0).
	ExhaustionThreshold float64
	// CreateFailures and CreateFailureWindow are what qp-create-failing
	// reports (leakwatch.Config; its defaults when 0).
	CreateFailures      int
	CreateFailureWindow time.Duration
	// ErrorStormCycles and ErrorStormWindow are what qp-error-storm
	// reports (leakwatch.Config; its defaults when 0).
	ErrorStormCycles int
	ErrorStormWindow time.Duration
	// MRLeakGrowth and MRLeakWindow are what mr-leak reports
	// (leakwatch.Config; its defaults when 0).
	MRLeakGrowth int
	MRLeakWindow time.Duration
	// Version is reported by /v1/status and the metrics.
	Version string
	// MetricsAddress is the TCP address /metrics is served on; "" serves
	// none.
	MetricsAddress string
	// Rename, when set, gives every device the agent sees appear (at its
	// start, and after a reset or a re-registration) its persistent name
	// through the rename policies, as the udev rule does on hosts that run
	// udev; Devices and All are the agent's to set.
	Rename *rename.Options
	// Reload, when set, is called on SIGHUP for the options to change: an
	// error refuses the reload (logged) and the agent keeps its options.
	Reload func() (Reloadable, error)
	// Policy is the remediation policy (DefaultPolicy, observing, when
	// its Mode is "").
	Policy Policy
	// StateFile is where the agent keeps its history across restarts: it
	// is read at the start, and written every StateInterval
	// (DefaultStateInterval when 0), sooner after a large change, and when
	// the agent stops (stateFile). A save whose writing has not returned
	// after 30 s (stateSaveTimeout), or StateInterval when shorter, is
	// given up, and none other begins until it returns; the save at the
	// stop ends within 10 s (stateStopTimeout) of the stop's start.
	// "" keeps none.
	StateFile     string
	StateInterval time.Duration
	// ResetHelper is the command line that runs reset.RunHelper (the
	// rdmatool binary's hidden helper command), required by Policy mode
	// reset unless it is a dry run.
	ResetHelper []string
	// retry is how often the agent tries again to open netlink and the
	// probes while ib_core is not loaded (a minute when 0), and reset
	// resets a device for the policy (resetDevice when nil): tests set
	// their own.
	retry time.Duration
	reset func(ctx context.Context, o reset.Options) (reset.Report, error)
	// stateStop bounds the save at the stop (stateStopTimeout when 0), and
	// writeState writes the state file (writeAtomic when nil): tests set
	// their own.
	stateStop  time.Duration
	writeState func(path string, maxSize int64, write func(io.Writer) error) (int64, error)
	// beforeLoad, when set, is called just before the state file is
	// read: tests signal the agent then.
	beforeLoad func()
}

// Reloadable are the options a running agent takes on SIGHUP; the others
// (socket, metrics address, probes, interval) take a restart.
type Reloadable struct {
	MaxQP     map[string]uint64
	Reconcile time.Duration
	Policy    *Policy // nil keeps the policy in force
}

// Run is the agent. It restores the history StateFile keeps, then until
// ctx ends it serves the socket, follows the probe events as they arrive,
// lists the devices every Interval and scans each device on a goroutine
// of its own every Interval, all into one State, and saves the history to
// StateFile. Then it stops every goroutine it started, closes the probes
// and the socket (removing its file), saves the history and returns nil.
// A save that hangs (a file system that does not answer) does not hold
// the agent: the history is copied with its lock held and written
// without it, a save not written within its deadline is given up, and
// the save at the stop ends within 10 s of ctx's end, after which Run
// returns without it, the goroutine blocked in the write left behind.
// It returns an error when it cannot start: the metrics address is
// malformed (checked before anything starts or logs), the socket or the
// metrics listener cannot be made, another agent listens on the socket,
// or netlink fails for a reason other than ib_core not being loaded; and
// when serving the socket fails. Nothing in the state file, or in saving
// it, stops the agent: it is logged.
//
// Without probes (no privilege, no BTF, NoProbes) it runs on netlink only
// and says why; while ib_core is not loaded it waits for it, trying
// netlink and the probes again every minute.
func Run(ctx context.Context, d watch.Deps, o RunOptions) error {
	d = d.WithDefaults()
	if o.Socket == "" {
		o.Socket = agentapi.DefaultSocket
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Reconcile <= 0 {
		o.Reconcile = DefaultReconcile
	}
	if o.retry <= 0 {
		o.retry = time.Minute
	}
	if o.StateInterval <= 0 {
		o.StateInterval = DefaultStateInterval
	}
	if o.stateStop <= 0 {
		o.stateStop = stateStopTimeout
	}
	if o.Policy.Mode == "" {
		o.Policy = DefaultPolicy()
	}
	if o.reset == nil {
		o.reset = resetDevice
	}
	if err := checkPolicy(o.Policy, o.ResetHelper); err != nil {
		return err
	}
	if err := CheckMetricsAddress(o.MetricsAddress); err != nil {
		return metricsAddressError(o.MetricsAddress, err) // before anything starts or logs
	}
	// A warning that comes again and again, identical, is logged once a
	// minute with how many came.
	limiter := newRepeatLimiter(d.Log.Handler(), repeatWindow, d.Now)
	d.Log = slog.New(limiter)
	log := d.Log.With("source", "agent")
	var hup chan os.Signal
	if o.Reload != nil {
		// Before the agent reads its state file or says it listens: a
		// SIGHUP from then on reloads (one that comes while the state
		// file loads, once the agent serves), it no longer kills the
		// agent.
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	nl, err := d.Dial()
	if err != nil && !errors.Is(err, syscall.EPROTONOSUPPORT) {
		return err
	}
	if err != nil {
		log.Warn("rdma netlink unavailable, waiting for ib_core", "err", err, "retry_seconds", o.retry.Seconds())
		nl = nil
	}

	cfg := leakwatch.Config{MaxQP: o.MaxQP, Retain: o.Retain, ExhaustionThreshold: o.ExhaustionThreshold,
		CreateFailures: o.CreateFailures, CreateFailureWindow: o.CreateFailureWindow,
		ErrorStormCycles: o.ErrorStormCycles, ErrorStormWindow: o.ErrorStormWindow,
		MRLeakGrowth: o.MRLeakGrowth, MRLeakWindow: o.MRLeakWindow, ProbesReason: "not attached yet"}
	if o.NoProbes {
		cfg.ProbesReason = "disabled by --no-probes"
	}
	st := newState(cfg, d.Now, o.Version)
	st.renaming = o.Rename != nil
	st.setReconcile(o.Reconcile)
	st.SetProcRoot(d.ProcRoot)
	st.setPolicy(o.Policy)

	var ln, mln net.Listener
	// closeAll closes what the start opened, when it ends before serving.
	closeAll := func() {
		if nl != nil {
			nl.Close()
		}
		if ln != nil {
			ln.Close()
		}
		if mln != nil {
			mln.Close()
		}
	}
	if ln, err = listen(o.Socket); err != nil {
		closeAll()
		return err
	}
	if o.MetricsAddress != "" {
		if mln, err = listenMetrics(o.MetricsAddress); err != nil {
			closeAll()
			return err
		}
	}
	var kept *stateFile
	if o.StateFile != "" { // the history of the agent that ran before, before anything adds to it
		kept = newStateFile(o.StateFile, d.ProcRoot, o.Version, log)
		if o.writeState != nil {
			kept.write = o.writeState
		}
		unlock, err := kept.lock() // before the load removes another's leftovers
		if err != nil {
			closeAll()
			return err
		}
		defer unlock()
		st.saves.mu.Lock()
		st.saves.kept = true
		st.saves.mu.Unlock()
		// A state file on a hung file system must not keep SIGTERM
		// from stopping the agent: the load is abandoned, and with it
		// the history it was filling, and nothing is saved over the file.
		if o.beforeLoad != nil {
			o.beforeLoad()
		}
		if _, err := opfile.Await(ctx, func() (struct{}, error) { kept.load(st, d.Now()); return struct{}{}, nil }); err != nil {
			log.Warn("stopping while the state file is read, which is left unfinished", "path", o.StateFile)
			closeAll()
			log.Info("stopped")
			return nil
		}
	}
	srv := newServer(agentapi.Handler(st.State, o.Version), log, idleTimeout, &st.sockConns)
	log.Info("listening", "socket", o.Socket, "interval_seconds", o.Interval.Seconds(), "reconcile_seconds", o.Reconcile.Seconds())
	logPolicy(log, o.Policy)
	var msrv *http.Server
	if mln != nil {
		msrv = newServer(metricsHandler(st, log), log, idleTimeout, &st.metricsConns)
		log.Info("serving metrics", "address", mln.Addr().String())
	}

	g, gctx := errgroup.WithContext(ctx)
	var stopBegan time.Time // when gctx ended: the stop's save is bounded from then
	notifyReady(log)
	g.Go(func() error {
		watchdog(gctx, st, log)
		return nil
	})
	g.Go(func() error {
		if err := serveLimited(srv, ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("agent: serve %s: %w", o.Socket, err)
		}
		return nil
	})
	if msrv != nil {
		g.Go(func() error {
			if err := serveLimited(msrv, mln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("agent: serve metrics on %s: %w", mln.Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		stopBegan = time.Now() // read after g.Wait
		notifyStopping()
		// Let queries in flight finish, briefly: the history is still
		// there to answer them.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// Requests still open after 5s are cut: the agent stops anyway.
		_ = srv.Shutdown(sctx)
		if msrv != nil {
			_ = msrv.Shutdown(sctx)
		}
		return nil
	})
	g.Go(func() error {
		runProbes(gctx, d, o, st, log)
		return nil
	})
	g.Go(func() error {
		// The peers of QPs that connect and fail between two dumps: the
		// probes' events ask for them.
		watch.FollowPeers(gctx, d, st.State)
		return nil
	})
	g.Go(func() error {
		runMonitor(gctx, d, o, st, log)
		return nil
	})
	if o.Reload != nil {
		g.Go(func() error {
			reloadOnHUP(gctx, hup, o.Reload, o.ResetHelper, st, log)
			return nil
		})
	}
	g.Go(func() error {
		runDevices(gctx, d, o, st, nl, log)
		return nil
	})
	g.Go(func() error {
		runPolicy(gctx, d, o, st, d.Log.With("source", "policy"))
		return nil
	})
	if kept != nil {
		g.Go(func() error {
			kept.keep(gctx, st, o.StateInterval, min(o.Interval, o.StateInterval), d.Now)
			return nil
		})
	}
	err = g.Wait()
	if kept != nil { // every goroutine is done: the history is whole
		kept.saveLast(st, d.Now(), stopBegan, o.stateStop)
	}
	limiter.flush(context.WithoutCancel(ctx))
	log.Info("stopped")
	return err
}

// runProbes attaches the probes and applies their events to st until ctx
// ends. While ib_core is not loaded it tries again every o.retry; when the
// probes cannot load for another reason, or their stream fails, the agent
// goes on with netlink only and st says why.
func runProbes(ctx context.Context, d watch.Deps, o RunOptions, st *state, log *slog.Logger) {
	if o.NoProbes {
		return
	}
	if d.OpenProbes == nil {
		st.SetProbes(false, "this build has no probes")
		return
	}
	retry := time.NewTicker(o.retry)
	defer retry.Stop()
	lastErr := ""
	for {
		src, err := d.OpenProbes(ctx, d.Log)
		if err == nil {
			st.SetProbes(true, "")
			log.Info("probes attached")
			// Until ctx ends (nil) or the stream fails: then the
			// history says so before the probes close.
			if err := watch.FollowProbes(ctx, src, st.State, "", o.Interval, watch.NewSites(d.Log, d.ProcRoot), st.deviceChanged); err != nil {
				log.Warn("probe stream failed, netlink only from here", "err", err)
				st.SetProbes(false, "probe stream failed: "+err.Error())
			}
			src.Close()
			return
		}
		waiting := errors.Is(err, bpf.ErrNoIBCore)
		if err.Error() != lastErr { // once, not at every retry
			log.Warn("probes unavailable, netlink only", "err", err, "retry", waiting)
		}
		lastErr = err.Error()
		st.SetProbes(false, lastErr)
		if !waiting {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
	}
}

// runDevices lists the devices every Interval (every o.retry while netlink
// is not there) and keeps one scanning goroutine per device: a device that
// appears gets one, a device that goes away has its goroutine stopped and
// its QPs ended. It returns when ctx ends, after every scanner returned.
func runDevices(ctx context.Context, d watch.Deps, o RunOptions, st *state, nl watch.Netlink, log *slog.Logger) {
	type running struct {
		dev  *atomic.Pointer[rdmanl.Device]
		stop context.CancelFunc
	}
	scanners := map[uint32]running{}
	facts := watch.NewFactsCache(d.LearnDevice)
	var lastZombies time.Time
	var wg sync.WaitGroup
	defer func() {
		for _, r := range scanners {
			r.stop()
		}
		wg.Wait()
		if nl != nil {
			nl.Close()
		}
	}()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	retry := time.NewTicker(o.retry)
	defer retry.Stop()
	for {
		if nl == nil {
			c, err := d.Dial()
			if err != nil {
				st.ScanFailed("", err) // every answer says why nothing is scanned
			} else {
				nl = c
				st.ScanSucceeded("")
				log.Info("rdma netlink available")
			}
		}
		if nl != nil {
			devs, err := nl.Devices(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if st.ScanFailed("", err) {
					log.Warn("listing devices failed", "err", err)
				}
			default:
				if st.ScanSucceeded("") {
					log.Info("listing devices succeeded again", "devices", len(devs))
				}
				// The state learns the device list first, so that a new
				// device's first scan is not taken for a gone device's.
				present := map[uint32]bool{}
				for _, dev := range devs {
					present[dev.Index] = true
				}
				var gone []uint32
				for index, r := range scanners {
					if !present[index] {
						r.stop()
						delete(scanners, index)
						gone = append(gone, index)
					}
				}
				st.setDevices(devs, gone, d.Now())
				// Zombie contexts belong to no device: the host's
				// processes are looked at here, at most once a minute
				// (every fd of every process is a readlink).
				if now := d.Now(); lastZombies.IsZero() || now.Sub(lastZombies) >= zombieEvery {
					st.Zombies(watch.Scanner{NL: nl, ProcRoot: d.ProcRoot, Now: d.Now}.LookForZombies(ctx, devs), now)
					lastZombies = now
				}
				for _, dev := range devs {
					if r, ok := scanners[dev.Index]; ok {
						r.dev.Store(&dev) // renamed, maybe
						continue
					}
					if o.Rename != nil {
						// The scanner starts under the old name; the next
						// listing gives it the new one.
						applyName(ctx, nl, *o.Rename, dev, st, log)
					}
					r := running{dev: &atomic.Pointer[rdmanl.Device]{}}
					r.dev.Store(&dev)
					var sctx context.Context
					sctx, r.stop = context.WithCancel(ctx)
					scanners[dev.Index] = r
					wg.Add(1)
					go func() {
						defer wg.Done()
						scanLoop(sctx, d, o, st, r.dev, facts, log)
					}()
				}
			}
		}
		wait := tick.C
		if nl == nil {
			wait = retry.C
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		case <-st.devicesChanged: // a device came, went or was renamed
		}
	}
}

// monitorer is a Netlink that can join the RDMA monitor group.
type monitorer interface {
	Monitor(ctx context.Context) iter.Seq2[rdmanl.MonitorEvent, error]
}

// runMonitor follows the RDMA netlink monitor group (6.12 and later) on a
// client of its own, and has the devices listed at once when one comes,
// goes or is renamed; where the kernel has no such group it says so once
// and returns (the probes' device events, and the listing every
// Interval, remain). An overrun (ENOBUFS: events lost) is a change too,
// and the group is joined again.
func runMonitor(ctx context.Context, d watch.Deps, o RunOptions, st *state, log *slog.Logger) {
	for ctx.Err() == nil {
		nl, err := d.Dial()
		if err != nil {
			select { // netlink not there yet (ib_core): runDevices says so
			case <-ctx.Done():
				return
			case <-time.After(o.retry):
				continue
			}
		}
		m, ok := nl.(monitorer)
		if !ok {
			nl.Close()
			return
		}
		failed := false
	events:
		for ev, err := range m.Monitor(ctx) {
			if err != nil {
				var re *rdmanl.Error
				switch {
				case errors.Is(err, syscall.ENOBUFS):
					log.Warn("rdma netlink monitor overrun: events lost, listing the devices")
					st.deviceChanged()
				case errors.As(err, &re) && re.Op == rdmanl.OpJoinMonitor:
					log.Info("rdma netlink monitor group unavailable (it needs 6.12 or later and CAP_NET_ADMIN): device changes are seen by the probes or at the next listing", "err", err)
					nl.Close()
					return
				default:
					log.Warn("rdma netlink monitor failed, joining again", "err", err)
					failed = true
				}
				break events
			}
			switch ev.Type.String() {
			case "register", "unregister", "rename":
				log.Debug("device event", "event", ev.Type.String(), "device", ev.DevName)
				st.deviceChanged()
			}
		}
		nl.Close()
		if failed {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// bigScan is the number of QPs, or of MRs, from which a dump's memory is
// returned to the OS once the dump is folded in.
const bigScan = 10000

// scanned is the number of QPs a scan lists.
func scanned(sc leakwatch.Scan) int {
	n := 0
	for _, ds := range sc.Devices {
		n += len(ds.QPs)
	}
	return n
}

// freshSummary is the age past which a resource summary is read again
// before it decides on an MR dump, when a resource was added or removed
// since it was read.
const freshSummary = time.Second

// summaryMark is a device's last resource summary, when it was read, and
// the probes' count of resources added and removed before it was
// (watch.State.ResourceChanges; counted false: they counted none).
type summaryMark struct {
	sum     rdmanl.Summary
	at      time.Time
	changes uint64
	counted bool
}

// current says whether m's summary still counts what dev has, the probes'
// count being changes (counted: they count them): they counted the same
// before it was read, and it is of dev under its name now.
func (m summaryMark) current(dev rdmanl.Device, changes uint64, counted bool) bool {
	return m.counted && counted && changes == m.changes && m.sum.DevIndex == dev.Index && m.sum.DevName == dev.Name
}

// stands says whether m's summary is current and younger than every at
// now (the reconcile: a summary is read again then, whatever the count).
func (m summaryMark) stands(dev rdmanl.Device, changes uint64, counted bool, now time.Time, every time.Duration) bool {
	return m.current(dev, changes, counted) && now.Sub(m.at) < every
}

// scanLoop dumps one device's QPs on a netlink client of its own until
// ctx ends: every Interval, or with probes every Reconcile (state.dumpDue);
// at the Intervals in between it reads the device's resource summary,
// unless the probes counted no resource added or removed since the last
// one it read (summaryMark.stands).
// After either it dumps the device's MRs when the summary counts another
// number of them than at their last dump, and every Reconcile
// (watch.Scanner.UpdateMRs); a summary a second old or more by then (read
// before a long QP dump) is read again first when the probes counted a
// change since (or count none). dev is the device as last listed (its name
// follows renames).
func scanLoop(ctx context.Context, d watch.Deps, o RunOptions, st *state, dev *atomic.Pointer[rdmanl.Device], facts *watch.FactsCache, log *slog.Logger) {
	if f, learned := facts.Of(*dev.Load()); learned {
		log.Info("device learned", "device", dev.Load().Name, "facts", describeFacts(f))
		st.setFacts(dev.Load().Name, f)
	}
	var nl watch.Netlink
	defer func() {
		if nl != nil {
			nl.Close()
		}
	}()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var last dumpMark
	var lastSum summaryMark
	var lastMRs watch.MRMark
	mrErr := "" // the last MR dump's error, logged once
	for {
		cur := *dev.Load()
		err := error(nil)
		if nl == nil {
			nl, err = d.Dial()
			if err != nil {
				nl = nil
			}
		}
		due := st.dumpDue(cur, last)
		var sum rdmanl.Summary // this interval's resource summary
		summed := false
		// read reads the device's summary into sum and lastSum, and
		// records it; changes is the probes' count taken before it.
		read := func(changes uint64, counted bool) {
			s, serr := nl.Summary(ctx, cur)
			switch {
			case serr == nil:
				sum, summed = s, true
				lastSum = summaryMark{sum: s, at: d.Now(), changes: changes, counted: counted}
				st.SetResources([]rdmanl.Summary{s}, cur.Name)
				st.CountQPs(cur, s, d.Now())
			case errors.Is(serr, rdmanl.ErrNoDevice):
				// gone: the next listing stops this scanner
			default:
				err = serr
				nl.Close()
				nl = nil
			}
		}
		// Before the summary is read: it lists every change counted.
		changes, counted := st.ResourceChanges()
		if nl != nil && !due {
			// Between dumps the counts of resources in use stay current:
			// one small request, no firmware query per QP. Unless nothing
			// was added or removed on any device since the last summary,
			// which then still counts what the device has: reading it
			// again walks every resource the device tracks, in the
			// kernel (55 ms of a TCG guest's CPU with 60,000 QPs and
			// 100,000 MRs, a third of the agent's CPU at idle).
			if lastSum.stands(cur, changes, counted, d.Now(), st.mrsEvery()) {
				sum, summed = lastSum.sum, true
				st.SetResources([]rdmanl.Summary{sum}, cur.Name)
				st.CountQPs(cur, sum, d.Now())
			} else {
				read(changes, counted)
			}
		}
		if due {
			if nl != nil {
				mark := st.mark()
				began := d.Now() // the summary is read first, the QPs after
				var sc leakwatch.Scan
				var sums []rdmanl.Summary
				sc, sums, err = watch.Scanner{NL: nl, ProcRoot: d.ProcRoot, Now: d.Now, Facts: facts}.Scan(ctx, []rdmanl.Device{cur})
				if err == nil && len(sc.Devices) > 0 {
					last = mark
					if st.Scan(sc) {
						log.Info("scan succeeded again", "device", cur.Name)
					}
					st.SetResources(sums, cur.Name)
					if len(sums) == 1 {
						sum, summed = sums[0], true
						lastSum = summaryMark{sum: sum, at: began, changes: changes, counted: counted}
					}
					if scanned(sc) >= bigScan {
						// The listing (about 170 bytes a QP) is dead once
						// folded in: its memory goes back to the OS now,
						// not over the minutes an idle agent's runtime
						// would take.
						sc = leakwatch.Scan{}
						debug.FreeOSMemory()
					}
				}
				if err != nil { // a fresh socket next time
					nl.Close()
					nl = nil
				}
			}
		}
		if nl != nil && summed && d.Now().Sub(lastSum.at) >= freshSummary {
			// The summary was read before a long QP dump (or the agent
			// was stopped): when a resource was added or removed since
			// (or the probes count none),
			// it is read again, so that the MR dump's mark counts what
			// the dump saw. Else the next interval's summary counts
			// another number of MRs than the mark and the MRs are dumped
			// twice for one change.
			if c, ok := st.ResourceChanges(); !lastSum.current(cur, c, ok) {
				summed = false
				read(c, ok)
			}
		}
		if nl != nil && summed {
			// The MRs when their number changed, and every reconcile.
			next, merr := watch.Scanner{NL: nl, ProcRoot: d.ProcRoot, Now: d.Now}.UpdateMRs(ctx, st.State, cur, sum, lastMRs, st.mrsEvery())
			if next != lastMRs && next.MRs() >= bigScan {
				// As for a big scan: the dump (some 200 bytes an MR)
				// is dead once counted.
				debug.FreeOSMemory()
			}
			lastMRs = next
			switch {
			case merr == nil && mrErr != "":
				log.Info("MR dump succeeded again", "device", cur.Name)
				mrErr = ""
			case merr == nil, errors.Is(merr, rdmanl.ErrNoDevice), ctx.Err() != nil:
			default:
				if merr.Error() != mrErr {
					log.Warn("MR dump failed", "device", cur.Name, "err", merr)
				}
				mrErr = merr.Error()
				nl.Close() // a fresh socket next time
				nl = nil
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && st.ScanFailed(cur.Name, err) {
			log.Warn("scan failed", "device", cur.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// reloadSlow is how long a reload may take before the agent says it is
// still waiting for it.
const reloadSlow = 10 * time.Second

// reloadOnHUP applies reload's options on every SIGHUP (hup, which Run
// has signal.Notify fill before it logs that it listens) until ctx ends. A
// reload that fails changes nothing. SIGHUPs that come during a reload make
// one more reload after it; a reload still running after reloadSlow is
// logged, once.
//
// Each reload runs on a goroutine of its own, which reloadOnHUP waits for
// only until ctx ends: reading the file can block where nothing interrupts
// it (a file system that hangs), and the agent stops on SIGTERM whatever a
// reload is doing. That goroutine, when ctx has ended, is the one the
// agent leaves behind, waited for by nobody: the process exits under it.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, reload func() (Reloadable, error), helper []string, st *state, log *slog.Logger) {
	type result struct {
		r   Reloadable
		err error
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		done := make(chan result, 1) // the reload never blocks on its result
		go func() {
			r, err := reload()
			done <- result{r, err}
		}()
		slow := time.NewTimer(reloadSlow)
		var res result
	wait:
		for {
			select {
			case <-ctx.Done():
				slow.Stop()
				log.Warn("stopping during a configuration reload, which is left unfinished")
				return
			case <-slow.C:
				log.Warn("configuration reload still running", "duration_seconds", reloadSlow.Seconds())
			case res = <-done:
				slow.Stop()
				break wait
			}
		}
		r, err := res.r, res.err
		if err == nil && r.Policy != nil {
			err = checkPolicy(*r.Policy, helper)
		}
		if err != nil {
			log.Error("configuration reload refused, keeping the running one", "err", err)
			continue
		}
		st.reload(r)
		log.Info("configuration reloaded", "reconcile_seconds", r.Reconcile.Seconds(), "max_qp", loggedMaxQP(r.MaxQP))
		if r.Policy != nil {
			logPolicy(log, *r.Policy)
		}
	}
}

// applyName gives a device that appeared its persistent name and logs what
// was done, or why not.
func applyName(ctx context.Context, nl watch.Netlink, o rename.Options, dev rdmanl.Device, st *state, log *slog.Logger) {
	o.Devices, o.All = []string{dev.Name}, false
	rep, err := rename.Run(ctx, nl, o)
	for _, r := range rep.Renames {
		st.renamed(r)
		switch r.Status {
		case rename.StatusRenamed:
			log.Info("device renamed", "device", r.From, "name", r.To, "node_guid", r.NodeGUID.String(), "policy", r.Policy, "reason", r.Reason)
		case rename.StatusFailed:
			log.Warn("device rename failed", "device", r.From, "name", r.To, "node_guid", r.NodeGUID.String(), "err", r.Error)
		default:
			log.Debug("device name kept", "device", r.From, "status", r.Status, "reason", r.Reason)
		}
	}
	if err != nil && len(rep.Renames) == 0 {
		log.Warn("device rename failed", "device", dev.Name, "err", err)
	}
}

// resetDevice runs reset.Run on a netlink client of its own.
func resetDevice(ctx context.Context, o reset.Options) (reset.Report, error) {
	c, err := rdmanl.Dial()
	if err != nil {
		return reset.Report{Device: o.Device, Method: o.Method, Result: reset.ResultFailed, Error: err.Error()}, err
	}
	defer c.Close()
	return reset.Run(ctx, c, o)
}
