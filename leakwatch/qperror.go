package leakwatch

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unique"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// RuleQPErrorStorm is the rule ID for an owner whose QPs keep entering
// Error and being replaced: a reconnect loop.
const RuleQPErrorStorm = "qp-error-storm"

// Config's defaults for qp-error-storm. Five reconnect cycles in five
// minutes: a consumer that recovers from one failure shows two (the QPs
// that failed, then its replacements when they are disconnected at the
// end), and one whose replacements fail as well is in a loop; nvme-rdma
// retries every 10 s (reconnect_delay) and an RDS or user reconnect loop
// faster, so five cycles come within a minute, and five minutes keeps a
// loop with a backoff of a minute in view.
const (
	DefaultErrorStormCycles = 5
	DefaultErrorStormWindow = 5 * time.Minute
)

// MaxQPErrors bounds the entries into Error a device keeps for
// qp-error-storm (the newest): the failures it counts, every cause but
// CauseModify. Teardowns and disconnects (CauseModify) are counted by
// cause (QPErrors) and not kept, so a neighbour's teardowns, however
// many, push no failure out.
const MaxQPErrors = 1024

// ErrorCause is why a QP entered Error, as rdmatool saw it.
type ErrorCause uint8

// The causes. A QP's entry into Error counts once, under the first
// cause seen; it counts again after the QP left Error (a modify to
// RESET) and entered it again.
const (
	// CauseModify: a modify to Error through ib_core: the consumer, its
	// ULP or rdma_cm (a disconnect moves the QP to Error).
	CauseModify ErrorCause = iota + 1
	// CauseQPFatal, CauseQPReqErr and CauseQPAccessErr: the provider
	// delivered the affiliated asynchronous error (IB_EVENT_QP_FATAL,
	// IB_EVENT_QP_REQ_ERR, IB_EVENT_QP_ACCESS_ERR) that put the QP in
	// Error.
	CauseQPFatal
	CauseQPReqErr
	CauseQPAccessErr
	// CauseProvider: the provider or the hardware moved the QP to Error
	// without an async event (a completion error, such as a remote access
	// error): a modify found it there (the provider said so to
	// ib_modify_qp_is_ok), or a scan listed it in Error that no modify or
	// async event the probes saw put there.
	CauseProvider
	// CauseUnknown: a scan listed the QP in Error while no probes fed
	// the watcher.
	CauseUnknown
	numCauses
)

var causeNames = [numCauses]string{"", "modify", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "provider", "unknown"}

// String is the cause as the metrics and findings name it.
func (c ErrorCause) String() string {
	if c < numCauses {
		return causeNames[c]
	}
	return "cause " + strconv.Itoa(int(c))
}

// failure says whether an entry into Error of cause c is one the consumer
// did not make, which qp-error-storm counts: every cause but a modify.
func (c ErrorCause) failure() bool { return c != CauseModify }

// asyncCause is the cause an async event is, when it puts the QP in
// Error (IB spec 11.6.3: the affiliated asynchronous errors); 0 for the
// others.
func asyncCause(name string) ErrorCause {
	switch name {
	case "QP_FATAL":
		return CauseQPFatal
	case "QP_REQ_ERR":
		return CauseQPReqErr
	case "QP_ACCESS_ERR":
		return CauseQPAccessErr
	}
	return 0
}

// qpError is one entry of a QP into Error that qp-error-storm counts, as
// its device keeps it.
type qpError struct {
	at Stamp
	// created is when the QP was first seen (its create event, or the
	// first scan that listed it).
	created Stamp
	names   unique.Handle[qpNames]
	peer    peerAddr // the QP's rdma_cm peer, learned then or since
	qpn     uint32
	cause   ErrorCause
}

// enteredError records that h entered Error at t for cause, unless the
// entry was counted already: once per entry, under the first cause seen.
// It counts the entry by cause and, if it is a failure, keeps it in the
// device's ring of failures (O(1)).
func (w *Watcher) enteredError(h *History, dev *deviceState, t time.Time, cause ErrorCause) {
	e := h.record()
	if e.errCause != 0 {
		return
	}
	e.errCause = cause
	dev.errors[cause]++
	if cause.failure() {
		dev.qpErrors.push(qpError{at: stampOf(t), created: h.FirstSeen, names: h.names, peer: h.peer, qpn: h.QPN, cause: cause}, MaxQPErrors)
	}
	h.note(t, sourceOf(cause), "entered Error: %s", cause)
}

