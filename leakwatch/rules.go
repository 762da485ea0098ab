package leakwatch

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// ruleConfig is what a rule reads: the watcher's Config, with the
// query's MaxQP over its own, and the query's MinAge.
type ruleConfig struct {
	Config
	MinAge time.Duration
}

// qpRule is one rule over one QP's history. Rules are small, pure and
// separate; the time comes from the caller, through a ruleClock: a rule
// compares an age with a duration only with clk.atLeast or clk.over, and
// reads of dev only what devFacts holds, so that a count can tell when its
// answer may change (counts.go).
type qpRule struct {
	id          string
	needsProbes bool
	// severity is that of the rule's findings; escalated, when not "",
	// the other one some of them have (at most one rule has one: a
	// qpVerdict holds one bit for it).
	severity, escalated Severity
	check               func(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool)
}

var qpRules = []qpRule{
	{RuleStaleErrorQP, false, SeverityWarning, "", staleErrorQP},
	{RuleNeverConnectedQP, false, SeverityWarning, "", neverConnectedQP},
	{RuleSRQDestroyWithoutLastWQE, true, SeverityError, "", srqDestroyWithoutLastWQE},
	{RuleLastWQENotEmitted, true, SeverityError, "", lastWQENotEmitted},
	{RuleLastWQEUnhandled, true, SeverityError, "", lastWQEUnhandled},
	{RuleXRCTgtOrphan, false, SeverityWarning, "", xrcTgtOrphan},
	{RuleSRQDrainStalled, true, SeverityError, SeverityCritical, srqDrainStalled}, // critical while the drain waits
}

// ruleClock is the time the rules read, and the earliest time after it at
// which an answer they read from it turns (zero: none does). Rules read
// wall time, as the histories' times are: now carries no monotonic
// reading.
type ruleClock struct {
	now, turn time.Time
}

// newRuleClock is a clock at now.
func newRuleClock(now time.Time) *ruleClock { return &ruleClock{now: now.Round(0)} }

// atLeast is how long has passed since t, and whether that is at least d.
func (c *ruleClock) atLeast(t time.Time, d time.Duration) (time.Duration, bool) {
	age := c.now.Sub(t)
	if age < d {
		c.turnsAt(t.Add(d))
	}
	return age, age >= d
}

// over says whether more than d has passed since t.
func (c *ruleClock) over(t time.Time, d time.Duration) bool {
	age := c.now.Sub(t)
	if age <= d {
		c.turnsAt(t.Add(d + 1))
	}
	return age > d
}

// turnsAt notes that an answer turns at t.
func (c *ruleClock) turnsAt(t time.Time) {
	if c.turn.IsZero() || t.Before(c.turn) {
		c.turn = t
	}
}

// IsQPRule reports whether id is a rule whose findings are each about one
// QP (Finding.QPN), not about a device.
func IsQPRule(id string) bool {
	return slices.ContainsFunc(qpRules, func(r qpRule) bool { return r.id == id })
}

// Rules lists every rule ID in the order they are evaluated.
func Rules() []string {
	ids := make([]string, 0, len(qpRules)+5)
	for _, r := range qpRules {
		ids = append(ids, r.id)
	}
	return append(ids, RuleQPExhaustion, RuleQPCreateFailing, RuleQPErrorStorm, RuleMRLeak, RuleZombieUverbsContext)
}

const (
	specStateMachine = "IB spec 10.3 (QP states): a QP in Error keeps its resources until its consumer destroys it"
	specSRQTeardown  = "IB spec 10.3.1: move an SRQ QP to Error, wait for LAST_WQE_REACHED, drain, then destroy, or WQEs and data segments leak"
	specNoLastWQE    = "IB spec 10.3.1; rxe before 6.5ish, siw, irdma and qedr never deliver LAST_WQE_REACHED"
)

func base(rule string, sev Severity, h *History, age time.Duration) Finding {
	n := h.qpNames()
	f := Finding{
		Rule: rule, Severity: sev, Device: n.device, QPN: h.QPN, Type: h.Type.String(),
		State: h.State.String(), Owner: n.owner, Peer: h.Peer(),
		SRQ: h.OnSRQ, SRQN: h.SRQN, AgeSeconds: math.Round(age.Seconds()*1000) / 1000,
		// Evidence: the history's notes, made when Evaluate keeps the
		// finding.
	}
	f.PID = h.pid
	f.setSite(siteOf(n.site))
	if f.Kernel() && f.Comm == "" {
		f.Comm = f.KernName
	}
	if !h.StateKnown {
		f.State = "unknown"
	}
	return f
}

