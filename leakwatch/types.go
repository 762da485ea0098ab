package leakwatch

import (
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// Rule IDs. They are stable API: the JSON reports, --rule and the docs use
// them.
const (
	RuleStaleErrorQP             = "stale-error-qp"
	RuleNeverConnectedQP         = "never-connected-qp"
	RuleSRQDestroyWithoutLastWQE = "srq-destroy-without-last-wqe"
	RuleLastWQENotEmitted        = "last-wqe-not-emitted"
	RuleLastWQEUnhandled         = "last-wqe-unhandled"
	RuleXRCTgtOrphan             = "xrc-tgt-orphan"
	RuleQPExhaustion             = "qp-exhaustion"
)

// Severity of a finding.
type Severity string

// Severities, from least to most urgent.
const (
	SeverityWarning  Severity = "warning"
	SeverityError    Severity = "error"
	SeverityCritical Severity = "critical"
)

// Config tunes the rules and the watcher: what every evaluation shares.
// What one evaluation reports (its MinAge, its rules) is its Query.
type Config struct {
	// Probes says whether probe events feed the watcher. Rules that need
	// them are skipped, with ProbesReason, when false.
	Probes       bool
	ProbesReason string
	// ExhaustionThreshold is the share of MaxQP that qp-exhaustion reports
	// (default 0.8); ExhaustionHorizon how far it extrapolates the growth
	// of QPs in use (default 24h).
	ExhaustionThreshold float64
	ExhaustionHorizon   time.Duration
	// MaxQP is the QP limit per device name when the caller knows it
	// (netlink does not carry it); it overrides what the device reported
	// (DeviceScan.MaxQP). qp-exhaustion needs one of them.
	MaxQP map[string]uint64
	// Retain is how long destroyed QPs that the destroy rules may report
	// (SRQ QPs torn down without the IB spec 10.3.1 sequence) are kept
	// (default 10 minutes); other destroyed QPs are kept at most a minute,
	// without their evidence. Live QPs are kept while the kernel has them,
	// so a watcher's memory follows the host's QPs and its churn over the
	// last minute, not its uptime.
	Retain time.Duration
	// CreateFailures and CreateFailureWindow are what qp-create-failing
	// reports: at least CreateFailures failed QP creates on a device
	// within CreateFailureWindow (defaults 10 and 5 minutes).
	CreateFailures      int
	CreateFailureWindow time.Duration
	// ErrorStormCycles and ErrorStormWindow are what qp-error-storm
	// reports: an owner whose QPs on a device entered Error in at least
	// ErrorStormCycles reconnect cycles within ErrorStormWindow (defaults
	// 5 and 5 minutes).
	ErrorStormCycles int
	ErrorStormWindow time.Duration
	// MRLeakGrowth and MRLeakWindow are what mr-leak reports: an owner
	// whose MRs on a device grew by at least MRLeakGrowth within
	// MRLeakWindow, over at least as many QP creates, while its live QPs
	// did not grow (defaults 3 and 10 minutes).
	MRLeakGrowth int
	MRLeakWindow time.Duration
}

// Query selects what one evaluation reports. What every query shares
// (retention, thresholds, whether probes feed the watcher) stays in the
// watcher's Config.
type Query struct {
	// MinAge is how long a state must last, or an SRQ QP's drain wait,
	// before it is reported.
	MinAge time.Duration
	// Rules limits the evaluation to these rule IDs; empty means all.
	// Unknown IDs select nothing (callers validate against Rules()).
	Rules []string
	// Device limits the evaluation to the device with this name; ""
	// means every device.
	Device string
	// MaxQP adds to Config.MaxQP, or overrides it, per device name.
	MaxQP map[string]uint64
	// SkipProbeRules, when not empty, skips the rules that need probe
	// events with this reason, as if the probes were off.
	SkipProbeRules string
	// Limit caps the findings reported QP by QP (0: all, below 0: none);
	// the summary counts them all.
	Limit int
	// Each, when set, is called with every finding, in no order, before
	// Limit applies: a caller that only counts findings (Limit below 0)
	// holds none of them. The finding is valid only during the call, and
	// a QP's finding has no Evidence there (it is made for the findings
	// the report keeps).
	Each func(*Finding)
}

// DeviceScan is one device's part of a netlink scan.
type DeviceScan struct {
	Device rdmanl.Device
	QPs    []rdmanl.QP
	// Contexts is the number of user verbs contexts open on the device.
	Contexts uint64
	// Owners maps a QP owner PID (the thread id the kernel recorded) to
	// what /proc says about its process: TGID, Comm, Cgroup and
	// ContainerID (Owner.resolve); absent owners have exited.
	Owners map[uint32]Owner
	// ULPs names, per QPN, the kernel module that owns a kernel QP
	// netlink reports as rdma_cm's (rdmanl.ULPs).
	ULPs map[uint32]string
	// Peers names, per QPN, the address at the other end of the QP's
	// rdma_cm connection (rdmanl.Peers); a QP it does not name keeps the
	// peer an earlier scan or Watcher.Peers gave it.
	Peers map[uint32]string
	// CMConnected holds the QPNs whose rdma_cm ID is in CONNECT (connecting
	// or connected). Scans fill it where the provider reports no QP state
	// (RESET with a port), and only there is it read.
	CMConnected map[uint32]bool
	// LastWQE is what the provider table says of this device's provider
	// on this kernel (ProviderLastWQE), LastWQESource where that comes
	// from; an event seen on the device overrides it.
	LastWQE       LastWQE
	LastWQESource string
	// MaxQP is the device's QP limit as the device reported it (0:
	// unknown); Config.MaxQP and Query.MaxQP override it.
	MaxQP uint64
}

// Scan is a netlink snapshot of every device.
type Scan struct {
	// Started is when the dump began (zero: unknown). A QP that a probe
	// saw created before it and that the dump does not list is gone,
	// although its destroy event was lost.
	Started time.Time
	// Time is when the dump ended.
	Time    time.Time
	Devices []DeviceScan
	// Zombies is what a look at the host's processes found for
	// zombie-uverbs-context; nil when this scan did not look (the last
	// look stands).
	Zombies *Zombies
}

// Evidence is one observation a finding rests on.
type Evidence struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"` // "scan" or "probe"
	What   string    `json:"what"`
}

