package leakwatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// withPeers is s with its one device's QPs' peers by QPN.
func withPeers(s Scan, peers map[uint32]string) Scan {
	s.Devices[0].Peers = peers
	return s
}

// A QP's peer comes from the scan whose rdma_cm IDs name it, stays when a
// later scan's do not (the ID gone before the QP), is in the QP's
// findings and in its history after the QP is destroyed; a QP that reuses
// the number starts without one, and another ID's address replaces it.
func TestPeerCarried(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	srq := onSRQ(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), 1)
	w.Scan(withPeers(dump(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), srq, qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)),
		map[uint32]string{17: "192.0.2.7", 18: "192.0.2.9"}))
	w.Scan(dump(c.at(10*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), srq, qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)))
	// The SRQ QP destroyed without Error: a finding after its end.
	w.Event(ev(c.at(11*time.Second), EventQPDestroyed, rxe, 18))
	rep := w.Evaluate(Query{MinAge: 5 * time.Second, Rules: []string{RuleStaleErrorQP, RuleSRQDestroyWithoutLastWQE}})
	got := map[uint32]string{}
	for _, f := range rep.Findings {
		got[f.QPN] = f.Peer
	}
	want := map[uint32]string{17: "192.0.2.7", 18: "192.0.2.9", 19: ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings' peers by QPN (-want +got):\n%s", diff)
	}
	if h := w.qps[qpKey{rxe.Index, 18}]; h == nil || !h.Destroyed || h.Peer() != "192.0.2.9" {
		t.Errorf("destroyed QP 18's history %+v: want its peer 192.0.2.9", h)
	}
	wantGroups := []PeerGroup{
		{Peer: "192.0.2.7", Findings: 1, Devices: []string{"rxe0"}, Rules: map[string]int{RuleStaleErrorQP: 1}},
		{Peer: "192.0.2.9", Findings: 1, Devices: []string{"rxe0"}, Rules: map[string]int{RuleSRQDestroyWithoutLastWQE: 1}},
		{Peer: "", Findings: 1, Devices: []string{"rxe0"}, Rules: map[string]int{RuleStaleErrorQP: 1}},
	}
	if diff := cmp.Diff(wantGroups, rep.Peers); diff != "" || rep.PeersOmitted != 0 {
		t.Errorf("report's peers (-want +got):\n%s (%d omitted)", diff, rep.PeersOmitted)
	}

	// QP 17 destroyed and its number used again: the new QP has no peer
	// until an ID names it; then another address replaces QP 19's.
	w.Scan(dump(c.at(20*time.Second), rxe, qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)))
	w.Scan(dump(c.at(21*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)))
	if p := w.qps[qpKey{rxe.Index, 17}].Peer(); p != "" {
		t.Errorf("QP 17 made again: peer %q, want none", p)
	}
	w.Scan(withPeers(dump(c.at(22*time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)),
		map[uint32]string{19: "2001:db8::2"}))
	if p := w.qps[qpKey{rxe.Index, 19}].Peer(); p != "2001:db8::2" {
		t.Errorf("QP 19: peer %q, want 2001:db8::2", p)
	}
}

// A dump of the rdma_cm IDs between scans (Watcher.Peers) names the peers
// of QPs only the probes saw, destroyed ones included, and of their
// entries into Error before it; QPNs the watcher does not know, and
// devices it does not know, change nothing.
func TestPeersBetweenScans(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	cycle(w, c.at(time.Second), 10, 42, "QP_ACCESS_ERR") // QPs 10 and 11, destroyed at 1.3s
	w.Event(create(c.at(2*time.Second), rxe, 12, false))
	w.Peers(rxe.Index, map[uint32]string{10: "192.0.2.1", 11: "192.0.2.1", 12: "192.0.2.7", 99: "192.0.2.99"})
	w.Peers(7, map[uint32]string{12: "192.0.2.8"}) // no such device
	got := map[uint32]string{}
	for k, h := range w.qps {
		got[k.qpn] = h.Peer()
	}
	if diff := cmp.Diff(map[uint32]string{10: "192.0.2.1", 11: "192.0.2.1", 12: "192.0.2.7"}, got); diff != "" {
		t.Errorf("peers by QPN (-want +got):\n%s", diff)
	}
	if n := w.devs[rxe.Index].qpErrors.len(); n != 1 {
		t.Errorf("%d failures kept, want QP 11's", n)
	}
	for _, e := range w.devs[rxe.Index].qpErrors.from(0) {
		if p := e.peer.String(); p != "192.0.2.1" {
			t.Errorf("QP %d's entry into Error (%s): peer %q, want 192.0.2.1", e.qpn, e.cause, p)
		}
	}
}
