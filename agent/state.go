package agent

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Status is what GET /v1/status returns.
type Status struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string `json:"probes"`
	ProbesError string `json:"probes_error"`
	// Scans counts the netlink QP dumps so far, one per device scanned.
	// ScanError says what failed at the last attempt, per device ("" when
	// every device's last scan and the last device listing succeeded).
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
// the agent knows about its sources. The probe reader feeds it events, each
// device's scanner its scans, and the socket handler reads it; a mutex
// serializes them, so it is safe for concurrent use.
type State struct {
	mu       sync.Mutex
	w        *leakwatch.Watcher
	now      func() time.Time
	version  string
	probes   bool
	probeErr string
	scans    int
	scanErrs map[string]string // by device name; "" for the device listing
	lastScan time.Time
	devices  []string
	// listed holds the names of the devices the last listing found, by
	// index (nil before one): a scan that ends after its device went away
	// is dropped, and one begun before a rename takes the name it has now.
	listed map[uint32]string
	lost   uint64
	// What the metrics export besides the history.
	guids    map[string]string // node GUID by device name, from the listing
	dev      map[string]*devMetrics
	events   map[string]uint64 // probe events read, by kind
	listedOK bool              // the last device listing succeeded
	// devicesChanged wakes the device lister (a device came, went or was
	// renamed): buffered, one pending wake-up is enough.
	devicesChanged chan struct{}
	// probesSince is when the probes last attached.
	probesSince time.Time
	reconcile   time.Duration          // between QP dumps under the probes
	procRoot    string                 // where reports resolve owners ("": not)
	maxQP       map[string]uint64      // by device name, as configured
	facts       map[string]DeviceFacts // by device name, as learned
	// The last evaluation for the metrics, and when it was made.
	findings   map[findingKey]int
	findingQPs map[string]map[string][]uint32 // QPNs by device and QP rule
	skipped    []leakwatch.Skipped
	findingsAt time.Time
	// The remediation policy, and what it and the renames did.
	pol       Policy
	decisions map[[3]string]uint64 // device, node GUID, decision
	resets    map[[4]string]uint64 // device, node GUID, method, result
	renames   map[[3]string]uint64 // device, node GUID, result
}

// devMetrics are a device's scan counters and its last resource counts.
type devMetrics struct {
	scans, scanErrors uint64
	lastScan          time.Time
	lastScanDuration  time.Duration
	resources         []rdmanl.ResourceCount
}

// qpsInUse is the device's QPs in use by its last resource counts, and
// whether they were read.
func (m devMetrics) qpsInUse() (uint64, bool) {
	for _, r := range m.resources {
		if r.Name == "qp" {
			return r.Current, true
		}
	}
	return 0, false
}

// devMetric returns the device's counters, made on first use.
func (s *State) devMetric(name string) *devMetrics {
	m := s.dev[name]
	if m == nil {
		m = &devMetrics{}
		s.dev[name] = m
	}
	return m
}

// NewState returns a State whose watcher has cfg and reads the time from
// now; version is what Status reports.
func NewState(cfg leakwatch.Config, now func() time.Time, version string) *State {
	return &State{w: leakwatch.New(cfg, now), now: now, version: version, probeErr: cfg.ProbesReason,
		devices: []string{}, scanErrs: map[string]string{},
		guids: map[string]string{}, dev: map[string]*devMetrics{}, events: map[string]uint64{}, maxQP: cfg.MaxQP, facts: map[string]DeviceFacts{},
		devicesChanged: make(chan struct{}, 1), pol: DefaultPolicy(),
		decisions: map[[3]string]uint64{}, resets: map[[4]string]uint64{}, renames: map[[3]string]uint64{}}
}

// SetProbes says whether probe events feed the history, and why not.
func (s *State) SetProbes(on bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on && !s.probes {
		s.probesSince = s.now()
	}
	s.probes, s.probeErr = on, reason
	s.w.SetProbes(on, reason)
}

// deviceChanged asks the device lister for a listing now.
func (s *State) deviceChanged() {
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
func (s *State) mark() dumpMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dumpMark{started: s.now(), lost: s.lost}
}

