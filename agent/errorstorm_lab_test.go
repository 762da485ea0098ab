package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/vmtest"
)

// TestLabErrorStorm runs qpwork's reconnect loop on rxe0 under the agent:
// a client that recovers from a stale R_Key (--rkey refresh: one failed
// write, then a connection that lasts) and one that retries with the
// stale key every time (--rkey keep: every write fails, every cycle
// reconnects). rxe moves both QPs of a failed write to Error itself (the
// requester on the REM_ACCESS_ERR completion, the responder on the R_Key
// violation), which the agent learns when the consumer's disconnect
// modifies them (the provider's state, from ib_modify_qp_is_ok), or
// earlier for the responder where rxe gives it QP_ACCESS_ERR (7.x). The
// agent counts each QP's entry into Error once, by cause, in
// rdmatool_qp_errors_total, and the retrying client, not the recovering
// one, is one qp-error-storm: 6 cycles, both QPs of each failed.
func TestLabErrorStorm(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	accessErr := vmtest.Fact(t, "rxe gives the target QP_ACCESS_ERR on a stale R_Key")
	const addr = "127.0.0.1:19098"
	const cycles = 6
	sock := t.TempDir() + "/agent.sock"
	// No dump while the loops run: a dump catching a failed client QP in
	// Error before its modify would count it as the provider's.
	stop := startAgent(t, sock, "--interval", "1s", "--reconcile", "1h", "--metrics-address", addr)
	defer stop()

	run := func(rkey string) (pid uint32) {
		t.Helper()
		evs := vmtest.StartWorkload(t, "--dev", "rxe0", "--reconnect", fmt.Sprint(cycles), "--connect", "cm", "--addr", vmtest.RXEAddr,
			"--rkey", rkey, "--mrs", "dereg").Wait(60 * time.Second)
		start, end := vmtest.Filter(evs, "reconnect_start"), vmtest.Filter(evs, "reconnect")
		if len(start) != 1 || len(end) != 1 {
			t.Fatalf("--rkey %s: %v", rkey, evs)
		}
		want := map[string][2]int{"keep": {cycles, cycles}, "refresh": {1, 2}}[rkey]
		if end[0].WriteErrors != want[0] || end[0].Connections != want[1] {
			t.Fatalf("--rkey %s: %d failed writes over %d connections, want %d over %d", rkey, end[0].WriteErrors, end[0].Connections, want[0], want[1])
		}
		return uint32(start[0].PID)
	}
	healthy := run("refresh")
	storm := run("keep")

	// Every entry counted: the failed connections' QPs (1 + cycles pairs)
	// as failures, the responders by QP_ACCESS_ERR where rxe gives it;
	// the recovering client's last connection, disconnected, as modifies.
	failed := 1 + cycles
	wantErrors := map[string]float64{"modify": 2, "provider": float64(2 * failed)}
	if accessErr {
		wantErrors["provider"], wantErrors["QP_ACCESS_ERR"] = float64(failed), float64(failed)
	}
	var got map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = qpErrorsByCause(t, addr)
		if fmt.Sprint(got) == fmt.Sprint(wantErrors) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the agent reads the probes' ring buffer on its own
	}
	if fmt.Sprint(got) != fmt.Sprint(wantErrors) {
		t.Errorf("rdmatool_qp_errors_total on rxe0 by cause: %v, want %v", got, wantErrors)
	}

	rep := agentUntil(t, sock, "rxe0", 5*time.Second, func(rep agentapi.CheckReport) bool {
		return slices.ContainsFunc(rep.Findings, func(f leakwatch.Finding) bool { return f.Rule == leakwatch.RuleQPErrorStorm })
	})
	var storms []leakwatch.Finding
	for _, f := range rep.Findings {
		if f.Rule == leakwatch.RuleQPErrorStorm {
			storms = append(storms, f)
		}
	}
	if len(storms) != 1 {
		t.Fatalf("qp-error-storm findings %+v, want one for the retrying client (pid %d; the recovering one is %d)", storms, storm, healthy)
	}
	f := storms[0]
	if f.TGID != storm || f.Comm != "qpwork" || f.Device != "rxe0" || f.Severity != leakwatch.SeverityError || f.Count != 2*cycles {
		t.Errorf("qp-error-storm %+v: want qpwork pid %d on rxe0, error, count %d", f, storm, 2*cycles)
	}
	var evidence []string
	for _, e := range f.Evidence {
		evidence = append(evidence, e.What)
	}
	causes := fmt.Sprintf("provider %d", 2*cycles)
	if accessErr {
		causes = fmt.Sprintf("QP_ACCESS_ERR %d, provider %d", cycles, cycles)
	}
	all := strings.Join(evidence, "\n")
	if want := fmt.Sprintf("%d QPs failed into Error in 5m0s (%.1f a minute) over %d reconnect cycles: %s", 2*cycles, float64(2*cycles)/5, cycles, causes); !strings.Contains(all, want) ||
		!strings.Contains(all, fmt.Sprintf("%d of them created after the first Error", 2*(cycles-1))) {
		t.Errorf("qp-error-storm evidence %q: want %q and %d replacements", evidence, want, 2*(cycles-1))
	}
	if !strings.Contains(all, "created at qpwork!") {
		t.Errorf("qp-error-storm evidence %q: want qpwork's creation site", evidence)
	}
}

// qpErrorsByCause scrapes rdmatool_qp_errors_total for rxe0 by cause.
func qpErrorsByCause(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	fams, _, err := scrapeErr("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range fams["rdmatool_qp_errors_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["device"] == "rxe0" {
			out[labels["cause"]] += m.GetCounter().GetValue()
		}
	}
	return out
}
