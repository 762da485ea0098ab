package leakwatch

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
	"unique"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// countedByEvaluate is what Evaluate counts at minAge: the findings by
// device, rule and severity, the rules it skips, and per device the QPs
// (by number) of each QP rule.
func countedByEvaluate(w *Watcher, minAge time.Duration) (Counts, map[string]map[string][]uint32) {
	want := Counts{Findings: map[CountKey]int{}}
	qpns := map[string]map[string][]uint32{}
	rep := w.Evaluate(Query{MinAge: minAge, Limit: -1, Each: func(f *Finding) {
		want.Findings[CountKey{f.Device, f.Rule, f.Severity}]++
		if !IsQPRule(f.Rule) {
			return
		}
		if qpns[f.Device] == nil {
			qpns[f.Device] = map[string][]uint32{}
		}
		qpns[f.Device][f.Rule] = append(qpns[f.Device][f.Rule], f.QPN)
	}})
	want.SkippedRules = rep.SkippedRules
	return want, qpns
}

// checkCounts fails t unless w's CountFindings counts what Evaluate does,
// the QPs with findings of each rule, of every set of two and of the
// reset policy's default stale rules included.
func checkCounts(t *testing.T, w *Watcher, minAge time.Duration, step string) {
	t.Helper()
	// The histories by device and the destroyed ones, which let a scan and
	// expire skip their walks, are those the watcher holds.
	perDev, destroyed := map[uint32]int{}, 0
	for _, h := range w.qps {
		perDev[h.DevIndex]++
		if h.Destroyed {
			destroyed++
		}
	}
	if !maps.Equal(perDev, w.perDev) || destroyed != w.destroyed {
		t.Fatalf("%s: histories by device %v, %d destroyed; the watcher counts %v, %d", step, perDev, destroyed, w.perDev, w.destroyed)
	}
	got := w.CountFindings(minAge)
	want, qpns := countedByEvaluate(w, minAge)
	if d := cmp.Diff(want.Findings, got.Findings, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("%s: counts (-Evaluate +CountFindings):\n%s", step, d)
	}
	if d := cmp.Diff(want.SkippedRules, got.SkippedRules); d != "" {
		t.Fatalf("%s: skipped rules (-Evaluate +CountFindings):\n%s", step, d)
	}
	sets := [][]string{{RuleStaleErrorQP, RuleLastWQENotEmitted, RuleLastWQEUnhandled, RuleXRCTgtOrphan, RuleSRQDrainStalled}}
	for i, a := range qpRules {
		sets = append(sets, []string{a.id})
		for _, b := range qpRules[i+1:] {
			sets = append(sets, []string{a.id, b.id})
		}
	}
	devices := slices.Collect(maps.Keys(qpns))
	for dev := range got.qps {
		devices = append(devices, dev)
	}
	for _, dev := range devices {
		for _, rules := range sets {
			some := map[uint32]bool{}
			for _, r := range rules {
				for _, n := range qpns[dev][r] {
					some[n] = true
				}
			}
			if n := got.QPs(dev, rules); n != len(some) {
				t.Fatalf("%s: %s: %d QPs with findings of %v, Evaluate has %d", step, dev, n, rules, len(some))
			}
		}
	}
}

// checkTally fails t unless w's Tally and LiveQPs are what counting every
// QP gives.
func checkTally(t *testing.T, w *Watcher, step string) {
	t.Helper()
	// A device's name is that of the first of its live QPs Tally meets
	// (with the histories of a rename, which one is not fixed), and
	// owners with as many QPs, the same PID and command are in no order:
	// enough owners that none is cut.
	byOwner := cmpopts.SortSlices(func(a, b OwnerQPs) bool { return fmt.Sprint(a) < fmt.Sprint(b) })
	if d := cmp.Diff(w.tally(100), w.Tally(100), cmpopts.EquateEmpty(), cmpopts.IgnoreFields(DeviceTally{}, "Name"), byOwner); d != "" {
		t.Fatalf("%s: tally (-counted +kept):\n%s", step, d)
	}
	live := 0
	for _, h := range w.qps {
		if !h.Destroyed {
			live++
		}
	}
	if n := w.LiveQPs(); n != live {
		t.Fatalf("%s: %d live QPs, counted %d", step, n, live)
	}
}

