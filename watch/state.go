package watch

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// State is a history of the host: one leakwatch.Watcher and what the watch
// knows about its sources and the devices. The probe follower feeds it
// events, the scans their dumps, and the agent's socket and metrics read
// it; a mutex serializes them, so it is safe for concurrent use. It is an
// agentapi.Source.
type State struct {
	mu       sync.Mutex
	w        *leakwatch.Watcher
	now      func() time.Time
	probes   bool
	probeErr string
	// sitesErr says why user QPs have no creation site ("" when the
	// uprobes are on every library found, or no probes say).
	sitesErr string
	// probesSince is when the probes last attached.
	probesSince time.Time
	scans       int
	scanErrs    map[string]string // by device name; "" for the device listing
	lastScan    time.Time
	devices     []string
	// listed holds the names of the devices the last listing found, by
	// index (nil before one): a scan that ends after its device went away
	// is dropped, and one begun before a rename takes the name it has now.
	listed   map[uint32]string
	lost     uint64
	stacks   bpf.StackStats          // the probes' creation-site stacks
	guids    map[string]string       // node GUID by device name, from the listing
	dev      map[string]*DeviceScans // by device name
	events   map[string]uint64       // probe events read, by kind
	listedOK bool                    // the last device listing succeeded
	procRoot string                  // where reports resolve owners ("": not)
	// peersWanted are the devices whose rdma_cm IDs probe events asked
	// to be dumped for their QPs' peers (askPeers), by index, with their
	// names; peersAsked is signalled when one is added (FollowPeers).
	peersWanted map[uint32]string
	peersAsked  chan struct{}
	// changes reads the probes' count of resources added and removed
	// (bpf.Tracer.ResourceChanges) while FollowProbes follows probes that
	// count them; nil otherwise.
	changes func() (uint64, bool)
}

var _ agentapi.Source = (*State)(nil)

// DeviceScans are a device's netlink scans as a State counted them, and
// its last resource counts.
type DeviceScans struct {
	Scans, Errors uint64 // QP dumps of the device, and failed ones
	// Last is when the last successful dump ended (zero: none yet), and
	// LastDuration how long it took.
	Last         time.Time
	LastDuration time.Duration
	// MRDumps counts the device's MR dumps folded in (ScanMRs).
	MRDumps uint64
	// Resources are the device's resources in use, from its last resource
	// summary.
	Resources []rdmanl.ResourceCount
	// unlisted is when a listing first did not have the device's name
	// (zero while it is listed): its counters (Scans, Errors, MRDumps) are
	// kept, unexported, for keepUnlisted, so that a device registered
	// again under its name continues them; the rest is cleared then.
	unlisted time.Time
}

// A device name that a listing no longer has keeps its counters for an
// hour (at most maxUnlisted names, the most recently gone), so that a
// device that comes back under its name (a reset, a link deleted and
// added) continues its Prometheus counters rather than starting again at
// 0; a name gone longer begins again, which Prometheus reads as a counter
// reset.
const (
	keepUnlisted = time.Hour
	maxUnlisted  = 64
)

// QPsInUse is the device's QPs in use by its last resource counts, and
// whether they were read.
func (m DeviceScans) QPsInUse() (uint64, bool) {
	for _, r := range m.Resources {
		if r.Name == "qp" {
			return r.Current, true
		}
	}
	return 0, false
}

// devScans returns the device's counters, made on first use. The caller
// holds s.mu.
func (s *State) devScans(name string) *DeviceScans {
	m := s.dev[name]
	if m == nil {
		m = &DeviceScans{}
		s.dev[name] = m
	}
	return m
}

