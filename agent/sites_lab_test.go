package agent

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests of creation sites in qp-leaks and the agent: which code made
// the leaked QPs, and which code keeps failing to make them.

// TestLabSites: QPs leaked by qpwork through plain verbs (left in INIT)
// and through librdmacm (a pair left in Error), and the QP of a stripped
// upstream client (Debian's ibv_rc_pingpong, waiting for a peer that never
// comes): the agent's findings and those of a one-shot qp-leaks with the
// probes name, as each QP's site, the qpwork function that called the
// library (not libibverbs or librdmacm inside it) with qpwork's build ID
// and the call instruction's offset, and for ibv_rc_pingpong its file,
// build ID and an offset that is a call in it. --stacks groups them by
// site.
func TestLabSites(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	qpwork := vmtest.OpenBinary(t, vmtest.Bin(t, "qpwork"))
	pingpong := vmtest.OpenBinary(t, "/usr/bin/ibv_rc_pingpong")
	if !pingpong.Stripped() {
		t.Fatalf("%s has a symbol table: want the stripped binary Debian ships", pingpong.Path)
	}
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s")
	defer stop()
	watch := startQPLeaks(t, append(slices.Clone(watchArgs), "--dev", "rxe0")...)
	watch.watching(t)

	verbs := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "INIT", "--hold", "stdin")
	verbs.WaitFor("ready", 30*time.Second)
	cm := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "1", "--connect", "cm", "--addr", vmtest.RXEAddr,
		"--to", "ERR", "--hold", "stdin")
	cm.WaitFor("ready", 60*time.Second)
	pp, ppQPN := startPingpong(t)
	t.Cleanup(func() {
		verbs.Release(30 * time.Second)
		cm.Release(30 * time.Second)
	})

	want := append(expect("never-connected-qp", verbs, "rxe0"), expect("stale-error-qp", cm, "rxe0")...)
	want = append(want, leak{"never-connected-qp", "rxe0", ppQPN, uint32(pp.Process.Pid)})
	checkSites := func(t *testing.T, rep agentapi.CheckReport) {
		check(t, rep, want)
		for _, f := range rep.Findings {
			what := fmt.Sprintf("%s qpn %d", f.Rule, f.QPN)
			site := vmtest.Site{Call: f.Site, Via: f.SiteVia, File: f.SiteFile, BuildID: f.SiteBuildID, Offset: f.SiteOffset}
			switch f.PID {
			case uint32(verbs.PID()):
				qpwork.CheckCall(t, what, site, "create_qps_verbs", "ibv_create_qp")
				vmtest.CheckCallsAbove(t, what, "qpwork", f.Stack)
			case uint32(cm.PID()):
				qpwork.CheckCall(t, what, site, "create_qp_rdmacm", "rdma_create_qp")
				vmtest.CheckCallsAbove(t, what, "qpwork", f.Stack)
			case uint32(pp.Process.Pid):
				pingpong.CheckCall(t, what, site, "", "ibv_create_qp")
			}
		}
		// Three sites, one per creating function.
		groups := map[string]int{}
		for _, g := range rep.Sites {
			groups[strings.SplitN(g.Site, "+", 2)[0]+" via "+g.SiteVia] = g.QPs
		}
		wantGroups := map[string]int{"qpwork!create_qps_verbs via ibv_create_qp": 2, "qpwork!create_qp_rdmacm via rdma_create_qp": 2,
			"ibv_rc_pingpong via ibv_create_qp": 1}
		if !mapsEqual(groups, wantGroups) {
			t.Errorf("sites %v, want %v (%+v)", groups, wantGroups, rep.Sites)
		}
	}
	t.Run("qp-leaks", func(t *testing.T) { checkSites(t, watch.done()) })
	t.Run("agent", func(t *testing.T) {
		rep, _, _ := runQPLeaks(t, "--agent-socket", sock, "--dev", "rxe0", "--min-age", "4s")
		if rep.Source != "agent" {
			t.Fatalf("qp-leaks asked the agent, source %q", rep.Source)
		}
		checkSites(t, rep)
		// The text an operator reads.
		out, _ := exec.Command(vmtest.Bin(t, "rdmatool"), "qp-leaks", "--agent-socket", sock, "--dev", "rxe0", "--min-age", "4s", "--stacks").Output()
		text := string(out)
		for _, line := range []string{
			"created at qpwork!create_qps_verbs+0x", "via ibv_create_qp (" + qpwork.Path + " build-id " + qpwork.BuildID + " offset 0x",
			"by creation site:", "rxe0  2 QPs created at qpwork!create_qp_rdmacm+0x", "(stale-error-qp 2)",
			"rxe0  1 QPs created at ibv_rc_pingpong",
		} {
			if !strings.Contains(text, line) {
				t.Errorf("qp-leaks --stacks: no %q in\n%s", line, text)
			}
		}
	})
}

