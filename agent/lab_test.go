package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests of `rdmatool qp-leaks`: real workloads leak (or do not) while
// the command watches, and the findings must name exactly those QPs.

// qpLeaks starts `rdmatool qp-leaks -j` and returns once it is watching
// (after its first scan and, with probes, after they attached).
func qpLeaks(t *testing.T, args ...string) func() agentapi.CheckReport {
	t.Helper()
	w := startQPLeaks(t, args...)
	w.watching(t)
	return w.done
}

// watcher is a `rdmatool qp-leaks -j -v` running in the background.
type watcher struct {
	cmd     *exec.Cmd
	out     strings.Builder
	logs    *strings.Builder
	started chan struct{} // closed when it logs that it watches
	t       *testing.T
}

// startQPLeaks starts `rdmatool qp-leaks -j -v` with args.
func startQPLeaks(t *testing.T, args ...string) *watcher {
	t.Helper()
	w := &watcher{t: t, logs: &strings.Builder{}, started: make(chan struct{})}
	w.cmd = exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"qp-leaks", "-j", "-v"}, args...)...)
	w.cmd.Stdout = &w.out
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			w.logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), `msg=watching`) {
				close(w.started)
			}
		}
	}()
	return w
}

// watching waits until the watcher logs that it watches.
func (w *watcher) watching(t *testing.T) {
	t.Helper()
	select {
	case <-w.started:
	case <-time.After(60 * time.Second):
		w.cmd.Process.Kill()
		t.Fatalf("qp-leaks did not start watching: %s", w.logs.String())
	}
}

// done waits for the end of the watch and returns its report; the exit
// status must say whether there were findings.
func (w *watcher) done() agentapi.CheckReport {
	t := w.t
	t.Helper()
	err := w.cmd.Wait()
	var rep agentapi.CheckReport
	if jerr := json.Unmarshal([]byte(w.out.String()), &rep); jerr != nil {
		t.Fatalf("qp-leaks: %v; output %q; log %s", err, w.out.String(), w.logs.String())
	}
	code := w.cmd.ProcessState.ExitCode()
	if want := map[bool]int{true: 1, false: 0}[len(rep.Findings) > 0]; code != want {
		t.Errorf("exit status %d with %d findings, want %d", code, len(rep.Findings), want)
	}
	return rep
}

type leak struct {
	Rule, Device string
	QPN          uint32
	PID          uint32
}