// dumpDue says whether dev is due for a netlink QP dump, its last
// successful one being last. Without probes, and on iWARP devices, every
// interval is; with probes, a device is dumped once after they attached
// and then every reconcile, or at the next interval when probe events
// were lost since its last dump. On hardware every QP a dump lists costs a
// firmware query: the probes are what keeps the history current.
func (s *State) dumpDue(dev rdmanl.Device, last dumpMark) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case last.started.IsZero() || !s.probes || iWARP(dev):
		return true
	case last.started.Before(s.probesSince): // the history's baseline under the probes
		return true
	case s.lost != last.lost:
		return true
	}
	return s.now().Sub(last.started) >= s.reconcile
}

func (s *State) setReconcile(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconcile = d
}

// reload applies reloaded options.
func (s *State) reload(r Reloadable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Reconcile > 0 {
		s.reconcile = r.Reconcile
	}
	s.maxQP = r.MaxQP
	s.w.SetMaxQP(r.MaxQP)
	if r.Policy != nil {
		s.pol = *r.Policy // the evaluation below collects QPNs for it
	}
	s.findingsAt = time.Time{} // the metrics' findings follow at once
}

// Event folds a probe event into the history.
func (s *State) Event(ev leakwatch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Event(ev)
}

// probeEvent counts a probe event of kind read from the probes, and folds
// it into the history when it is one the rules follow (le not nil).
func (s *State) probeEvent(kind string, le *leakwatch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[kind]++
	if le != nil {
		s.w.Event(*le)
	}
}

// Scan folds a netlink scan of some devices into the history; a device it
// scanned is one the host has. recovered says the last scan of one of them
// had failed.
func (s *State) Scan(sc leakwatch.Scan) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed != nil {
		sc.Devices = slices.DeleteFunc(slices.Clone(sc.Devices), func(ds leakwatch.DeviceScan) bool { return s.listed[ds.Device.Index] == "" })
		for i := range sc.Devices {
			sc.Devices[i].Device.Name = s.listed[sc.Devices[i].Device.Index]
		}
	}
	s.w.Scan(sc)
	for _, ds := range sc.Devices {
		if !slices.Contains(s.devices, ds.Device.Name) {
			s.devices = append(s.devices, ds.Device.Name)
		}
		if _, failed := s.scanErrs[ds.Device.Name]; failed {
			recovered = true
			delete(s.scanErrs, ds.Device.Name)
		}
		s.scans++
		m := s.devMetric(ds.Device.Name)
		m.scans++
		m.lastScan = sc.Time
		if !sc.Started.IsZero() {
			m.lastScanDuration = sc.Time.Sub(sc.Started)
		}
	}
	s.lastScan = sc.Time
	return recovered
}

// Zombies folds a look at the host's processes for zombie contexts, made
// at t, into the history.
func (s *State) Zombies(z *leakwatch.Zombies, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Scan(leakwatch.Scan{Time: t, Zombies: z})
}

// scanFailed records a failed scan of device ("" for the device listing)
// and says whether its last attempt had succeeded.
func (s *State) scanFailed(device string, err error) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, failed := s.scanErrs[device]
	s.scanErrs[device] = err.Error()
	if device != "" {
		s.devMetric(device).scanErrors++
	} else {
		s.listedOK = false
	}
	return !failed
}

// scanSucceeded clears the error of device ("" for the device listing)
// and says whether it had failed.
func (s *State) scanSucceeded(device string) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, failed := s.scanErrs[device]
	delete(s.scanErrs, device)
	if device == "" {
		s.listedOK = true
	}
	return failed
}

// setFacts records what was learned of a device (its max_qp, for the
// metrics; the scans carry the facts into the history).
func (s *State) setFacts(name string, f DeviceFacts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.facts[name] = f
}

// countQPs records a device's QPs in use from its resource summary, read
// between dumps, for qp-exhaustion's growth.
func (s *State) countQPs(dev rdmanl.Device, sum rdmanl.Summary, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed != nil && s.listed[dev.Index] == "" {
		return
	}
	if s.listed != nil {
		dev.Name = s.listed[dev.Index] // counted before a rename the listing has seen
	}
	for _, c := range sum.Counts {
		if c.Name == "qp" {
			s.w.CountQPs(dev.Index, dev.Name, at, int(c.Current))
		}
	}
}

