package vmtest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/vmtest"
)

func TestLabDevicesActive(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	links := vmtest.RdmaJSON(t, "link", "show")
	devs := vmtest.RdmaJSON(t, "dev", "show")
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(d), func(t *testing.T) {
			var state string
			for _, l := range links {
				if l["ifname"] == string(d) && l["port"] == 1.0 {
					state, _ = l["state"].(string)
				}
			}
			if state != "ACTIVE" {
				t.Errorf("rdma link: %s/1 state = %q, want ACTIVE (links: %v)", d, state, links)
			}
			var guid string
			for _, dev := range devs {
				if dev["ifname"] == string(d) {
					guid, _ = dev["node_guid"].(string)
				}
			}
			if guid != d.NodeGUID() {
				t.Errorf("rdma dev: %s node_guid = %q, want %q (fixed MAC)", d, guid, d.NodeGUID())
			}
		})
	}
}

// connectArgs connects pairs the way each provider allows: by hand on RoCE,
// through rdma_cm on iWARP, where only the CM can take a QP to RTS.
func connectArgs(d vmtest.Device) []string {
	if d == vmtest.SIW {
		return []string{"--connect", "cm", "--addr", d.Addr()}
	}
	return []string{"--connect", "verbs"}
}

func TestRCPairInIproute2(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(d), func(t *testing.T) {
			args := append([]string{"--dev", string(d), "--pairs", "--qps", "1", "--to", "RTS", "--hold", "stdin"}, connectArgs(d)...)
			w := vmtest.StartWorkload(t, args...)
			ready := w.WaitFor("ready", 30*time.Second)
			qps := w.QPs()
			if len(qps) != 2 {
				t.Fatalf("workload made %d QPs, want 2: %v", len(qps), qps)
			}
			shown := map[float64]map[string]any{}
			for _, qp := range vmtest.RdmaJSON(t, "res", "show", "qp", "link", string(d)) {
				if n, ok := qp["lqpn"].(float64); ok {
					shown[n] = qp
				}
			}
			for _, qp := range qps {
				got, ok := shown[float64(qp.QPN)]
				if !ok {
					t.Errorf("QP %d of pid %d not in rdma res show qp: %v", qp.QPN, ready.PID, shown)
					continue
				}
				want := map[string]any{"state": "RTS", "type": "RC", "pid": float64(ready.PID), "comm": "qpwork"}
				if d == vmtest.RXE {
					want["rqpn"] = float64(qp.PeerQPN) // iWARP QPs have no remote QPN
				}
				if d == vmtest.SIW && !vmtest.Fact(t, "netlink shows siw QP state") {
					want["state"] = "RESET" // siw_query_qp leaves the state at 0
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("QP %d: %s = %v, want %v", qp.QPN, k, got[k], v)
					}
				}
			}
			w.Release(30 * time.Second)
		})
	}
}

// TestLastWQEReached checks the kernel fact rdmatool's detection rests on:
// which providers deliver IB_EVENT_QP_LAST_WQE_REACHED when a QP attached to
// an SRQ is moved to the error state (IB spec 10.3.1).
func TestLastWQEReached(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(fmt.Sprintf("%s on %s", d, vmtest.Kernel()), func(t *testing.T) {
			want := vmtest.EmitsLastWQE(t, d)
			args := append([]string{"--dev", string(d), "--pairs", "--qps", "1", "--srq", "--to", "ERR",
				"--teardown", "spec", "--last-wqe-timeout-ms", "1000"}, connectArgs(d)...)
			evs := vmtest.StartWorkload(t, args...).Wait(60 * time.Second)
			results := vmtest.Filter(evs, "last_wqe")
			if len(results) != 2 {
				t.Fatalf("got %d last_wqe results, want one per QP of the pair: %v", len(results), evs)
			}
			for _, r := range results {
				if r.Received != want {
					t.Errorf("QP %d: LAST_WQE_REACHED received = %v, want %v on kernel %s", r.QPN, r.Received, want, vmtest.Kernel())
				}
			}
			async := vmtest.Filter(evs, "async")
			for _, a := range async {
				if a.Code == 16 && !want {
					t.Errorf("unexpected LAST_WQE_REACHED for QP %d", a.QPN)
				}
			}
			if destroyed := vmtest.Filter(evs, "destroyed"); len(destroyed) != 2 {
				t.Errorf("spec teardown destroyed %d QPs, want 2", len(destroyed))
			}
		})
	}
}

