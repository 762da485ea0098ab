package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// DefaultSocket is where the agent listens and the CLI asks.
const DefaultSocket = "/run/rdmatool/agent.sock"

// RunOptions configure the agent.
type RunOptions struct {
	// Socket is the unix socket the agent serves (DefaultSocket when "").
	Socket string
	// Interval is the time between netlink scans (default 10s).
	Interval time.Duration
	// NoProbes runs on netlink only.
	NoProbes bool
	// MaxQP is the QP limit per device name, for qp-exhaustion.
	MaxQP map[string]uint64
	// Retain is how long destroyed QPs are kept (leakwatch's default when 0).
	Retain time.Duration
	// Retry is how often the agent tries again to open netlink and the
	// probes while ib_core is not loaded (default 1 minute).
	Retry time.Duration
	// Version is reported by /v1/status.
	Version string
}

// Status is what GET /v1/status returns.
type Status struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string `json:"probes"`
	ProbesError string `json:"probes_error"`
	// Scans counts the netlink scans so far; ScanError is the last scan's
	// error ("" when it succeeded).
	Scans     int    `json:"scans"`
	ScanError string `json:"scan_error"`
	// LastScanSeconds is how long ago the last successful scan ended (-1
	// before the first).
	LastScanSeconds float64  `json:"last_scan_seconds"`
	Devices         []string `json:"devices"`
	// QPs is the number of live QPs the agent tracks.
	QPs        int    `json:"qps"`
	LostEvents uint64 `json:"lost_events"`
}

// State is the agent's history of the host: one leakwatch.Watcher and what
// the agent knows about its sources. Run's loop feeds it (Scan, Event,
// SetProbes) and the socket handler reads it (Report, Status); a mutex
// serializes them, so it is safe for concurrent use.
type State struct {
	mu       sync.Mutex
	w        *leakwatch.Watcher
	now      func() time.Time
	version  string
	probes   bool
	probeErr string
	scans    int
	scanErr  string
	lastScan time.Time
	devices  []string
	lost     uint64
}

// NewState returns a State whose watcher has cfg and reads the time from
// now; version is what Status reports.
func NewState(cfg leakwatch.Config, now func() time.Time, version string) *State {
	return &State{w: leakwatch.New(cfg, now), now: now, version: version, probeErr: cfg.ProbesReason, devices: []string{}}
}

// SetProbes says whether probe events feed the history, and why not.
func (s *State) SetProbes(on bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes, s.probeErr = on, reason
	s.w.SetProbes(on, reason)
}

// Event folds a probe event into the history.
func (s *State) Event(ev bpf.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Event(ev)
}

// Scan folds a netlink scan into the history; its devices become the
// devices the agent reports. recovered says the scan before it failed.
func (s *State) Scan(sc leakwatch.Scan) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recovered = s.scanErr != ""
	s.w.Scan(sc)
	s.scans++
	s.scanErr, s.lastScan = "", sc.Time
	s.devices = s.devices[:0]
	for _, ds := range sc.Devices {
		s.devices = append(s.devices, ds.Device.Name)
	}
	return recovered
}

// scanFailed records a failed scan and says whether the last one succeeded.
func (s *State) scanFailed(err error) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = s.scanErr == ""
	s.scanErr = err.Error()
	return changed
}

func (s *State) setLost(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = n
}

// Report answers a qp-leaks query. ok is false when q names a device the
// last scan did not find.
func (s *State) Report(q leakwatch.Query) (rep CheckReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devices := append([]string{}, s.devices...)
	if q.Device != "" {
		if !slicesContains(devices, q.Device) {
			return CheckReport{}, false
		}
		devices = []string{q.Device}
	}
	rep = CheckReport{
		Report: s.w.Evaluate(q), Probes: onOff(s.probes), ProbesError: s.probeErr, LostEvents: s.lost,
		Scans: s.scans, Devices: devices, Source: "agent", ObservedSince: s.w.Started().UTC(),
	}
	if q.SkipProbeRules != "" { // the report says what its rules rested on
		rep.Probes, rep.ProbesError = "off", q.SkipProbeRules
	}
	return rep, true
}