func leaks(rep agentapi.CheckReport) []leak {
	out := []leak{}
	for _, f := range rep.Findings {
		out = append(out, leak{f.Rule, f.Device, f.QPN, f.PID})
	}
	slices.SortFunc(out, func(a, b leak) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

func expect(rule string, w *vmtest.Workload, dev string) []leak {
	var out []leak
	for _, q := range w.QPs() {
		out = append(out, leak{rule, dev, q.QPN, uint32(w.PID())})
	}
	return out
}

func check(t *testing.T, rep agentapi.CheckReport, want []leak) {
	t.Helper()
	slices.SortFunc(want, func(a, b leak) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if want == nil {
		want = []leak{}
	}
	if got := leaks(rep); !slices.Equal(got, want) {
		t.Errorf("findings:\n got  %v\n want %v\n(skipped %v, probes %s %s)", got, want, rep.SkippedRules, rep.Probes, rep.ProbesError)
	}
}

var watchArgs = []string{"--watch", "9s", "--min-age", "4s", "--interval", "1s"}

// verdict checks what one watch of a scenario reported.
type verdict func(t *testing.T, rep agentapi.CheckReport, probes bool)

// withProbes watches one run of a scenario twice at once, with the probes
// and with --no-probes (args after watchArgs for both), and checks each
// report in a subtest of its own: the scenario runs its workloads once
// both watch and returns the check. The watches are wall-clock windows
// that leave the guest idle, so running them side by side halves the
// scenario's time without changing what either sees.
func withProbes(t *testing.T, args []string, scenario func(t *testing.T) verdict) {
	t.Helper()
	// The watch with the probes first, then the one without: each window
	// starts once the watcher is ready, so the probes' attach (seconds
	// under TCG) is not taken out of the netlink watch's window.
	with := startQPLeaks(t, append(slices.Clone(watchArgs), args...)...)
	with.watching(t)
	without := startQPLeaks(t, append(append(slices.Clone(watchArgs), args...), "--no-probes")...)
	without.watching(t)
	check := scenario(t)
	reports := map[bool]agentapi.CheckReport{true: with.done(), false: without.done()}
	for _, probes := range []bool{true, false} {
		t.Run(fmt.Sprintf("probes=%v", probes), func(t *testing.T) {
			check(t, reports[probes], probes)
		})
	}
}

// probeRules are the rules that need the probes.
var probeRules = []string{"srq-destroy-without-last-wqe", "last-wqe-not-emitted", "last-wqe-unhandled", "srq-drain-stalled", "qp-create-failing", "qp-error-storm", "mr-leak"}

// checkSkipped asserts the rules a run did not evaluate, and why: with
// --no-probes the probe rules; qp-exhaustion always runs (the devices say
// their max_qp).
func checkSkipped(t *testing.T, rep agentapi.CheckReport, probes bool) {
	t.Helper()
	var got, want []string
	for _, s := range rep.SkippedRules {
		got = append(got, s.Rule)
		if wantReason := "needs the eBPF probes: disabled by --no-probes"; !strings.HasPrefix(s.Reason, wantReason) {
			t.Errorf("%s skipped because %q, want %q", s.Rule, s.Reason, wantReason)
		}
	}
	if !probes {
		want = append(want, probeRules...)
	}
	// qp-exhaustion is evaluated: rxe and siw report their max_qp to the
	// verbs query.
	if !slices.Equal(got, want) {
		t.Errorf("skipped rules %v, want %v", got, want)
	}
	wantProbes, wantErr := "on", ""
	if !probes {
		wantProbes, wantErr = "off", "disabled by --no-probes"
	}
	if rep.Probes != wantProbes || rep.ProbesError != wantErr {
		t.Errorf("probes %q (%q), want %q (%q)", rep.Probes, rep.ProbesError, wantProbes, wantErr)
	}
}

// containerID is the id of the docker scope the lab tests put workloads in.
const containerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// moveToCgroup moves process pid into a new cgroup named like a docker
// container's (system.slice/docker-ID.scope) and returns the path the
// guest shows in /proc/PID/cgroup. The cgroup is removed when the test
// ends.
func moveToCgroup(t *testing.T, pid int) string {
	t.Helper()
	rel := filepath.Join("system.slice", "docker-"+containerID+".scope")
	dir := filepath.Join("/sys/fs/cgroup", rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile("/sys/fs/cgroup/cgroup.procs", []byte(strconv.Itoa(pid)), 0o644) // back to the root, if still alive
		os.Remove(dir)
		os.Remove(filepath.Dir(dir))
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			if path != "/"+rel {
				t.Fatalf("/proc/%d/cgroup shows %q after the move to %s", pid, path, rel)
			}
			return path
		}
	}
	t.Fatalf("/proc/%d/cgroup has no cgroup v2 line: %q", pid, b)
	return ""
}

// checkOwner asserts that every finding names the cgroup and the container.
func checkOwner(t *testing.T, rep agentapi.CheckReport, cgroup string) {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Cgroup != cgroup || f.ContainerID != containerID || f.Comm != "qpwork" {
			t.Errorf("finding qpn %d: comm %q cgroup %q container %q, want qpwork, %q, %s", f.QPN, f.Comm, f.Cgroup, f.ContainerID, cgroup, containerID)
		}
		// qpwork creates its QPs on its main thread: the thread is the process.
		if f.TGID != f.PID || f.PID == 0 {
			t.Errorf("finding qpn %d: pid %d tgid %d, want the same non-zero process id", f.QPN, f.PID, f.TGID)
		}
	}
}

func TestLabLeftInErr(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	withProbes(t, []string{"--dev", "rxe0"}, func(t *testing.T) verdict {
		w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
		w.WaitFor("ready", 30*time.Second)
		cgroup := moveToCgroup(t, w.PID())
		healthy := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "2", "--to", "RTS", "--hold", "stdin")
		healthy.WaitFor("ready", 30*time.Second)
		t.Cleanup(func() {
			w.Release(30 * time.Second)
			healthy.Release(30 * time.Second)
		})
		return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
			check(t, rep, expect("stale-error-qp", w, "rxe0"))
			checkSkipped(t, rep, probes)
			checkOwner(t, rep, cgroup)
		}
	})
}