// kernelQP is a QP as the random host of TestCountFindingsFollowsChanges
// has it.
type kernelQP struct {
	typ   rdmanl.QPType
	state rdmanl.QPState
	pid   uint32
	kern  string
	srq   bool
}

// randomHost drives a watcher with a random host: QPs created, moved,
// failed into Error and destroyed with their events (some lost), drains,
// LAST_WQE_REACHED, scans that list the QPs (some moved by the provider,
// unseen by the probes), devices renamed, unregistered and registered
// again, owners resolved, QP counts, MR dumps, zombie looks, the probes
// turned off and on, a restart from the saved histories, and time that
// steps onto and just past the times at which the rules' answers turn.
type randomHost struct {
	t      *testing.T
	rng    *rand.Rand
	c      *clock
	w      *Watcher
	cfg    Config
	minAge time.Duration
	devs   map[uint32]rdmanl.Device
	qps    map[uint32]map[uint32]*kernelQP // by device index and QPN
	next   uint32                          // the next device index
	times  []time.Time                     // times of observations, for thresholds
	probes bool
}

func (r *randomHost) now() time.Time { return r.c.t }

// observed notes that something was observed now.
func (r *randomHost) observed() {
	r.times = append(r.times, r.now())
	if len(r.times) > 64 {
		r.times = r.times[1:]
	}
}

func (r *randomHost) pick(n int) int { return r.rng.IntN(n) }

// anyDevice is a device the host has, or false.
func (r *randomHost) anyDevice() (rdmanl.Device, bool) {
	if len(r.devs) == 0 {
		return rdmanl.Device{}, false
	}
	keys := slices.Sorted(maps.Keys(r.devs))
	return r.devs[keys[r.pick(len(keys))]], true
}

// anyQP is a QP of dev, or false.
func (r *randomHost) anyQP(dev rdmanl.Device) (uint32, *kernelQP, bool) {
	qps := r.qps[dev.Index]
	if len(qps) == 0 {
		return 0, nil, false
	}
	keys := slices.Sorted(maps.Keys(qps))
	n := keys[r.pick(len(keys))]
	return n, qps[n], true
}

func (r *randomHost) event(dev rdmanl.Device, kind EventKind, qpn uint32, q *kernelQP) Event {
	e := Event{Kind: kind, Time: r.now(), DevIndex: dev.Index, DevName: dev.Name, QPN: qpn}
	if q != nil {
		e.QPType, e.OnSRQ, e.KernOwner = q.typ, q.srq, q.kern
		if q.kern == "" {
			e.PID, e.TID, e.Comm = q.pid, q.pid, fmt.Sprintf("app%d", q.pid)
		}
	}
	return e
}

// send folds ev into the watcher, unless the probes are off or lose it.
func (r *randomHost) send(ev Event) {
	if r.probes && r.pick(10) > 0 {
		r.w.Event(ev)
		r.observed()
	}
}

// addDevice registers a device under a new index.
func (r *randomHost) addDevice() {
	d := rdmanl.Device{Index: r.next, Name: fmt.Sprintf("dev%d", r.next%3), NodeGUID: rdmanl.GUID(0x1000 + r.next)}
	r.next++
	r.devs[d.Index] = d
	r.qps[d.Index] = map[uint32]*kernelQP{}
}

