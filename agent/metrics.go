package agent

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rdmatool/rdmatool/agentapi/query"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/rdmatool/rdmatool/watch"
)

// DefaultMetricsAddress is where the agent serves /metrics: loopback only,
// so exposing it to a network is the operator's decision. The Prometheus
// exporters' range 9100-9999 has been fully allocated since 2023, so the
// port lies above it.
const DefaultMetricsAddress = "127.0.0.1:10095"

// topOwners bounds the owner series per device.
const topOwners = 10

// metricsSnapshot is what one scrape exports, read under one lock.
type metricsSnapshot struct {
	version      string
	started      time.Time
	probes       bool
	listedOK     bool
	lost         uint64
	unattributed uint64
	goneKept     int
	stacks       bpf.StackStats
	events       map[string]uint64
	devices      []string
	guids        map[string]string
	dev          map[string]watch.DeviceScans
	tally        []leakwatch.DeviceTally
	mrs          []leakwatch.DeviceMRs
	failures     []leakwatch.DeviceFailures
	qpErrors     []leakwatch.DeviceErrors
	lists        []leakwatch.DeviceLists
	learned      map[string]uint64 // max_qp the devices reported
	findings     map[leakwatch.CountKey]int
	maxQP        map[string]uint64
	skippedRules []leakwatch.Skipped
	policy       Policy
	decisions    map[decisionKey]uint64
	resets       map[resetKey]uint64
	renames      map[renameKey]uint64
	saves        saveCounts
}

// deviceMaxQP is the configured limit of a device, else what it reported.
func (s metricsSnapshot) deviceMaxQP(name string) uint64 {
	if m := s.maxQP[name]; m > 0 {
		return m
	}
	return s.learned[name]
}

// qpLabels is the labels of a qps series besides the device's.
type qpLabels struct {
	typ, state string
}

// snapshot copies what the metrics export. The findings are counted now
// (watch.State.CountFindings: a count does the work of what changed since
// the last one).
func (s *state) snapshot() metricsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := s.CountFindings(query.DefaultMinAge)
	h := s.Snapshot()
	snap := metricsSnapshot{
		version: s.version, started: h.Started, probes: h.Probes, listedOK: h.ListedOK, lost: h.Lost, stacks: h.Stacks,
		unattributed: h.UnattributedFailures, goneKept: h.GoneKept,
		events: h.Events, devices: h.Devices, guids: h.GUIDs, dev: h.Scans,
		tally: s.Tally(topOwners), mrs: s.MRTally(topOwners), failures: s.CreateFailures(), qpErrors: s.QPErrors(),
		lists:    s.Lists(),
		findings: counts.Findings, maxQP: s.maxQP, skippedRules: counts.SkippedRules,
		policy: s.pol, decisions: maps.Clone(s.decisions), resets: maps.Clone(s.resets), renames: maps.Clone(s.renames),
	}
	s.zeroCounters(&snap)
	snap.saves = s.saves.copy()
	snap.learned = make(map[string]uint64, len(s.facts))
	for k, f := range s.facts {
		snap.learned[k] = f.MaxQP
	}
	return snap
}

// Every label set a counter of the policy or the renames can take for a
// listed device is exported from the start, at 0 until it counts: a counter
// that first appeared at 1 would be no increase() to an alert, so the first
// reset, failure or hourly limit would pass unseen.
var (
	decisionsCounted = []string{DecisionReset, DecisionDryRun, DecisionCooldown, DecisionHourlyLimit, DecisionInProgress, DecisionNoMaxQP}
	resetResults     = []string{reset.ResultDone, reset.ResultWaiting, reset.ResultFailed}
	renameResults    = []string{string(rename.StatusRenamed), string(rename.StatusUnchanged), string(rename.StatusSkipped), string(rename.StatusFailed)}
)