// staleErrorQP: a QP stays in ERR (or SQE) for at least MinAge.
func staleErrorQP(h *History, _ *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	if h.Destroyed || !h.StateKnown || (h.State != rdmanl.QPStateErr && h.State != rdmanl.QPStateSQE) {
		return Finding{}, false
	}
	age, aged := clk.atLeast(h.StateSince.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleStaleErrorQP, SeverityWarning, h, age)
	f.Hint = "the owner moved this QP to the error state and never destroyed it; it counts against max_qp until destroyed: fix the consumer's error path"
	if h.OnSRQ {
		f.Hint += " (it is on an SRQ: drain with a marker WR, then destroy)"
	}
	f.Spec = specStateMachine
	return f, true
}

// neverConnectedQP: an RC or UC QP stays in RESET or INIT, or in RTR
// without ever reaching RTS, for at least MinAge. XRC targets live in RTR
// by design and are not RC/UC.
func neverConnectedQP(h *History, _ *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	if h.Destroyed || !h.StateKnown || (h.Type != rdmanl.QPTypeRC && h.Type != rdmanl.QPTypeUC) {
		return Finding{}, false
	}
	switch {
	case h.State == rdmanl.QPStateReset, h.State == rdmanl.QPStateInit:
	case h.State == rdmanl.QPStateRTR && !h.EverRTS:
	default:
		return Finding{}, false
	}
	age, aged := clk.atLeast(h.StateSince.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleNeverConnectedQP, SeverityWarning, h, age)
	f.Hint = "connection setup never completed (CM timeout, missing or rejected peer); the consumer should destroy QPs whose connection failed"
	f.Spec = specStateMachine
	return f, true
}

// srqDestroyWithoutLastWQE: an SRQ QP was destroyed without first being
// moved to ERR or, on a provider that emits it, before LAST_WQE_REACHED.
func srqDestroyWithoutLastWQE(h *History, dev *deviceState, clk *ruleClock, _ ruleConfig) (Finding, bool) {
	if !h.Destroyed || !h.DestroySeen || h.DeviceGone || !h.OnSRQ {
		return Finding{}, false
	}
	var why string
	switch {
	case !h.ErrBeforeDestroy:
		why = fmt.Sprintf("destroyed from state %s without moving it to Error first", h.State)
	case dev.emitsLastWQE && !h.LastWQEBeforeDestroy:
		why = "destroyed in Error before LAST_WQE_REACHED was delivered (this provider delivers it)"
	default:
		return Finding{}, false
	}
	f := base(RuleSRQDestroyWithoutLastWQE, SeverityError, h, clk.now.Sub(h.seen().DestroyedAt.Time()))
	f.State = "destroyed"
	f.Hint = why + "; tear SRQ QPs down as the spec says: modify to Error, wait for LAST_WQE_REACHED (or post a marker WR and wait for its flush), drain the CQ, then destroy"
	f.Spec = specSRQTeardown
	return f, true
}

// lastWQENotEmitted: an SRQ QP has been in ERR for at least MinAge (the
// move seen by a probe) and the provider never delivered LAST_WQE_REACHED.
func lastWQENotEmitted(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	e := h.seen()
	if e.ErrAt.IsZero() {
		return lastWQENotEmittedBefore(h, dev, clk, cfg)
	}
	if h.Destroyed || !h.OnSRQ || h.State != rdmanl.QPStateErr || e.LastWQECount > 0 {
		return Finding{}, false
	}
	age, aged := clk.atLeast(e.ErrAt.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleLastWQENotEmitted, SeverityError, h, age)
	f.Hint = fmt.Sprintf("%s did not deliver IB_EVENT_QP_LAST_WQE_REACHED after this SRQ QP entered Error; a consumer waiting for it never destroys the QP: post a marker WR after Error, wait for its flush completion, then destroy", dev.name)
	if f.Kernel() {
		f.Hint += fmt.Sprintf(" (this is a kernel QP of %s: since 6.11 ib_drain_qp waits up to 60 s for the event, see %s)", f.Owner.name(), RuleSRQDrainStalled)
	}
	f.Spec = specNoLastWQE
	return f, true
}