func TestLabNeverConnected(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	withProbes(t, nil, func(t *testing.T) verdict {
		w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "3", "--to", "INIT", "--hold", "stdin")
		w.WaitFor("ready", 30*time.Second)
		t.Cleanup(func() { w.Release(30 * time.Second) })
		return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
			check(t, rep, expect("never-connected-qp", w, "rxe0"))
			checkSkipped(t, rep, probes)
		}
	})
}

func TestLabHealthyChurn(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	withProbes(t, nil, func(t *testing.T) verdict {
		churn := vmtest.StartWorkload(t, "--dev", "rxe0", "--churn", "3000")
		spec := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "2", "--srq", "--to", "RTS", "--teardown", "spec", "--last-wqe-timeout-ms", "500")
		siw := vmtest.StartWorkload(t, "--dev", "siw0", "--pairs", "--qps", "1", "--srq", "--connect", "cm", "--addr", vmtest.SIWAddr, "--to", "RTS", "--teardown", "marker")
		churn.Wait(120 * time.Second)
		spec.Wait(60 * time.Second)
		siw.Wait(60 * time.Second)
		return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
			check(t, rep, nil)
			checkSkipped(t, rep, probes)
		}
	})
}

// iWARP providers move a connected QP to RTS inside their own CM code, not
// through _ib_modify_qp, so the probes see it stop at RTR: a held, healthy
// iWARP connection must still not look never connected, while QPs that
// really never connected, next to it, do.
func TestLabIWARPConnectionHeld(t *testing.T) {
	vmtest.Require(t, vmtest.SIW)
	// Two workloads start on a slow TCG guest (6.1 takes seconds to
	// connect siw pairs): watch long enough for the idle QPs to reach
	// --min-age before the end.
	withProbes(t, []string{"--watch", "16s"}, func(t *testing.T) verdict {
		w := vmtest.StartWorkload(t, "--dev", "siw0", "--pairs", "--qps", "2", "--connect", "cm", "--addr", vmtest.SIWAddr, "--hold", "stdin")
		idle := vmtest.StartWorkload(t, "--dev", "siw0", "--qps", "2", "--to", "INIT", "--hold", "stdin")
		w.WaitFor("ready", 30*time.Second)
		idle.WaitFor("ready", 30*time.Second)
		t.Cleanup(func() {
			w.Release(30 * time.Second)
			idle.Release(30 * time.Second)
		})
		return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
			// The QPs left in INIT are never connected, where rdmatool
			// can know their state: from the probes, or from netlink
			// where siw reports it.
			var want []leak
			if probes || vmtest.Fact(t, "netlink shows siw QP state") {
				want = expect("never-connected-qp", idle, "siw0")
			}
			check(t, rep, want)
			checkSkipped(t, rep, probes)
		}
	})
}

// Its rule needs the probes: without them, the destroyed QPs leave nothing
// that netlink can see.
func TestLabSRQDestroyedFromRTS(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	withProbes(t, nil, func(t *testing.T) verdict {
		w := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "1", "--srq", "--to", "RTS", "--teardown", "direct")
		w.Wait(60 * time.Second)
		return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
			checkSkipped(t, rep, probes)
			if !probes {
				check(t, rep, nil)
				return
			}
			check(t, rep, expect("srq-destroy-without-last-wqe", w, "rxe0"))
		}
	})
}

