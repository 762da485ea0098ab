package leakwatch

import (
	"container/heap"
	"maps"
	"slices"
	"time"
	"unique"
)

// CountKey is what a count of findings is by: the device, the rule and the
// severity.
type CountKey struct {
	Device   string
	Rule     string
	Severity Severity
}

// Counts is what an evaluation of every rule counts (CountFindings).
type Counts struct {
	// Findings counts the findings by device, rule and severity.
	Findings map[CountKey]int
	// SkippedRules are the rules not evaluated, and why, as a Report's.
	SkippedRules []Skipped
	// qps counts the QPs with findings on each device by the QP rules
	// that found them.
	qps map[string]map[qpVerdict]int
}

// QPs is how many QPs on device have a finding of at least one of rules
// (QP rules: the others count none), each QP counted once.
func (c Counts) QPs(device string, rules []string) int {
	var want qpVerdict
	for i, r := range qpRules {
		if slices.Contains(rules, r.id) {
			want |= 1 << i
		}
	}
	n := 0
	for v, k := range c.qps[device] {
		if v&want != 0 {
			n += k
		}
	}
	return n
}

// CountFindings counts what Evaluate(Query{MinAge: minAge, Limit: -1})
// would count now, and the rules it would skip. The watcher keeps the
// count of the QP rules' findings QP by QP: a count evaluates again only
// the QPs that changed since the last one (a scan or an event changed
// them, or what the rules read of their device), and those whose findings
// may change with time alone (an age that reaches minAge, a retention that
// runs out); with nothing changed it does no work QP by QP. The device
// rules are evaluated whole, and mr-leak without its evidence. Another
// minAge, the probes turned on or off, or a clock that went back start
// the count again from every QP.
func (w *Watcher) CountFindings(minAge time.Duration) Counts {
	e := w.evaluation(Query{MinAge: minAge}, w.now())
	clk := newRuleClock(e.now)
	c := w.counts
	if c == nil || c.minAge != minAge || c.probes != e.probes || clk.now.Before(c.at) {
		c = w.startCounts(minAge, e.probes)
	}
	w.checkFacts()
	for len(c.turns) > 0 && !clk.now.Before(c.turns[0].at) {
		t := heap.Pop(&c.turns).(turn)
		if w.current(t.h) {
			w.changed(t.h, t.h.names)
		}
	}
	var one []Finding
	c.evaluated = 0
	for _, h := range c.queue {
		h.queued = false
		if !w.current(h) {
			continue
		}
		c.evaluated++
		clk.turn = time.Time{} // this QP's
		one = w.qpFindings(one[:0], h, &e, clk)
		h.counted = verdictOf(one)
		c.add(h.Device(), h.counted, 1)
		if !clk.turn.IsZero() {
			heap.Push(&c.turns, turn{clk.turn, h})
		}
	}
	if cap(c.queue) > 4096 { // a first count, or a storm: let it go
		c.queue = nil
	} else {
		clear(c.queue)
		c.queue = c.queue[:0]
	}
	if cap(c.turns) > 4096 && len(c.turns) < cap(c.turns)/4 {
		c.turns = slices.Clone(c.turns)
	}
	c.at = clk.now

	out := Counts{Findings: maps.Clone(c.findings), SkippedRules: slices.Clone(e.skipped), qps: make(map[string]map[qpVerdict]int, len(c.qps))}
	for dev, byVerdict := range c.qps {
		out.qps[dev] = maps.Clone(byVerdict)
	}
	w.deviceFindings(&e, true, func(f *Finding) { out.Findings[CountKey{f.Device, f.Rule, f.Severity}]++ }, &out.SkippedRules)
	if out.SkippedRules == nil {
		out.SkippedRules = []Skipped{}
	}
	return out
}

