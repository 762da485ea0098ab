package leakwatch

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable time source for the watcher.
type clock struct{ t time.Time }

func (c *clock) now() time.Time               { return c.t }
func (c *clock) at(d time.Duration) time.Time { c.t = t0.Add(d); return c.t }

var rxe = rdmanl.Device{Index: 0, Name: "rxe0"}
var siw = rdmanl.Device{Index: 1, Name: "siw0"}

func qp(lqpn uint32, typ rdmanl.QPType, state rdmanl.QPState, pid uint32) rdmanl.QP {
	q := rdmanl.QP{LQPN: lqpn, Type: typ, State: state, Owner: rdmanl.Owner{PID: pid}}
	if state != rdmanl.QPStateReset {
		q.Port = 1
	}
	return q
}

func onSRQ(q rdmanl.QP, srqn uint32) rdmanl.QP { q.OnSRQ, q.SRQN = true, srqn; return q }

func scan(t time.Time, dev rdmanl.Device, qps ...rdmanl.QP) Scan {
	return Scan{Time: t, Devices: []DeviceScan{{Device: dev, QPs: qps, Contexts: 1, Owners: map[uint32]Owner{42: {Comm: "app"}, 43: {Comm: "other"}}}},
		Zombies: &Zombies{}} // the host's processes were looked at: no zombie contexts
}

// dump is a scan whose dump began at t.
func dump(t time.Time, dev rdmanl.Device, qps ...rdmanl.QP) Scan {
	s := scan(t, dev, qps...)
	s.Started = t
	return s
}

func ev(t time.Time, kind EventKind, dev rdmanl.Device, qpn uint32) Event {
	return Event{Kind: kind, Time: t, DevIndex: dev.Index, DevName: dev.Name, QPN: qpn, QPType: rdmanl.QPTypeRC, PID: 42, TID: 42, Comm: "app"}
}

func modify(t time.Time, dev rdmanl.Device, qpn uint32, s rdmanl.QPState) Event {
	e := ev(t, EventQPModified, dev, qpn)
	e.NewState, e.HasState = s, true
	return e
}

func create(t time.Time, dev rdmanl.Device, qpn uint32, srq bool) Event {
	e := ev(t, EventQPCreated, dev, qpn)
	e.OnSRQ, e.SRQN = srq, 0
	return e
}

func lastWQE(t time.Time, dev rdmanl.Device, qpn uint32) Event {
	e := ev(t, EventQPAsync, dev, qpn)
	e.Async, e.LastWQE = "QP_LAST_WQE_REACHED", true
	return e
}

type found struct {
	Rule, Device string
	QPN, PID     uint32
}

func summarize(r Report) []found {
	out := []found{}
	for _, f := range r.Findings {
		out = append(out, found{f.Rule, f.Device, f.QPN, f.PID})
	}
	return out
}