// startPingpong starts Debian's ibv_rc_pingpong as a server on rxe0 and
// returns once its QP exists (in INIT, while it waits on TCP for a client
// that never comes), with the QP's number from RDMA netlink.
func startPingpong(t *testing.T) (*exec.Cmd, uint32) {
	t.Helper()
	cmd := exec.Command("/usr/bin/ibv_rc_pingpong", "-d", "rxe0", "-g", "0", "-p", "18519")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	c, err := rdmanl.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Device(t.Context(), "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	// ibv_rc_pingpong says nothing until it has a peer (its stdout is a
	// pipe, buffered): its QP is looked for.
	deadline := time.Now().Add(30 * time.Second)
	for {
		for q, err := range c.QPs(t.Context(), d, rdmanl.DumpOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if q.Owner.PID == uint32(cmd.Process.Pid) && q.State == rdmanl.QPStateInit {
				return cmd, q.LQPN
			}
		}
		select {
		case <-exited:
			t.Fatalf("ibv_rc_pingpong exited: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no QP of ibv_rc_pingpong in INIT on rxe0 after 30s: %s", out.String())
		}
	}
}

// TestLabCreateFailing: a workload whose QP creates the device refuses
// (qpwork --oversized: one send WR over rxe's max_qp_wr, EINVAL) makes
// qp-create-failing fire on rxe0 in the agent, with the errno and the
// site of the creates (qpwork's create_qp_oversized), and the agent's
// rdmatool_qp_create_failures_total counts each failure once.
func TestLabCreateFailing(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	const addr = "127.0.0.1:19097"
	const creates = 12 // over the rule's 10
	qpwork := vmtest.OpenBinary(t, vmtest.Bin(t, "qpwork"))
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s", "--metrics-address", addr)
	defer stop()
	// The consumer lives on after its failures, as one retrying does: the
	// sites are read from the process while it runs.
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--oversized", fmt.Sprint(creates), "--hold", "stdin")
	w.WaitFor("ready", 60*time.Second)
	t.Cleanup(func() { w.Release(30 * time.Second) })
	failed := vmtest.Filter(w.Events(), "create_failed")
	if len(failed) != creates {
		t.Fatalf("qpwork saw %d creates fail, want %d: %v", len(failed), creates, w.Events())
	}
	// The rule fires at the 11th failure: the agent has seen them all when
	// its finding counts 12 (or the wait ends, and the count is reported).
	rep := agentUntil(t, sock, "rxe0", 10*time.Second, func(rep agentapi.CheckReport) bool {
		return slices.ContainsFunc(rep.Findings, func(f leakwatch.Finding) bool {
			return f.Rule == leakwatch.RuleQPCreateFailing && f.Count >= creates
		})
	})
	var f *leakwatch.Finding
	for i := range rep.Findings {
		if rep.Findings[i].Rule == leakwatch.RuleQPCreateFailing && rep.Findings[i].Device == "rxe0" {
			f = &rep.Findings[i]
		} else {
			t.Errorf("unexpected finding %s on %s qpn %d", rep.Findings[i].Rule, rep.Findings[i].Device, rep.Findings[i].QPN)
		}
	}
	if f == nil {
		t.Fatalf("no qp-create-failing on rxe0: %v", leaks(rep))
	}
	if f.Count != creates || f.Severity != leakwatch.SeverityError {
		t.Errorf("qp-create-failing: count %d severity %s, want %d error", f.Count, f.Severity, creates)
	}
	qpwork.CheckCall(t, "qp-create-failing", vmtest.Site{Call: f.Site, Via: f.SiteVia, File: f.SiteFile, BuildID: f.SiteBuildID,
		Offset: f.SiteOffset}, "create_qp_oversized", "ibv_create_qp")
	vmtest.CheckCallsAbove(t, "qp-create-failing", "qpwork", f.Stack)
	var evidence []string
	for _, e := range f.Evidence {
		evidence = append(evidence, e.What)
	}
	if all := strings.Join(evidence, "\n"); !strings.Contains(all, fmt.Sprintf("EINVAL %d", creates)) ||
		!strings.Contains(all, fmt.Sprintf("%d at qpwork!create_qp_oversized+0x", creates)) {
		t.Errorf("qp-create-failing evidence %q: want EINVAL %d at qpwork!create_qp_oversized", evidence, creates)
	}
	if !strings.Contains(f.Hint, "EINVAL") {
		t.Errorf("qp-create-failing hint %q names no errno", f.Hint)
	}

	// The counter: each failure once, by errno and site.
	fams, body, err := scrapeErr("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fam := fams["rdmatool_qp_create_failures_total"]
	if fam == nil {
		t.Fatalf("no rdmatool_qp_create_failures_total:\n%s", body)
	}
	total := 0.0
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		total += m.GetCounter().GetValue()
		if labels["device"] != "rxe0" || labels["errno"] != "EINVAL" || labels["site"] != f.Site+" via ibv_create_qp" {
			t.Errorf("rdmatool_qp_create_failures_total%v = %v, want device rxe0, errno EINVAL, site %s via ibv_create_qp",
				labels, m.GetCounter().GetValue(), f.Site)
		}
	}
	if total != creates {
		t.Errorf("rdmatool_qp_create_failures_total sums to %v, want %d:\n%s", total, creates, body)
	}
}
