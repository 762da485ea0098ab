package leakwatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
	"runtime"
)

// twoDevices is a watcher with, after 10s: rxe0 QP 17 in ERR since 0s and
// QP 18 in INIT since 8s, siw0 QP 20 in ERR since 0s and SRQ QP 21 moved
// to ERR by a probe at 0s (never a LAST_WQE_REACHED).
func twoDevices(t *testing.T, cfg Config) (*Watcher, *clock) {
	t.Helper()
	c := &clock{t: t0}
	w := New(cfg, c.now)
	s := scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42))
	s.Devices = append(s.Devices, DeviceScan{Device: siw, QPs: []rdmanl.QP{qp(20, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)}, Contexts: 1})
	w.Scan(s)
	w.Event(create(c.at(0), siw, 21, true))
	w.Event(modify(c.at(0), siw, 21, rdmanl.QPStateErr))
	s = scan(c.at(8*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42))
	s.Devices = append(s.Devices, DeviceScan{Device: siw, QPs: []rdmanl.QP{qp(20, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43), onSRQ(qp(21, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 0)}, Contexts: 1})
	w.Scan(s)
	for _, dev := range []rdmanl.Device{rxe, siw} { // no MRs on either
		w.ScanMRs(&MRDump{Device: dev, Time: c.at(9 * time.Second)})
	}
	c.at(10 * time.Second)
	return w, c
}

func skippedRules(r Report) []string {
	out := []string{}
	for _, s := range r.SkippedRules {
		out = append(out, s.Rule)
	}
	return out
}

func TestEvaluateQuery(t *testing.T) {
	tests := []struct {
		name        string
		q           Query
		want        []found
		wantSkipped []string
		wantQPs     int
	}{
		{
			name: "everything, 5s",
			q:    Query{MinAge: 5 * time.Second},
			want: []found{
				{RuleStaleErrorQP, "rxe0", 17, 42},
				{RuleStaleErrorQP, "siw0", 20, 43},
				{RuleLastWQENotEmitted, "siw0", 21, 42}, // supersedes its stale-error-qp
			},
			wantSkipped: []string{RuleQPExhaustion},
			wantQPs:     4,
		},
		{
			name: "min age 1s reaches the INIT QP",
			q:    Query{MinAge: time.Second},
			want: []found{
				{RuleStaleErrorQP, "rxe0", 17, 42},
				{RuleNeverConnectedQP, "rxe0", 18, 42},
				{RuleStaleErrorQP, "siw0", 20, 43},
				{RuleLastWQENotEmitted, "siw0", 21, 42},
			},
			wantSkipped: []string{RuleQPExhaustion},
			wantQPs:     4,
		},
		{
			name:        "min age longer than anything",
			q:           Query{MinAge: time.Minute},
			want:        []found{},
			wantSkipped: []string{RuleQPExhaustion},
			wantQPs:     4,
		},
		{
			name:        "one device",
			q:           Query{MinAge: time.Second, Device: "rxe0"},
			want:        []found{{RuleStaleErrorQP, "rxe0", 17, 42}, {RuleNeverConnectedQP, "rxe0", 18, 42}},
			wantSkipped: []string{RuleQPExhaustion},
			wantQPs:     2,
		},
		{
			name:        "a device the watcher never saw",
			q:           Query{MinAge: time.Second, Device: "mlx5_0"},
			want:        []found{},
			wantSkipped: []string{},
			wantQPs:     0,
		},
		{
			name:        "one rule",
			q:           Query{MinAge: time.Second, Rules: []string{RuleNeverConnectedQP}},
			want:        []found{{RuleNeverConnectedQP, "rxe0", 18, 42}},
			wantSkipped: []string{},
			wantQPs:     4,
		},
		{
			name: "probe rules skipped for this query",
			q:    Query{MinAge: 5 * time.Second, SkipProbeRules: "disabled by --no-probes"},
			want: []found{
				{RuleStaleErrorQP, "rxe0", 17, 42},
				{RuleStaleErrorQP, "siw0", 20, 43},
				{RuleStaleErrorQP, "siw0", 21, 42},
			},
			wantSkipped: []string{RuleSRQDestroyWithoutLastWQE, RuleLastWQENotEmitted, RuleLastWQEUnhandled, RuleSRQDrainStalled, RuleQPExhaustion, RuleQPCreateFailing, RuleQPErrorStorm, RuleMRLeak},
			wantQPs:     4,
		},
		{
			name:        "max_qp from the query",
			q:           Query{MinAge: time.Minute, Rules: []string{RuleQPExhaustion}, MaxQP: map[string]uint64{"rxe0": 2}},
			want:        []found{{RuleQPExhaustion, "rxe0", 0, 0}},
			wantSkipped: []string{RuleQPExhaustion}, // siw0's max_qp is still unknown
			wantQPs:     4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := twoDevices(t, Config{Probes: true})
			r := w.Evaluate(tt.q)
			if diff := cmp.Diff(tt.want, summarize(r)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkipped, skippedRules(r)); diff != "" {
				t.Errorf("skipped rules (-want +got):\n%s", diff)
			}
			if r.QPs != tt.wantQPs || r.ObservedSeconds != 10 {
				t.Errorf("qps %d observed %vs, want %d and 10s", r.QPs, r.ObservedSeconds, tt.wantQPs)
			}
			for _, s := range r.SkippedRules {
				if s.Rule != RuleQPExhaustion && s.Reason != "needs the eBPF probes: "+tt.q.SkipProbeRules {
					t.Errorf("%s skipped with reason %q", s.Rule, s.Reason)
				}
			}
		})
	}
}

