package watch

import (
	"net/netip"
	"testing"
	"time"

	"slices"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
)

// A scan reads the rdma_cm IDs of the devices whose resource summary
// counts some, and of those only: they name the QPs' peers and, where the
// provider reports no QP state, which QPs are connected.
func TestScanReadsCMIDs(t *testing.T) {
	mlx := rdmanl.Device{Index: 3, Name: "mlx5_0"}
	host := rdmanltest.NewHost(rxe, siw, mlx)
	unfilled := qp(1, rdmanl.QPStateReset, 42) // qp() gives it port 1
	host.SetQPs(siw.Index, unfilled, qp(2, rdmanl.QPStateReset, 42))
	host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateRTS, 42), qp(18, rdmanl.QPStateRTS, 42))
	host.SetQPs(mlx.Index, qp(30, rdmanl.QPStateRTS, 42))
	host.SetCMIDs(siw.Index, rdmanl.CMID{LQPN: 1, State: rdmanl.CMStateConnect}, rdmanl.CMID{LQPN: 2, State: 8 /* LISTEN */}, rdmanl.CMID{LQPN: 0, State: rdmanl.CMStateConnect})
	host.SetCMIDs(rxe.Index, rdmanl.CMID{LQPN: 17, State: rdmanl.CMStateConnect, DstAddr: netip.MustParseAddrPort("192.0.2.7:4420")},
		rdmanl.CMID{SrcAddr: netip.MustParseAddrPort("192.0.2.1:4420")}) // a listener
	nl := host.Dial()
	defer nl.Close()
	sc, _, err := Scanner{NL: nl, Now: time.Now}.Scan(t.Context(), []rdmanl.Device{rxe, siw, mlx})
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Devices[0].CMConnected; got != nil {
		t.Errorf("rxe0 reports its QP states, yet its rdma_cm IDs say which QPs are connected: %v", got)
	}
	if diff := cmp.Diff(map[uint32]string{17: "192.0.2.7"}, sc.Devices[0].Peers); diff != "" {
		t.Errorf("rxe0's peers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[uint32]bool{1: true}, sc.Devices[1].CMConnected); diff != "" {
		t.Errorf("siw0's connected QPs (-want +got):\n%s", diff)
	}
	if got := sc.Devices[1].Peers; got != nil {
		t.Errorf("siw0's rdma_cm IDs name no destination, yet peers %v", got)
	}
	if diff := cmp.Diff(map[string]int{"rxe0": 1, "siw0": 1}, host.CMIDDumps()); diff != "" {
		t.Errorf("rdma_cm ID dumps (-want +got):\n%s", diff)
	}
}

// QPs netlink reports as rdma_cm's get their ULP from the rdma_cm IDs and
// SRQs; a user QP's rdma_cm ID names none. Each device's SRQs are dumped
// once, for the QPs' SRQ numbers and the ULPs.
func TestScanNamesULPs(t *testing.T) {
	host := rdmanltest.NewHost(rxe, siw)
	kern := func(n uint32) rdmanl.QP {
		q := qp(n, rdmanl.QPStateRTS, 0)
		q.Owner = rdmanl.Owner{KernName: "rdma_cm"}
		return q
	}
	host.SetQPs(siw.Index, kern(2), kern(3), kern(5))
	host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateRTS, 42))
	host.SetCMIDs(siw.Index, rdmanl.CMID{LQPN: 2, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}}, rdmanl.CMID{LQPN: 5, Owner: rdmanl.Owner{KernName: "nvme_rdma"}})
	host.SetCMIDs(rxe.Index, rdmanl.CMID{LQPN: 17, Owner: rdmanl.Owner{PID: 42}})
	host.SetSRQs(siw.Index, rdmanl.SRQ{SRQN: 1, QPs: []rdmanl.QPRange{{Min: 2, Max: 3}}, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}})
	nl := host.Dial()
	defer nl.Close()
	sc, _, err := Scanner{NL: nl, Now: time.Now}.Scan(t.Context(), []rdmanl.Device{rxe, siw})
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Devices[0].ULPs; got != nil {
		t.Errorf("rxe0 has no rdma_cm QPs, yet ULPs %v", got)
	}
	if diff := cmp.Diff(map[uint32]string{2: "nvmet_rdma", 3: "nvmet_rdma", 5: "nvme_rdma"}, sc.Devices[1].ULPs); diff != "" {
		t.Errorf("siw0's ULPs (-want +got):\n%s", diff)
	}
	var onSRQ []uint32
	for _, q := range sc.Devices[1].QPs {
		if q.OnSRQ && q.SRQN == 1 {
			onSRQ = append(onSRQ, q.LQPN)
		}
	}
	if diff := cmp.Diff([]uint32{2, 3}, onSRQ); diff != "" {
		t.Errorf("siw0's QPs on SRQ 1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"rxe0": 1, "siw0": 1}, host.SRQDumps()); diff != "" {
		t.Errorf("SRQ dumps (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"rxe0": 1, "siw0": 1}, host.CMIDDumps()); diff != "" {
		t.Errorf("rdma_cm ID dumps (-want +got):\n%s", diff)
	}
}

// A scan begun before its device was renamed (the agent renamed it, the
// listing saw the new name) is folded in under the name the device has
// now: the status does not list the old name again, and findings name
// the new one. The lab's TestLabAgentRenamesDevices met this race once.
func TestScanBegunBeforeARename(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := NewState(leakwatch.Config{}, func() time.Time { return now })
	old := rdmanl.Device{Index: 7, Name: "rxe7"}
	st.SetDevices([]rdmanl.Device{old}, nil, now)
	st.SetDevices([]rdmanl.Device{{Index: 7, Name: "lab_roce7"}}, nil, now)
	st.Scan(leakwatch.Scan{Time: now, Devices: []leakwatch.DeviceScan{{
		Device: old, QPs: []rdmanl.QP{{LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}}}}}})
	if got := st.Status().Devices; !slices.Equal(got, []string{"lab_roce7"}) {
		t.Errorf("status devices %q, want [lab_roce7]", got)
	}
	now = now.Add(time.Hour)
	rep, ok := st.Report(leakwatch.Query{MinAge: time.Second})
	if !ok || len(rep.Findings) != 1 || rep.Findings[0].Device != "lab_roce7" {
		t.Errorf("findings %+v (ok %v), want one on lab_roce7", rep.Findings, ok)
	}
}