func (r *randomHost) step() string {
	dev, ok := r.anyDevice()
	switch op := r.pick(24); {
	case !ok || op == 0 && len(r.devs) < 3:
		r.addDevice()
		return "device registered"
	case op <= 4: // a create, failed or not
		n := dev.Index*1000 + uint32(r.pick(40))
		if _, taken := r.qps[dev.Index][n]; taken {
			return "no create"
		}
		q := &kernelQP{typ: []rdmanl.QPType{rdmanl.QPTypeRC, rdmanl.QPTypeRC, rdmanl.QPTypeUC, rdmanl.QPTypeUD, rdmanl.QPTypeXRCTgt}[r.pick(5)],
			state: rdmanl.QPStateReset, pid: uint32(42 + r.pick(3)), srq: r.pick(2) == 0}
		if r.pick(4) == 0 {
			q.pid, q.kern = 0, []string{"ib_uverbs", "rdma_cm", "ib_core"}[r.pick(3)]
		}
		ev := r.event(dev, EventQPCreated, n, q)
		if r.pick(8) == 0 {
			ev.Result = -12
			r.send(ev)
			return "create failed"
		}
		r.qps[dev.Index][n] = q
		r.send(ev)
		return "created"
	case op <= 8: // a modify, or the provider's own move
		n, q, ok := r.anyQP(dev)
		if !ok {
			return "no modify"
		}
		states := []rdmanl.QPState{rdmanl.QPStateInit, rdmanl.QPStateRTR, rdmanl.QPStateRTS, rdmanl.QPStateSQD, rdmanl.QPStateSQE, rdmanl.QPStateErr, rdmanl.QPStateErr, rdmanl.QPStateReset}
		to := states[r.pick(len(states))]
		if r.pick(5) == 0 {
			q.state = to // the provider's: no event
			return "provider moved"
		}
		ev := r.event(dev, EventQPModified, n, q)
		ev.NewState, ev.HasState = to, true
		if r.pick(3) == 0 {
			ev.CurState, ev.HasCurState = q.state, true
		}
		if r.pick(10) == 0 {
			ev.Result = -22
		} else {
			q.state = to
		}
		r.send(ev)
		return "modified"
	case op <= 10: // an async event
		n, q, ok := r.anyQP(dev)
		if !ok {
			return "no async"
		}
		ev := r.event(dev, EventQPAsync, n, q)
		switch r.pick(3) {
		case 0:
			ev.Async, ev.LastWQE = "QP_LAST_WQE_REACHED", true
		case 1:
			ev.Async = "QP_FATAL"
			q.state = rdmanl.QPStateErr
		default:
			ev.Async = "COMM_EST"
		}
		r.send(ev)
		return "async " + ev.Async
	case op <= 13: // a destroy
		n, q, ok := r.anyQP(dev)
		if !ok {
			return "no destroy"
		}
		ev := r.event(dev, EventQPDestroyed, n, q)
		if r.pick(8) == 0 {
			ev.Result = -16
		} else {
			delete(r.qps[dev.Index], n)
		}
		r.send(ev)
		return "destroyed"
	case op <= 15: // a drain begins or returns
		n, q, ok := r.anyQP(dev)
		if !ok {
			return "no drain"
		}
		kind := EventDrainStarted
		if r.pick(2) == 0 {
			kind = EventDrainEnded
		}
		ev := r.event(dev, kind, n, q)
		ev.Drain = []string{"ib_drain_qp", "ib_drain_rq"}[r.pick(2)]
		if kind == EventDrainEnded && r.pick(2) == 0 {
			ev.Duration = time.Duration(r.pick(4)) * time.Second
		}
		r.send(ev)
		return "drain"
	case op <= 18: // a scan of one device, or all
		s := Scan{Time: r.now(), Started: r.now().Add(-time.Duration(r.pick(4)) * time.Second)}
		if r.pick(4) == 0 {
			s.Started = time.Time{}
		}
		for _, index := range slices.Sorted(maps.Keys(r.devs)) {
			d := r.devs[index]
			if d.Index != dev.Index && r.pick(2) == 0 {
				continue
			}
			ds := DeviceScan{Device: d, Contexts: uint64(r.pick(2)), LastWQE: LastWQE(r.pick(3)), LastWQESource: "table",
				MaxQP: uint64(r.pick(2) * 64), Owners: map[uint32]Owner{}, ULPs: map[uint32]string{}, CMConnected: map[uint32]bool{}}
			for pid := uint32(42); pid < 45; pid++ {
				if r.pick(3) > 0 {
					ds.Owners[pid] = Owner{TGID: pid, Comm: fmt.Sprintf("app%d-%d", pid, r.pick(2))}
				}
			}
			for _, n := range slices.Sorted(maps.Keys(r.qps[d.Index])) {
				q := r.qps[d.Index][n]
				kq := rdmanl.QP{LQPN: n, Type: q.typ, State: q.state, Port: 1, OnSRQ: q.srq, Owner: rdmanl.Owner{PID: q.pid, KernName: q.kern}}
				if r.pick(6) == 0 { // a provider that reports no state
					kq.State = rdmanl.QPStateReset
					ds.CMConnected[n] = r.pick(2) == 0
				}
				if q.kern == "rdma_cm" && r.pick(2) == 0 {
					ds.ULPs[n] = "nvmet_rdma"
				}
				ds.QPs = append(ds.QPs, kq)
			}
			s.Devices = append(s.Devices, ds)
		}
		if r.pick(3) == 0 {
			s.Zombies = &Zombies{}
		}
		r.w.Scan(s)
		r.observed()
		return "scanned"
	case op == 19: // a rename
		dev.Name = fmt.Sprintf("dev%d", r.pick(4))
		r.devs[dev.Index] = dev
		if r.probes {
			r.w.Event(Event{Kind: EventDeviceRenamed, Time: r.now(), DevIndex: dev.Index, DevName: dev.Name, NewName: dev.Name})
		}
		return "renamed"
	case op == 20: // a device goes away: its QPs with it
		delete(r.devs, dev.Index)
		delete(r.qps, dev.Index)
		if r.probes && r.pick(2) == 0 {
			r.w.Event(Event{Kind: EventDeviceUnregistered, Time: r.now(), DevIndex: dev.Index, DevName: dev.Name})
		} else {
			r.w.DeviceGone(dev.Index, r.now())
		}
		r.observed()
		return "device gone"
	case op == 21: // owners resolved, QPs counted, MRs dumped
		comm := fmt.Sprintf("renamed%d", r.pick(2))
		r.w.ResolveOwners(func(tid uint32) (Owner, bool) { return Owner{TGID: tid, Comm: comm}, tid != 43 })
		r.w.CountQPs(dev.Index, dev.Name, r.now(), len(r.qps[dev.Index]))
		d := &MRDump{Device: dev, Time: r.now()}
		for i := range r.pick(6) {
			d.Add(rdmanl.MR{MRN: uint32(i), Len: 4096, Owner: rdmanl.Owner{PID: 42}})
		}
		r.w.ScanMRs(d)
		return "resolved"
	case op == 22: // the probes off, or on again
		r.probes = !r.probes
		reason := ""
		if !r.probes {
			reason = "stream failed"
		}
		r.w.SetProbes(r.probes, reason)
		return "probes"
	default: // a restart from the saved histories
		saved := save(r.t, r.w)
		r.w = New(r.cfg, r.c.now)
		r.w.SetProbes(r.probes, "")
		if _, err := restore(r.w, saved); err != nil {
			r.t.Fatal(err)
		}
		var devs []rdmanl.Device
		for _, index := range slices.Sorted(maps.Keys(r.devs)) {
			devs = append(devs, r.devs[index])
		}
		r.w.Listed(devs)
		return "restarted"
	}
}

