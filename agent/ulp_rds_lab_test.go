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

// RDS runs on a soft RoCE device of its own, rdsDev on the dummy netdev
// rdsNet with two addresses: RDS connects two local addresses over
// rds_rdma only when they differ.
const (
	rdsDev  = "rxe8"
	rdsNet  = "rdsnet0"
	rdsAddr = "198.51.100.1"
	rdsPeer = "198.51.100.2"
)

// rdsUp loads rds_rdma and makes rdsDev on rdsNet, with rdsAddr and
// rdsPeer, until the test ends. RDS keeps a connection it made until
// rds_rdma is unloaded, and makes it again whenever it drops: on the lab's
// rxe0 its QPs would outlive the test into every later one in the guest
// (a QP of rdma_cm's in INIT, connecting to an address gone, in the
// NVMe-oF test's count). Deleting rdsDev and rdsNet takes the connection's
// QPs, PD and MRs with the device; RDS's attempts to connect again then
// fail as they bind to rdsAddr, before any QP or rdma_cm ID is listed.
// rds_rdma stays loaded: unloading it right after a reconnect storm
// panicked 7.x (the module's text gone under a work item still queued:
// "Fatal exception in interrupt" in process_one_work).
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
	if err := run("ip", "link", "add", "name", rdsNet, "address", "02:00:00:00:08:01", "type", "dummy"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run("ip", "link", "del", rdsNet); err != nil {
			t.Error(err)
		}
		// What later tests would see of RDS: nothing.
		out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", "qp", "-j").Output()
		if err != nil {
			t.Fatalf("rdmatool res qp: %v", err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("rdmatool res qp -j: %v: %s", err, out)
		}
		for _, r := range rows {
			if r["ulp"] == "rds_rdma" {
				t.Errorf("a QP of rds_rdma left after %s was deleted: %v", rdsDev, r)
			}
		}
	})
	for _, args := range [][]string{
		{"ip", "addr", "add", rdsAddr + "/24", "dev", rdsNet},
		{"ip", "addr", "add", rdsPeer + "/24", "dev", rdsNet},
		{"ip", "link", "set", rdsNet, "up"},
		{"rdma", "link", "add", rdsDev, "type", "rxe", "netdev", rdsNet},
	} {
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := run("rdma", "link", "delete", rdsDev); err != nil {
			t.Error(err)
		}
	})
}

// rdsRows lists rdsDev's rows of `rdmatool res KIND -j` whose owner is
// rds_rdma: the QPs rdma_cm made for it (ulp rds_rdma) or, for MRs,
// those on its PD.
func rdsRows(t *testing.T, kind string) []map[string]any {
	t.Helper()
	out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", kind, "-j", "link", rdsDev).Output()
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
// two addresses of a soft RoCE device's netdev (rdswork), RDS's IB transport making the
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

	quiet := vmtest.StartRDSWork(t, "--a", rdsAddr, "--b", rdsPeer, "--mode", "quiet", "--cycles", "3", "--hold", "stdin")
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
	// The connection's two ends, both on rdsDev.
	if len(qps) != 2 || slices.ContainsFunc(qps, func(r map[string]any) bool { return r["kern_name"] != "rdma_cm" || r["state"] != "RTS" }) {
		t.Errorf("res qp: rds_rdma's QPs %v, want 2 of rdma_cm in RTS", qps)
	}
	if len(mrs) == 0 {
		t.Errorf("res mr: no MR of rds_rdma on %s after a mapping", rdsDev)
	}
	t.Logf("rds_rdma on %s: %d QPs, %d MRs", rdsDev, len(qps), len(mrs))
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
	if fs := rdsFindings(agentUntil(t, sock, rdsDev, 0, func(agentapi.CheckReport) bool { return true })); len(fs) > 0 {
		t.Errorf("a quiet RDS connection: findings %+v, want none", fs)
	}
	quiet.Release(30 * time.Second)

	before := qpErrorsByCause(t, addr, rdsDev)
	storm := vmtest.StartRDSWork(t, "--a", rdsAddr, "--b", rdsPeer, "--mode", "bad-rkey", "--cycles", fmt.Sprint(cycles), "--hold", "stdin")
	storm.WaitFor("ready", 5*time.Minute)
	evs = storm.Events()
	t.Logf("rdswork --mode bad-rkey: %v", raws(evs))
	if c := vmtest.Filter(evs, "cycle"); len(c) != cycles || slices.ContainsFunc(c, func(e vmtest.Event) bool { return e.Status == "success" }) {
		t.Fatalf("bad-rkey writes: %v, want %d failures", c, cycles)
	}
	storms := awaitStorms(t, sock, rdsDev, 10*time.Second)
	if len(storms) != 1 {
		t.Fatalf("qp-error-storm findings %+v, want one, for rds_rdma", storms)
	}
	// Each failed write fails one QP at least (the requester's, on its
	// REM_ACCESS_ERR completion), both ends at most.
	f := storms[0]
	if f.KernName != "rdma_cm" || f.ULP != "rds_rdma" || f.Device != rdsDev || f.Count < cycles || f.Count > 2*cycles {
		t.Errorf("qp-error-storm %+v: want rdma_cm's QPs for rds_rdma on %s, count %d to %d", f, rdsDev, cycles, 2*cycles)
	}
	// The agent's dumps of the rdma_cm IDs as the QPs connect name the
	// peers, one address at each end, of the QPs they find still there
	// (a connection lived 0.1 s on 6.1, 2 s on 6.12; the dumps are paced
	// at 50 times their cost): those named are the two addresses.
	switch f.Peer {
	case rdsAddr, rdsPeer:
	case "":
		t.Logf("no peer named for the %d failed QPs", f.Count)
	default:
		t.Errorf("qp-error-storm peer %q, want %s or %s", f.Peer, rdsAddr, rdsPeer)
	}
	after := qpErrorsByCause(t, addr, rdsDev)
	var failures float64
	for cause, n := range after {
		if cause != "modify" {
			failures += n - before[cause]
		}
	}
	if failures < cycles {
		t.Errorf("rdmatool_qp_errors_total on %s: %v before, %v after: %v failures, want at least %d", rdsDev, before, after, failures, cycles)
	}
	t.Logf("rdmatool_qp_errors_total on %s: %v before the storm, %v after; storm evidence: %v", rdsDev, before, after, f.Evidence)
	storm.Release(30 * time.Second)
}

func raws(evs []vmtest.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Raw
	}
	return out
}