// counter is the count of the QP rules' findings that CountFindings keeps:
// by device, rule and severity, and of the QPs by device and verdict. Each
// current history's verdict (History.counted) is in it, but for those
// queued to be counted again, which are out of it until then.
type counter struct {
	minAge time.Duration
	probes bool      // the probe rules run
	at     time.Time // the last count's time
	// findings and qps are the counts; a key whose count is 0 goes.
	findings map[CountKey]int
	qps      map[string]map[qpVerdict]int
	// queue holds the histories to count again (History.queued), and
	// maybe some no longer current (replaced or forgotten since).
	queue []*History
	// turns are when the findings of histories may change with time
	// alone, the soonest first; some may be of histories no longer
	// current, or counted again since.
	turns turnHeap
	// facts are what the QP rules read of each device at the last count.
	facts map[uint32]devFacts
	// evaluated counts the QPs the last count evaluated.
	evaluated int
}

// add adds n times (-1: takes away) the findings of a QP on device that
// the verdict v holds.
func (c *counter) add(device string, v qpVerdict, n int) {
	if v == 0 {
		return
	}
	for i, r := range qpRules {
		if v&(1<<i) == 0 {
			continue
		}
		sev := r.severity
		if v&escalated != 0 && r.escalated != "" {
			sev = r.escalated
		}
		k := CountKey{device, r.id, sev}
		if c.findings[k] += n; c.findings[k] == 0 {
			delete(c.findings, k)
		}
	}
	byVerdict := c.qps[device]
	if byVerdict == nil {
		byVerdict = map[qpVerdict]int{}
		c.qps[device] = byVerdict
	}
	if byVerdict[v] += n; byVerdict[v] == 0 {
		delete(byVerdict, v)
		if len(byVerdict) == 0 {
			delete(c.qps, device)
		}
	}
}

// startCounts starts the count again from every QP.
func (w *Watcher) startCounts(minAge time.Duration, probes bool) *counter {
	c := &counter{minAge: minAge, probes: probes, findings: map[CountKey]int{}, qps: map[string]map[qpVerdict]int{},
		queue: make([]*History, 0, len(w.qps)), facts: map[uint32]devFacts{}}
	for _, h := range w.qps {
		h.counted, h.queued = 0, true
		c.queue = append(c.queue, h)
	}
	w.counts = c
	return c
}

// qpVerdict is what the QP rules found on one QP: bit i says that
// qpRules[i] has a finding, escalated that the finding of the rule with an
// escalated severity is of that severity.
type qpVerdict uint8

const escalated qpVerdict = 1 << 7

// verdictOf is the verdict of one QP's findings.
func verdictOf(fs []Finding) qpVerdict {
	var v qpVerdict
	for _, f := range fs {
		i := slices.IndexFunc(qpRules, func(r qpRule) bool { return r.id == f.Rule })
		v |= 1 << i
		if f.Severity != qpRules[i].severity {
			v |= escalated
		}
	}
	return v
}

// devFacts are what the QP rules read of a QP's device (their dev).
type devFacts struct {
	lastWQE      LastWQE
	emitsLastWQE bool
	noContexts   bool
}

// factsOf are the facts of d; nil stands for a device the watcher does not
// know, which the rules read as a device with nothing known.
func factsOf(d *deviceState) devFacts {
	if d == nil {
		d = &deviceState{}
	}
	known, _ := d.lastWQEKnown()
	return devFacts{lastWQE: known, emitsLastWQE: d.emitsLastWQE, noContexts: d.contexts == 0}
}

// checkFacts counts again the QPs of each device whose facts changed since
// the last count (or that the last count did not know).
func (w *Watcher) checkFacts() {
	c := w.counts
	var changed []uint32
	for index, d := range w.devs {
		if f, ok := c.facts[index]; !ok || f != factsOf(d) {
			changed = append(changed, index)
			c.facts[index] = factsOf(d)
		}
	}
	for index, f := range c.facts {
		if _, ok := w.devs[index]; !ok {
			if f != factsOf(nil) {
				changed = append(changed, index)
			}
			delete(c.facts, index)
		}
	}
	if len(changed) == 0 {
		return
	}
	for _, h := range w.qps {
		if slices.Contains(changed, h.DevIndex) {
			w.changed(h, h.names)
		}
	}
}