func TestRules(t *testing.T) {
	cfg := Config{Probes: true}
	tests := []struct {
		name  string
		steps func(w *Watcher, c *clock)
		want  []found
	}{
		{"QP in ERR for 10s", func(w *Watcher, c *clock) {
			w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
			w.Scan(scan(c.at(10*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
		}, []found{{RuleStaleErrorQP, "rxe0", 17, 42}}},
		{"QP in ERR for 1s", func(w *Watcher, c *clock) {
			w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
			c.at(time.Second)
		}, nil},
		{"RC QP in INIT for 6s", func(w *Watcher, c *clock) {
			w.Scan(scan(c.at(0), rxe, qp(20, rdmanl.QPTypeRC, rdmanl.QPStateInit, 43)))
			c.at(6 * time.Second)
		}, []found{{RuleNeverConnectedQP, "rxe0", 20, 43}}},
		{"RC QP back in RTR after RTS is not never-connected", func(w *Watcher, c *clock) {
			w.Event(modify(c.at(0), rxe, 20, rdmanl.QPStateRTS))
			w.Event(modify(c.at(time.Second), rxe, 20, rdmanl.QPStateRTR))
			c.at(20 * time.Second)
		}, nil},
		{"UD and XRC target QPs in RTR/INIT are fine", func(w *Watcher, c *clock) {
			w.Scan(scan(c.at(0), rxe, qp(21, rdmanl.QPTypeUD, rdmanl.QPStateInit, 42), qp(22, rdmanl.QPTypeXRCTgt, rdmanl.QPStateRTR, 42)))
			c.at(time.Minute)
		}, nil},
		{"siw on 6.1: RESET with a port is an unfilled state, not a leak", func(w *Watcher, c *clock) {
			q := qp(1, rdmanl.QPTypeRC, rdmanl.QPStateReset, 42)
			q.Port = 1
			w.Scan(scan(c.at(0), siw, q))
			w.Scan(scan(c.at(time.Minute), siw, q))
		}, nil},
		{"siw on 6.1 with probes: the probe's state counts", func(w *Watcher, c *clock) {
			q := qp(1, rdmanl.QPTypeRC, rdmanl.QPStateReset, 42)
			q.Port = 1
			w.Event(modify(c.at(0), siw, 1, rdmanl.QPStateErr))
			w.Scan(scan(c.at(time.Second), siw, q))
			c.at(10 * time.Second)
		}, []found{{RuleStaleErrorQP, "siw0", 1, 42}}},
		{"iWARP: the probes saw RTR, a later dump RTS (the provider's own move)", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), siw, 1, false))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateRTR))
			w.Scan(dump(c.at(5*time.Second), siw, qp(1, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
			c.at(time.Minute)
		}, nil},
		{"iWARP: without that dump the QP looks never connected", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), siw, 1, false))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateRTR))
			c.at(time.Minute)
		}, []found{{RuleNeverConnectedQP, "siw0", 1, 42}}},
		{"a dump right after a probed transition does not undo it", func(w *Watcher, c *clock) {
			w.Event(modify(c.at(10*time.Second), rxe, 17, rdmanl.QPStateErr))
			w.Scan(dump(c.at(10*time.Second+500*time.Millisecond), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
			c.at(time.Minute)
		}, []found{{RuleStaleErrorQP, "rxe0", 17, 42}}},
		{"hardware moved the QP to ERR: the dump says so", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 17, false))
			w.Event(modify(c.at(time.Millisecond), rxe, 17, rdmanl.QPStateRTS))
			w.Scan(dump(c.at(10*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
			c.at(time.Minute)
		}, []found{{RuleStaleErrorQP, "rxe0", 17, 42}}},
		{"siw on 6.1: a connected rdma_cm ID stands for the unreported RTS", func(w *Watcher, c *clock) {
			q := qp(1, rdmanl.QPTypeRC, rdmanl.QPStateReset, 42)
			q.Port = 1
			w.Event(create(c.at(0), siw, 1, false))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateRTR))
			sc := dump(c.at(time.Second), siw, q)
			sc.Devices[0].CMConnected = map[uint32]bool{1: true}
			w.Scan(sc)
			c.at(time.Minute)
		}, nil},
		{"siw on 6.1: an unreported state and no connected rdma_cm ID", func(w *Watcher, c *clock) {
			q := qp(1, rdmanl.QPTypeRC, rdmanl.QPStateReset, 42)
			q.Port = 1
			w.Event(create(c.at(0), siw, 1, false))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateRTR))
			w.Scan(dump(c.at(time.Second), siw, q))
			c.at(time.Minute)
		}, []found{{RuleNeverConnectedQP, "siw0", 1, 42}}},
		{"SRQ QP destroyed straight from RTS", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 30, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 30, rdmanl.QPStateRTS))
			w.Event(ev(c.at(2*time.Millisecond), EventQPDestroyed, rxe, 30))
			c.at(time.Second)
		}, []found{{RuleSRQDestroyWithoutLastWQE, "rxe0", 30, 42}}},
		{"SRQ QP torn down by the spec on an emitting provider", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 30, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 30, rdmanl.QPStateRTS))
			w.Event(modify(c.at(2*time.Millisecond), rxe, 30, rdmanl.QPStateErr))
			w.Event(lastWQE(c.at(3*time.Millisecond), rxe, 30))
			w.Event(lastWQE(c.at(4*time.Millisecond), rxe, 30)) // again after the marker WR
			w.Event(ev(c.at(5*time.Millisecond), EventQPDestroyed, rxe, 30))
			c.at(time.Minute)
		}, nil},
		{"SRQ QP destroyed in ERR before LAST_WQE on an emitting provider", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 31, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 31, rdmanl.QPStateErr))
			w.Event(lastWQE(c.at(2*time.Millisecond), rxe, 31))
			w.Event(ev(c.at(2*time.Millisecond), EventQPDestroyed, rxe, 31))
			w.Event(create(c.at(3*time.Millisecond), rxe, 32, true))
			w.Event(modify(c.at(4*time.Millisecond), rxe, 32, rdmanl.QPStateErr))
			w.Event(ev(c.at(5*time.Millisecond), EventQPDestroyed, rxe, 32))
		}, []found{{RuleSRQDestroyWithoutLastWQE, "rxe0", 32, 42}}},
		{"SRQ QP drained with a marker on a provider that never emits", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), siw, 1, true))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateErr))
			w.Event(ev(c.at(time.Second), EventQPDestroyed, siw, 1))
			c.at(time.Minute)
		}, nil},
		{"SRQ QP in ERR, provider never emits", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), siw, 1, true))
			w.Event(modify(c.at(time.Millisecond), siw, 1, rdmanl.QPStateErr))
			c.at(6 * time.Second)
		}, []found{{RuleLastWQENotEmitted, "siw0", 1, 42}}},
		{"SRQ QP in ERR, event delivered, never destroyed", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 33, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 33, rdmanl.QPStateErr))
			w.Event(lastWQE(c.at(2*time.Millisecond), rxe, 33))
			c.at(6 * time.Second)
		}, []found{{RuleLastWQEUnhandled, "rxe0", 33, 42}}},
		{"LAST_WQE delivered before the modify to ERR returned (its event comes second, stamped at its start)", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 35, true))
			w.Event(lastWQE(c.at(3*time.Millisecond), rxe, 35))
			w.Event(modify(t0.Add(2*time.Millisecond), rxe, 35, rdmanl.QPStateErr))
			c.at(6 * time.Second)
		}, []found{{RuleLastWQEUnhandled, "rxe0", 35, 42}}},
		{"the same, torn down by the spec", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 35, true))
			w.Event(lastWQE(c.at(3*time.Millisecond), rxe, 35))
			w.Event(modify(t0.Add(2*time.Millisecond), rxe, 35, rdmanl.QPStateErr))
			w.Event(ev(c.at(5*time.Millisecond), EventQPDestroyed, rxe, 35))
			c.at(time.Minute)
		}, nil},
		{"a LAST_WQE of an earlier Error does not count for the next", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 36, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 36, rdmanl.QPStateErr))
			w.Event(lastWQE(c.at(2*time.Millisecond), rxe, 36))
			w.Event(modify(c.at(3*time.Millisecond), rxe, 36, rdmanl.QPStateReset))
			w.Event(modify(c.at(4*time.Millisecond), rxe, 36, rdmanl.QPStateRTS))
			w.Event(modify(c.at(5*time.Millisecond), rxe, 36, rdmanl.QPStateErr))
			c.at(6 * time.Second)
		}, []found{{RuleLastWQENotEmitted, "rxe0", 36, 42}}},
		{"device unregistered under its QPs", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 34, true))
			w.Event(modify(c.at(time.Millisecond), rxe, 34, rdmanl.QPStateRTS))
			w.Event(Event{Kind: EventDeviceUnregistered, Time: c.at(time.Second), DevIndex: 0, DevName: "rxe0"})
			c.at(time.Minute)
		}, nil},
		{"QP number reused after destroy", func(w *Watcher, c *clock) {
			w.Event(create(c.at(0), rxe, 40, false))
			w.Event(modify(c.at(time.Millisecond), rxe, 40, rdmanl.QPStateErr))
			w.Event(ev(c.at(2*time.Millisecond), EventQPDestroyed, rxe, 40))
			w.Event(create(c.at(3*time.Millisecond), rxe, 40, false))
			w.Event(modify(c.at(4*time.Millisecond), rxe, 40, rdmanl.QPStateRTS))
			c.at(time.Minute)
		}, nil},
		{"QP gone from the dump is not reported", func(w *Watcher, c *clock) {
			w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
			w.Scan(scan(c.at(10*time.Second), rxe))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(cfg, c.now)
			tt.steps(w, c)
			if diff := cmp.Diff(append([]found{}, tt.want...), summarize(findings(w, Query{MinAge: 5 * time.Second}))); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthyChurn(t *testing.T) {
	// Thousands of QPs through the full spec lifecycle: nothing to report.
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	at := time.Duration(0)
	step := func() time.Time { at += 100 * time.Microsecond; return c.at(at) }
	for i := range 5000 {
		qpn := uint32(17 + i%300) // numbers are reused
		w.Event(create(step(), rxe, qpn, i%2 == 0))
		for _, s := range []rdmanl.QPState{rdmanl.QPStateInit, rdmanl.QPStateRTR, rdmanl.QPStateRTS, rdmanl.QPStateErr} {
			w.Event(modify(step(), rxe, qpn, s))
		}
		if i%2 == 0 {
			w.Event(lastWQE(step(), rxe, qpn))
		}
		w.Event(ev(step(), EventQPDestroyed, rxe, qpn))
	}
	c.at(at + time.Hour)
	if got := findings(w, Query{MinAge: 5 * time.Second}); len(got.Findings) != 0 {
		t.Errorf("healthy churn gave %d findings, first %+v", len(got.Findings), got.Findings[0])
	}
}

func TestWithoutProbes(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{ProbesReason: "no BTF"}, c.now)
	w.Scan(scan(c.at(0), rxe, onSRQ(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 0)))
	c.at(10 * time.Second)
	r := findings(w, Query{MinAge: 5 * time.Second})
	if diff := cmp.Diff([]found{{RuleStaleErrorQP, "rxe0", 17, 42}}, summarize(r)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	var skipped []string
	for _, s := range r.SkippedRules {
		skipped = append(skipped, s.Rule)
		if s.Rule != RuleQPExhaustion && s.Reason != "needs the eBPF probes: no BTF" {
			t.Errorf("%s skipped with reason %q", s.Rule, s.Reason)
		}
	}
	want := []string{RuleSRQDestroyWithoutLastWQE, RuleLastWQENotEmitted, RuleLastWQEUnhandled, RuleSRQDrainStalled, RuleQPExhaustion, RuleQPCreateFailing, RuleQPErrorStorm, RuleMRLeak}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped rules %v, want %v", skipped, want)
	}
}

func TestRuleSelection(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	c.at(time.Minute)
	if diff := cmp.Diff([]found{{RuleNeverConnectedQP, "rxe0", 18, 42}}, summarize(findings(w, Query{MinAge: time.Second, Rules: []string{RuleNeverConnectedQP}}))); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestQPExhaustion(t *testing.T) {
	many := func(n int) []rdmanl.QP {
		qps := make([]rdmanl.QP, n)
		for i := range qps {
			qps[i] = qp(uint32(17+i), rdmanl.QPTypeUD, rdmanl.QPStateRTS, 42)
		}
		return qps
	}
	tests := []struct {
		name      string
		counts    []int // one scan a minute
		max       uint64
		wantSev   Severity
		wantFound bool
	}{
		{"85% of max", []int{85}, 100, SeverityCritical, true},
		{"50% and flat", []int{50, 50, 50}, 100, "", false},
		{"growing to max within a day", []int{100, 200, 300}, 10000, SeverityError, true},
		{"growing but far from max", []int{100, 101, 102}, 1000000, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(Config{Probes: true, MaxQP: map[string]uint64{"rxe0": tt.max}}, c.now)
			for i, n := range tt.counts {
				w.Scan(scan(c.at(time.Duration(i)*time.Minute), rxe, many(n)...))
			}
			r := findings(w, Query{MinAge: 5 * time.Second, Rules: []string{RuleQPExhaustion}})
			if got := len(r.Findings) == 1; got != tt.wantFound {
				t.Fatalf("findings %+v, want found=%v", r.Findings, tt.wantFound)
			}
			if tt.wantFound && (r.Findings[0].Severity != tt.wantSev || r.Findings[0].Limit != tt.max) {
				t.Errorf("finding %+v, want severity %s limit %d", r.Findings[0], tt.wantSev, tt.max)
			}
		})
	}
	t.Run("max unknown", func(t *testing.T) {
		c := &clock{t: t0}
		w := New(Config{}, c.now)
		w.Scan(scan(c.at(0), rxe, many(3)...))
		r := findings(w, Query{Rules: []string{RuleQPExhaustion}})
		if len(r.SkippedRules) != 1 || r.SkippedRules[0].Rule != RuleQPExhaustion {
			t.Errorf("skipped %+v, want qp-exhaustion skipped for rxe0", r.SkippedRules)
		}
	})
}

func TestXRCTgtOrphan(t *testing.T) {
	tgt := rdmanl.QP{LQPN: 50, Type: rdmanl.QPTypeXRCTgt, State: rdmanl.QPStateRTR, Port: 1, Owner: rdmanl.Owner{KernName: "ib_uverbs"}}
	for _, contexts := range []uint64{0, 2} {
		c := &clock{t: t0}
		w := New(Config{}, c.now)
		s := scan(c.at(0), rxe, tgt)
		s.Devices[0].Contexts = contexts
		w.Scan(s)
		c.at(time.Minute)
		if got, want := len(findings(w, Query{MinAge: 5 * time.Second, Rules: []string{RuleXRCTgtOrphan}}).Findings), map[uint64]int{0: 1, 2: 0}[contexts]; got != want {
			t.Errorf("%d open contexts: %d findings, want %d", contexts, got, want)
		}
	}
}

func TestFindingFields(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Event(create(c.at(0), siw, 1, true))
	w.Event(modify(c.at(time.Second), siw, 1, rdmanl.QPStateErr))
	c.at(8 * time.Second)
	fs := findings(w, Query{MinAge: 5 * time.Second}).Findings
	if len(fs) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := fs[0]
	if f.Rule != RuleLastWQENotEmitted || f.Severity != SeverityError || f.Comm != "app" || !f.SRQ || f.State != "ERR" ||
		f.AgeSeconds != 7 || f.Type != "RC" || f.Hint == "" || f.Spec == "" || len(f.Evidence) < 2 {
		t.Errorf("finding %+v", f)
	}
}

// TestOwnerThreadAndProcess: netlink records the creating thread; findings name it
// as pid and its process as tgid, from a probe's create event or from the
// /proc lookup a scan carries.
func TestOwnerThreadAndProcess(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	e := create(c.at(0), rxe, 1, false)
	e.PID, e.TID = 100, 101 // a worker thread of process 100
	w.Event(e)
	w.Event(modify(c.at(time.Second), rxe, 1, rdmanl.QPStateErr))
	s := scan(c.at(2*time.Second), rxe, qp(1, rdmanl.QPTypeRC, rdmanl.QPStateErr, 101), qp(2, rdmanl.QPTypeRC, rdmanl.QPStateErr, 77))
	s.Devices[0].Owners[77] = Owner{TGID: 70, Comm: "app"}
	w.Scan(s)
	c.at(10 * time.Second)
	got := map[uint32][2]uint32{}
	for _, f := range findings(w, Query{MinAge: 5 * time.Second}).Findings {
		got[f.QPN] = [2]uint32{f.PID, f.TGID}
	}
	want := map[uint32][2]uint32{1: {101, 100}, 2: {77, 70}}
	if len(got) != 2 || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("QPN: {pid, tgid} = %v, want %v", got, want)
	}
}