// Queries with different options on one watcher do not disturb each other
// nor the watcher's own Config.
func TestEvaluateIsPure(t *testing.T) {
	w, c := twoDevices(t, Config{Probes: true, Retain: time.Minute})
	q := Query{MinAge: 5 * time.Second, Rules: []string{RuleStaleErrorQP}}
	s := scan(c.at(10*time.Second), rxe) // rxe0's QPs are gone
	s.Devices = append(s.Devices, DeviceScan{Device: siw, QPs: []rdmanl.QP{qp(20, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43), onSRQ(qp(21, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 0)}})
	w.Scan(s)
	before := len(w.histories())
	first := findings(w, q)
	for _, q := range []Query{{MinAge: 0, Device: "rxe0"}, {SkipProbeRules: "x", MaxQP: map[string]uint64{"siw0": 1}}, {Rules: []string{RuleQPExhaustion}}} {
		w.Evaluate(q)
	}
	if diff := cmp.Diff(first, findings(w, q)); diff != "" {
		t.Errorf("findings changed after other queries (-before +after):\n%s", diff)
	}
	if w.cfg.MaxQP != nil || !w.cfg.Probes {
		t.Errorf("a query changed the watcher's config: %+v", w.cfg)
	}
	// Past Retain, Evaluate leaves the destroyed QPs out but keeps them;
	// the next expiry forgets them.
	c.at(20 * time.Minute)
	if got := w.Evaluate(Query{Device: "rxe0"}); got.QPs != 0 || len(got.Findings) != 0 {
		t.Errorf("expired QPs evaluated: %+v", got)
	}
	if got := len(w.histories()); got != before {
		t.Errorf("Evaluate forgot QPs: %d histories, had %d", got, before)
	}
	findings(w, q)
	if got := len(w.histories()); got != before-2 {
		t.Errorf("the expiry kept expired QPs: %d histories, want %d", got, before-2)
	}
}

func TestSetProbes(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{ProbesReason: "ib_core is not loaded"}, c.now)
	if got := skippedRules(w.Evaluate(Query{})); !slices.Contains(got, RuleLastWQEUnhandled) {
		t.Fatalf("probe rules evaluated without probes: skipped %v", got)
	}
	w.SetProbes(true, "")
	if got := skippedRules(w.Evaluate(Query{})); slices.Contains(got, RuleLastWQEUnhandled) {
		t.Errorf("probe rules skipped after SetProbes(true): %v", got)
	}
	w.SetProbes(false, "probe stream failed")
	r := w.Evaluate(Query{})
	if len(r.SkippedRules) == 0 || r.SkippedRules[0].Reason != "needs the eBPF probes: probe stream failed" {
		t.Errorf("skipped %+v", r.SkippedRules)
	}
}