func sourceOf(c ErrorCause) source {
	if c == CauseProvider || c == CauseUnknown {
		return sourceScan
	}
	return sourceProbe
}

// leftError records that h left Error: a later entry counts again.
func (h *History) leftError(s rdmanl.QPState) {
	if s != rdmanl.QPStateErr && h.events != nil {
		h.events.errCause = 0
	}
}

// ErrorCount counts a device's QPs' entries into Error of one cause.
type ErrorCount struct {
	Cause ErrorCause
	Count uint64
}

// DeviceErrors are a device's QP Error entries, counted by cause.
type DeviceErrors struct {
	Index  uint32
	Name   string
	Counts []ErrorCount // by cause, causes seen only
}

// QPErrors counts each device's QP entries into Error by cause, for as
// long as the watcher knows the device (counts that only grow). A QP
// first seen already in Error is not counted: when it entered is not
// known. Sorted by device index.
func (w *Watcher) QPErrors() []DeviceErrors {
	var out []DeviceErrors
	for index, d := range w.devs {
		de := DeviceErrors{Index: index, Name: d.name}
		for c, n := range d.errors {
			if n > 0 {
				de.Counts = append(de.Counts, ErrorCount{Cause: ErrorCause(c), Count: n})
			}
		}
		if len(de.Counts) > 0 {
			out = append(out, de)
		}
	}
	slices.SortFunc(out, func(a, b DeviceErrors) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// stormOwner is one owner's Error entries on a device within the window;
// owner is the newest entry's, or the newest that has a cgroup (what /proc
// said of the process, which a QP no scan listed lacks).
type stormOwner struct {
	owner  Owner
	errs   []qpError
	cycles int
}

// stormKey is who an Error entry belongs to: a process, or a kernel module
// and the ULP it serves. Not the whole Owner: the QPs of one process that
// a scan listed have its cgroup, those created since have not yet.
type stormKey struct {
	kern, ulp string
	process   uint32
}

func stormKeyOf(o Owner) stormKey {
	if o.Kernel() {
		return stormKey{kern: o.KernName, ulp: o.ULP}
	}
	return stormKey{process: o.process()}
}

// reconnectCycles counts the cycles in errs (oldest first): the first
// Error starts one, and so does each Error of a QP created after the
// current cycle began (a replacement that failed in turn). QPs that fail
// together (a controller's queues, both QPs of a pair) are one cycle.
func reconnectCycles(errs []qpError) int {
	cycles := 0
	var start Stamp
	for _, e := range errs {
		if cycles == 0 || e.created > start {
			cycles++
			start = e.at
		}
	}
	return cycles
}

// qpErrorStorms reports each owner whose QPs on dev failed into Error
// in at least cfg.ErrorStormCycles reconnect cycles within
// cfg.ErrorStormWindow before now: the errors, their rate and causes, the
// cycles and the replacements, the most frequent creation site as the
// finding's. Only failures count: an async error event, or the provider
// moving the QP (CauseProvider, CauseUnknown), the entries the device
// keeps (its newest MaxQPErrors). A modify to Error is what every
// teardown and disconnect does, and what a consumer does after a failure
// the kernel did not see (a completion error): it counts in QPErrors, and
// is not kept.
func qpErrorStorms(dev *deviceState, now time.Time, cfg ruleConfig) []Finding {
	since := stampOf(now.Add(-cfg.ErrorStormWindow))
	i := dev.qpErrors.search(func(e *qpError) int { return cmp.Compare(e.at, since) })
	if dev.qpErrors.len()-i < cfg.ErrorStormCycles {
		return nil // a cycle has one failure at least
	}
	// The window begins at the oldest failure kept, and the device kept
	// as many as it keeps: older failures within the window may be gone.
	truncated := i == 0 && dev.qpErrors.full(MaxQPErrors)
	byOwner := map[stormKey]*stormOwner{}
	var order []*stormOwner
	for _, e := range dev.qpErrors.from(i) {
		o := e.names.Value().owner
		k := stormKeyOf(o)
		so := byOwner[k]
		if so == nil {
			so = &stormOwner{}
			byOwner[k] = so
			order = append(order, so)
		}
		if so.owner.Cgroup == "" || o.Cgroup != "" {
			so.owner = o
		}
		so.errs = append(so.errs, *e)
	}
	var out []Finding
	for _, so := range order {
		if so.cycles = reconnectCycles(so.errs); so.cycles < cfg.ErrorStormCycles {
			continue
		}
		out = append(out, stormFinding(dev, so, truncated, now, cfg))
	}
	return out
}

// stormFinding is the finding of so's storm on dev; its count is "at
// least" so many when truncated (the device's failures kept do not reach
// back to the window's beginning).
func stormFinding(dev *deviceState, so *stormOwner, truncated bool, now time.Time, cfg ruleConfig) Finding {
	errs := so.errs
	first, last := errs[0], errs[len(errs)-1]
	span := now.Sub(first.at.Time())
	f := Finding{
		Rule: RuleQPErrorStorm, Severity: SeverityError, Device: dev.name, Owner: so.owner,
		Count: uint64(len(errs)), AgeSeconds: math.Round(span.Seconds()*1000) / 1000,
		Spec: "IB spec 10.3: a QP in Error flushes its work; memory registered through it (fast registration, bound memory windows) goes with it",
	}
	if f.Kernel() && f.Comm == "" {
		f.Comm = f.KernName
	}
	causes, sites := map[ErrorCause]int{}, map[siteHandle]int{}
	replaced := 0
	for _, e := range errs {
		causes[e.cause]++
		sites[e.names.Value().site]++
		if e.created > first.at {
			replaced++
		}
	}
	byCause := make([]string, 0, len(causes))
	order := slices.Sorted(maps.Keys(causes))
	slices.SortStableFunc(order, func(a, b ErrorCause) int { return cmp.Compare(causes[b], causes[a]) })
	for _, c := range order {
		byCause = append(byCause, fmt.Sprintf("%s %d", c, causes[c]))
	}
	site, n := siteHandle{}, -1
	for s, k := range sites {
		if k > n || k == n && siteOf(s).String() < siteOf(site).String() {
			site, n = s, k
		}
	}
	f.setSite(siteOf(site))
	count := strconv.Itoa(len(errs))
	if truncated {
		count = "at least " + count
	}
	rate := float64(len(errs)) / cfg.ErrorStormWindow.Minutes()
	f.Evidence = append(f.Evidence,
		Evidence{Time: first.at.Time(), Source: "probe", What: fmt.Sprintf("%s QPs failed into Error in %s (%.1f a minute) over %d reconnect cycles: %s",
			count, cfg.ErrorStormWindow, rate, so.cycles, strings.Join(byCause, ", "))},
		Evidence{Time: now.UTC(), Source: "probe", What: fmt.Sprintf("%d of them created after the first Error (replacements that failed in turn)", replaced)})
	if where := siteOf(site).String(); where != "" {
		f.Evidence = append(f.Evidence, Evidence{Time: now.UTC(), Source: "probe", What: fmt.Sprintf("%d created at %s", n, where)})
	}
	var peers string
	f.Peer, peers = stormPeers(errs)
	f.Evidence = append(f.Evidence, Evidence{Time: now.UTC(), Source: "scan", What: peers},
		heldKeys(dev, keyOf(so.owner, siteOf(site)), first.at, last.at, now))
	f.Evidence = append(f.Evidence, Evidence{Time: last.at.Time(), Source: sourceOf(last.cause).String(),
		What: fmt.Sprintf("last: QP %d entered Error (%s)", last.qpn, last.cause)})
	f.Hint = fmt.Sprintf("%s QPs of this owner failed into Error in %d reconnect cycles within %s (%s): each replacement fails as the QP before it. "+
		"Find the first failure's cause: remote access errors (QP_ACCESS_ERR on the responder; REM_ACCESS_ERR completions on the requester, "+
		"which reach the kernel as no event) mean a peer uses an R_Key that no longer exists (an MR deregistered or registered again, "+
		"or registered through a QP that went to Error): the peer must fetch fresh keys after a reconnect; retry with a backoff",
		count, so.cycles, cfg.ErrorStormWindow, strings.Join(byCause, ", "))
	return f
}

// maxStormPeers bounds the peers a storm's evidence names.
const maxStormPeers = 5

// stormPeers names the peers of errs' QPs (their rdma_cm connections'
// other ends), the most frequent first with the QPs of each, at most
// maxStormPeers: the most frequent ("" when no QP had one) and the
// evidence that says so.
func stormPeers(errs []qpError) (top, what string) {
	counts := map[string]int{}
	known := 0
	for _, e := range errs {
		if p := e.peer.String(); p != "" {
			counts[p]++
			known++
		}
	}
	if known == 0 {
		return "", "peers: no failed QP's rdma_cm peer is known (no rdma_cm ID named one: QPs not connected through rdma_cm, or gone before a dump of the rdma_cm IDs saw them)"
	}
	order := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(counts[b], counts[a]) })
	var named []string
	for _, p := range order[:min(len(order), maxStormPeers)] {
		named = append(named, fmt.Sprintf("%s %d", p, counts[p]))
	}
	if more := len(order) - maxStormPeers; more > 0 {
		rest := 0
		for _, p := range order[maxStormPeers:] {
			rest += counts[p]
		}
		named = append(named, fmt.Sprintf("and %d more peers with %d", more, rest))
	}
	return order[0], fmt.Sprintf("peers (rdma_cm) of %d of the %d failed QPs: %s", known, len(errs), strings.Join(named, ", "))
}