// TestLabStaleRKey runs qpwork's reconnect loop on rxe0: three RDMA WRITEs of
// a client to a target over one rdma_cm pair that reconnects only after a
// failed write, the client starting with an R_Key whose MR the target has
// deregistered. A client that keeps that key fails every write with
// REM_ACCESS_ERR and reconnects every cycle; one that takes the new
// connection's key after a failure fails once and stays on its second
// connection. A target that keeps the MRs of ended connections holds one per
// connection at the end. The target QP of each failed write gets
// QP_ACCESS_ERR where the kernel's rxe gives it.
func TestLabStaleRKey(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	accessErr := vmtest.Fact(t, "rxe gives the target QP_ACCESS_ERR on a stale R_Key")
	type outcome struct {
		Failed      []int // cycles whose write fails
		Connection  []int // each cycle's connection
		TargetMRs   []int // MRs the target holds at each cycle's line
		WriteErrors int
		Connections int
		MRsLeft     int // registered after the loop
	}
	for _, c := range []struct {
		rkey, mrs string
		want      outcome
	}{
		{"keep", "dereg", outcome{[]int{0, 1, 2}, []int{0, 1, 2}, []int{1, 1, 1}, 3, 3, 0}},
		{"refresh", "dereg", outcome{[]int{0}, []int{0, 1, 1}, []int{1, 1, 1}, 1, 2, 0}},
		{"keep", "keep", outcome{[]int{0, 1, 2}, []int{0, 1, 2}, []int{1, 2, 3}, 3, 3, 3}},
		{"refresh", "keep", outcome{[]int{0}, []int{0, 1, 1}, []int{1, 2, 2}, 1, 2, 2}},
	} {
		t.Run(fmt.Sprintf("rkey %s, mrs %s on %s", c.rkey, c.mrs, vmtest.Kernel()), func(t *testing.T) {
			evs := vmtest.StartWorkload(t, "--dev", "rxe0", "--reconnect", "3", "--connect", "cm", "--addr", vmtest.RXEAddr,
				"--rkey", c.rkey, "--mrs", c.mrs).Wait(60 * time.Second)
			start, cycles, end := vmtest.Filter(evs, "reconnect_start"), vmtest.Filter(evs, "cycle"), vmtest.Filter(evs, "reconnect")
			if len(start) != 1 || len(cycles) != 3 || len(end) != 1 || end[0].Cycles != 3 {
				t.Fatalf("want reconnect_start, 3 cycles and reconnect with 3 cycles: %v", evs)
			}
			stale := start[0].RKey
			got := outcome{WriteErrors: end[0].WriteErrors, Connections: end[0].Connections, MRsLeft: end[0].TargetMRs}
			var failedTargets []uint32
			qps := map[int][2]uint32{} // a connection's client and target QPN
			for i, cy := range cycles {
				got.Connection = append(got.Connection, cy.Connection)
				got.TargetMRs = append(got.TargetMRs, cy.TargetMRs)
				switch cy.Status {
				case "SUCCESS":
				case "REM_ACCESS_ERR":
					got.Failed = append(got.Failed, i)
					failedTargets = append(failedTargets, cy.TargetQPN)
				default:
					t.Errorf("cycle %d: write %s, want SUCCESS or REM_ACCESS_ERR", i, cy.Status)
				}
				// keep writes with the stale key; refresh with the
				// connection's once a write failed (connection 1 on)
				wantRKey := stale
				if c.rkey == "refresh" && cy.Connection > 0 {
					wantRKey = cy.TargetRKey
				}
				if cy.RKey != wantRKey || cy.TargetRKey == stale {
					t.Errorf("cycle %d: wrote with R_Key %#x, want %#x (stale %#x, the connection's %#x)",
						i, cy.RKey, wantRKey, stale, cy.TargetRKey)
				}
				pair := [2]uint32{cy.ClientQPN, cy.TargetQPN}
				if p, ok := qps[cy.Connection]; ok && p != pair {
					t.Errorf("cycle %d: QPs %v, want connection %d's %v", i, pair, cy.Connection, p)
				}
				qps[cy.Connection] = pair
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("reconnect loop (-want +got):\n%s", diff)
			}
			// every connection's QPs are new ones, destroyed by the end
			var destroyed []uint32
			for _, d := range vmtest.Filter(evs, "destroyed") {
				destroyed = append(destroyed, d.QPN)
			}
			var made []uint32
			for k := range len(qps) {
				made = append(made, qps[k][0], qps[k][1])
			}
			slices.Sort(destroyed)
			slices.Sort(made)
			if len(slices.Compact(slices.Clone(made))) != 2*len(qps) || !slices.Equal(destroyed, made) {
				t.Errorf("destroyed QPs %v, want the connections' QPs %v, each its own", destroyed, made)
			}
			var accessErrs []uint32
			for _, a := range vmtest.Filter(evs, "async") {
				if a.Type != "QP_ACCESS_ERR" {
					t.Errorf("async event %s for QP %d", a.Type, a.QPN)
					continue
				}
				accessErrs = append(accessErrs, a.QPN)
			}
			if want := map[bool][]uint32{true: failedTargets, false: nil}[accessErr]; !slices.Equal(accessErrs, want) {
				t.Errorf("QP_ACCESS_ERR for QPs %v, want %v (the failed writes' target QPs: %v)", accessErrs, want, accessErr)
			}
		})
	}
}