// tick moves the time on: a little, a lot, or onto (and just past) a
// time at which an answer may turn: an observation plus MinAge, the
// retentions or a slow drain.
func (r *randomHost) tick() {
	switch r.pick(4) {
	case 0:
		return
	case 1:
		r.c.t = r.c.t.Add([]time.Duration{time.Nanosecond, time.Millisecond, time.Second, 3 * time.Second, 30 * time.Second, 2 * time.Minute}[r.pick(6)])
		return
	}
	if len(r.times) == 0 {
		return
	}
	at := r.times[r.pick(len(r.times))].Add([]time.Duration{r.minAge, slowDrain, goneRetain, r.cfg.Retain}[r.pick(4)])
	if r.pick(2) == 0 {
		at = at.Add(time.Nanosecond)
	}
	if at.After(r.c.t) {
		r.c.t = at
	}
}

// The counts CountFindings keeps are those of a whole evaluation after
// any sequence of changes: random hosts, a thousand steps or so each, the
// counts compared after most of them.
func TestCountFindingsFollowsChanges(t *testing.T) {
	seeds, steps := 12, 1200
	if testing.Short() {
		seeds, steps = 4, 600
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := Config{Probes: true, Retain: 3 * time.Minute, MRLeakGrowth: 2, CreateFailures: 2, ErrorStormCycles: 2}
			r := &randomHost{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 27)), c: &clock{t: t0}, cfg: cfg,
				minAge: 5 * time.Second, devs: map[uint32]rdmanl.Device{}, qps: map[uint32]map[uint32]*kernelQP{}, probes: true}
			r.w = New(cfg, r.c.now)
			for i := range steps {
				what := r.step()
				r.tick()
				if r.pick(3) > 0 {
					step := fmt.Sprintf("step %d (%s, %s)", i, what, r.now().Sub(t0))
					checkCounts(t, r.w, r.minAge, step)
					checkTally(t, r.w, step)
				}
			}
			// Another MinAge counts from the start, and back.
			checkCounts(t, r.w, time.Second, "min age 1s")
			checkCounts(t, r.w, r.minAge, "min age back")
		})
	}
}

