package watch

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
)

// probe folds a probe event of QP qpn on rxe0 into st, as FollowProbes
// does.
func probe(st *State, kind leakwatch.EventKind, qpn uint32, set func(*leakwatch.Event)) {
	le := leakwatch.Event{Kind: kind, Time: t0, DevIndex: rxe.Index, DevName: rxe.Name, QPN: qpn, QPType: rdmanl.QPTypeRC, PID: 42, TID: 42, Comm: "app"}
	if set != nil {
		set(&le)
	}
	st.probeEvent("", &le)
}

func toState(s rdmanl.QPState) func(*leakwatch.Event) {
	return func(le *leakwatch.Event) { le.NewState, le.HasState = s, true }
}

// Probe events ask for a dump of a device's rdma_cm IDs when an RC QP of
// a process, or one rdma_cm made, connects, fails or is disconnected while
// its peer is not known; not for another QP type, another kernel QP, a
// create, or a QP whose peer is known. A dump gives the QPs their peers,
// on the findings, and one asked for twice before it is made is made once.
func TestProbeEventsAskForPeers(t *testing.T) {
	host := rdmanltest.NewHost(rxe)
	host.SetCMIDs(rxe.Index, rdmanl.CMID{LQPN: 17, DstAddr: netip.MustParseAddrPort("192.0.2.7:4420")})
	st := NewState(leakwatch.Config{Probes: true}, func() time.Time { return t0.Add(time.Minute) })
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	asked := st.takePeersWanted

	probe(st, leakwatch.EventQPCreated, 17, nil)
	probe(st, leakwatch.EventQPCreated, 1, func(le *leakwatch.Event) { le.QPType, le.KernOwner, le.PID, le.TID = rdmanl.QPTypeGSI, "ib_core", 0, 0 })
	probe(st, leakwatch.EventQPCreated, 2, func(le *leakwatch.Event) { le.QPType, le.KernOwner, le.PID, le.TID = rdmanl.QPTypeRC, "ib_srp", 0, 0 })
	probe(st, leakwatch.EventQPCreated, 3, func(le *leakwatch.Event) { le.QPType = rdmanl.QPTypeUD })
	if got := asked(); len(got) != 0 {
		t.Errorf("creates asked for the rdma_cm IDs of %v", got)
	}
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateInit))
	probe(st, leakwatch.EventQPModified, 1, toState(rdmanl.QPStateRTS))
	probe(st, leakwatch.EventQPModified, 2, toState(rdmanl.QPStateRTR))
	probe(st, leakwatch.EventQPModified, 3, toState(rdmanl.QPStateRTS))
	if got := asked(); len(got) != 0 {
		t.Errorf("INIT, a GSI QP, a kernel QP rdma_cm did not make and a UD QP asked for the rdma_cm IDs of %v", got)
	}
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateRTR))
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateRTS))
	if diff := cmp.Diff([]rdmanl.Device{rxe}, asked()); diff != "" {
		t.Errorf("QP 17 connecting: devices asked for (-want +got):\n%s", diff)
	}
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateRTS))
	nl := dumpPeers(t.Context(), Deps{Dial: func() (Netlink, error) { return host.Dial(), nil }}, st, nil)
	if nl == nil {
		t.Fatal("dumpPeers failed")
	}
	defer nl.Close()
	if diff := cmp.Diff(map[string]int{"rxe0": 1}, host.CMIDDumps()); diff != "" {
		t.Errorf("rdma_cm ID dumps (-want +got):\n%s", diff)
	}
	probe(st, leakwatch.EventQPAsync, 17, func(le *leakwatch.Event) { le.Async = "QP_ACCESS_ERR" })
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateErr))
	if got := asked(); len(got) != 0 {
		t.Errorf("QP 17, its peer known, failing asked for the rdma_cm IDs of %v", got)
	}
	rep, _ := st.Report(leakwatch.Query{MinAge: time.Second, Rules: []string{leakwatch.RuleStaleErrorQP}})
	if len(rep.Findings) != 1 || rep.Findings[0].QPN != 17 || rep.Findings[0].Peer != "192.0.2.7" {
		t.Errorf("findings %+v, want QP 17's with peer 192.0.2.7", rep.Findings)
	}
}

// FollowPeers dumps the rdma_cm IDs a probe event asks for, on a client
// of its own, and returns when its context ends.
func TestFollowPeers(t *testing.T) {
	host := rdmanltest.NewHost(rxe)
	host.SetCMIDs(rxe.Index, rdmanl.CMID{LQPN: 17, DstAddr: netip.MustParseAddrPort("[2001:db8::7]:4420")})
	st := NewState(leakwatch.Config{Probes: true}, func() time.Time { return t0 })
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		FollowPeers(ctx, Deps{Dial: func() (Netlink, error) { return host.Dial(), nil }}, st)
	}()
	probe(st, leakwatch.EventQPCreated, 17, nil)
	probe(st, leakwatch.EventQPModified, 17, toState(rdmanl.QPStateRTR))
	// QP 17 has been in RTR for MinAge 0: a finding that names its peer.
	peer := func() string {
		rep, _ := st.Report(leakwatch.Query{Rules: []string{leakwatch.RuleNeverConnectedQP}})
		if len(rep.Findings) != 1 {
			return ""
		}
		return rep.Findings[0].Peer
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for peer() != "2001:db8::7" {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("no peer for QP 17 after 10s; rdma_cm ID dumps %v", host.CMIDDumps())
		}
	}
	cancel()
	<-done
	if n := host.Open(); n != 0 {
		t.Errorf("%d netlink clients left open", n)
	}
}