// A probe saw the QP created but its destroy event was lost: the first scan
// that began after the create and does not list it ends its history. A QP
// created while the scan ran is kept.
func TestLostDestroyEvent(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true, Retain: time.Minute}, c.now)
	w.Event(create(c.at(0), rxe, 17, false))
	w.Event(modify(c.at(time.Second), rxe, 17, rdmanl.QPStateErr))
	// The destroy at 2s is lost. A QP is created during the next scan.
	w.Event(create(c.at(3500*time.Millisecond), rxe, 18, false))
	w.Scan(Scan{Started: t0.Add(3 * time.Second), Time: c.at(4 * time.Second), Devices: []DeviceScan{{Device: rxe}}})
	c.at(time.Minute)
	var live []uint32
	for _, h := range w.histories() {
		if !h.Destroyed {
			live = append(live, h.QPN)
		}
	}
	if !slices.Equal(live, []uint32{18}) {
		t.Errorf("live QPs %v, want [18]", live)
	}
	if got := summarize(w.Evaluate(Query{MinAge: 5 * time.Second, Rules: []string{RuleStaleErrorQP}})); len(got) != 0 {
		t.Errorf("a QP whose destroy was lost is reported: %v", got)
	}
	// Scans without a start time (one-shot callers) keep the old rule:
	// only QPs a scan listed are taken as gone.
	w2 := New(Config{Probes: true}, c.now)
	w2.Event(create(c.at(0), rxe, 17, false))
	w2.Scan(Scan{Time: c.at(4 * time.Second), Devices: []DeviceScan{{Device: rxe}}})
	if h := w2.histories(); len(h) != 1 || h[0].Destroyed {
		t.Errorf("histories %+v, want QP 17 alive", h)
	}
}

// Hours of churn, with scans every 10s, lost destroy events and devices
// coming and going, leave the watcher with what the kernel has plus what
// Retain keeps.
func TestMemoryBounded(t *testing.T) {
	c := &clock{t: t0}
	const retain = 10 * time.Minute
	w := New(Config{Probes: true, Retain: retain}, c.now)
	const interval = 10 * time.Second
	steps := int((6 * time.Hour) / interval)
	qpn := uint32(100)
	maxHistories := 0
	for i := range steps {
		start := t0.Add(time.Duration(i) * interval)
		// A temporary device every hour, with one QP for a minute.
		tmp := rdmanl.Device{Index: uint32(10 + i/360), Name: "tmp"}
		for j := range 20 {
			at := start.Add(time.Duration(j) * 100 * time.Millisecond)
			qpn++
			w.Event(create(c.at(at.Sub(t0)), rxe, qpn, j%2 == 0))
			for k := range 2 * maxEvidence { // more evidence than a QP keeps
				w.Event(modify(c.at(at.Sub(t0)), rxe, qpn, []rdmanl.QPState{rdmanl.QPStateInit, rdmanl.QPStateErr}[k%2]))
			}
			if j%5 != 0 { // one destroy in five is lost
				w.Event(ev(c.at(at.Sub(t0)+time.Millisecond), EventQPDestroyed, rxe, qpn))
			}
		}
		s := Scan{Started: start.Add(5 * time.Second), Time: c.at(start.Add(5*time.Second + time.Millisecond).Sub(t0)),
			Devices: []DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(1, rdmanl.QPTypeGSI, rdmanl.QPStateRTS, 0)}}}}
		if i%360 < 6 {
			s.Devices = append(s.Devices, DeviceScan{Device: tmp, QPs: []rdmanl.QP{qp(1, rdmanl.QPTypeGSI, rdmanl.QPStateRTS, 0)}})
		}
		w.Scan(s)
		if i%360 == 6 { // the device list no longer has it
			w.DeviceGone(tmp.Index, s.Time)
		}
		maxHistories = max(maxHistories, len(w.qps))
	}
	// 20 QPs per 10s are destroyed. Retain keeps 10 minutes of the 8 SRQ
	// QPs destroyed in Error without LAST_WQE_REACHED (the destroy rule may
	// report them); the other 12 (not on an SRQ, or their destroy event
	// lost) are kept a minute.
	limit := int(retain/interval)*8 + int(goneRetain/interval+1)*12 + 20 + 2
	if maxHistories > limit {
		t.Errorf("up to %d histories, want at most %d", maxHistories, limit)
	}
	if len(w.devs) > 2 {
		t.Errorf("%d device states kept, want rxe0 and at most one temporary device", len(w.devs))
	}
	for _, h := range w.qps {
		if len(h.notes) > maxEvidence {
			t.Fatalf("QP %d keeps %d observations", h.QPN, len(h.notes))
		}
	}
	for _, d := range w.devs {
		if len(d.samples) > maxSamples {
			t.Errorf("%s keeps %d samples", d.name, len(d.samples))
		}
	}
	if r := findings(w, Query{MinAge: 5 * time.Second}); len(r.Findings) != 0 {
		t.Errorf("churn with lost destroys reported %d findings, first %+v", len(r.Findings), r.Findings[0])
	}
}

