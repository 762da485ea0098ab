package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/vmtest"
)

// TestLabMRLeak runs qpwork's reconnect loop on rxe0 under the agent: a
// client that retries with a stale R_Key (--rkey keep: every write fails,
// every cycle reconnects) whose target registers an MR for each
// connection and never deregisters it (--mrs keep), then one whose target
// deregisters it when the connection ends (--mrs dereg). The agent reads
// rxe0's resource summary at an interval (a second) when the probes
// counted a resource added or removed, and dumps its MRs only when their
// number changed (the reconcile is an hour away): the first client is one
// mr-leak, its MRs grown by the target's since the agent first listed
// them, 4 KiB each, over the QP creates (a pair a connection), and the
// metrics show its MRs as `rdma res mr` lists them; the second is none.
// While nothing changes, no MR dump is made.
func TestLabMRLeak(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	const addr = "127.0.0.1:19099"
	const cycles = 6
	sock := t.TempDir() + "/agent.sock"
	stop := startAgent(t, sock, "--interval", "1s", "--reconcile", "1h", "--metrics-address", addr)
	defer stop()
	// rxe0's series of a family, with the labels kv gives in pairs.
	metric := func(name string, kv ...string) (float64, bool) {
		t.Helper()
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"device": "rxe0"}
		for i := 0; i+1 < len(kv); i += 2 {
			want[kv[i]] = kv[i+1]
		}
	series:
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
		return 0, false
	}
	dumps := func() float64 { n, _ := metric("rdmatool_mr_dumps_total"); return n }
	until := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(200 * time.Millisecond) // the agent offers no notification of its dumps
		}
	}
	until("rxe0's first MR dump", 30*time.Second, func() bool { return dumps() >= 1 })
	// What an MR dump costs: none while the count stays put (a
	// measurement over 5 intervals, not a wait for something).
	idle := dumps()
	time.Sleep(5 * time.Second)
	idleDumps := dumps() - idle
	if idleDumps != 0 {
		t.Errorf("%v MR dumps of rxe0 over 5 intervals without a change, want none", idleDumps)
	}

	// --mrs keep: the MRs pile up.
	start := time.Now()
	before := dumps()
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--reconnect", fmt.Sprint(cycles), "--connect", "cm", "--addr", vmtest.RXEAddr,
		"--rkey", "keep", "--mrs", "keep", "--cycle-pause-ms", "1200", "--hold", "stdin")
	end := w.WaitFor("reconnect", 90*time.Second)
	w.WaitFor("ready", 10*time.Second)
	loop := time.Since(start)
	pid := uint32(w.PID())
	if end.Connections != cycles || end.TargetMRs != cycles {
		t.Fatalf("--mrs keep: %d connections, %d target MRs left, want %d and %d: %v", end.Connections, end.TargetMRs, cycles, cycles, w.Events())
	}
	mrs := end.TargetMRs + 1 // and the client's own buffer, registered at its start
	var inKernel int
	for _, mr := range vmtest.RdmaJSON(t, "res", "show", "mr", "dev", "rxe0") {
		if p, _ := mr["pid"].(float64); uint32(p) == pid {
			inKernel++
		}
	}
	if inKernel != mrs {
		t.Fatalf("rdma res show mr lists %d MRs of qpwork (pid %d), want %d", inKernel, pid, mrs)
	}
	isLeak := func(f leakwatch.Finding) bool { return f.Rule == leakwatch.RuleMRLeak }
	rep := agentUntil(t, sock, "rxe0", 10*time.Second, func(rep agentapi.CheckReport) bool {
		for _, f := range rep.Findings {
			if isLeak(f) && f.Count == uint64(mrs) {
				return true
			}
		}
		return false
	})
	loopDumps := dumps() - before
	var leaks []leakwatch.Finding
	for _, f := range rep.Findings {
		if isLeak(f) {
			leaks = append(leaks, f)
		}
	}
	if len(leaks) != 1 {
		t.Fatalf("mr-leak findings %+v, want one for qpwork (pid %d)", leaks, pid)
	}
	f := leaks[0]
	if f.TGID != pid || f.Comm != "qpwork" || f.Device != "rxe0" || f.Severity != leakwatch.SeverityError || f.Count != uint64(mrs) {
		t.Errorf("mr-leak %+v: want qpwork pid %d on rxe0, error, %d MRs", f, pid, mrs)
	}
	var evidence []string
	for _, e := range f.Evidence {
		evidence = append(evidence, e.What)
	}
	all := strings.Join(evidence, "\n")
	// The growth is from the agent's first dump that listed qpwork's MRs
	// with no fewer live QPs than the dump it goes to (the rule wants QPs
	// that did not grow): its own buffer and the first connection's MR,
	// or, when the first connection's dump came before its QPs were up or
	// the last dump caught a connection up, the second connection's too
	// (6.1, 3 MRs with 2 live QPs, twice: one thread and two). It
	// goes to the last dump, or to the one before when the last came
	// while the last connection was up (the evidence then says what the
	// last counted). Each connection creates two QPs (client and
	// server), then registers its MR (reconnect_pair); the dump the
	// growth starts from, at an interval of the agent after qpwork
	// registered its buffer, can come after the first connection's
	// creates, one (6.12, CI) or both (6.1, CI: MRs 1 → 7 over 10
	// creates), and before its MR: so the creates counted after it are
	// two for each connection but the first, whose MR the growth counts.
	var from, to, grew, kib, creates int
	_, err := fmt.Sscanf(evidence[0], "MRs %d → %d (+%d, +%d KiB) in 10m0s over %d QP creates while its live QPs did not grow", &from, &to, &grew, &kib, &creates)
	lastUp := to == mrs-1 && strings.Contains(all, fmt.Sprintf("at the last dump: %d MRs", mrs))
	if err != nil || (to != mrs && !lastUp) || from > 3 || grew != to-from || kib != 4*grew || creates < 2*(to-from-1) || !strings.Contains(evidence[0], "0 now)") {
		t.Errorf("mr-leak evidence %q (%v): want the MRs from 3 at most (qpwork's buffer, the first two connections') to %d, 4 KiB each, over the creates of %d connections or more (two each), no live QP now",
			evidence, err, mrs, to-from-1)
	}
	if strings.Count(all, "oldest: MR ") != 3 || !strings.Contains(all, "R_Key 0x") {
		t.Errorf("mr-leak evidence %q: want the three oldest MRs with their keys", evidence)
	}
	if !strings.Contains(f.Hint, "ibv_dereg_mr") || !strings.Contains(f.Hint, "ulimit -l") {
		t.Errorf("mr-leak hint %q", f.Hint)
	}
	t.Logf("mr-leak: %s", all)
	for _, c := range []struct {
		name string
		want float64
	}{{"rdmatool_owner_mrs", float64(mrs)}, {"rdmatool_owner_mr_bytes", float64(mrs * 4096)}} {
		if got, ok := metric(c.name, "pid", fmt.Sprint(pid), "comm", "qpwork", "ulp", ""); !ok || got != c.want {
			t.Errorf("%s of qpwork: %v (present %v), want %v", c.name, got, ok, c.want)
		}
	}
	if got, _ := metric("rdmatool_mrs"); got < float64(mrs) {
		t.Errorf("rdmatool_mrs on rxe0: %v, want at least qpwork's %d", got, mrs)
	}
	held := dumps()
	time.Sleep(5 * time.Second)
	heldDumps := dumps() - held
	t.Logf("MR dumps of rxe0: %v over 5 intervals idle; %v over the loop of %d connections (%s, an interval a second); %v over 5 intervals while qpwork held its %d MRs",
		idleDumps, loopDumps, cycles, loop.Round(time.Second), heldDumps, mrs)
	if heldDumps != 0 {
		t.Errorf("%v MR dumps of rxe0 over 5 intervals while qpwork held its MRs, want none", heldDumps)
	}
	if loopDumps < 2 || loopDumps > loop.Seconds()+2 {
		t.Errorf("%v MR dumps of rxe0 over a loop of %s: want one for a change at most at each interval", loopDumps, loop.Round(time.Second))
	}
	w.Release(30 * time.Second)

	// --mrs dereg: each connection's MR goes with it.
	w = vmtest.StartWorkload(t, "--dev", "rxe0", "--reconnect", fmt.Sprint(cycles), "--connect", "cm", "--addr", vmtest.RXEAddr,
		"--rkey", "keep", "--mrs", "dereg", "--cycle-pause-ms", "1200", "--hold", "stdin")
	defer w.Release(30 * time.Second)
	end = w.WaitFor("reconnect", 90*time.Second)
	w.WaitFor("ready", 10*time.Second)
	if end.Connections != cycles || end.TargetMRs != 0 {
		t.Fatalf("--mrs dereg: %d connections, %d target MRs left, want %d and 0", end.Connections, end.TargetMRs, cycles)
	}
	dereg := fmt.Sprint(w.PID())
	// Its last connection's MR deregistered, then dumped: its buffer left.
	until("qpwork's own buffer alone in the metrics", 10*time.Second, func() bool {
		n, ok := metric("rdmatool_owner_mrs", "pid", dereg, "comm", "qpwork")
		return ok && n == 1
	})
	rep = agentUntil(t, sock, "rxe0", 0, func(agentapi.CheckReport) bool { return true })
	for _, f := range rep.Findings {
		if isLeak(f) {
			t.Errorf("mr-leak %+v for a client that deregisters its MRs (pid %s), or one released (pid %d): want none", f, dereg, pid)
		}
	}
}