// erredBefore reports whether an SRQ QP was in Error, not destroyed, when
// rdmatool began watching it (no probe saw it enter Error, no event came).
func erredBefore(h *History) bool {
	e := h.seen()
	return !h.Destroyed && h.OnSRQ && e.ErrAt.IsZero() && h.StateKnown && h.State == rdmanl.QPStateErr && e.LastWQECount == 0
}

// lastWQENotEmittedBefore: an SRQ QP already in Error when watching began,
// on a provider known never to deliver LAST_WQE_REACHED.
func lastWQENotEmittedBefore(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	known, source := dev.lastWQEKnown()
	if !erredBefore(h) || known != LastWQENever {
		return Finding{}, false
	}
	age, aged := clk.atLeast(h.StateSince.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleLastWQENotEmitted, SeverityError, h, age)
	f.Hint = fmt.Sprintf("rdmatool did not see this SRQ QP enter Error (it was in Error when watching began, or the provider moved it there), and %s never delivers IB_EVENT_QP_LAST_WQE_REACHED (%s); a consumer waiting for it never destroys the QP: post a marker WR after Error, wait for its flush completion, then destroy", dev.name, source)
	f.Spec = specNoLastWQE
	return f, true
}

// lastWQEUnhandled: LAST_WQE_REACHED was delivered but the QP was not
// destroyed within MinAge; or the QP was in Error before watching began on
// a provider known to deliver it, so the event was due then.
func lastWQEUnhandled(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	if erredBefore(h) {
		known, source := dev.lastWQEKnown()
		if known != LastWQEDelivered {
			return Finding{}, false
		}
		age, aged := clk.atLeast(h.StateSince.Time(), cfg.MinAge)
		if !aged {
			return Finding{}, false
		}
		f := base(RuleLastWQEUnhandled, SeverityError, h, age)
		f.Hint = fmt.Sprintf("rdmatool did not see this SRQ QP enter Error (it was in Error when watching began, or the provider moved it there), and %s delivers LAST_WQE_REACHED (%s), so the event was due then, yet the QP is still there: the consumer has no handler for it or lost it; drain and destroy when it arrives", dev.name, source)
		f.Spec = specSRQTeardown
		return f, true
	}
	e := h.seen()
	if h.Destroyed || !h.OnSRQ || e.LastWQECount == 0 {
		return Finding{}, false
	}
	age, aged := clk.atLeast(e.LastWQEAt.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleLastWQEUnhandled, SeverityError, h, age)
	f.Hint = fmt.Sprintf("LAST_WQE_REACHED was delivered %d time(s) but the QP is still there: the consumer has no handler for it or loses the event; drain and destroy when it arrives", e.LastWQECount)
	f.Spec = specSRQTeardown
	return f, true
}

// xrcTgtOrphan: an XRC target QP owned by ib_uverbs with no PID that has
// outlived every process with the device open.
func xrcTgtOrphan(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	if h.Destroyed || h.Type != rdmanl.QPTypeXRCTgt || h.pid != 0 || dev.contexts != 0 {
		return Finding{}, false
	}
	if k := h.Owner().KernName; k != "" && k != "ib_uverbs" {
		return Finding{}, false
	}
	age, aged := clk.atLeast(h.FirstSeen.Time(), cfg.MinAge)
	if !aged {
		return Finding{}, false
	}
	f := base(RuleXRCTgtOrphan, SeverityWarning, h, age)
	f.Hint = "an XRC target QP outlived every process with the device open; it holds a QP until its XRC domain goes away: restart the XRC users or reset the device"
	f.Spec = "IB spec 14.2 (XRC): target QPs belong to the XRC domain, not to a process"
	return f, true
}