func TestOwnerProcess(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	owners := map[uint32]Owner{42: {Comm: "app", Cgroup: "/system.slice/docker-" + id + ".scope", ContainerID: id}}
	w.Scan(Scan{Time: c.at(0), Devices: []DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 7)}, Owners: owners}}})
	c.at(10 * time.Second)
	fs := findings(w, Query{MinAge: 5 * time.Second}).Findings
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	if fs[0].Comm != "app" || fs[0].Cgroup != "/system.slice/docker-"+id+".scope" || fs[0].ContainerID != id {
		t.Errorf("finding of an owner in a container: comm %q cgroup %q container %q", fs[0].Comm, fs[0].Cgroup, fs[0].ContainerID)
	}
	if fs[1].Comm != "" || fs[1].Cgroup != "" || fs[1].ContainerID != "" {
		t.Errorf("finding of an exited owner: comm %q cgroup %q container %q", fs[1].Comm, fs[1].Cgroup, fs[1].ContainerID)
	}
}

// The destroy event of an SRQ QP can wait in the ring buffer while a scan
// that no longer lists the QP is folded in: it still is that QP's destroy,
// and the destroy rule still sees how it was torn down.
func TestDestroyEventAfterScan(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Event(create(c.at(0), rxe, 17, true))
	w.Event(modify(c.at(time.Second), rxe, 17, rdmanl.QPStateRTS))
	w.Scan(Scan{Started: c.at(2 * time.Second), Time: c.at(2 * time.Second), Devices: []DeviceScan{{Device: rxe, QPs: []rdmanl.QP{onSRQ(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), 0)}}}})
	w.Scan(Scan{Started: c.at(4 * time.Second), Time: c.at(4 * time.Second), Devices: []DeviceScan{{Device: rxe}}})
	w.Event(ev(t0.Add(3*time.Second), EventQPDestroyed, rxe, 17))
	c.at(10 * time.Second)
	r := findings(w, Query{MinAge: 5 * time.Second})
	if diff := cmp.Diff([]found{{RuleSRQDestroyWithoutLastWQE, "rxe0", 17, 42}}, summarize(r)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if len(w.histories()) != 1 {
		t.Errorf("%d histories for one QP", len(w.histories()))
	}
}

// BenchmarkEvaluate is one query over 10,000 QPs in ERR (10,000
// findings): keeping them all, keeping the 1,000 an answer lists by
// default, only counting them (the agent's metrics), and one that selects
// nothing.
func BenchmarkEvaluate(b *testing.B) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	qps := make([]rdmanl.QP, 10000)
	for i := range qps {
		qps[i] = qp(uint32(17+i), rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)
	}
	w.Scan(scan(c.at(0), rxe, qps...))
	c.at(time.Minute)
	for _, q := range []struct {
		name string
		q    Query
	}{
		{"all", Query{MinAge: 5 * time.Second}},
		{"limit-1000", Query{MinAge: 5 * time.Second, Limit: 1000}},
		{"count", Query{MinAge: 5 * time.Second, Limit: -1, Each: func(*Finding) {}}},
		{"none", Query{MinAge: time.Hour}},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				w.Evaluate(q.q)
			}
		})
	}
}