// With the probes, the SRQ rules explain the QPs in ERR; without them
// netlink still sees QPs stuck in ERR, where the provider reports the
// state (siw on 6.1 reports RESET for every QP).
func TestLabSRQQPInErr(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(dev), func(t *testing.T) {
			withProbes(t, []string{"--dev", string(dev)}, func(t *testing.T) verdict {
				w := vmtest.StartWorkload(t, "--dev", string(dev), "--qps", "2", "--srq", "--to", "ERR", "--hold", "stdin")
				w.WaitFor("ready", 30*time.Second)
				t.Cleanup(func() { w.Release(30 * time.Second) })
				return func(t *testing.T, rep agentapi.CheckReport, probes bool) {
					checkSkipped(t, rep, probes)
					switch {
					case !probes && dev == vmtest.SIW && !vmtest.Fact(t, "netlink shows siw QP state"):
						check(t, rep, nil)
					case !probes:
						check(t, rep, expect("stale-error-qp", w, string(dev)))
					case vmtest.EmitsLastWQE(t, dev):
						check(t, rep, expect("last-wqe-unhandled", w, string(dev)))
					default:
						check(t, rep, expect("last-wqe-not-emitted", w, string(dev)))
					}
				}
			})
		})
	}
}

// runQPLeaks runs `rdmatool qp-leaks -j` to its end.
func runQPLeaks(t *testing.T, args ...string) (rep agentapi.CheckReport, code int, stderr string) {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"qp-leaks", "-j"}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("qp-leaks %v: exit %d, output %q, stderr %s", args, cmd.ProcessState.ExitCode(), out.String(), errOut.String())
	}
	return rep, cmd.ProcessState.ExitCode(), errOut.String()
}

// startAgent starts `rdmatool agent` on sock and returns once it answers
// with the probes attached; stop sends SIGTERM and returns its exit status.
func startAgent(t *testing.T, sock string, args ...string) (stop func() int) {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"agent", "--socket", sock, "--metrics-address", "127.0.0.1:0"}, args...)...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := askStatus(t.Context(), sock)
		if err == nil && st.Probes == "on" && st.Scans > 0 {
			break
		}
		select {
		case <-exited:
			t.Fatalf("rdmatool agent exited: %s", logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmatool agent not ready with probes (%+v, %v): %s", st, err, logs.String())
		}
	}
	return func() int {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("rdmatool agent did not stop on SIGTERM: %s", logs.String())
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("rdmatool agent exited %d after SIGTERM: %s", code, logs.String())
		}
		return cmd.ProcessState.ExitCode()
	}
}