// setResources records the devices' resource counts (netlink's summary)
// for those of names.
func (s *State) setResources(sums []rdmanl.Summary, names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sum := range sums {
		if slices.Contains(names, sum.DevName) && slices.Contains(s.devices, sum.DevName) {
			s.devMetric(sum.DevName).resources = slices.Clone(sum.Counts)
		}
	}
}

// setDevices records the devices the host has now; gone lists the indexes
// of those it no longer has, whose QPs end with them.
func (s *State) setDevices(devs []rdmanl.Device, gone []uint32, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(devs))
	s.listed = make(map[uint32]string, len(devs))
	for _, d := range devs {
		names = append(names, d.Name)
		s.listed[d.Index] = d.Name
	}
	s.devices = names
	clear(s.guids)
	for _, d := range devs {
		s.guids[d.Name] = d.NodeGUID.String()
	}
	for name := range s.dev {
		if !slices.Contains(names, name) {
			delete(s.dev, name) // a renamed device's series end with its name
		}
	}
	for name := range s.facts {
		if !slices.Contains(names, name) {
			delete(s.facts, name)
		}
	}
	for _, index := range gone {
		s.w.DeviceGone(index, at)
	}
	for dev := range s.scanErrs {
		if dev != "" && !slices.Contains(names, dev) {
			delete(s.scanErrs, dev)
		}
	}
}

func (s *State) setLost(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = n
}

// HasDevice reports whether the agent knows the device named dev (any
// device when dev is empty): whether Report would answer for it now.
func (s *State) HasDevice(dev string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dev == "" || slices.Contains(s.devices, dev)
}

// Report answers a qp-leaks query. ok is false when q names a device the
// host does not have.
func (s *State) Report(q leakwatch.Query) (rep CheckReport, ok bool) {
	return s.report(q, "agent")
}

func (s *State) report(q leakwatch.Query, source string) (rep CheckReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devices := slices.Clone(s.devices)
	if q.Device != "" {
		if !slices.Contains(devices, q.Device) {
			return CheckReport{}, false
		}
		devices = []string{q.Device}
	}
	s.resolveOwners()
	rep = CheckReport{
		Report: s.w.Evaluate(q), Probes: onOff(s.probes), ProbesError: s.probeErr, LostEvents: s.lost,
		Scans: s.scans, Devices: devices, ScanError: s.scanErrorText(), Source: source, ObservedSince: s.w.Started().UTC(),
	}
	if q.SkipProbeRules != "" { // the report says what its rules rested on
		rep.Probes, rep.ProbesError = "off", q.SkipProbeRules
	}
	return rep, true
}

// resolveOwners has the history name owners as /proc sees them now. The
// caller holds s.mu.
func (s *State) resolveOwners() {
	if s.procRoot == "" {
		return
	}
	procs, err := owner.NewResolver(s.procRoot)
	if err != nil {
		return
	}
	s.w.ResolveOwners(func(tid uint32) (leakwatch.Owner, bool) {
		p, ok := procs.Lookup(tid)
		return leakOwner(p), ok
	})
}

// SetProcRoot says where reports resolve owners (normally /proc; "" not
// at all).
func (s *State) SetProcRoot(root string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procRoot = root
}

// Status reports the agent's sources and counters.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Version: s.version, Started: s.w.Started().UTC(), Probes: onOff(s.probes), ProbesError: s.probeErr,
		Scans: s.scans, ScanError: s.scanErrorText(), LastScanSeconds: -1, Devices: slices.Clone(s.devices),
		LostEvents: s.lost, QPs: s.w.LiveQPs(),
	}
	if !s.lastScan.IsZero() {
		st.LastScanSeconds = s.now().Sub(s.lastScan).Round(time.Millisecond).Seconds()
	}
	return st
}

// scanErrorText joins the scan errors, the device listing's first.
func (s *State) scanErrorText() string {
	keys := make([]string, 0, len(s.scanErrs))
	for k := range s.scanErrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	errs := make([]string, 0, len(keys))
	for _, k := range keys {
		errs = append(errs, s.scanErrs[k])
	}
	return strings.Join(errs, "; ")
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
