package rdmanl

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An nvmet-rdma target with use_srq=1 and an nvme-rdma host on one device:
// netlink says rdma_cm for all their QPs.
func TestULPs(t *testing.T) {
	cm := Owner{KernName: "rdma_cm"}
	qps := []QP{
		{LQPN: 1, Owner: Owner{KernName: "ib_core"}},            // GSI: not rdma_cm's
		{LQPN: 17, Owner: cm},                                   // host queue
		{LQPN: 18, Owner: cm, OnSRQ: true, SRQN: 2},             // target queue, its CM ID names it
		{LQPN: 19, Owner: cm, OnSRQ: true, SRQN: 2},             // target queue, CM ID already gone
		{LQPN: 20, Owner: cm},                                   // neither table names it
		{LQPN: 21, Owner: Owner{PID: 42}, OnSRQ: true, SRQN: 3}, // a user QP
	}
	ids := []CMID{
		{LQPN: 17, Owner: Owner{KernName: "nvme_rdma"}},
		{LQPN: 18, Owner: Owner{KernName: "nvmet_rdma"}},
		{LQPN: 0, Owner: Owner{KernName: "nvmet_rdma"}}, // the listener
		{LQPN: 21, Owner: Owner{PID: 42}},
	}
	srqs := []SRQ{{SRQN: 2, Owner: Owner{KernName: "nvmet_rdma"}}, {SRQN: 3, Owner: Owner{PID: 42}}}
	want := map[uint32]string{17: "nvme_rdma", 18: "nvmet_rdma", 19: "nvmet_rdma"}
	if diff := cmp.Diff(want, ULPs(qps, ids, srqs)); diff != "" {
		t.Errorf("ULPs (-want +got):\n%s", diff)
	}
}

// A client's and a target's rdma_cm IDs on one device: each QP's peer is
// the address its ID connects to, the listener and an ID not bound to a
// QP name none.
func TestPeers(t *testing.T) {
	ids := []CMID{
		{LQPN: 17, SrcAddr: netip.MustParseAddrPort("192.0.2.1:41822"), DstAddr: netip.MustParseAddrPort("192.0.2.7:4420")},         // the client's
		{LQPN: 18, SrcAddr: netip.MustParseAddrPort("192.0.2.1:4420"), DstAddr: netip.MustParseAddrPort("192.0.2.9:51234")},         // accepted: the remote's ephemeral port
		{LQPN: 19, SrcAddr: netip.MustParseAddrPort("[2001:db8::1]:4420"), DstAddr: netip.MustParseAddrPort("[2001:db8::2]:60000")}, // IPv6
		{SrcAddr: netip.MustParseAddrPort("0.0.0.0:4420")},                                                                          // the listener
		{DstAddr: netip.MustParseAddrPort("192.0.2.8:4420")},                                                                        // resolving, no QP yet
		{LQPN: 20, SrcAddr: netip.MustParseAddrPort("192.0.2.1:4420")},                                                              // bound, no destination
	}
	want := map[uint32]string{17: "192.0.2.7", 18: "192.0.2.9", 19: "2001:db8::2"}
	if diff := cmp.Diff(want, Peers(ids)); diff != "" {
		t.Errorf("Peers (-want +got):\n%s", diff)
	}
}