// The agent has watched a leak for longer than a one-shot run could:
// qp-leaks reports it from the agent's history with its full age, and
// observes locally, finding nothing that young, once the agent is gone.
func TestLabAgent(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s")
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	cgroup := moveToCgroup(t, w.PID())
	time.Sleep(6 * time.Second) // the QPs stay in ERR past --min-age (3s)
	args := []string{"--agent-socket", sock, "--watch", "1s", "--min-age", "3s"}
	rep, code, stderr := runQPLeaks(t, args...)
	if rep.Source != "agent" || code != 1 || stderr != "" {
		t.Fatalf("qp-leaks with the agent: source %q, exit %d, stderr %q", rep.Source, code, stderr)
	}
	check(t, rep, expect("stale-error-qp", w, "rxe0"))
	checkOwner(t, rep, cgroup)
	for _, f := range rep.Findings {
		// A 1s watch cannot see a state older than about 1s.
		if f.AgeSeconds < 3 {
			t.Errorf("qpn %d in ERR for %.3fs by the agent's account, want at least 3s", f.QPN, f.AgeSeconds)
		}
	}
	for _, f := range rep.Findings {
		t.Logf("agent: qpn %d %s for %.3fs, pid %d cgroup %s container %s", f.QPN, f.Rule, f.AgeSeconds, f.PID, f.Cgroup, f.ContainerID)
	}
	t.Logf("agent: observed %.3fs, %d scans, probes %s, %d lost events", rep.ObservedSeconds, rep.Scans, rep.Probes, rep.LostEvents)
	if rep.ObservedSeconds < 6 || rep.Probes != "on" || rep.Scans < 6 {
		t.Errorf("agent report observed %.1fs, %d scans, probes %s; want at least 6s and 6 scans with probes", rep.ObservedSeconds, rep.Scans, rep.Probes)
	}
	// --no-probes through the agent: the netlink rules over its history,
	// and the probe rules skipped as in a local --no-probes run.
	rep, code, stderr = runQPLeaks(t, append(args, "--no-probes")...)
	if rep.Source != "agent" || code != 1 || stderr != "" {
		t.Errorf("qp-leaks --no-probes with the agent: source %q, exit %d, stderr %q", rep.Source, code, stderr)
	}
	check(t, rep, expect("stale-error-qp", w, "rxe0"))
	checkSkipped(t, rep, false)
	// The text report says who observed, and for how long.
	out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "qp-leaks", "--agent-socket", sock, "--min-age", "3s").Output()
	if !strings.Contains(string(out), ", observed by the agent for ") || !strings.Contains(string(out), "cgroup "+cgroup+" container "+containerID[:12]) {
		t.Errorf("qp-leaks text with the agent (%v):\n%s", err, out)
	}
	st, err := askStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.QPs < 2 || !slices.Contains(st.Devices, "rxe0") || st.ScanError != "" {
		t.Errorf("agent status %+v", st)
	}

	stop()
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("agent socket left after SIGTERM: %v", err)
	}
	started := time.Now()
	rep, code, stderr = runQPLeaks(t, append(args, "-v")...)
	t.Logf("local: observed %.3fs, %d scans, %d findings, %s wall", rep.ObservedSeconds, rep.Scans, len(rep.Findings), time.Since(started).Round(time.Millisecond))
	if rep.Source != "local" || code != 0 || len(rep.Findings) != 0 {
		t.Errorf("qp-leaks without the agent: source %q, exit %d, findings %v", rep.Source, code, leaks(rep))
	}
	if !strings.Contains(stderr, `msg="no agent, observing locally"`) || strings.Contains(stderr, "did not answer") {
		t.Errorf("qp-leaks without the agent logged:\n%s", stderr)
	}
	w.Release(30 * time.Second)
}