// A count with nothing changed since the last evaluates no QP; one after
// a change evaluates the QP that changed.
func TestCountFindingsIdle(t *testing.T) {
	w, c, qps, _ := tracked60k(false, 0)
	c.at(time.Minute)
	if got := w.CountFindings(5 * time.Second).Findings[CountKey{"rxe0", RuleNeverConnectedQP, SeverityWarning}]; got != len(qps) {
		t.Fatalf("%d never-connected-qp findings, want %d", got, len(qps))
	}
	c.at(2 * time.Minute)
	w.CountFindings(5 * time.Second)
	if n := w.counts.evaluated; n != 0 {
		t.Errorf("a count with nothing changed evaluated %d QPs", n)
	}
	w.Event(modify(c.at(2*time.Minute), rxe, qps[0].LQPN, rdmanl.QPStateRTS))
	got := w.CountFindings(5 * time.Second).Findings[CountKey{"rxe0", RuleNeverConnectedQP, SeverityWarning}]
	if n := w.counts.evaluated; n != 1 || got != len(qps)-1 {
		t.Errorf("after one QP connected: evaluated %d QPs, %d findings; want 1 and %d", n, got, len(qps)-1)
	}
	// A scan that lists the same QPs changes no history.
	w.Scan(scan(c.at(3*time.Minute), rxe, append([]rdmanl.QP{qp(qps[0].LQPN, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)}, qps[1:]...)...))
	w.CountFindings(5 * time.Second)
	if n := w.counts.evaluated; n != 0 {
		t.Errorf("a count after a scan that changed nothing evaluated %d QPs", n)
	}
}

// Findings that come and go with time alone, no history changing: a QP
// left in INIT is never-connected-qp once MinAge has passed, and an SRQ
// QP destroyed from RTS is srq-destroy-without-last-wqe until its
// retention runs out.
func TestCountFindingsByTime(t *testing.T) {
	never := CountKey{"rxe0", RuleNeverConnectedQP, SeverityWarning}
	destroyed := CountKey{"rxe0", RuleSRQDestroyWithoutLastWQE, SeverityError}
	c := &clock{t: t0}
	w := New(Config{Probes: true, Retain: time.Minute}, c.now)
	w.Event(create(c.at(0), rxe, 17, false))
	w.Event(modify(c.at(0), rxe, 17, rdmanl.QPStateInit))
	w.Event(create(c.at(0), rxe, 18, true))
	w.Event(modify(c.at(0), rxe, 18, rdmanl.QPStateRTS))
	w.Event(ev(c.at(time.Second), EventQPDestroyed, rxe, 18))
	tests := []struct {
		at                  time.Duration
		wantNever, wantGone int
	}{
		{0, 0, 1},
		{5*time.Second - 1, 0, 1},
		{5 * time.Second, 1, 1},
		{time.Minute + time.Second, 1, 1},
		{time.Minute + time.Second + 1, 1, 0},
		{time.Hour, 1, 0},
	}
	for _, tt := range tests {
		c.at(tt.at)
		got := w.CountFindings(5 * time.Second).Findings
		if got[never] != tt.wantNever || got[destroyed] != tt.wantGone {
			t.Errorf("at %s: %s %d, %s %d; want %d and %d", tt.at, never.Rule, got[never], destroyed.Rule, got[destroyed], tt.wantNever, tt.wantGone)
		}
	}
}

