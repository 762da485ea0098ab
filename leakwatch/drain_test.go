package leakwatch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

func kernCreate(t time.Time, dev rdmanl.Device, qpn uint32, srq bool) Event {
	e := create(t, dev, qpn, srq)
	e.PID, e.TID, e.Comm, e.KernOwner = 0, 0, "kworker/0:1", "rdma_cm"
	return e
}

func drain(t time.Time, kind EventKind, dev rdmanl.Device, qpn uint32, fn string, d time.Duration) Event {
	e := ev(t, kind, dev, qpn)
	e.Drain, e.Duration = fn, d
	return e
}

// The nvmet-rdma teardown on siw since 6.11: three SRQ QPs and a QP
// without SRQ are drained; the SRQ drains wait 60 s, the other returns.
func TestSRQDrainStalled(t *testing.T) {
	c := &clock{}
	w := New(Config{Probes: true}, c.now)
	kq := func(n uint32, srq bool) rdmanl.QP {
		q := qp(n, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 0)
		q.Owner = rdmanl.Owner{KernName: "rdma_cm"}
		if srq {
			q = onSRQ(q, 1)
		}
		return q
	}
	for _, n := range []uint32{10, 11, 12} {
		w.Event(kernCreate(c.at(0), siw, n, true))
	}
	w.Event(kernCreate(c.at(0), siw, 13, false))
	s := dump(c.at(time.Second), siw, kq(10, true), kq(11, true), kq(12, true), kq(13, false))
	s.Devices[0].ULPs = map[uint32]string{10: "nvmet_rdma", 11: "nvmet_rdma", 12: "nvmet_rdma", 13: "nvme_rdma"}
	w.Scan(s)
	// Metrics count the QPs by owner with the ULP they serve.
	tally := w.Tally(10)
	if len(tally) != 1 || !slices.Contains(tally[0].Owners, OwnerQPs{Owner: Owner{Comm: "rdma_cm", ULP: "nvmet_rdma"}, QPs: 3}) ||
		!slices.Contains(tally[0].Owners, OwnerQPs{Owner: Owner{Comm: "rdma_cm", ULP: "nvme_rdma"}, QPs: 1}) {
		t.Errorf("tally %+v", tally)
	}
	start := c.at(10 * time.Second)
	for _, n := range []uint32{10, 11, 12} {
		w.Event(drain(start, EventDrainStarted, siw, n, "ib_drain_qp", 0))
		w.Event(modify(start, siw, n, rdmanl.QPStateErr))
	}
	w.Event(drain(start, EventDrainStarted, siw, 13, "ib_drain_qp", 0))
	w.Event(drain(start, EventDrainStarted, siw, 13, "ib_drain_rq", 0))
	w.Event(drain(start, EventDrainEnded, siw, 13, "ib_drain_rq", time.Millisecond))
	w.Event(drain(start.Add(2*time.Millisecond), EventDrainEnded, siw, 13, "ib_drain_qp", 2*time.Millisecond))

	q := Query{MinAge: 5 * time.Second, Rules: []string{RuleSRQDrainStalled}}
	c.at(14 * time.Second)
	if rep := w.Evaluate(q); len(rep.Findings) != 0 {
		t.Fatalf("drains waiting 4s of a 5s threshold reported: %+v", rep.Findings)
	}
	c.at(30 * time.Second)
	rep := w.Evaluate(q)
	if diff := cmp.Diff([]found{{RuleSRQDrainStalled, "siw0", 10, 0}, {RuleSRQDrainStalled, "siw0", 11, 0}, {RuleSRQDrainStalled, "siw0", 12, 0}}, summarize(rep)); diff != "" {
		t.Fatalf("while waiting (-want +got):\n%s", diff)
	}
	for _, f := range rep.Findings {
		if f.Severity != SeverityCritical || !f.Draining || f.DrainSeconds != 20 || f.ULP != "nvmet_rdma" || f.KernName != "rdma_cm" ||
			!strings.Contains(f.Hint, "nvmet_rdma") || !strings.Contains(f.Hint, "use_srq=0") || !strings.Contains(f.Hint, "ib_drain_qp") {
			t.Errorf("waiting finding %+v", f)
		}
	}
	// The kernel QPs in Error on siw's SRQ are also last-wqe-not-emitted,
	// with the ULP named.
	lw := w.Evaluate(Query{MinAge: 5 * time.Second, Rules: []string{RuleLastWQENotEmitted}})
	if len(lw.Findings) != 3 || lw.Findings[0].ULP != "nvmet_rdma" || !strings.Contains(lw.Findings[0].Hint, "kernel QP of nvmet_rdma") {
		t.Errorf("last-wqe-not-emitted: %+v", lw.Findings)
	}

	end := c.at(70*time.Second + 300*time.Millisecond)
	for _, n := range []uint32{10, 11, 12} {
		w.Event(drain(end, EventDrainEnded, siw, n, "ib_drain_qp", 60300*time.Millisecond))
		w.Event(ev(end, EventQPDestroyed, siw, n))
	}
	w.Event(ev(end, EventQPDestroyed, siw, 13))
	w.Scan(dump(c.at(75*time.Second), siw))
	c.at(5 * time.Minute)
	rep = w.Evaluate(q)
	if diff := cmp.Diff([]found{{RuleSRQDrainStalled, "siw0", 10, 0}, {RuleSRQDrainStalled, "siw0", 11, 0}, {RuleSRQDrainStalled, "siw0", 12, 0}}, summarize(rep)); diff != "" {
		t.Fatalf("afterwards (-want +got):\n%s", diff)
	}
	for _, f := range rep.Findings {
		if f.Severity != SeverityError || f.Draining || f.DrainSeconds != 60.3 || f.State != "destroyed" || f.ULP != "nvmet_rdma" {
			t.Errorf("history finding %+v", f)
		}
	}
	// A threshold above the drain reports nothing; Retain forgets them.
	if rep := w.Evaluate(Query{MinAge: 61 * time.Second, Rules: []string{RuleSRQDrainStalled}}); len(rep.Findings) != 0 {
		t.Errorf("61s threshold: %+v", rep.Findings)
	}
	c.at(75*time.Second + 11*time.Minute)
	if rep := findings(w, Query{}); len(rep.Findings) != 0 {
		t.Errorf("after Retain: %+v", rep.Findings)
	}
}