// qpExhaustion: a device's QPs in use reach the threshold of its max, or
// at the observed growth rate reach the max within the horizon.
func qpExhaustion(dev *deviceState, limit uint64, now time.Time, cfg ruleConfig) (Finding, bool) {
	if len(dev.samples) == 0 || limit == 0 {
		return Finding{}, false
	}
	last := dev.samples[len(dev.samples)-1]
	n := uint64(last.n)
	f := Finding{
		Rule: RuleQPExhaustion, Device: dev.name, Type: "", State: "", Count: n, Limit: limit,
		Evidence: []Evidence{{Time: last.t.UTC(), Source: "scan", What: fmt.Sprintf("%d of %d QPs in use", n, limit)}},
		Spec:     "a device refuses new QPs at max_qp: no new connection can be built",
	}
	if float64(n) >= cfg.ExhaustionThreshold*float64(limit) {
		f.Severity = SeverityCritical
		f.Hint = fmt.Sprintf("%d of %d QPs in use (%.0f%%); new connections fail at max_qp: find the owners with rdmatool res qp and the other findings", n, limit, 100*float64(n)/float64(limit))
		return f, true
	}
	first := dev.samples[0]
	span := last.t.Sub(first.t)
	if span < cfg.MinAge || last.n <= first.n {
		return Finding{}, false
	}
	rate := float64(last.n-first.n) / span.Seconds() // QPs per second
	eta := time.Duration(float64(limit-n) / rate * float64(time.Second))
	if eta > cfg.ExhaustionHorizon {
		return Finding{}, false
	}
	f.Severity = SeverityError
	f.AgeSeconds = math.Round(span.Seconds()*1000) / 1000
	f.Hint = fmt.Sprintf("QPs in use grow by %.2f/s (%d to %d in %s); at that rate max_qp (%d) is reached in %s", rate, first.n, last.n, span.Round(time.Second), limit, eta.Round(time.Second))
	return f, true
}

// Evaluate runs the rules q selects at the watcher's current time. It
// changes nothing, so queries with different options can follow each other
// on one watcher. What it holds follows what it reports, not the findings
// there are: QP by QP, each finding is counted into the summary, passed to
// q.Each and kept only when q.Limit lets it through.
func (w *Watcher) Evaluate(q Query) Report {
	e := w.evaluation(q, w.now())
	rep := Report{SkippedRules: slices.Clone(e.skipped), ObservedSeconds: math.Round(e.now.Sub(w.start).Seconds()*1000) / 1000}
	if rep.SkippedRules == nil {
		rep.SkippedRules = []Skipped{}
	}
	var sum summarizer
	keep := keeper{limit: q.Limit}
	take := func(f *Finding, h *History) {
		rep.FindingsTotal++
		sum.add(f)
		if q.Each != nil {
			q.Each(f)
		}
		keep.offer(f, h)
	}
	clk := newRuleClock(e.now)
	var one []Finding // the findings of one QP
	for _, h := range w.qps {
		if q.Device != "" && h.Device() != q.Device {
			continue
		}
		if !h.Destroyed {
			rep.QPs++
		}
		one = w.qpFindings(one[:0], h, &e, clk)
		for i := range one {
			take(&one[i], h)
		}
	}
	w.deviceFindings(&e, false, func(f *Finding) { take(f, nil) }, &rep.SkippedRules)
	rep.Summary = sum.result()
	rep.Sites, rep.SitesOmitted = sum.siteResult()
	rep.Peers, rep.PeersOmitted = sum.peerResult()
	rep.Findings = keep.findings()
	rep.FindingsOmitted = rep.FindingsTotal - len(rep.Findings)
	return rep
}

// evaluation is what a query selects at one time: the rules' config, the
// QP rules it runs and those it skips, and whether the probe rules run.
type evaluation struct {
	q        Query
	now      time.Time
	cfg      ruleConfig
	probes   bool
	noProbes string // why the rules that need the probes are skipped
	rules    []qpRule
	skipped  []Skipped // QP rules
}

// evaluation is what q selects at now.
func (w *Watcher) evaluation(q Query, now time.Time) evaluation {
	e := evaluation{q: q, now: now, cfg: ruleConfig{Config: w.cfg, MinAge: q.MinAge}}
	if len(q.MaxQP) > 0 {
		e.cfg.MaxQP = maps.Clone(e.cfg.MaxQP)
		if e.cfg.MaxQP == nil {
			e.cfg.MaxQP = map[string]uint64{}
		}
		maps.Copy(e.cfg.MaxQP, q.MaxQP)
	}
	probes, probesReason := e.cfg.Probes, e.cfg.ProbesReason
	if q.SkipProbeRules != "" {
		probes, probesReason = false, q.SkipProbeRules
	}
	e.probes, e.noProbes = probes, "needs the eBPF probes"
	if probesReason != "" {
		e.noProbes += ": " + probesReason
	}
	for _, r := range qpRules {
		if !e.enabled(r.id) {
			continue
		}
		if r.needsProbes && !probes {
			e.skipped = append(e.skipped, Skipped{Rule: r.id, Reason: e.noProbes})
			continue
		}
		e.rules = append(e.rules, r)
	}
	return e
}