// tracked60k is a watcher tracking 60,000 QPs in INIT on rxe0, seen by
// scans only, or (probed) seen created and moved to INIT by the probes
// before a scan listed them, as the agent tracks them: each event with a
// command name of its own, as the probe reader decodes it, and with sites
// above 0, a creation site, one of that many, its strings its own, as
// package watch names each event's. It returns the heap the watcher
// holds per QP (after a collection) and the QPs scanned.
func tracked60k(probed bool, sites int) (w *Watcher, c *clock, qps []rdmanl.QP, perQP float64) {
	const n = 60000
	c = &clock{t: t0}
	qps = make([]rdmanl.QP, n)
	for i := range qps {
		qps[i] = qp(uint32(17+i), rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	w = New(Config{Probes: true}, c.now)
	if probed {
		for _, q := range qps {
			e := create(c.at(0), rxe, q.LQPN, false)
			e.Comm = strings.Clone(e.Comm)
			if sites > 0 {
				n := int(q.LQPN) % sites
				e.Site = Site{Call: fmt.Sprintf("qpwork!create_qps_%d+0x4c", n), Via: strings.Clone("rdma_create_qp"),
					File: strings.Clone("/usr/local/bin/qpwork"), BuildID: strings.Clone("3f0e4c0b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"), Offset: uint64(0x1a2c + n)}
			}
			w.Event(e)
			e = modify(c.at(time.Millisecond), rxe, q.LQPN, rdmanl.QPStateInit)
			e.Comm = strings.Clone(e.Comm)
			w.Event(e)
		}
	}
	w.Scan(scan(c.at(time.Second), rxe, qps...))
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return w, c, qps, float64(ms.HeapAlloc-before) / n // qps was live before
}

// The agent's memory is mostly its QP histories: one costs at most 190
// bytes of heap (the agent's goal is under 40 MB of RSS at 60,000 QPs;
// before the names and notes were interned and the probes' events moved
// out of the struct a QP took 358, and 197 while a created QP kept a note
// of its RESET). A creation site costs a QP no more:
// it is interned with the owner's names (qpNames), which the QPs of a
// process made at one site share.
func TestTrackedQPHeap(t *testing.T) {
	tests := []struct {
		name   string
		probed bool
		sites  int
	}{
		{"scanned", false, 0},
		{"probed", true, 0},
		{"probed with 8 sites", true, 8},
	}
	heap := map[string]float64{}
	for _, tt := range tests {
		w, _, qps, perQP := tracked60k(tt.probed, tt.sites)
		heap[tt.name] = perQP
		t.Logf("%s: %.0f bytes of heap per tracked QP", tt.name, perQP)
		if perQP > 190 {
			t.Errorf("%s: %.0f bytes of heap per tracked QP, want at most 190", tt.name, perQP)
		}
		if got := w.LiveQPs(); got != len(qps) {
			t.Errorf("%s: %d live QPs tracked, want %d", tt.name, got, len(qps))
		}
		runtime.KeepAlive(qps)
	}
	if d := heap["probed with 8 sites"] - heap["probed"]; d > 8 {
		t.Errorf("sites cost %.1f bytes of heap per QP, want at most 8", d)
	}

	// A peer is the QP's own (History.peer), not part of the names the
	// QPs of a process share: the 60,000 QPs of one process to as many
	// peers (an MPI job's all-to-all over RC) cost their addresses, not
	// 60,000 copies of the names.
	w, _, qps, _ := tracked60k(true, 0)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	peers := make(map[uint32]string, len(qps))
	for i, q := range qps {
		peers[q.LQPN] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&0xff, i&0xff)
	}
	w.Peers(rxe.Index, peers)
	clear(peers) // the addresses the watcher keeps, not those of the map
	runtime.GC()
	runtime.ReadMemStats(&ms)
	perPeer := float64(int64(ms.HeapAlloc)-int64(before)) / float64(len(qps))
	t.Logf("a peer of its own: %.0f bytes of heap more per tracked QP", perPeer)
	if perPeer > 100 {
		t.Errorf("a peer of its own costs %.0f bytes of heap per QP, want at most 100", perPeer)
	}
	if got := w.qps[qpKey{rxe.Index, qps[7].LQPN}].Peer(); got != "10.0.0.7" {
		t.Errorf("QP %d's peer %q, want 10.0.0.7", qps[7].LQPN, got)
	}
	runtime.KeepAlive(qps)
}

// BenchmarkTrack reports the heap a tracked QP costs (heap-B/qp) at
// 60,000 QPs, scanned or probed as tracked60k tracks them; the loop times
// a scan of all of them.
func BenchmarkTrack(b *testing.B) {
	for _, tt := range []struct {
		name   string
		probed bool
		sites  int
	}{{"scanned", false, 0}, {"probed", true, 0}, {"probed-sites", true, 8}} {
		b.Run(tt.name, func(b *testing.B) {
			w, c, qps, perQP := tracked60k(tt.probed, tt.sites)
			for b.Loop() {
				w.Scan(scan(c.at(2*time.Second), rxe, qps...))
			}
			b.ReportMetric(perQP, "heap-B/qp")
			runtime.KeepAlive(qps)
			runtime.KeepAlive(w)
		})
	}
}

// A limited evaluation counts every finding, passes each to Query.Each,
// keeps the most severe up to the limit, and a kept finding's evidence
// stays as it was when the history takes more.
func TestEvaluateLimitAndEach(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	var qps []rdmanl.QP
	for qpn := uint32(17); qpn < 27; qpn++ {
		qps = append(qps, qp(qpn, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42))
	}
	w.Scan(scan(c.at(0), rxe, qps...))
	w.Event(create(c.at(time.Second), rxe, 30, true))
	w.Event(modify(c.at(time.Second), rxe, 30, rdmanl.QPStateErr)) // last-wqe-not-emitted: error, not warning
	c.at(time.Minute)
	for _, tt := range []struct {
		limit int
		want  []uint32
	}{{0, []uint32{17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 30}}, {3, []uint32{17, 18, 30}}, {-1, nil}} {
		var each int
		rep := w.Evaluate(Query{MinAge: 5 * time.Second, Limit: tt.limit, Each: func(*Finding) { each++ }})
		var got []uint32
		for _, f := range rep.Findings {
			got = append(got, f.QPN)
		}
		if !slices.Equal(got, tt.want) || rep.Findings == nil {
			t.Errorf("limit %d: findings on QPs %v, want %v", tt.limit, got, tt.want)
		}
		if each != 11 || rep.FindingsTotal != 11 || rep.FindingsOmitted != 11-len(tt.want) {
			t.Errorf("limit %d: Each called %d times, total %d, omitted %d; want 11, 11, %d", tt.limit, each, rep.FindingsTotal, rep.FindingsOmitted, 11-len(tt.want))
		}
		if n := rep.Summary[0].Count + rep.Summary[1].Count; len(rep.Summary) != 2 || n != 11 {
			t.Errorf("limit %d: summary %+v", tt.limit, rep.Summary)
		}
	}
	// QP 30's history full of notes: each new one moves them in place.
	for i := range maxEvidence {
		w.Event(Event{Kind: EventQPAsync, Time: c.at(time.Minute), DevIndex: rxe.Index, DevName: rxe.Name, QPN: 30, Async: fmt.Sprintf("event %d", i)})
	}
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{MinAge: 5 * time.Second, Limit: 1})
	if rep.Findings[0].QPN != 30 {
		t.Fatalf("limit 1 kept %+v", rep.Findings[0])
	}
	before := slices.Clone(rep.Findings[0].Evidence)
	w.Event(Event{Kind: EventQPAsync, Time: c.at(2 * time.Minute), DevIndex: rxe.Index, DevName: rxe.Name, QPN: 30, Async: "one more"})
	if d := cmp.Diff(before, rep.Findings[0].Evidence); d != "" || len(before) == 0 {
		t.Errorf("a kept finding's evidence changed with its history (-before +after):\n%s", d)
	}
}