// The QPs of one process created by different threads share one copy of
// their device's and owner's names: the thread stays in the History.
func TestThreadsShareNames(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	s := scan(c.at(0), rxe, qp(1, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 101), qp(2, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 102))
	s.Devices[0].Owners[101] = Owner{TGID: 100, Comm: "app"}
	s.Devices[0].Owners[102] = Owner{TGID: 100, Comm: "app"}
	w.Scan(s)
	hs := w.histories()
	if len(hs) != 2 || hs[0].names != hs[1].names {
		t.Fatalf("%d histories, names shared %v", len(hs), len(hs) == 2 && hs[0].names == hs[1].names)
	}
	for _, h := range hs {
		if o := h.Owner(); o.PID != 100+h.QPN || o.TGID != 100 || o.Comm != "app" {
			t.Errorf("qpn %d owner %+v, want thread %d of process 100", h.QPN, o, 100+h.QPN)
		}
	}
}

// Devices are scanned on their own schedules: a scan of one device says
// nothing about the QPs of another; only DeviceGone ends them.
func TestScanPerDevice(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true, Retain: time.Minute}, c.now)
	w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	w.Scan(scan(c.at(time.Second), siw, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)))
	w.Scan(scan(c.at(2*time.Second), rxe)) // QP 17 is gone, siw's QP 3 is not
	live := func() []uint32 {
		var out []uint32
		for _, h := range w.histories() {
			if !h.Destroyed {
				out = append(out, h.QPN)
			}
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff([]uint32{3}, live()); diff != "" {
		t.Errorf("live QPs after a scan of rxe0 (-want +got):\n%s", diff)
	}
	c.at(10 * time.Second)
	if diff := cmp.Diff([]found{{RuleStaleErrorQP, "siw0", 3, 43}}, summarize(findings(w, Query{MinAge: 5 * time.Second}))); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	w.DeviceGone(siw.Index, c.at(11*time.Second))
	if got := live(); len(got) != 0 {
		t.Errorf("live QPs after siw0 went away: %v", got)
	}
	if _, ok := w.devs[siw.Index]; !ok {
		t.Errorf("siw0 forgotten while its QP history is retained")
	}
	w.Scan(scan(c.at(2*time.Minute), rxe))
	if _, ok := w.devs[siw.Index]; ok {
		t.Errorf("siw0 still kept after its QPs expired")
	}
	if _, ok := w.devs[rxe.Index]; !ok {
		t.Errorf("rxe0 forgotten although it is scanned")
	}
}

// A dump that began before the probes saw a QP destroyed still lists it
// (the kernel built that reply first): the QP stays destroyed, and is not
// reported for the minutes until the next reconciliation. A dump that began
// well after the destroy and lists the number is a new QP.
func TestScanListsAQPDestroyedDuringTheDump(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Event(create(c.at(0), rxe, 17, false))
	w.Event(modify(c.at(time.Second), rxe, 17, rdmanl.QPStateInit))
	w.Event(ev(c.at(3*time.Second), EventQPDestroyed, rxe, 17))
	s := dump(c.at(2*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42))
	s.Time = c.at(4 * time.Second)
	w.Scan(s)
	if n := w.LiveQPs(); n != 0 {
		t.Errorf("%d live QPs after a dump that began before the destroy listed the destroyed QP, want 0", n)
	}
	c.at(time.Minute)
	if f := summarize(findings(w, Query{MinAge: 5 * time.Second})); len(f) != 0 {
		t.Errorf("findings about a destroyed QP: %v", f)
	}
	w.Scan(dump(c.at(2*time.Minute), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	if n := w.LiveQPs(); n != 1 {
		t.Errorf("%d live QPs after a later dump listed QP 17 again, want 1 (a new QP)", n)
	}
}

// Histories are copies: changing one, evidence included, leaves the
// watcher as it was.
func TestHistoriesAreCopies(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	h := w.histories()
	h[0].State = rdmanl.QPStateRTS
	h[0].notes[0].at = 1
	again := w.histories()
	if again[0].State != rdmanl.QPStateErr || again[0].notes[0].at == 1 {
		t.Errorf("the watcher's history changed through a copy: %+v", again[0])
	}
}

// A scan that misses an SRQ QP before its destroy event arrives (the event
// waited in the ring buffer) leaves the QP's evidence for the finding the
// event makes; a non-SRQ QP's goes at once.
func TestEvidenceSurvivesTheDestroyRace(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Event(create(c.at(0), rxe, 30, true))
	w.Event(create(c.at(0), rxe, 31, false))
	w.Event(modify(c.at(time.Millisecond), rxe, 30, rdmanl.QPStateRTS))
	w.Scan(dump(c.at(5*time.Second), rxe)) // neither is listed any more
	w.Event(ev(c.at(4*time.Second), EventQPDestroyed, rxe, 30))
	rep := findings(w, Query{MinAge: time.Second})
	if len(rep.Findings) != 1 || rep.Findings[0].Rule != RuleSRQDestroyWithoutLastWQE {
		t.Fatalf("findings %v, want srq-destroy-without-last-wqe for QP 30", summarize(rep))
	}
	if ev := rep.Findings[0].Evidence; len(ev) < 3 || ev[0].What != "created" {
		t.Errorf("evidence %+v, want the QP's life from its creation", ev)
	}
	for _, h := range w.histories() {
		if h.QPN == 31 && len(h.notes) != 0 {
			t.Errorf("a destroyed QP no rule can report keeps %d observations", len(h.notes))
		}
	}
}

// findings forgets the destroyed QPs past their retention, as a scan does,
// and evaluates q at the watcher's current time.
func findings(w *Watcher, q Query) Report {
	w.expire(w.now())
	return w.Evaluate(q)
}