// Finding is one reported leak.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Device   string   `json:"device"`
	QPN      uint32   `json:"qpn"`
	Type     string   `json:"type"`
	State    string   `json:"state"`
	// Owner is the QP's owner (for zombie-uverbs-context the process,
	// none for qp-exhaustion); a kernel QP whose command is not known has
	// its module's name in Comm as well.
	Owner
	// Peer is the address at the other end of the QP's rdma_cm connection
	// (the rdma_cm ID's destination, without its port); "" when no rdma_cm
	// ID named one, or for a finding about no single QP. A qp-error-storm
	// names the peer most of its failed QPs had.
	Peer       string     `json:"peer"`
	SRQ        bool       `json:"srq"`  // attached to an SRQ
	SRQN       uint32     `json:"srqn"` // meaningful when srq is true
	AgeSeconds float64    `json:"age_seconds"`
	Evidence   []Evidence `json:"evidence"`
	Hint       string     `json:"hint"`
	Spec       string     `json:"spec"`
	// Count and Limit are set by qp-exhaustion (QPs in use and max_qp).
	Count uint64 `json:"count"`
	Limit uint64 `json:"limit"`
	// DrainSeconds is how long a drain of the QP has waited (still
	// running) or took (returned); set by srq-drain-stalled.
	DrainSeconds float64 `json:"drain_seconds"`
	// Draining says that drain has not returned yet.
	Draining bool `json:"draining"`
	// The QP's creation site, when the probes saw it (Site): for a user
	// QP the call (Site.Call), the library function called, the file, its
	// build ID and the call's offset in it, and in Stack the calls above it
	// where the program has frame pointers; for a kernel QP the innermost
	// frames of its kernel stack. At most 8 frames. Absent when not known.
	Site        string   `json:"site,omitempty"`
	SiteVia     string   `json:"site_via,omitempty"`
	SiteFile    string   `json:"site_file,omitempty"`
	SiteBuildID string   `json:"site_build_id,omitempty"`
	SiteOffset  uint64   `json:"site_offset,omitempty"`
	Stack       []string `json:"stack,omitempty"`
}

// maxStackFrames bounds the frames a finding shows.
const maxStackFrames = 8

// setSite gives f the site s.
func (f *Finding) setSite(s Site) {
	f.Site, f.SiteVia, f.SiteFile, f.SiteBuildID, f.SiteOffset = s.Call, s.Via, s.File, s.BuildID, s.Offset
	if len(s.Stack) > 0 {
		f.Stack = s.Stack[:min(len(s.Stack), maxStackFrames)]
	}
}

// creationSite is the finding's site in one phrase (Site.String), "" for
// none.
func (f *Finding) creationSite() string {
	return Site{Call: f.Site, Via: f.SiteVia, Stack: f.Stack}.String()
}

// Skipped is a rule that was not evaluated, and why.
type Skipped struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Report is the outcome of one evaluation.
type Report struct {
	// Summary groups every finding by device, rule and owner (all of
	// them, also those Findings leaves out).
	Summary []Group `json:"summary"`
	// Findings are the findings QP by QP: at most Query.Limit, the most
	// severe first; FindingsOmitted counts those left out, FindingsTotal
	// all of them.
	Findings        []Finding `json:"findings"`
	FindingsOmitted int       `json:"findings_omitted"`
	FindingsTotal   int       `json:"findings_total"`
	SkippedRules    []Skipped `json:"skipped_rules"`
	// Sites groups the findings that have a creation site by device and
	// site, the largest first (at most maxSiteGroups; SitesOmitted counts
	// the groups left out); absent when no finding has a site.
	Sites        []SiteGroup `json:"sites,omitempty"`
	SitesOmitted int         `json:"sites_omitted,omitempty"`
	// Peers counts every finding by its peer (Finding.Peer; "" gathers
	// those without one), the largest groups first (at most
	// maxPeerGroups; PeersOmitted counts the groups left out).
	Peers        []PeerGroup `json:"peers"`
	PeersOmitted int         `json:"peers_omitted"`
	// ObservedSeconds is how long the watcher has been observing.
	ObservedSeconds float64 `json:"observed_seconds"`
	QPs             int     `json:"qps"` // QPs tracked at the last scan
}