// rxe delivers LAST_WQE_REACHED: its SRQ drains return in a millisecond
// and nothing is reported; without probes the rule is skipped.
func TestSRQDrainFast(t *testing.T) {
	c := &clock{}
	w := New(Config{Probes: true}, c.now)
	w.Event(kernCreate(c.at(0), rxe, 17, true))
	w.Event(drain(c.at(time.Second), EventDrainStarted, rxe, 17, "ib_drain_qp", 0))
	w.Event(modify(c.at(time.Second), rxe, 17, rdmanl.QPStateErr))
	w.Event(lastWQE(c.at(time.Second), rxe, 17))
	w.Event(drain(c.at(time.Second+time.Millisecond), EventDrainEnded, rxe, 17, "ib_drain_qp", time.Millisecond))
	w.Event(ev(c.at(time.Second+time.Millisecond), EventQPDestroyed, rxe, 17))
	c.at(time.Minute)
	if rep := w.Evaluate(Query{MinAge: 0}); len(rep.Findings) != 0 {
		t.Errorf("fast drain reported: %+v", rep.Findings)
	}
	w.SetProbes(false, "no BTF")
	rep := w.Evaluate(Query{Rules: []string{RuleSRQDrainStalled}})
	if len(rep.SkippedRules) != 1 || rep.SkippedRules[0].Rule != RuleSRQDrainStalled {
		t.Errorf("skipped %+v", rep.SkippedRules)
	}
}

// The drain's return and the destroy wait in the ring buffer while a scan
// finds the QP gone: the history still gets both and reports the drain.
func TestSRQDrainEndAfterScan(t *testing.T) {
	c := &clock{}
	w := New(Config{Probes: true}, c.now)
	w.Event(kernCreate(c.at(0), siw, 10, true))
	q := onSRQ(qp(10, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 0), 1)
	q.Owner = rdmanl.Owner{KernName: "rdma_cm"}
	s := dump(c.at(time.Second), siw, q)
	s.Devices[0].ULPs = map[uint32]string{10: "nvmet_rdma"}
	w.Scan(s)
	w.Event(drain(c.at(2*time.Second), EventDrainStarted, siw, 10, "ib_drain_qp", 0))
	w.Event(modify(c.at(2*time.Second), siw, 10, rdmanl.QPStateErr))
	w.Scan(dump(c.at(63*time.Second), siw)) // the QP is gone
	w.Event(drain(c.at(62*time.Second), EventDrainEnded, siw, 10, "ib_drain_qp", 60*time.Second))
	w.Event(ev(c.at(62*time.Second), EventQPDestroyed, siw, 10))
	c.at(64 * time.Second)
	rep := w.Evaluate(Query{MinAge: 5 * time.Second})
	if len(rep.Findings) != 1 || rep.Findings[0].Rule != RuleSRQDrainStalled || rep.Findings[0].State != "destroyed" || rep.Findings[0].DrainSeconds != 60 || rep.Findings[0].ULP != "nvmet_rdma" {
		t.Fatalf("findings %+v", rep.Findings)
	}
	c.at(5 * time.Minute) // kept past a minute: the destroy made it reportable
	if rep := w.Evaluate(Query{MinAge: 5 * time.Second}); len(rep.Findings) != 1 {
		t.Errorf("after 5 minutes: %+v", rep.Findings)
	}
}

// The kernel skipped the fexit of a drain (a program attached to or
// detached from ib_drain_qp while it slept): the destroy that follows
// bounds the drain, and the finding says so.
func TestSRQDrainReturnUnseen(t *testing.T) {
	c := &clock{}
	w := New(Config{Probes: true}, c.now)
	w.Event(kernCreate(c.at(0), siw, 10, true))
	w.Event(drain(c.at(2*time.Second), EventDrainStarted, siw, 10, "ib_drain_qp", 0))
	w.Event(modify(c.at(2*time.Second), siw, 10, rdmanl.QPStateErr))
	w.Event(ev(c.at(62*time.Second+300*time.Millisecond), EventQPDestroyed, siw, 10))
	c.at(70 * time.Second)
	rep := w.Evaluate(Query{MinAge: 5 * time.Second})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	if f := rep.Findings[0]; f.Rule != RuleSRQDrainStalled || f.DrainSeconds != 60.3 || f.Draining || !strings.Contains(f.Hint, "up to 1m0.3s (its return was not seen") {
		t.Errorf("finding %+v", f)
	}
}
