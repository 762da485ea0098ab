package agent

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
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
	// listed holds the indexes of the devices the last listing found (nil
	// before one): a scan that ends after its device went away is dropped.
	listed map[uint32]bool
	lost   uint64
}

// NewState returns a State whose watcher has cfg and reads the time from
// now; version is what Status reports.
func NewState(cfg leakwatch.Config, now func() time.Time, version string) *State {
	return &State{w: leakwatch.New(cfg, now), now: now, version: version, probeErr: cfg.ProbesReason,
		devices: []string{}, scanErrs: map[string]string{}}
}

// SetProbes says whether probe events feed the history, and why not.
func (s *State) SetProbes(on bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes, s.probeErr = on, reason
	s.w.SetProbes(on, reason)
}

// Event folds a probe event into the history.
func (s *State) Event(ev leakwatch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Event(ev)
}

// Scan folds a netlink scan of some devices into the history; a device it
// scanned is one the host has. recovered says the last scan of one of them
// had failed.
func (s *State) Scan(sc leakwatch.Scan) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed != nil {
		sc.Devices = slices.DeleteFunc(slices.Clone(sc.Devices), func(ds leakwatch.DeviceScan) bool { return !s.listed[ds.Device.Index] })
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
	return !failed
}

// scanSucceeded clears the error of device ("" for the device listing)
// and says whether it had failed.
func (s *State) scanSucceeded(device string) (recovered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, failed := s.scanErrs[device]
	delete(s.scanErrs, device)
	return failed
}

// setDevices records the devices the host has now; gone lists the indexes
// of those it no longer has, whose QPs end with them.
func (s *State) setDevices(devs []rdmanl.Device, gone []uint32, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(devs))
	s.listed = make(map[uint32]bool, len(devs))
	for _, d := range devs {
		names = append(names, d.Name)
		s.listed[d.Index] = true
	}
	s.devices = names
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
	rep = CheckReport{
		Report: s.w.Evaluate(q), Probes: onOff(s.probes), ProbesError: s.probeErr, LostEvents: s.lost,
		Scans: s.scans, Devices: devices, ScanError: s.scanErrorText(), Source: source, ObservedSince: s.w.Started().UTC(),
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