// zeroCounters adds to snap, at 0, the decisions and resets the policy can
// count for each listed device (under a reset policy: by every method it
// may use, which for auto is any, and auto itself for a reset that fails
// before it chose one), and the renames the agent can count (when it names
// devices), under the names the devices have now. The caller holds s.mu.
func (s *state) zeroCounters(snap *metricsSnapshot) {
	var methods []string
	if s.pol.Mode == PolicyReset {
		methods = []string{string(s.pol.Method)}
		if s.pol.Method == reset.MethodAuto || s.pol.Method == "" {
			methods = []string{string(reset.MethodAuto)}
			for _, m := range reset.Methods() {
				methods = append(methods, string(m))
			}
		}
	}
	for _, name := range snap.devices {
		guid := snap.guids[name]
		if len(methods) > 0 {
			for _, d := range decisionsCounted {
				snap.decisions[decisionKey{name, guid, d}] += 0
			}
		}
		for _, m := range methods {
			for _, r := range resetResults {
				snap.resets[resetKey{name, guid, m, r}] += 0
			}
		}
		if s.renaming {
			for _, r := range renameResults {
				snap.renames[renameKey{name, guid, r}] += 0
			}
		}
	}
}

// collector exports the agent's state to Prometheus. A scrape reads the
// state's memory only: it never waits on netlink or the probes.
type collector struct {
	st *state

	buildInfo, startTime, probesUp, netlinkUp, events, lost *prometheus.Desc
	stacksRefused, stacks, stacksCapacity                   *prometheus.Desc
	resources, qps, ownerQPs, findings, maxQP, useRatio     *prometheus.Desc
	siteQPs, createFailures, qpErrors                       *prometheus.Desc
	unattributed, goneKept                                  *prometheus.Desc
	mrs, mrBytes, ownerMRs, ownerMRBytes, mrDumps           *prometheus.Desc
	scans, scanErrors, scanDuration, lastScan               *prometheus.Desc
	ruleSkipped                                             *prometheus.Desc
	policyInfo, decisions, resets, renames                  *prometheus.Desc
	saves, saveDuration, saveLock, saveWriting              *prometheus.Desc
	// listEntries is the occupancy of the watcher's bounded lists.
	listEntries *prometheus.Desc
	// conns is the occupancy of the listeners' connection slots.
	conns *prometheus.Desc
}

