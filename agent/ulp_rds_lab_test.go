package agent

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/vmtest"
)

// rdsPeer is the second address on rxe0's netdev: RDS connects two local
// addresses over rds_rdma only when they differ.
const rdsPeer = "192.0.2.2"

// rdsUp loads rds_rdma and adds rdsPeer to rxe0's netdev until the test
// ends. rds_rdma stays loaded, with the connection RDS keeps between the
// two addresses (two QPs of rdma_cm's) and its PD: unloading it right
// after a reconnect storm panicked 7.x (the module's text gone under a
// work item still queued: "Fatal exception in interrupt" in
// process_one_work). This file's name sorts after every other file of
// the package's lab tests, so none runs after it in the guest.
func rdsUp(t *testing.T) {
	t.Helper()
	run := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run("modprobe", "rds_rdma"); err != nil {
		t.Fatal(err)
	}
	if err := run("ip", "addr", "add", rdsPeer+"/24", "dev", "dummy0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run("ip", "addr", "del", rdsPeer+"/24", "dev", "dummy0") })
}

// rdsRows lists rxe0's rows of `rdmatool res KIND -j` whose owner is
// rds_rdma: the QPs rdma_cm made for it (ulp rds_rdma) or, for MRs,
// those on its PD.
func rdsRows(t *testing.T, kind string) []map[string]any {
	t.Helper()
	out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", kind, "-j", "link", "rxe0").Output()
	if err != nil {
		t.Fatalf("rdmatool res %s: %v", kind, err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("rdmatool res %s -j: %v: %s", kind, err, out)
	}
	var mine []map[string]any
	for _, r := range rows {
		if r["ulp"] == "rds_rdma" || r["kern_name"] == "rds_rdma" {
			mine = append(mine, r)
		}
	}
	return mine
}

// TestLabRDS runs RDS over soft RoCE under the agent: two RDS sockets on
// two addresses of rxe0's netdev (rdswork), RDS's IB transport making the
// connection's RC QPs (rdma_cm's, for rds_rdma) and fast-registering the
// receiver's buffer on it (RDS_CMSG_RDMA_MAP) for the sender's RDMA
// WRITEs. A quiet connection (three good writes) is listed under
// rds_rdma in `res qp` and `res mr` and gives no finding; writes with an
// R_Key no MR has (rdswork --mode bad-rkey) fail at the peer, the QPs go
// to Error, and RDS drops and makes the connection again each time: one
// qp-error-storm, for rds_rdma, whose QPs the agent names from their
// creation stacks (they live and die between its dumps).
func TestLabRDS(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	rdsUp(t)
	const addr = "127.0.0.1:19097"
	const cycles = 6
	sock := t.TempDir() + "/agent.sock"
	stop := startAgent(t, sock, "--interval", "1s", "--reconcile", "1h", "--metrics-address", addr)
	defer stop()

	quiet := vmtest.StartRDSWork(t, "--a", vmtest.RXEAddr, "--b", rdsPeer, "--mode", "quiet", "--cycles", "3", "--hold", "stdin")
	quiet.WaitFor("ready", 2*time.Minute)
	evs := quiet.Events()
	t.Logf("rdswork --mode quiet: %v", raws(evs))
	// RDS_GET_MR maps without a connection; with FRWR, the one way RDS
	// registers memory on rxe, rds_ib_reg_frmr refuses that ("TODO: Add
	// FRWR support for RDS_GET_MR using proxy qp").
	if g := vmtest.Filter(evs, "get_mr"); len(g) != 1 || g[0].Errno != int(syscall.EOPNOTSUPP) {
		t.Errorf("RDS_GET_MR: %v, want EOPNOTSUPP", g)
	}
	if m := vmtest.Filter(evs, "mapped"); len(m) != 1 || m[0].Errno != 0 || m[0].RKey == 0 {
		t.Fatalf("RDS_CMSG_RDMA_MAP: %v, want an R_Key", m)
	}
	for _, c := range vmtest.Filter(evs, "cycle") {
		if c.Status != "success" {
			t.Errorf("quiet write %d: %s", c.N, c.Status)
		}
	}
	qps, mrs := rdsRows(t, "qp"), rdsRows(t, "mr")
	// The connection's two ends, both on rxe0.
	if len(qps) != 2 || slices.ContainsFunc(qps, func(r map[string]any) bool { return r["kern_name"] != "rdma_cm" || r["state"] != "RTS" }) {
		t.Errorf("res qp: rds_rdma's QPs %v, want 2 of rdma_cm in RTS", qps)
	}
	if len(mrs) == 0 {
		t.Errorf("res mr: no MR of rds_rdma on rxe0 after a mapping")
	}
	t.Logf("rds_rdma on rxe0: %d QPs, %d MRs", len(qps), len(mrs))
	rdsFindings := func(rep agentapi.CheckReport) []leakwatch.Finding {
		var out []leakwatch.Finding
		for _, f := range rep.Findings {
			if f.ULP == "rds_rdma" || f.KernName == "rds_rdma" {
				out = append(out, f)
			}
		}
		return out
	}
	// The quiet connection's QPs are older than --min-age (5s) by then.
	time.Sleep(6 * time.Second)
	if fs := rdsFindings(agentUntil(t, sock, "rxe0", 0, func(agentapi.CheckReport) bool { return true })); len(fs) > 0 {
		t.Errorf("a quiet RDS connection: findings %+v, want none", fs)
	}
	quiet.Release(30 * time.Second)

	before := qpErrorsByCause(t, addr)
	storm := vmtest.StartRDSWork(t, "--a", vmtest.RXEAddr, "--b", rdsPeer, "--mode", "bad-rkey", "--cycles", fmt.Sprint(cycles), "--hold", "stdin")
	storm.WaitFor("ready", 5*time.Minute)
	evs = storm.Events()
	t.Logf("rdswork --mode bad-rkey: %v", raws(evs))
	if c := vmtest.Filter(evs, "cycle"); len(c) != cycles || slices.ContainsFunc(c, func(e vmtest.Event) bool { return e.Status == "success" }) {
		t.Fatalf("bad-rkey writes: %v, want %d failures", c, cycles)
	}
	storms := awaitStorms(t, sock, 10*time.Second)
	if len(storms) != 1 {
		t.Fatalf("qp-error-storm findings %+v, want one, for rds_rdma", storms)
	}
	// Each failed write fails one QP at least (the requester's, on its
	// REM_ACCESS_ERR completion), both ends at most.
	f := storms[0]
	if f.KernName != "rdma_cm" || f.ULP != "rds_rdma" || f.Device != "rxe0" || f.Count < cycles || f.Count > 2*cycles {
		t.Errorf("qp-error-storm %+v: want rdma_cm's QPs for rds_rdma on rxe0, count %d to %d", f, cycles, 2*cycles)
	}
	// The agent's dumps of the rdma_cm IDs as the QPs connect name the
	// peers, one address at each end, of the QPs they find still there
	// (a connection lived 0.1 s on 6.1, 2 s on 6.12; the dumps are paced
	// at 50 times their cost): those named are the two addresses.
	switch f.Peer {
	case vmtest.RXEAddr, rdsPeer:
	case "":
		t.Logf("no peer named for the %d failed QPs", f.Count)
	default:
		t.Errorf("qp-error-storm peer %q, want %s or %s", f.Peer, vmtest.RXEAddr, rdsPeer)
	}
	after := qpErrorsByCause(t, addr)
	var failures float64
	for cause, n := range after {
		if cause != "modify" {
			failures += n - before[cause]
		}
	}
	if failures < cycles {
		t.Errorf("rdmatool_qp_errors_total on rxe0: %v before, %v after: %v failures, want at least %d", before, after, failures, cycles)
	}
	t.Logf("rdmatool_qp_errors_total on rxe0: %v before the storm, %v after; storm evidence: %v", before, after, f.Evidence)
	storm.Release(30 * time.Second)
}

func raws(evs []vmtest.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Raw
	}
	return out
}