// NewState returns a State whose watcher has cfg and reads the time from
// now.
func NewState(cfg leakwatch.Config, now func() time.Time) *State {
	return &State{w: leakwatch.New(cfg, now), now: now, probeErr: cfg.ProbesReason,
		devices: []string{}, scanErrs: map[string]string{},
		guids: map[string]string{}, dev: map[string]*DeviceScans{}, events: map[string]uint64{},
		peersWanted: map[uint32]string{}, peersAsked: make(chan struct{}, 1)}
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

// SetMaxQP sets the QP limits per device name the rules use
// (leakwatch.Config.MaxQP).
func (s *State) SetMaxQP(maxQP map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.SetMaxQP(maxQP)
}

// probeEvent counts a probe event of kind read from the probes, and folds
// it into the history when it is one the rules follow (le not nil).
func (s *State) probeEvent(kind string, le *leakwatch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[kind]++
	if le != nil {
		s.w.Event(*le)
		s.askPeers(le)
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
		m := s.devScans(ds.Device.Name)
		m.Scans++
		m.Last = sc.Time
		if !sc.Started.IsZero() {
			m.LastDuration = sc.Time.Sub(sc.Started)
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

// ScanFailed records a failed scan of device ("" for the device listing)
// and says whether its last attempt had succeeded.
func (s *State) ScanFailed(device string, err error) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, failed := s.scanErrs[device]
	s.scanErrs[device] = err.Error()
	if device != "" {
		s.devScans(device).Errors++
	} else {
		s.listedOK = false
	}
	return !failed
}

// ScanSucceeded clears the error of device ("" for the device listing)
// and says whether it had failed.
func (s *State) ScanSucceeded(device string) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, failed := s.scanErrs[device]
	delete(s.scanErrs, device)
	if device == "" {
		s.listedOK = true
	}
	return failed
}

// CountQPs records a device's QPs in use from its resource summary, read
// between dumps, for qp-exhaustion's growth.
func (s *State) CountQPs(dev rdmanl.Device, sum rdmanl.Summary, at time.Time) {
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

// ScanMRs folds a device's MR dump into the history
// (leakwatch.Watcher.ScanMRs), under the name the device's listing gives
// it now; a dump of a device the last listing no longer has is dropped.
func (s *State) ScanMRs(d *leakwatch.MRDump) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed != nil {
		if s.listed[d.Device.Index] == "" {
			return
		}
		d.Device.Name = s.listed[d.Device.Index] // dumped before a rename the listing has seen
	}
	s.w.ScanMRs(d)
	if slices.Contains(s.devices, d.Device.Name) {
		s.devScans(d.Device.Name).MRDumps++
	}
}

// SetResources records the devices' resource counts (netlink's summary)
// for those of names.
func (s *State) SetResources(sums []rdmanl.Summary, names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sum := range sums {
		if slices.Contains(names, sum.DevName) && slices.Contains(s.devices, sum.DevName) {
			s.devScans(sum.DevName).Resources = slices.Clone(sum.Counts)
		}
	}
}

// SetDevices records the devices the host has now (the history takes up
// what it restored of them: leakwatch.Watcher.Listed); gone lists the
// indexes of those it no longer has, whose QPs end with them.
func (s *State) SetDevices(devs []rdmanl.Device, gone []uint32, at time.Time) {
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
	var unlisted []string
	for name, m := range s.dev {
		switch {
		case slices.Contains(names, name):
			m.unlisted = time.Time{}
			continue
		case m.unlisted.IsZero():
			// Its series end with its name; its counters are kept, what it
			// had (its resources, its last dump) goes with it.
			m.unlisted, m.Resources, m.Last, m.LastDuration = at, nil, time.Time{}, 0
		case at.Sub(m.unlisted) > keepUnlisted:
			delete(s.dev, name)
			continue
		}
		unlisted = append(unlisted, name)
	}
	if len(unlisted) > maxUnlisted {
		slices.SortFunc(unlisted, func(a, b string) int { return s.dev[a].unlisted.Compare(s.dev[b].unlisted) })
		for _, name := range unlisted[:len(unlisted)-maxUnlisted] {
			delete(s.dev, name)
		}
	}
	s.w.Listed(devs)
	for _, index := range gone {
		s.w.DeviceGone(index, at)
	}
	for dev := range s.scanErrs {
		if dev != "" && !slices.Contains(names, dev) {
			delete(s.scanErrs, dev)
		}
	}
}

// SaveSnapshot copies, with the State locked, what a save of the history
// writes (leakwatch.Watcher.SaveSnapshot): one moment's, which its Put
// makes records of and encodes without the lock, while the State goes on.
func (s *State) SaveSnapshot() *leakwatch.SaveSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.SaveSnapshot()
}

// Restore reads saved records into the history, one that has observed
// nothing yet, through get (leakwatch.Watcher.Restore): its devices'
// listings and scans take them up.
func (s *State) Restore(get func(record any) error) (qps int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Restore(get)
}

// Restored counts what became of the restored histories
// (leakwatch.Watcher.Restored).
func (s *State) Restored() leakwatch.Restored {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Restored()
}

func (s *State) setSitesError(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sitesErr = e
}

func (s *State) setLost(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = n
}

func (s *State) setStacks(st bpf.StackStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stacks = st
}

// ResourceChanges reads the count of every device's resources added and
// removed (QPs, CQs, PDs, MRs, SRQs, user contexts, rdma_cm IDs: the
// kernel's resource tracking) that the probes keep, now. A resource
// summary read after it lists every change it holds. ok is false while no
// probe stream that counts them is followed.
func (s *State) ResourceChanges() (n uint64, ok bool) {
	s.mu.Lock()
	read := s.changes
	s.mu.Unlock()
	if read == nil {
		return 0, false
	}
	return read()
}

func (s *State) setChanges(read func() (uint64, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes = read
}

// HasDevice reports whether the history has the device named dev (any
// device when dev is empty): whether Report would answer for it now.
func (s *State) HasDevice(dev string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dev == "" || slices.Contains(s.devices, dev)
}

// Report answers a qp-leaks query from the history, its owners named as
// /proc sees them now. ok is false when q names a device the host does not
// have. Source is left for the caller to say.
func (s *State) Report(q leakwatch.Query) (rep agentapi.CheckReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devices := slices.Clone(s.devices)
	if q.Device != "" {
		if !slices.Contains(devices, q.Device) {
			return agentapi.CheckReport{}, false
		}
		devices = []string{q.Device}
	}
	s.resolveOwners()
	rep = agentapi.CheckReport{
		Report: s.w.Evaluate(q), Probes: onOff(s.probes), ProbesError: s.probeErr, LostEvents: s.lost, SitesError: s.sitesErr,
		Scans: s.scans, Devices: devices, ScanError: s.scanErrorText(), ObservedSince: s.w.Started().UTC(),
	}
	if q.SkipProbeRules != "" { // the report says what its rules rested on
		rep.Probes, rep.ProbesError, rep.SitesError = "off", q.SkipProbeRules, ""
	}
	if !s.probes {
		rep.SitesError = "" // ProbesError says why: no probes, no sites
	}
	return rep, true
}

// Evaluate runs the rules over the history (leakwatch.Watcher.Evaluate),
// its owners named as /proc sees them now; q.Each is called with the
// State locked, so it must not call the State.
func (s *State) Evaluate(q leakwatch.Query) leakwatch.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolveOwners()
	return s.w.Evaluate(q)
}

// CountFindings counts the findings of every rule at minAge, and the
// rules skipped (leakwatch.Watcher.CountFindings: the work follows what
// changed since the last count). Owners are not resolved: counts do not
// name them.
func (s *State) CountFindings(minAge time.Duration) leakwatch.Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.CountFindings(minAge)
}

