package vmtest

import "testing"

// facts holds kernel behaviour measured in the lab, per matrix kernel. Tests
// assert both directions, so a kernel that changes behaviour fails loudly
// and this table gets updated with the new measurement.
var facts = map[string]map[string]bool{
	// rxe generates IB_EVENT_QP_LAST_WQE_REACHED when a QP attached to an
	// SRQ enters the error state (from 6.5 or so; ~0.5 ms after ERR on 6.12,
	// and again when a WR is posted afterwards).
	"rxe emits LAST_WQE_REACHED": {"6.1": false, "6.12": true, "7.x": true},
	// siw_query_qp did not fill in the QP state before 6.2ish, so netlink
	// reported every siw QP as RESET.
	"netlink shows siw QP state": {"6.1": false, "6.12": true, "7.x": true},
	// siw never generates it.
	"siw emits LAST_WQE_REACHED": {"6.1": false, "6.12": false, "7.x": false},
	// ib_core wraps every QP's event handler in __ib_qp_event_handler from
	// 6.11 on, so one probe sees the events of kernel and user QPs; before,
	// ib_uverbs_qp_event_handler sees user QPs' only (bpf.Tracer.Probes).
	"ib_core has __ib_qp_event_handler": {"6.1": false, "6.12": true, "7.x": true},
	// ib_drain_qp moves a QP on an SRQ to Error and waits up to 60 s for
	// LAST_WQE_REACHED (__ib_drain_srq, from 6.11); before, it drained only
	// the send queue of such a QP and returned at once. Measured with
	// nvmet_rdma use_srq=1 over siw, which never delivers the event.
	"ib_drain_qp waits for LAST_WQE_REACHED on SRQ QPs": {"6.1": false, "6.12": true, "7.x": true},
	// Debian builds ib_core with module BTF and the kernel attaches
	// fentry/fexit (BPF trampolines) to its functions.
	"fentry attaches to ib_core": {"6.1": true, "6.12": true, "7.x": true},
	// What the probes see while rdmatool reset relinks a software device
	// (DELLINK, NEWLINK): __ib_unregister_device and ib_register_device
	// run; neither provider dispatches IB_EVENT_DEVICE_FATAL on DELLINK.
	"rxe relink shows unregister":   {"6.1": true, "6.12": true, "7.x": true},
	"rxe relink shows register":     {"6.1": true, "6.12": true, "7.x": true},
	"rxe relink shows device_fatal": {"6.1": false, "6.12": false, "7.x": false},
	"siw relink shows unregister":   {"6.1": true, "6.12": true, "7.x": true},
	"siw relink shows register":     {"6.1": true, "6.12": true, "7.x": true},
	"siw relink shows device_fatal": {"6.1": false, "6.12": false, "7.x": false},
	// From 6.11 the kernel marks the name `rdma link add NAME` gives a
	// device as assigned by user space (RDMA_NLDEV_ATTR_NAME_ASSIGN_TYPE),
	// and rdmatool's udev rule keeps it.
	"rdma link add names are user-assigned": {"6.1": false, "6.12": true, "7.x": true},
	// An RDMA WRITE with an R_Key whose MR was deregistered (qpwork
	// --reconnect --rkey keep --mrs dereg): on rxe the writer's completion
	// is REM_ACCESS_ERR, both QPs are in Error, and from 7.x rxe gives the
	// target QP IB_EVENT_QP_ACCESS_ERR; before, no async event at all (the
	// probes see only the consumer's own modify to Error and the destroy).
	// siw completes the write when it is sent; the target's TERMINATE
	// reaches the writer later (QP_FATAL on 7.x, racing the next cycle), so
	// it is not a fact here.
	"rxe gives the target QP_ACCESS_ERR on a stale R_Key": {"6.1": false, "6.12": false, "7.x": true},
	// netdevsim compiles out of tree from Debian's linux-source (lab/siw.go)
	// and its devlink reload re-creates its ports.
	"lab has netdevsim": {"6.1": true, "6.12": true, "7.x": true},
}

// Fact returns whether the guest's kernel shows the named behaviour, failing
// t when the table has no measurement for this kernel.
func Fact(t testing.TB, behaviour string) bool {
	t.Helper()
	byKernel, ok := facts[behaviour]
	if !ok {
		t.Fatalf("vmtest: no such fact %q", behaviour)
	}
	v, ok := byKernel[Kernel()]
	if !ok {
		t.Fatalf("vmtest: fact %q was never measured on kernel %q", behaviour, Kernel())
	}
	return v
}

// EmitsLastWQE is the fact for a lab device's provider.
func EmitsLastWQE(t testing.TB, d Device) bool {
	t.Helper()
	if d == SIW {
		return Fact(t, "siw emits LAST_WQE_REACHED")
	}
	return Fact(t, "rxe emits LAST_WQE_REACHED")
}