// Each rule that counts QPs fits a qpVerdict: a bit each, and one for the
// one rule with an escalated severity.
func TestQPVerdictFits(t *testing.T) {
	escalating := 0
	for _, r := range qpRules {
		if r.escalated != "" {
			escalating++
		}
	}
	if len(qpRules) > 7 || escalating > 1 {
		t.Errorf("%d QP rules, %d with an escalated severity: a qpVerdict holds 7 and 1", len(qpRules), escalating)
	}
}

// Every field of a history but its notes, its scan generation and the
// watcher's bookkeeping is in its shape: a scan that changes one is seen
// to change the history.
func TestHistoryShape(t *testing.T) {
	var h History
	h.events = &qpEvents{drain: &drainState{}}
	base := h.shape()
	v := reflect.ValueOf(&h.historyFields).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if slices.Contains([]string{"scanGen", "counted", "queued"}, name) {
			continue
		}
		c := h
		field := reflect.ValueOf(&c.historyFields).Elem().Field(i)
		f := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int64, reflect.Int:
			f.SetInt(1)
		case reflect.Uint8, reflect.Uint32:
			f.SetUint(1)
		case reflect.Struct: // names
			c.names = unique.Make(qpNames{device: "x"})
		case reflect.Pointer: // events
			c.events = &qpEvents{}
		case reflect.Array: // peer
			c.peer = peerFrom("192.0.2.1")
		default:
			t.Fatalf("field %s of kind %s: give it a value here", name, f.Kind())
		}
		if s := c.shape(); !s.differs(&base) {
			t.Errorf("a change to %s leaves the shape", name)
		}
	}
	for _, change := range []func(e *qpEvents){
		func(e *qpEvents) { e.ErrAt = 1 },
		func(e *qpEvents) { e.LastWQECount = 1 },
		func(e *qpEvents) { e.errCause = CauseModify },
		func(e *qpEvents) { e.drain.DrainTook = time.Second },
		func(e *qpEvents) { e.drain.drainDepth = 1 },
	} {
		c := h
		e := *h.events
		d := *e.drain
		e.drain = &d
		c.events = &e
		change(c.events)
		if s := c.shape(); !s.differs(&base) {
			t.Errorf("a change to the events %+v leaves the shape", *c.events)
		}
	}
}

// BenchmarkCountFindings is the agent's count of the findings at 60,000
// tracked QPs, each a never-connected-qp finding: with nothing changed
// since the last count, after an event about one QP (the event
// included), the first count (every QP), and the whole evaluation that
// counted them before.
func BenchmarkCountFindings(b *testing.B) {
	w, c, qps, _ := tracked60k(true, 8)
	c.at(time.Minute)
	w.CountFindings(5 * time.Second)
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			w.CountFindings(5 * time.Second)
		}
	})
	b.Run("one-changed", func(b *testing.B) {
		states := []rdmanl.QPState{rdmanl.QPStateRTS, rdmanl.QPStateInit}
		i := 0
		for b.Loop() {
			w.Event(modify(c.t, rxe, qps[0].LQPN, states[i%2]))
			w.CountFindings(5 * time.Second)
			i++
		}
	})
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			w.counts = nil
			w.CountFindings(5 * time.Second)
		}
	})
	b.Run("evaluate", func(b *testing.B) {
		for b.Loop() {
			w.Evaluate(Query{MinAge: 5 * time.Second, Limit: -1, Each: func(*Finding) {}})
		}
	})
	b.Run("tally-unchanged", func(b *testing.B) {
		for b.Loop() {
			w.Tally(10)
		}
	})
	b.Run("tally-one-changed", func(b *testing.B) {
		states := []rdmanl.QPState{rdmanl.QPStateRTS, rdmanl.QPStateInit}
		i := 0
		for b.Loop() {
			w.Event(modify(c.t, rxe, qps[0].LQPN, states[i%2]))
			w.Tally(10)
			i++
		}
	})
}