// untoldKeys is what the kernel does not say of the keys that went with
// failed QPs.
const untoldKeys = "the kernel does not say which of them were fast-registered on the failed QPs, nor which memory windows were bound to them " +
	"(netlink lists no QP for an MR, and no memory windows)"

// heldKeys is the evidence of the R_Keys an owner (k) held on dev when its
// QPs failed (from first to last): its MRs at the device's last MR dump,
// the oldest of them with their keys, and when that dump was, or why they
// are not known.
func heldKeys(dev *deviceState, k mrOwnerKey, first, last Stamp, now time.Time) Evidence {
	st := dev.mrs
	if st == nil || st.dumped == 0 {
		return Evidence{Time: now.UTC(), Source: "scan", What: fmt.Sprintf("R_Keys the owner held when its QPs failed: not known, no MR dump of %s yet", dev.name)}
	}
	at := st.dumped
	var when string
	switch {
	case at < first:
		when = at.Time().Sub(first.Time()).Abs().Round(time.Millisecond).String() + " before the first failure"
	case at > last:
		when = at.Time().Sub(last.Time()).Round(time.Millisecond).String() + " after the last failure"
	default:
		when = "between the first failure and the last"
	}
	ev := Evidence{Time: at.Time(), Source: "scan"}
	o := st.owners[k]
	if o == nil || o.samples[len(o.samples)-1].mrs == 0 {
		ev.What = fmt.Sprintf("R_Keys the owner held when its QPs failed: none, it had no MRs on %s at the last MR dump (%s)", dev.name, when)
		return ev
	}
	s := o.samples[len(o.samples)-1]
	var keys []string
	hasKeys := true
	for _, m := range o.oldest {
		hasKeys = hasKeys && m.hasKeys
		if m.hasKeys {
			keys = append(keys, fmt.Sprintf("MR %d R_Key 0x%x", m.mrn, m.rkey))
		} else {
			keys = append(keys, fmt.Sprintf("MR %d", m.mrn))
		}
	}
	oldest := ""
	if uint64(len(o.oldest)) < s.mrs {
		oldest = fmt.Sprintf(", the oldest %d", len(o.oldest))
	}
	mrs := "MRs"
	if s.mrs == 1 {
		mrs = "MR"
	}
	ev.What = fmt.Sprintf("R_Keys the owner held when its QPs failed, at the last MR dump (%s): %d %s (%s)%s: %s", when, s.mrs, mrs, size(s.bytes), oldest, strings.Join(keys, ", "))
	if !hasKeys {
		ev.What += " (their keys need CAP_NET_ADMIN)"
	}
	ev.What += "; " + untoldKeys
	return ev
}