// newCollector returns a prometheus.Collector of the agent's state.
func newCollector(st *state) prometheus.Collector {
	dev := []string{"device", "node_guid"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("rdmatool_"+name, help, labels, nil)
	}
	return &collector{
		st:             st,
		buildInfo:      d("agent_build_info", "The agent's version and Go version; always 1.", "version", "goversion"),
		startTime:      d("agent_start_time_seconds", "When the agent started observing, in seconds since the Unix epoch."),
		probesUp:       d("probes_up", "Whether the eBPF probes feed the agent (1) or it runs on netlink only (0)."),
		netlinkUp:      d("netlink_up", "Whether the last listing of the RDMA devices over netlink succeeded."),
		events:         d("probe_events_total", "Probe events read from the kernel, by kind.", "kind"),
		lost:           d("probe_events_lost_total", "Probe events the kernel could not deliver (ring buffer full)."),
		stacksRefused:  d("probe_stacks_refused_total", "Kernel and user stacks of creation sites the probes could not store (their stack map's hash bucket held another stack, or the stack could not be walked): those QP creates have no stack."),
		stacks:         d("probe_stacks", "Stacks of creation sites the probes' two stack maps hold (the generation stored into now and the previous one, emptied in turn every 30 s), as the agent counts them."),
		stacksCapacity: d("probe_stacks_capacity", "Stacks the probes' two stack maps can hold (0 without the probes)."),
		resources: d("device_resources", "Resources in use on a device, by type, as the kernel's resource summary counts them.",
			append(dev, "resource")...),
		qps: d("qps", "Live QPs the agent tracks, by type and state (state \"unknown\" where the provider does not report it).",
			append(dev, "type", "state")...),
		ownerQPs: d("owner_qps", fmt.Sprintf("Live QPs per owning process (pid and comm; pid 0 for kernel modules, with ulp the module that QPs rdma_cm created serve), the %d largest owners of each device; comm \"(other)\" counts the rest.", topOwners),
			append(dev, "pid", "comm", "ulp")...),
		siteQPs: d("creation_site_qps", fmt.Sprintf("Live QPs per creation site (app!function+0xOFFSET via the verbs function called; a kernel QP's innermost frame), the %d largest sites of each device; site \"other\" counts the rest. QPs whose site the probes did not see are not counted.", topOwners),
			append(dev, "site")...),
		createFailures: d("qp_create_failures_total", "QP creates the device refused, by errno (ENOMEM, EINVAL, ...) and creation site (the device's first 10 sites; site \"other\" counts the rest, \"\" those whose site is not known).",
			append(dev, "errno", "site")...),
		qpErrors: d("qp_errors_total", "QP entries into Error, by cause: modify (a modify through ib_core: a disconnect, a teardown), QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR (the provider's async errors), provider (the provider moved the QP without an event, a completion error: a modify found it in Error, or a dump listed it so), unknown (a dump listed it in Error, without probes). A QP first seen in Error is not counted.",
			append(dev, "cause")...),
		unattributed: d("qp_create_failures_unattributed_total", "QP creates refused on a device the probes could not name (the probe on the create's entry missed it): counted on no device."),
		goneKept:     d("gone_device_counters", "Names of devices no longer listed whose counters the agent keeps, so that a device registered again under its name (a reset, a link deleted and added) continues them: at most 64, each for an hour."),
		mrs:          d("mrs", "MRs on the device at its last MR dump (made when the resource summary counts another number of MRs, and every reconcile).", dev...),
		mrBytes:      d("mr_bytes", "Bytes the device's MRs register (the sum of their lengths) at its last MR dump.", dev...),
		ownerMRs: d("owner_mrs", fmt.Sprintf("MRs per owning process at the device's last MR dump (pid and comm; pid 0 for a kernel module, its name in comm and ulp), the %d owners of each device with the most; comm \"(other)\" counts the rest.", topOwners),
			append(dev, "pid", "comm", "ulp")...),
		ownerMRBytes: d("owner_mr_bytes", fmt.Sprintf("Bytes the MRs of an owning process register at the device's last MR dump, for the %d owners of rdmatool_owner_mrs; comm \"(other)\" counts the rest.", topOwners),
			append(dev, "pid", "comm", "ulp")...),
		mrDumps:      d("mr_dumps_total", "Netlink MR dumps of the device.", dev...),
		findings:     d("findings", "Current qp-leaks findings (min age "+query.DefaultMinAge.String()+"), by rule and severity.", append(dev, "rule", "severity")...),
		ruleSkipped:  d("rule_skipped", "Rules the agent cannot evaluate now (1), with the reason.", "rule", "reason"),
		maxQP:        d("device_max_qps", "The device's QP limit (max_qp): configured, else as the device reports it.", dev...),
		useRatio:     d("device_qp_use_ratio", "QPs in use as a share of max_qp, where the agent knows it.", dev...),
		scans:        d("scans_total", "Netlink QP dumps of the device.", dev...),
		scanErrors:   d("scan_errors_total", "Failed netlink QP dumps of the device.", dev...),
		scanDuration: d("scan_duration_seconds", "How long the device's last netlink QP dump took.", dev...),
		lastScan:     d("last_scan_timestamp_seconds", "When the device's last netlink QP dump ended, in seconds since the Unix epoch.", dev...),
		policyInfo:   d("policy_info", "The remediation policy in force (1): mode observe or reset, and whether resets are only logged (dry_run).", "mode", "dry_run"),
		decisions: d("policy_decisions_total", "Decisions of the remediation policy about a device whose thresholds held: reset, dry_run, cooldown, hourly_limit, in_progress, no_max_qp.",
			append(dev, "decision")...),
		resets: d("resets_total", "Resets the policy started, by method and result (done; waiting: the removal still waits for the device's holders; failed). device and node_guid are the device's before the reset.",
			append(dev, "method", "result")...),
		listEntries: d("watcher_list_entries", fmt.Sprintf("Entries the history keeps in a device's bounded event lists: qp_errors, the QP failures into Error qp-error-storm counts (at most %d, the newest; teardowns' modifies are counted in rdmatool_qp_errors_total, not kept); create_failures, the failed QP creates qp-create-failing counts (at most %d, the newest).", leakwatch.MaxQPErrors, leakwatch.MaxCreateFailures),
			append(dev, "list")...),
		renames: d("renames_total", "Persistent names the agent applied to devices as they appeared, by result (renamed, unchanged, skipped, failed); device is the name after it.",
			append(dev, "result")...),
		saves: d("state_saves_total", "Saves of the history to the state file, by result: ok, failed, timeout (its writing had not returned within 30s, or the state interval when shorter; 10s at the agent's stop). Exported when the agent keeps a state file.",
			"result"),
		saveDuration: d("state_save_duration_seconds", "How long the last save of the history that ended took, its copy, encoding, write, sync and rename (a save that timed out, when its writing returned)."),
		saveLock:     d("state_save_lock_seconds", "How long the last save of the history held it locked to copy it: probe events, scans, socket answers and scrapes wait meanwhile."),
		conns: d("agent_connections", fmt.Sprintf("Connections a listener of the agent serves now, at most %d each (more wait in the kernel's backlog): listener is socket (the agent's unix socket) or metrics (this endpoint, counting the scrape that reads it).", maxConns),
			"listener"),
		saveWriting: d("state_save_in_flight", "Whether a save of the history is being written (1), past its deadline too: no other save begins until its writing returns."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buildInfo, c.startTime, c.probesUp, c.netlinkUp, c.events, c.lost,
		c.stacksRefused, c.stacks, c.stacksCapacity,
		c.resources, c.qps, c.ownerQPs, c.siteQPs, c.createFailures, c.qpErrors, c.unattributed, c.goneKept, c.mrs, c.mrBytes, c.ownerMRs, c.ownerMRBytes, c.mrDumps, c.findings, c.ruleSkipped, c.maxQP, c.useRatio, c.scans, c.scanErrors, c.scanDuration, c.lastScan,
		c.policyInfo, c.decisions, c.resets, c.renames, c.saves, c.saveDuration, c.saveLock, c.saveWriting, c.listEntries, c.conns} {
		ch <- d
	}
}

// emitter sends a scrape's metrics: every label value through
// quote.Label (valid UTF-8, bounded), and each label set of a family once.
// A metric that cannot be made, or a label set given twice, is sent as an
// invalid metric: the registry leaves it out, serves the rest, and counts
// the error in promhttp_metric_handler_errors_total (which an alert
// watches), so one bad value never hides the series after it.
type emitter struct {
	ch   chan<- prometheus.Metric
	seen map[string]struct{}
	key  []byte
}

func (e *emitter) emit(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	e.key = append(e.key[:0], d.String()...)
	for i, l := range labels {
		labels[i] = quote.Label(l)
		e.key = append(append(e.key, 0xff), labels[i]...)
	}
	if _, dup := e.seen[string(e.key)]; dup {
		e.ch <- prometheus.NewInvalidMetric(d, fmt.Errorf("label set %q given twice", labels))
		return
	}
	e.seen[string(e.key)] = struct{}{}
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.snapshot()
	e := &emitter{ch: ch, seen: map[string]struct{}{}}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		e.emit(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		e.emit(d, prometheus.CounterValue, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(c.buildInfo, 1, s.version, runtime.Version())
	gauge(c.startTime, float64(s.started.UnixNano())/1e9)
	gauge(c.probesUp, b2f(s.probes))
	gauge(c.netlinkUp, b2f(s.listedOK))
	gauge(c.policyInfo, 1, s.policy.Mode, strconv.FormatBool(s.policy.DryRun))
	gauge(c.conns, float64(c.st.sockConns.Load()), "socket")
	gauge(c.conns, float64(c.st.metricsConns.Load()), "metrics")
	for l, n := range s.decisions {
		counter(c.decisions, float64(n), l.device, l.nodeGUID, l.decision)
	}
	for l, n := range s.resets {
		counter(c.resets, float64(n), l.device, l.nodeGUID, l.method, l.result)
	}
	for l, n := range s.renames {
		counter(c.renames, float64(n), l.device, l.nodeGUID, l.result)
	}
	if sv := s.saves; sv.kept {
		counter(c.saves, float64(sv.ok), "ok")
		counter(c.saves, float64(sv.failed), "failed")
		counter(c.saves, float64(sv.timedOut), "timeout")
		if sv.last > 0 {
			gauge(c.saveDuration, sv.last.Seconds())
		}
		if sv.locked > 0 {
			gauge(c.saveLock, sv.locked.Seconds())
		}
		gauge(c.saveWriting, b2f(sv.writing))
	}
	counter(c.lost, float64(s.lost))
	counter(c.unattributed, float64(s.unattributed))
	gauge(c.goneKept, float64(s.goneKept))
	counter(c.stacksRefused, float64(s.stacks.Refused))
	gauge(c.stacks, float64(s.stacks.Held))
	gauge(c.stacksCapacity, float64(s.stacks.Capacity))
	for kind, n := range s.events {
		counter(c.events, float64(n), kind)
	}
	for _, sk := range s.skippedRules {
		gauge(c.ruleSkipped, 1, sk.Rule, sk.Reason)
	}
	for _, name := range s.devices {
		guid := s.guids[name]
		m := s.dev[name]
		counter(c.scans, float64(m.Scans), name, guid)
		counter(c.scanErrors, float64(m.Errors), name, guid)
		counter(c.mrDumps, float64(m.MRDumps), name, guid)
		if !m.Last.IsZero() {
			gauge(c.scanDuration, m.LastDuration.Seconds(), name, guid)
			gauge(c.lastScan, float64(m.Last.UnixNano())/1e9, name, guid)
		}
		for _, r := range m.Resources {
			gauge(c.resources, float64(r.Current), name, guid, r.Name)
		}
		if limit := s.deviceMaxQP(name); limit > 0 {
			gauge(c.maxQP, float64(limit), name, guid)
			if n, ok := m.QPsInUse(); ok {
				gauge(c.useRatio, float64(n)/float64(limit), name, guid)
			}
		}
	}
	for _, t := range s.tally {
		if !slices.Contains(s.devices, t.Name) {
			continue // its device was not listed (yet, or any more)
		}
		guid := s.guids[t.Name]
		byLabels := map[qpLabels]int{} // StateKnown false and a RESET of the same type
		for cl, n := range t.Classes {
			state := cl.State.String()
			if !cl.StateKnown {
				state = "unknown"
			}
			byLabels[qpLabels{cl.Type.String(), state}] += n
		}
		for l, n := range byLabels {
			gauge(c.qps, float64(n), t.Name, guid, l.typ, l.state)
		}
		// The tally's owners are one series each: Owner holds the labels.
		for _, o := range t.Owners {
			gauge(c.ownerQPs, float64(o.QPs), t.Name, guid, strconv.FormatUint(uint64(o.PID), 10), o.Comm, o.ULP)
		}
		if t.OtherQPs > 0 {
			gauge(c.ownerQPs, float64(t.OtherQPs), t.Name, guid, "", "(other)", "")
		}
		for _, st := range t.Sites {
			gauge(c.siteQPs, float64(st.QPs), t.Name, guid, st.Site)
		}
		if t.OtherSiteQPs > 0 {
			gauge(c.siteQPs, float64(t.OtherSiteQPs), t.Name, guid, leakwatch.OtherSite)
		}
	}
	for _, dm := range s.mrs {
		if !slices.Contains(s.devices, dm.Name) {
			continue // its device was not listed (yet, or any more)
		}
		guid := s.guids[dm.Name]
		gauge(c.mrs, float64(dm.MRs), dm.Name, guid)
		gauge(c.mrBytes, float64(dm.Bytes), dm.Name, guid)
		for _, o := range dm.Owners {
			pid := strconv.FormatUint(uint64(o.PID), 10)
			gauge(c.ownerMRs, float64(o.MRs), dm.Name, guid, pid, o.Comm, o.ULP)
			gauge(c.ownerMRBytes, float64(o.Bytes), dm.Name, guid, pid, o.Comm, o.ULP)
		}
		if dm.OtherMRs > 0 {
			gauge(c.ownerMRs, float64(dm.OtherMRs), dm.Name, guid, "", "(other)", "")
			gauge(c.ownerMRBytes, float64(dm.OtherBytes), dm.Name, guid, "", "(other)", "")
		}
	}
	// A device registered again under its name (a reset, a link deleted
	// and added) is one series set: the watcher hands the counts of the
	// gone registration to the new one (leakwatch/continue.go), and
	// what each registration holds is summed by name here; a device no
	// longer listed leaves the scrape.
	failures := map[[3]string]uint64{}
	for _, df := range s.failures {
		for _, fc := range df.Counts {
			failures[[3]string{df.Name, fc.Errno, fc.Site}] += fc.Count
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(failures), cmpKeys) {
		if slices.Contains(s.devices, k[0]) {
			counter(c.createFailures, float64(failures[k]), k[0], s.guids[k[0]], k[1], k[2])
		}
	}
	qpErrors := map[[3]string]uint64{}
	for _, de := range s.qpErrors {
		for _, ec := range de.Counts {
			qpErrors[[3]string{de.Name, ec.Cause.String()}] += ec.Count
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(qpErrors), cmpKeys) {
		if slices.Contains(s.devices, k[0]) {
			counter(c.qpErrors, float64(qpErrors[k]), k[0], s.guids[k[0]], k[1])
		}
	}
	lists := map[string]leakwatch.DeviceLists{} // a gone registration's with the listed one's
	for _, dl := range s.lists {
		l := lists[dl.Name]
		l.QPErrors += dl.QPErrors
		l.CreateFailures += dl.CreateFailures
		lists[dl.Name] = l
	}
	for _, name := range slices.Sorted(maps.Keys(lists)) {
		if slices.Contains(s.devices, name) {
			gauge(c.listEntries, float64(lists[name].QPErrors), name, s.guids[name], "qp_errors")
			gauge(c.listEntries, float64(lists[name].CreateFailures), name, s.guids[name], "create_failures")
		}
	}
	keys := make([]leakwatch.CountKey, 0, len(s.findings))
	for k := range s.findings {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b leakwatch.CountKey) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Severity, b.Severity))
	})
	for _, k := range keys {
		gauge(c.findings, float64(s.findings[k]), k.Device, s.guids[k.Device], k.Rule, string(k.Severity))
	}
}

// cmpKeys orders label tuples.
func cmpKeys(a, b [3]string) int {
	return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]), cmp.Compare(a[2], b[2]))
}