// with100kMRs adds to a watcher of tracked60k two MR dumps of rxe0 of
// 100,000 MRs of four processes, between which process 42 made three QPs
// in place of three others and registered three MRs more: an mr-leak.
func with100kMRs(w *Watcher, c *clock) {
	dumpMRs := func(at time.Duration, extra uint32) {
		d := &MRDump{Device: rxe, Time: c.at(at), Owners: map[uint32]Owner{42: {TGID: 42, Comm: "app"}}}
		for i := range uint32(100000) + extra {
			d.Add(rdmanl.MR{MRN: i, Len: 4096, Owner: rdmanl.Owner{PID: 42 + i%4}})
		}
		w.ScanMRs(d)
	}
	for qpn := uint32(100000); qpn < 100003; qpn++ {
		w.Event(create(c.at(2*time.Second), rxe, qpn, false))
	}
	dumpMRs(2*time.Second, 0)
	for qpn := uint32(100000); qpn < 100003; qpn++ {
		w.Event(ev(c.at(3*time.Second), EventQPDestroyed, rxe, qpn))
		w.Event(create(c.at(3*time.Second), rxe, qpn+3, false))
	}
	dumpMRs(4*time.Second, 12) // 3 more for each owner, one of which made QPs
}

// A count with nothing changed does no work MR by MR or QP by QP, with
// 100,000 MRs tracked and an mr-leak among the findings.
func BenchmarkCountFindingsMRs(b *testing.B) {
	w, c, _, _ := tracked60k(true, 0)
	with100kMRs(w, c)
	c.at(time.Minute)
	if n := w.CountFindings(5 * time.Second).Findings[CountKey{"rxe0", RuleMRLeak, SeverityError}]; n != 1 {
		b.Fatalf("%d mr-leak findings, want 1", n)
	}
	b.Run("count-unchanged", func(b *testing.B) {
		for b.Loop() {
			w.CountFindings(5 * time.Second)
		}
	})
	b.Run("mrtally", func(b *testing.B) {
		for b.Loop() {
			w.MRTally(10)
		}
	})
}

// The watcher's count of histories by device and of destroyed ones
// follows each way a QP ends: a scan that no longer lists it, its
// destroy event after that scan (the scan ran while the event waited in
// the ring buffer), its device going away, and expiry. A scan of another
// device, with no QPs, walks no history (the count says there is none to
// miss) and expires none.
func TestTrackedCounts(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	check := func(step string, dev0, destroyed int) {
		t.Helper()
		if w.perDev[rxe.Index] != dev0 || w.destroyed != destroyed {
			t.Errorf("%s: %d histories on rxe0, %d destroyed; want %d, %d", step, w.perDev[rxe.Index], w.destroyed, dev0, destroyed)
		}
		checkCounts(t, w, 5*time.Second, step)
	}
	w.Scan(dump(c.at(0), rxe, qp(10, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(11, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42),
		qp(12, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
	check("three listed", 3, 0)
	w.Scan(dump(c.at(time.Second), rxe, qp(11, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(12, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
	check("10 missed by a scan", 3, 1)
	w.Event(ev(c.at(500*time.Millisecond), EventQPDestroyed, rxe, 10)) // before that scan began
	check("10's destroy event after the scan", 3, 1)
	w.Event(ev(c.at(2*time.Second), EventQPDestroyed, rxe, 11))
	check("11 destroyed", 3, 2)
	w.Scan(scan(c.at(3*time.Second), siw))
	check("a scan of siw0", 3, 2)
	w.DeviceGone(rxe.Index, c.at(4*time.Second))
	check("rxe0 gone", 3, 3)
	w.Scan(scan(c.at(10*time.Minute), siw))
	check("expired", 0, 0)
	if _, ok := w.devs[rxe.Index]; ok {
		t.Errorf("rxe0, gone, without histories, still a device of the watcher")
	}
}