// Status reports the agent's sources and counters.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Version: s.version, Started: s.w.Started().UTC(), Probes: onOff(s.probes), ProbesError: s.probeErr,
		Scans: s.scans, ScanError: s.scanErr, LastScanSeconds: -1, Devices: append([]string{}, s.devices...),
		LostEvents: s.lost, QPs: s.w.LiveQPs(),
	}
	if !s.lastScan.IsZero() {
		st.LastScanSeconds = s.now().Sub(s.lastScan).Round(time.Millisecond).Seconds()
	}
	return st
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// Run is the agent: it scans netlink every Interval, follows the probe
// events, keeps one leakwatch history of the host and answers the CLI on
// a unix socket, until ctx ends; then it closes the socket (removing its
// file) and returns nil. It returns an error when it cannot start: the
// socket cannot be made, another agent listens on it, or netlink fails for
// a reason other than ib_core not being loaded.
//
// Without probes (no privilege, no BTF, NoProbes) it runs on netlink only
// and reports why; while ib_core is not loaded it waits for it, trying
// netlink and the probes again every Retry.
func Run(ctx context.Context, d Deps, o RunOptions) error {
	if d.Now == nil {
		d.Now = time.Now
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = time.Minute
	}
	log := d.Log.With("source", "agent")
	c, err := d.Dial()
	if err != nil && !errors.Is(err, syscall.EPROTONOSUPPORT) {
		return err
	}
	if err != nil {
		log.Warn("rdma netlink unavailable, waiting for ib_core", "err", err, "retry_seconds", o.Retry.Seconds())
	}
	defer func() {
		if c != nil {
			c.Close()
		}
	}()

	cfg := leakwatch.Config{MaxQP: o.MaxQP, Retain: o.Retain}
	if o.NoProbes {
		cfg.ProbesReason = "disabled by --no-probes"
	} else {
		cfg.ProbesReason = "not attached yet"
	}
	st := NewState(cfg, d.Now, o.Version)

	ln, err := Listen(o.Socket)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: NewHandler(st), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		// Let queries in flight finish, briefly: the loop stops feeding
		// the watcher but it is still there to answer.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-served
	}()
	log.Info("listening", "socket", o.Socket, "interval_seconds", o.Interval.Seconds())

	// The probes: src is open while p carries its events.
	var (
		src       EventSource
		p         pump
		stopPump  context.CancelFunc = func() {}
		lostSoFar uint64             // lost by probe sessions that ended
	)
	lost := func() uint64 {
		if s, ok := src.(interface{ Stats() (bpf.Stats, error) }); ok {
			if stats, err := s.Stats(); err == nil {
				return lostSoFar + stats.Total()
			}
		}
		return lostSoFar
	}
	closeProbes := func() {
		if src == nil {
			return
		}
		lostSoFar = lost()
		stopPump()
		if p.events != nil { // nil: the reader is done already
			for ev := range p.events { // what it read before it stopped
				st.Event(ev)
			}
		}
		src.Close()
		src, p = nil, pump{}
	}
	defer closeProbes()
	retry := time.NewTicker(o.Retry)
	defer retry.Stop()
	waiting := false // for ib_core: retry netlink and the probes
	probesErr := ""  // why the last attempt to open the probes failed
	openProbes := func() {
		if o.NoProbes {
			return
		}
		if d.OpenProbes == nil {
			st.SetProbes(false, "this build has no probes")
			return
		}
		s, err := d.OpenProbes(ctx, d.Log)
		if err != nil {
			waiting = errors.Is(err, bpf.ErrNoIBCore)
			if err.Error() != probesErr { // once, not at every retry
				log.Warn("probes unavailable, netlink only", "err", err, "retry", waiting)
			}
			probesErr = err.Error()
			st.SetProbes(false, probesErr)
			return
		}
		probesErr = ""
		src = s
		var pctx context.Context
		pctx, stopPump = context.WithCancel(ctx)
		p = startPump(pctx, src, "")
		st.SetProbes(true, "")
		log.Info("probes attached")
	}
	openProbes()

	scanOnce := func() {
		if c == nil {
			return
		}
		sc, err := scanAll(ctx, c, d.ProcRoot, d.Now)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if st.scanFailed(err) {
				log.Warn("scan failed", "err", err)
			}
			return
		}
		if st.Scan(sc) {
			log.Info("scan succeeded again", "devices", len(sc.Devices))
		}
		st.setLost(lost())
	}
	scanOnce()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				p.events = nil
				continue
			}
			st.Event(ev)
		case err := <-p.err:
			log.Warn("probe stream failed, netlink only from here", "err", err)
			st.SetProbes(false, "probe stream failed: "+err.Error())
			closeProbes()
		case <-tick.C:
			scanOnce()
		case <-retry.C:
			if c == nil {
				if nc, err := d.Dial(); err == nil {
					c = nc
					log.Info("rdma netlink available")
					scanOnce()
				}
			}
			if waiting && src == nil {
				openProbes()
			}
		case err := <-served:
			served <- err // for the deferred Shutdown
			return fmt.Errorf("agent: serve %s: %w", o.Socket, err)
		case <-ctx.Done():
			log.Info("stopping")
			return nil
		}
	}
}

// scanAll scans every device netlink lists now (devices come and go while
// the agent runs).
func scanAll(ctx context.Context, c *rdmanl.Client, procRoot string, now func() time.Time) (leakwatch.Scan, error) {
	devs, err := c.Devices(ctx)
	if err != nil {
		return leakwatch.Scan{}, err
	}
	return scanDevices(ctx, c, devs, procRoot, now)
}