// metricsHandler serves /metrics (and nothing else) from a registry of
// the state's collector, the Go runtime's and the process's.
func metricsHandler(st *state, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(st), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		// promhttp_metric_handler_errors_total: a scrape that left a
		// metric out is counted, and RdmatoolScrapeIncomplete fires.
		Registry: reg,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return mux
}

// CheckMetricsAddress refuses an address the metrics cannot be served on
// whatever the host: one that is not HOST:PORT, or whose port is not a
// number up to 65535. "" (no metrics) passes. The flag, the
// configuration's key and Run check it before anything starts. The error
// says why, without the address or the package: the caller names the
// setting.
func CheckMetricsAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("want HOST:PORT, such as %s", DefaultMetricsAddress)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %s is not a number up to 65535", quote.String(port))
	}
	return nil
}

// metricsAddressError is Run's error for a metrics address that cannot be
// served on: err is why.
func metricsAddressError(addr string, err error) error {
	return fmt.Errorf("agent: metrics address %s: %w", quote.String(addr), err)
}

// listenMetrics opens the metrics listener; a bad or busy address is an
// error at start, not a silent agent without metrics.
func listenMetrics(addr string) (net.Listener, error) {
	if err := CheckMetricsAddress(addr); err != nil {
		return nil, metricsAddressError(addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return nil, metricsAddressError(addr, err)
	}
	return ln, nil
}
