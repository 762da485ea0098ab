package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/watch"
)

// state is what the agent's goroutines share: the history of the host
// (watch.State, which the socket answers from, behind its own lock) and,
// behind mu, what the daemon keeps besides: the reconcile period, the
// configured QP limits and the devices' learned facts, and the remediation
// policy in force with what it and the renames did. mu is taken before the
// history's lock, never after.
type state struct {
	*watch.State
	now     func() time.Time
	version string // what the metrics report
	// devicesChanged wakes the device lister (a device came, went or was
	// renamed): buffered, one pending wake-up is enough.
	devicesChanged chan struct{}

	mu        sync.Mutex
	reconcile time.Duration                // between QP dumps under the probes
	maxQP     map[string]uint64            // by device name, as configured
	facts     map[string]watch.DeviceFacts // by device name, as learned
	// The remediation policy, and what it and the renames did.
	pol       Policy
	decisions map[decisionKey]uint64
	resets    map[resetKey]uint64
	renames   map[renameKey]uint64
	// renaming says that the agent names devices as they appear
	// (RunOptions.Rename), so that their renames are counted.
	renaming bool

	// saves are the state file's saves, behind a lock of their own: a
	// save's goroutine counts its end without taking mu.
	saves saveStats

	// sockConns and metricsConns are the connections the agent's socket
	// and /metrics serve now (newServer counts them).
	sockConns, metricsConns atomic.Int64
}

// saveStats counts the history's saves to the state file, for the metrics.
type saveStats struct {
	mu sync.Mutex
	// kept says the agent keeps a state file: the metrics are exported.
	kept                 bool
	ok, failed, timedOut uint64
	// last is how long the last save that ended took (0: none yet),
	// locked how long the last save held the history locked to copy it;
	// writing says a save's writing has not returned.
	last, locked time.Duration
	writing      bool
}

// began counts a save that began, its copy of the history made in locked.
func (s *saveStats) began(locked time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locked, s.writing = locked, true
}

// ended counts the end of a save's writing, took after the save began.
func (s *saveStats) ended(took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.writing = took, false
}

// count counts a save's result: ok (nil), failed, or timed out
// (errSaveTimeout).
func (s *saveStats) count(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.ok++
	case errors.Is(err, errSaveTimeout):
		s.timedOut++
	default:
		s.failed++
	}
}

// copy returns the counts (without the lock).
func (s *saveStats) copy() saveCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return saveCounts{kept: s.kept, ok: s.ok, failed: s.failed, timedOut: s.timedOut, last: s.last, locked: s.locked, writing: s.writing}
}

// saveCounts is a copy of saveStats' counts.
type saveCounts struct {
	kept                 bool
	ok, failed, timedOut uint64
	last, locked         time.Duration
	writing              bool
}

// decisionKey is the labels of a policy decision's counter.
type decisionKey struct{ device, nodeGUID, decision string }

// resetKey is the labels of a reset's counter: the device before the
// reset, the method it used, and its result.
type resetKey struct{ device, nodeGUID, method, result string }

// renameKey is the labels of a rename's counter: the device's name after
// it, and the result.
type renameKey struct{ device, nodeGUID, result string }

// newState returns the agent's state over a new history whose watcher has
// cfg and reads the time from now; version is what the metrics report.
func newState(cfg leakwatch.Config, now func() time.Time, version string) *state {
	return &state{State: watch.NewState(cfg, now), now: now, version: version,
		devicesChanged: make(chan struct{}, 1), maxQP: cfg.MaxQP, facts: map[string]watch.DeviceFacts{}, pol: DefaultPolicy(),
		decisions: map[decisionKey]uint64{}, resets: map[resetKey]uint64{}, renames: map[renameKey]uint64{}}
}

// deviceChanged asks the device lister for a listing now.
func (s *state) deviceChanged() {
	select {
	case s.devicesChanged <- struct{}{}:
	default:
	}
}

// iWARP reports whether a device is iWARP: its provider moves QPs to RTS
// inside its own connection manager, where the probes do not see it.
func iWARP(d rdmanl.Device) bool { return d.Protocol == "iw" || d.NodeType.String() == "rnic" }

// dumpMark is what a device's scanner remembers of its last dump.
type dumpMark struct {
	started time.Time // when the last successful dump began (zero: none yet)
	lost    uint64    // the probes' lost events then
}

// mark is a dumpMark for a dump beginning now.
func (s *state) mark() dumpMark {
	return dumpMark{started: s.now(), lost: s.Snapshot().Lost}
}

// dumpDue says whether dev is due for a netlink QP dump, its last
// successful one being last. Without probes, and on iWARP devices, every
// interval is; with probes, a device is dumped once after they attached
// and then every reconcile, or at the next interval when probe events
// were lost since its last dump. On hardware every QP a dump lists costs a
// firmware query: the probes are what keeps the history current.
func (s *state) dumpDue(dev rdmanl.Device, last dumpMark) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.Snapshot()
	switch {
	case last.started.IsZero() || !h.Probes || iWARP(dev):
		return true
	case last.started.Before(h.ProbesSince): // the history's baseline under the probes
		return true
	case h.Lost != last.lost:
		return true
	}
	return s.now().Sub(last.started) >= s.reconcile
}

// mrsEvery is how often a device's MRs are dumped at least: every
// reconcile, between the dumps a change of their number brings
// (watch.MRMark).
func (s *state) mrsEvery() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconcile
}

func (s *state) setReconcile(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconcile = d
}

// reload applies reloaded options.
func (s *state) reload(r Reloadable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Reconcile > 0 {
		s.reconcile = r.Reconcile
	}
	s.maxQP = r.MaxQP
	s.SetMaxQP(r.MaxQP)
	if r.Policy != nil {
		s.pol = *r.Policy
	}
}

// setFacts records what was learned of a device (its max_qp, for the
// metrics and the policy; the scans carry the facts into the history).
func (s *state) setFacts(name string, f watch.DeviceFacts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.facts[name] = f
}

// setDevices records the devices the host has now in the history
// (watch.State.SetDevices) and forgets the facts of those it no longer
// has under their names.
func (s *state) setDevices(devs []rdmanl.Device, gone []uint32, at time.Time) {
	s.SetDevices(devs, gone, at)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.facts {
		if !slices.ContainsFunc(devs, func(d rdmanl.Device) bool { return d.Name == name }) {
			delete(s.facts, name)
		}
	}
}

// describeFacts is a log value for a device's facts.
func describeFacts(f watch.DeviceFacts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider %s, LAST_WQE_REACHED %s", quote.String(f.Provider), f.LastWQE)
	if f.MaxQP > 0 {
		fmt.Fprintf(&b, ", max_qp %d", f.MaxQP)
	} else {
		fmt.Fprintf(&b, ", max_qp unknown (%s)", f.MaxQPErr)
	}
	return b.String()
}