// current says whether h is the history the watcher tracks for its QP.
func (w *Watcher) current(h *History) bool { return w.qps[qpKey{h.DevIndex, h.QPN}] == h }

// put makes h the history of the QP k: the one it replaces leaves the
// counts, and h is counted at the next count.
func (w *Watcher) put(k qpKey, h *History) {
	old := w.qps[k]
	if old != nil && old != h {
		w.uncount(old)
		w.tracked(old, -1)
	}
	if old != h {
		w.tracked(h, 1)
	}
	w.qps[k] = h
	w.changed(h, h.names)
}

// drop forgets the history of the QP k.
func (w *Watcher) drop(k qpKey) {
	if h := w.qps[k]; h != nil {
		w.uncount(h)
		w.tracked(h, -1)
		delete(w.qps, k)
	}
}

// tracked adds d (1: put, -1: dropped) to the histories of h's device and,
// when h is destroyed, to the destroyed ones (Watcher.perDev, destroyed).
func (w *Watcher) tracked(h *History, d int) {
	if w.perDev[h.DevIndex] += d; w.perDev[h.DevIndex] == 0 {
		delete(w.perDev, h.DevIndex)
	}
	if h.Destroyed {
		w.destroyed += d
	}
}

// uncount takes h's findings out of the counts.
func (w *Watcher) uncount(h *History) {
	w.gen++
	if c := w.counts; c != nil && h.counted != 0 {
		c.add(h.Device(), h.counted, -1)
		h.counted = 0
	}
}

// changed says that the current history h changed, its names being names
// before: its findings, counted under the device those names name, leave
// the counts, and it is counted again at the next count. Every change to
// a current history but its notes comes here, and so does whatever
// changes what the rules read of one (its device's facts, the time).
func (w *Watcher) changed(h *History, names unique.Handle[qpNames]) {
	w.gen++
	c := w.counts
	if c == nil {
		return
	}
	if h.counted != 0 {
		device := ""
		if names != (unique.Handle[qpNames]{}) {
			device = names.Value().device
		}
		c.add(device, h.counted, -1)
		h.counted = 0
	}
	if h.queued {
		return
	}
	h.queued = true
	c.queue = append(c.queue, h)
	if len(c.queue) > 2*len(w.qps)+64 { // replaced and forgotten histories pile up between counts
		c.queue = slices.DeleteFunc(c.queue, func(q *History) bool {
			if w.current(q) {
				return false
			}
			q.queued = false
			return true
		})
	}
	if len(c.turns) > 2*len(w.qps)+64 {
		c.turns.compact(w.current)
	}
}

// turn is when the findings of h may change with time alone.
type turn struct {
	at time.Time
	h  *History
}

// turnHeap is a min-heap of turns by time.
type turnHeap []turn

func (t turnHeap) Len() int           { return len(t) }
func (t turnHeap) Less(i, j int) bool { return t[i].at.Before(t[j].at) }
func (t turnHeap) Swap(i, j int)      { t[i], t[j] = t[j], t[i] }
func (t *turnHeap) Push(x any)        { *t = append(*t, x.(turn)) }
func (t *turnHeap) Pop() any {
	old := *t
	x := old[len(old)-1]
	old[len(old)-1] = turn{}
	*t = old[:len(old)-1]
	return x
}

// compact keeps the soonest turn of each history current says is, which
// is enough: counted again then, a history is given its next turn.
func (t *turnHeap) compact(current func(*History) bool) {
	soonest := map[*History]time.Time{}
	for _, x := range *t {
		if at, ok := soonest[x.h]; current(x.h) && (!ok || x.at.Before(at)) {
			soonest[x.h] = x.at
		}
	}
	*t = (*t)[:0]
	for h, at := range soonest {
		*t = append(*t, turn{at, h})
	}
	heap.Init(t)
}