// Tally counts each device's live QPs by class and by owner, its topN
// owners named (leakwatch.Watcher.Tally).
func (s *State) Tally(topN int) []leakwatch.DeviceTally {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Tally(topN)
}

// MRTally is what each device's last MR dump counted, its topN owners
// named (leakwatch.Watcher.MRTally).
func (s *State) MRTally(topN int) []leakwatch.DeviceMRs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.MRTally(topN)
}

// CreateFailures counts each device's failed QP creates by errno and
// creation site (leakwatch.Watcher.CreateFailures).
func (s *State) CreateFailures() []leakwatch.DeviceFailures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.CreateFailures()
}

// QPErrors counts each device's QP entries into Error by cause
// (leakwatch.Watcher.QPErrors).
func (s *State) QPErrors() []leakwatch.DeviceErrors {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.QPErrors()
}

// Lists are the lengths of each device's bounded event lists
// (leakwatch.Watcher.Lists).
func (s *State) Lists() []leakwatch.DeviceLists {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Lists()
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

// Status reports the history's sources and counters; Version is left
// for the agent to say.
func (s *State) Status() agentapi.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := agentapi.Status{
		Started: s.w.Started().UTC(), Probes: onOff(s.probes), ProbesError: s.probeErr,
		Scans: s.scans, ScanError: s.scanErrorText(), LastScanSeconds: -1, Devices: slices.Clone(s.devices),
		LostEvents: s.lost, QPs: s.w.LiveQPs(),
	}
	if !s.lastScan.IsZero() {
		st.LastScanSeconds = s.now().Sub(s.lastScan).Round(time.Millisecond).Seconds()
	}
	return st
}

// Snapshot is a copy of what a State knows besides the history: its
// sources and the devices, for the agent's metrics and its scheduling of
// dumps.
type Snapshot struct {
	// Started is when the history began.
	Started time.Time
	// Probes says whether probe events feed the history and ProbesSince
	// since when (their last attach); Lost counts the events they lost,
	// Events the events read, by kind (bpf.Kind's names); Stacks says
	// how full their creation-site stack maps are.
	Probes      bool
	ProbesSince time.Time
	Lost        uint64
	Events      map[string]uint64
	Stacks      bpf.StackStats
	// ListedOK says whether the last device listing succeeded.
	ListedOK bool
	// Devices are the devices the host has, as listed and scanned, and
	// GUIDs their node GUIDs by name, from the last listing.
	Devices []string
	GUIDs   map[string]string
	// Scans are the devices' scan counters and resource counts, by name;
	// a device neither scanned nor counted yet has none.
	Scans map[string]DeviceScans
	// GoneKept counts the names of devices no longer listed whose
	// counters are kept, to continue if they come back (at most 64 names,
	// for an hour: DeviceScans and leakwatch's counters alike).
	GoneKept int
	// UnattributedFailures counts the failed QP creates of no known device
	// (leakwatch.Watcher.UnattributedCreateFailures).
	UnattributedFailures uint64
}

// Snapshot copies what the State knows besides the history.
func (s *State) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{
		Started: s.w.Started(), Probes: s.probes, ProbesSince: s.probesSince, Lost: s.lost,
		Events: maps.Clone(s.events), Stacks: s.stacks, ListedOK: s.listedOK, Devices: slices.Clone(s.devices),
		GUIDs: maps.Clone(s.guids), Scans: make(map[string]DeviceScans, len(s.dev)),
		UnattributedFailures: s.w.UnattributedCreateFailures(),
	}
	gone := map[string]bool{}
	for k, v := range s.dev {
		snap.Scans[k] = *v
		if !v.unlisted.IsZero() {
			gone[k] = true
		}
	}
	for _, name := range s.w.RetiredNames() {
		gone[name] = true
	}
	snap.GoneKept = len(gone)
	return snap
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