// BenchmarkScanOtherDevice is the agent's scan, at each interval, of an
// iWARP device without QPs beside 60,000 QPs of another: no walk over
// them (5.7 ms a scan on the host when each scan walked every history
// twice, 3 to 6 us since).
func BenchmarkScanOtherDevice(b *testing.B) {
	w, c, _, _ := tracked60k(true, 0)
	c.at(10 * time.Minute)
	for b.Loop() {
		w.Scan(scan(c.now(), siw))
	}
}

// TestEvaluateAllAcrossChunks keeps every finding (limit 0) of more QPs
// than a keeper's chunk holds, scanned in no order: each once, in the
// report's order, with its own evidence.
func TestEvaluateAllAcrossChunks(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	const n = 3*keeperChunk + 7
	qps := make([]rdmanl.QP, n)
	for i := range qps {
		qps[i] = qp(uint32(17+(i*7919)%n), rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)
	}
	w.Scan(scan(c.at(0), rxe, qps...))
	c.at(time.Minute)
	rep := w.Evaluate(Query{MinAge: 5 * time.Second})
	if len(rep.Findings) != n || rep.FindingsTotal != n {
		t.Fatalf("%d findings of %d, want %d", len(rep.Findings), rep.FindingsTotal, n)
	}
	for i, f := range rep.Findings {
		if f.QPN != uint32(17+i) {
			t.Fatalf("finding %d is QP %d's, want QP %d's", i, f.QPN, 17+i)
		}
		if len(f.Evidence) == 0 {
			t.Fatalf("QP %d's finding has no evidence", f.QPN)
		}
	}
}
