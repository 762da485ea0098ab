package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/vmtest"
)

// TestLabPolicyReset runs the agent with the reset policy on and a
// workload that leaves QPs in ERR on rxe0 past the thresholds: the agent
// resets rxe0 once (relink; rxe cannot cut its users off, so the removal
// waits until the workload lets go), rxe0 comes back under its name and
// node GUID, and when a second workload leaves QPs in ERR within the
// cooldown the agent does not reset it again. The metrics count both
// decisions and the reset, and the log gives each decision's evidence.
func TestLabPolicyReset(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	// If the test fails half-way, later tests still find rxe0.
	t.Cleanup(func() {
		if _, err := os.Stat("/sys/class/infiniband/rxe0"); err != nil {
			exec.Command("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "dummy0").Run()
		}
	})
	readGUID := func() string {
		b, err := os.ReadFile("/sys/class/infiniband/rxe0/node_guid")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	guid := readGUID()
	config := filepath.Join(t.TempDir(), "agent.yaml")
	// 10 QPs in ERR and the GSI QP are 11 of a max_qp of 40: over 20% in
	// use, over 5 stale QPs. A long timeout: the removal waits for the
	// workload, which the test ends once the decision is made.
	if err := os.WriteFile(config, []byte(`max_qp:
  rxe0: 40
policy:
  mode: reset
  qp_use: 0.2
  stale_qps: 5
  for: 3s
  cooldown: 1h
  max_per_hour: 2
  method: relink
  grace: 0s
  timeout: 90s
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const addr = "127.0.0.1:19096"
	logs, exited, stop, _ := labAgent(t, "--config", config, "--socket", filepath.Join(t.TempDir(), "agent.sock"),
		"--interval", "1s", "--metrics-address", addr)
	metric := func(name string, kv ...string) float64 {
		return deviceValue("http://"+addr+"/metrics", "rxe0", guid, name, kv...)
	}
	// The probes attached, and two more intervals (siw0 is dumped at each):
	// rxe0's dump after they attached is done, so the workload's states
	// reach the history through the probes.
	siwScans := func() float64 {
		b, err := os.ReadFile("/sys/class/infiniband/siw0/node_guid")
		if err != nil {
			return -1
		}
		return deviceValue("http://"+addr+"/metrics", "siw0", strings.TrimSpace(string(b)), "rdmatool_scans_total")
	}
	waitLab(t, 60*time.Second, exited, logs, "the probes attached", func() bool {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		up, _ := value(fams, "rdmatool_probes_up", map[string]string{})
		return err == nil && up == 1
	})
	n := siwScans()
	waitLab(t, 30*time.Second, exited, logs, "two more intervals", func() bool { return siwScans() >= n+2 })

	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "10", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	started := time.Now()
	// Stale after the findings' min age (5s), held for 3s, seen at the
	// next interval.
	decided := func() bool { return metric("rdmatool_policy_decisions_total", "decision", "reset") == 1 }
	deadline := time.Now().Add(60 * time.Second)
	for !decided() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if !decided() {
		_, body, _ := scrapeErr("http://" + addr + "/metrics")
		var evidence []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "rdmatool_") && strings.Contains(l, `device="rxe0"`) {
				evidence = append(evidence, l)
			}
		}
		t.Fatalf("no reset decision 60s after the workload was ready; rxe0's series:\n%s\nagent log:\n%s", strings.Join(evidence, "\n"), logs.String())
	}
	t.Logf("reset decided %.1fs after the workload was ready", time.Since(started).Seconds())
	// The removal waits for the workload (rxe has no disassociate): it
	// ends, and the reset completes.
	w.Release(30 * time.Second)
	waitLab(t, 90*time.Second, exited, logs, "the reset done", func() bool {
		return metric("rdmatool_resets_total", "method", "relink", "result", "done") == 1
	})
	if got := readGUID(); got != guid {
		t.Errorf("rxe0 after the policy's reset: node GUID %q, want %q", got, guid)
	}
	t.Logf("reset done %.1fs after the workload was ready", time.Since(started).Seconds())

	// Stale again within the cooldown: no second reset.
	w2 := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "10", "--to", "ERR", "--hold", "stdin")
	w2.WaitFor("ready", 30*time.Second)
	waitLab(t, 60*time.Second, exited, logs, "a cooldown decision", func() bool {
		return metric("rdmatool_policy_decisions_total", "decision", "cooldown") == 1
	})
	if n := metric("rdmatool_policy_decisions_total", "decision", "reset"); n != 1 {
		t.Errorf("%v reset decisions, want 1 (the second episode is within the cooldown)", n)
	}
	fams, _, err := scrapeErr("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var resets float64
	if f := fams["rdmatool_resets_total"]; f != nil {
		for _, m := range f.Metric {
			resets += m.GetCounter().GetValue()
		}
	}
	if resets != 1 {
		t.Errorf("rdmatool_resets_total sums to %v, want 1", resets)
	}
	if v, _ := value(fams, "rdmatool_policy_info", map[string]string{"mode": "reset", "dry_run": "false"}); v != 1 {
		t.Errorf("rdmatool_policy_info{mode=reset,dry_run=false} = %v, want 1", v)
	}
	log := logs.String()
	for _, want := range []string{
		`msg="policy decision" source=policy decision=reset device=rxe0 node_guid=` + guid + ` qps=11 max_qp=40`,
		`msg="policy decision" source=policy decision=cooldown device=rxe0`,
		`msg=reset source=policy who="rdmatool agent (policy)" device=rxe0`,
		`result=done`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log lacks %q:\n%s", want, log)
		}
	}
	w2.Release(30 * time.Second)
	stop()
}