// The agent gives a device its persistent name (map policy) when it starts
// and again when the device is deleted and re-added under its kernel name,
// and goes on answering through it.
func TestLabAgentRenamesDevices(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	rdmatool := vmtest.Bin(t, "rdmatool")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	run("ip", "link", "add", "name", "ragent0", "address", "02:00:00:00:07:01", "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "del", "ragent0").Run() })
	run("ip", "link", "set", "ragent0", "up")
	run(rdmatool, "link", "add", "rxe7", "type", "rxe", "netdev", "ragent0")
	t.Cleanup(func() {
		for _, name := range []string{"lab_roce7", "rxe7"} {
			exec.Command(rdmatool, "link", "delete", name).Run()
		}
	})
	guid, err := os.ReadFile("/sys/class/infiniband/rxe7/node_guid")
	if err != nil {
		t.Fatal(err)
	}
	names := filepath.Join(t.TempDir(), "names.conf")
	if err := os.WriteFile(names, []byte(strings.TrimSpace(string(guid))+" lab_roce7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exists := func(dev string) func() bool {
		return func() bool { _, err := os.Stat("/sys/class/infiniband/" + dev); return err == nil }
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	// rxe7 was named by "link add": 6.11+ marks that user-assigned, hence
	// --rename-force. Only the map names devices: rxe0 and siw0 keep theirs.
	// A long interval: the agent must learn of the device from its
	// register event (probes, or the monitor group on 6.12+), not a listing.
	stop := startAgent(t, sock, "--interval", "30s", "--rename", "map", "--names-map", names, "--rename-force")
	if !waitUntil(30*time.Second, exists("lab_roce7")) {
		t.Fatal("the agent did not rename rxe7 to lab_roce7 at its start")
	}
	for _, dev := range []string{"rxe0", "siw0"} {
		if !exists(dev)() {
			t.Errorf("%s was renamed; the map does not name it", dev)
		}
	}
	run(rdmatool, "link", "delete", "lab_roce7")
	run(rdmatool, "link", "add", "rxe7", "type", "rxe", "netdev", "ragent0")
	started := time.Now()
	if !waitUntil(10*time.Second, exists("lab_roce7")) {
		t.Fatal("the agent did not rename the re-added rxe7 within 10s (its listing interval is 30s)")
	}
	t.Logf("re-added rxe7 renamed to lab_roce7 after %s", time.Since(started).Round(time.Millisecond))
	if !waitUntil(10*time.Second, func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && slices.Contains(st.Devices, "lab_roce7") && !slices.Contains(st.Devices, "rxe7")
	}) { // the rename is a device event too
		st, err := askStatus(t.Context(), sock)
		t.Errorf("agent status after the re-add: %+v, %v", st, err)
	}
	stop()
}

// SRQ QPs already in Error when qp-leaks or the agent starts get the
// diagnosis their provider calls for, from the provider table: where it
// never delivers LAST_WQE_REACHED, last-wqe-not-emitted; where it does, the
// event was due before anyone watched: last-wqe-unhandled. (siw on 6.1
// reports no QP state over netlink: nothing can be said there.)
func TestLabErrBeforeWatching(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(dev), func(t *testing.T) {
			w := vmtest.StartWorkload(t, "--dev", string(dev), "--qps", "2", "--srq", "--to", "ERR", "--hold", "stdin")
			w.WaitFor("ready", 30*time.Second)
			var want []leak
			switch {
			case dev == vmtest.SIW && !vmtest.Fact(t, "netlink shows siw QP state"):
			case vmtest.EmitsLastWQE(t, dev):
				want = expect("last-wqe-unhandled", w, string(dev))
			default:
				want = expect("last-wqe-not-emitted", w, string(dev))
			}
			rep, _, stderr := runQPLeaks(t, "--no-agent", "--dev", string(dev), "--watch", "3s", "--min-age", "2s")
			if rep.Probes != "on" {
				t.Fatalf("qp-leaks without probes: %s %s", rep.ProbesError, stderr)
			}
			check(t, rep, want)
			sock := filepath.Join(t.TempDir(), "agent.sock")
			stop := startAgent(t, sock, "--interval", "1s")
			deadline := time.Now().Add(30 * time.Second)
			for {
				rep, _, _ = runQPLeaks(t, "--agent-socket", sock, "--dev", string(dev), "--min-age", "2s")
				if len(leaks(rep)) >= len(want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			check(t, rep, want)
			stop()
			w.Release(30 * time.Second)
		})
	}
}

// qp-exhaustion needs no --max-qp: the agent asks each device its limit.
// With a threshold low enough for the lab, 20 QPs on siw0 cross it; the
// finding's limit is what ibv_devinfo reports.
func TestLabQPExhaustionFromDevice(t *testing.T) {
	vmtest.Require(t, vmtest.SIW)
	out, err := exec.Command("ibv_devinfo", "-v", "-d", "siw0").Output()
	if err != nil {
		t.Fatal(err)
	}
	var maxQP uint64
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "max_qp:"); ok {
			maxQP, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if maxQP == 0 {
		t.Fatalf("ibv_devinfo has no max_qp:\n%s", out)
	}
	threshold := 10.0 / float64(maxQP) // 10 QPs
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s", "--exhaustion-threshold", strconv.FormatFloat(threshold, 'g', -1, 64))
	w := vmtest.StartWorkload(t, "--dev", "siw0", "--qps", "20", "--to", "INIT", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	var rep agentapi.CheckReport
	if !waitUntil(30*time.Second, func() bool {
		rep, _, _ = runQPLeaks(t, "--agent-socket", sock, "--rule", "qp-exhaustion")
		return len(rep.Findings) > 0
	}) {
		t.Fatalf("no qp-exhaustion: %+v", rep)
	}
	f := rep.Findings[0]
	if f.Device != "siw0" || f.Limit != maxQP || f.Count < 20 || len(rep.Findings) != 1 {
		t.Errorf("findings %+v; want siw0 only, limit %d (the device's), at least 20 QPs", rep.Findings, maxQP)
	}
	t.Logf("qp-exhaustion on siw0: %d of %d QPs (threshold %g)", f.Count, f.Limit, threshold)
	stop()
	w.Release(30 * time.Second)
}