// enabled says whether the query selects the rule id.
func (e *evaluation) enabled(id string) bool {
	return len(e.q.Rules) == 0 || slices.Contains(e.q.Rules, id)
}

// qpFindings appends the findings of e's QP rules on h at clk's time to
// out, the superseded left out; a destroyed QP past its retention has
// none, as if expired (the next scan deletes it).
func (w *Watcher) qpFindings(out []Finding, h *History, e *evaluation, clk *ruleClock) []Finding {
	if h.Destroyed && clk.over(h.seen().DestroyedAt.Time(), w.retention(h)) {
		return out
	}
	dev := w.devs[h.DevIndex]
	if dev == nil {
		dev = &deviceState{name: h.Device()}
	}
	n := len(out)
	for _, r := range e.rules {
		if f, ok := r.check(h, dev, clk, e.cfg); ok {
			out = append(out, f)
		}
	}
	return out[:n+len(dropSuperseded(out[n:]))]
}

// deviceFindings passes take the findings of e's device rules, and adds
// the rules it skips to skipped. A bare finding is counted, not shown:
// mr-leak's leaves its evidence out (which counts the owner's live QPs,
// QP by QP).
func (w *Watcher) deviceFindings(e *evaluation, bare bool, take func(*Finding), skipped *[]Skipped) {
	q, now, cfg := e.q, e.now, e.cfg
	if e.enabled(RuleQPExhaustion) {
		var unknown []string
		for _, d := range w.devs {
			if q.Device != "" && d.name != q.Device {
				continue
			}
			limit := cfg.MaxQP[d.name]
			if limit == 0 {
				limit = d.maxQP
			}
			if limit == 0 {
				unknown = append(unknown, d.name)
				continue
			}
			if f, ok := qpExhaustion(d, limit, now, cfg); ok {
				take(&f)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			*skipped = append(*skipped, Skipped{Rule: RuleQPExhaustion,
				Reason: "max_qp unknown for " + strings.Join(unknown, ", ") + " (the device did not report it: set it per device)"})
		}
	}
	for _, id := range []string{RuleQPCreateFailing, RuleQPErrorStorm} {
		if !e.enabled(id) {
			continue
		}
		if !e.probes {
			*skipped = append(*skipped, Skipped{Rule: id, Reason: e.noProbes})
			continue
		}
		for _, index := range slices.Sorted(maps.Keys(w.devs)) {
			d := w.devs[index]
			if q.Device != "" && d.name != q.Device {
				continue
			}
			if id == RuleQPCreateFailing {
				if f, ok := qpCreateFailing(d, now, cfg); ok {
					take(&f)
				}
				continue
			}
			for _, f := range qpErrorStorms(d, now, cfg) {
				take(&f)
			}
		}
	}
	if e.enabled(RuleMRLeak) {
		switch {
		case !e.probes:
			*skipped = append(*skipped, Skipped{Rule: RuleMRLeak, Reason: e.noProbes})
		case w.mrsUndumped(q.Device):
			*skipped = append(*skipped, Skipped{Rule: RuleMRLeak, Reason: "no MR dump yet"})
		default:
			for _, index := range slices.Sorted(maps.Keys(w.devs)) {
				d := w.devs[index]
				if q.Device != "" && d.name != q.Device {
					continue
				}
				for _, f := range w.mrLeaks(index, d, now, cfg, bare) {
					take(&f)
				}
			}
		}
	}
	if e.enabled(RuleZombieUverbsContext) {
		fs, skip := w.zombieFindings(q, now)
		for i := range fs {
			take(&fs[i])
		}
		if skip != nil {
			*skipped = append(*skipped, *skip)
		}
	}
}

// dropSuperseded removes stale-error-qp from one QP's findings when a
// more specific SRQ rule already explains it, so each leak is reported
// once, for its cause.
func dropSuperseded(fs []Finding) []Finding {
	specific := slices.ContainsFunc(fs, func(f Finding) bool {
		return f.Rule == RuleLastWQENotEmitted || f.Rule == RuleLastWQEUnhandled
	})
	if !specific {
		return fs
	}
	return slices.DeleteFunc(fs, func(f Finding) bool { return f.Rule == RuleStaleErrorQP })
}
