package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/vmtest"
)

// TestLabMetrics scrapes a real agent inside the guest while a workload
// leaves QPs in ERR: /metrics shows them by state, their owner and the
// finding by rule within the scan interval, keyed by the device's name
// and its node GUID as sysfs has it, and the output passes promlint.
func TestLabMetrics(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	const addr = "127.0.0.1:19095"
	logs, exited, stop, _ := labAgent(t, "--socket", filepath.Join(t.TempDir(), "agent.sock"), "--interval", "1s", "--metrics-address", addr)

	rxe := map[string]string{"device": "rxe0", "node_guid": sysfsGUID(t, "rxe0")}
	siw := map[string]string{"device": "siw0", "node_guid": sysfsGUID(t, "siw0")}
	with := func(dev map[string]string, kv ...string) map[string]string {
		m := map[string]string{"device": dev["device"], "node_guid": dev["node_guid"]}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	// Up with its probes: the agent's own gauges say so.
	var fams map[string]*dto.MetricFamily
	var body string
	waitLab(t, 60*time.Second, exited, logs, "the agent serving metrics with its probes", func() bool {
		fams, body, _ = scrapeErr("http://" + addr + "/metrics")
		up, _ := value(fams, "rdmatool_probes_up", map[string]string{})
		scans, _ := value(fams, "rdmatool_scans_total", siw)
		return up == 1 && scans > 0
	})

	// Two more intervals: rxe0's dump under the probes (its first may have
	// begun before they attached) is done. From here to the end (over 5s
	// at --interval 1s) its history lives on events.
	siwDumps, _ := value(fams, "rdmatool_scans_total", siw)
	waitLab(t, 30*time.Second, exited, logs, "two more intervals", func() bool {
		fams, body, _ = scrapeErr("http://" + addr + "/metrics")
		n, _ := value(fams, "rdmatool_scans_total", siw)
		return n >= siwDumps+2
	})
	rxeDumps, _ := value(fams, "rdmatool_scans_total", rxe)
	siwDumps, _ = value(fams, "rdmatool_scans_total", siw)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	pid := strconv.Itoa(w.PID())
	started := time.Now()
	waitLab(t, 30*time.Second, exited, logs, "the workload's QPs in /metrics", func() bool {
		fams, body, _ = scrapeErr("http://" + addr + "/metrics")
		errQPs, _ := value(fams, "rdmatool_qps", with(rxe, "type", "RC", "state", "ERR"))
		owned, _ := value(fams, "rdmatool_owner_qps", with(rxe, "pid", pid, "comm", "qpwork", "ulp", ""))
		return errQPs >= 2 && owned >= 2
	})
	t.Logf("QPs in ERR in /metrics %.1fs after the workload was ready", time.Since(started).Seconds())
	// The finding follows once the state is older than its min age (5s):
	// each scrape counts the findings then.
	waitLab(t, 30*time.Second, exited, logs, "stale-error-qp in /metrics", func() bool {
		fams, body, _ = scrapeErr("http://" + addr + "/metrics")
		n, _ := value(fams, "rdmatool_findings", with(rxe, "rule", leakwatch.RuleStaleErrorQP, "severity", "warning"))
		return n >= 2
	})
	t.Logf("findings in /metrics %.1fs after the workload was ready", time.Since(started).Seconds())
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"rdmatool_device_resources", with(rxe, "resource", "qp"), 3}, // the workload's 2 and the GSI QP
		{"rdmatool_device_resources", with(siw, "resource", "pd"), 0},
		{"rdmatool_probe_events_total", map[string]string{"kind": "qp_create"}, 2},
		{"rdmatool_probe_events_total", map[string]string{"kind": "qp_modify"}, 2},
		{"rdmatool_netlink_up", map[string]string{}, 1},
		{"rdmatool_probe_stacks_capacity", map[string]string{}, 2048}, // two stack maps of 1024
		{"rdmatool_probe_stacks", map[string]string{}, 0},
		{"rdmatool_probe_stacks_refused_total", map[string]string{}, 0},
		{"rdmatool_scan_duration_seconds", rxe, 0},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got < c.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", c.name, c.labels, got, ok, c.min)
		}
	}
	lost, _ := value(fams, "rdmatool_probe_events_lost_total", map[string]string{})
	if n, _ := value(fams, "rdmatool_scans_total", rxe); n != rxeDumps && lost == 0 {
		t.Errorf("rxe0 dumped %v times between reconciliations with the probes on and no events lost", n-rxeDumps)
	}
	// siw0 is iWARP: dumped every interval, probes or not.
	if n, _ := value(fams, "rdmatool_scans_total", siw); n < siwDumps+4 {
		t.Errorf("siw0 dumped %v times in over 5s at --interval 1s, want every interval", n-siwDumps)
	}
	checkScrapeAgainstNames(t, fams)
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	w.Release(30 * time.Second)
	stop()
}

// labAgent starts `rdmatool agent` with args in the guest and returns its
// log, a channel closed when it exits, stop: SIGTERM, and the agent must
// exit 0 within 30s; and its process, for other signals. The agent is
// killed at the end of the test.
func labAgent(t *testing.T, args ...string) (logs *strings.Builder, exited <-chan struct{}, stop func(), proc *os.Process) {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"agent"}, args...)...)
	logs = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return logs, done, func() {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("agent did not stop on SIGTERM: %s", logs.String())
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("agent exited %d: %s", code, logs.String())
		}
	}, cmd.Process
}

// waitLab polls cond every 200ms until it holds, failing after timeout or
// when the agent exits.
func waitLab(t *testing.T, timeout time.Duration, exited <-chan struct{}, logs *strings.Builder, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-exited:
			t.Fatalf("agent exited while waiting for %s: %s", what, logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s; agent log:\n%s", what, timeout, logs.String())
		}
	}
}