// TestLabNVMeoF runs the NVMe-oF workload where it takes seconds: over rxe
// with and without SRQs and over siw without, connected, with I/O, then
// disconnected and the port removed. (siw with use_srq=1 stalls for a
// minute on kernels with the SRQ drain; agent and cmd/rdmatool test that.)
func TestLabNVMeoF(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, c := range []struct {
		dev    vmtest.Device
		useSRQ bool
	}{{vmtest.RXE, false}, {vmtest.RXE, true}, {vmtest.SIW, false}} {
		t.Run(fmt.Sprintf("%s/use_srq=%v", c.dev, c.useSRQ), func(t *testing.T) {
			n := vmtest.StartNVMeoF(t, vmtest.NVMeoFOptions{Device: c.dev, UseSRQ: c.useSRQ})
			if n.Queues != 3 {
				t.Errorf("%s has %d queues, want 3 (admin and 2 I/O)", n.Ctrl, n.Queues)
			}
			if got := n.IO(t, 64); got != 2*64*4096 {
				t.Errorf("I/O moved %d bytes, want %d", got, 2*64*4096)
			}
			kernQPs := 0
			qps := vmtest.RdmaJSON(t, "res", "show", "qp", "link", string(c.dev))
			for _, qp := range qps {
				if qp["comm"] == "rdma_cm" && qp["type"] == "RC" {
					kernQPs++
				}
			}
			// three QPs on each side: the host's and the target's
			if kernQPs != 6 {
				t.Errorf("rdma res show qp: %d RC QPs of [rdma_cm] on %s, want 6: %v", kernQPs, c.dev, qps)
			}
			srqs := 0
			for _, srq := range vmtest.RdmaJSON(t, "res", "show", "srq") {
				if srq["ifname"] == string(c.dev) && srq["comm"] == "nvmet_rdma" {
					srqs++
				}
			}
			if (srqs > 0) != c.useSRQ {
				t.Errorf("rdma res show srq: %d SRQs of nvmet_rdma on %s with use_srq=%v", srqs, c.dev, c.useSRQ)
			}
			d := n.Disconnect(t)
			p := n.RemovePort(t)
			t.Logf("%s use_srq=%v on %s: disconnect %s, port removal %s", c.dev, c.useSRQ, vmtest.Kernel(), d, p)
			if d > 10*time.Second || p > 10*time.Second {
				t.Errorf("teardown took %s (disconnect) and %s (port removal), want seconds", d, p)
			}
		})
	}
}
