package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/watch"
)

// serveAgent runs the agent's socket API over a history in which rxe0's
// QP 17, owned by pid 42, has been in ERR for 90s.
func serveAgent(t *testing.T) string {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	st := watch.NewState(leakwatch.Config{ProbesReason: "no BTF"}, func() time.Time { return now })
	st.Scan(leakwatch.Scan{Started: t0, Time: t0, Devices: []leakwatch.DeviceScan{{
		Device: rdmanl.Device{Index: 1, Name: "rxe0"},
		QPs:    []rdmanl.QP{{LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}}},
		Owners: map[uint32]leakwatch.Owner{42: {Comm: "app", Cgroup: "/system.slice/app.service"}},
	}}})
	now = t0.Add(90 * time.Second)
	return serveAPI(t, st)
}

// serveAPI answers the agent's socket API (agentapi.Handler, as the agent
// does) from st on a unix socket in a temporary directory until the test
// ends.
func serveAPI(t *testing.T, st *watch.State) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: agentapi.Handler(st, "test")}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return sock
}

func TestQPLeaksFromAgent(t *testing.T) {
	t.Parallel()
	sock := serveAgent(t)
	code, stdout, stderr := runCLI(t, "qp-leaks", "-j", "--agent-socket", sock, "--watch", "1s", "--min-age", "1m")
	if code != 1 || stderr != "" {
		t.Fatalf("qp-leaks -j from the agent: exit %d, stderr %q", code, stderr)
	}
	var rep agentapi.CheckReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	if rep.Source != "agent" || len(rep.Findings) != 1 || rep.ObservedSeconds != 90 {
		t.Fatalf("report %+v", rep)
	}
	if f := rep.Findings[0]; f.Rule != "stale-error-qp" || f.QPN != 17 || f.PID != 42 || f.AgeSeconds != 90 || f.Cgroup != "/system.slice/app.service" {
		t.Errorf("finding %+v", f)
	}
	if !strings.Contains(stdout, `"source":"agent"`) || !strings.Contains(stdout, `"observed_since":"2026-01-01T00:00:00Z"`) {
		t.Errorf("JSON %s lacks the source or the agent's start", stdout)
	}

	// The text output says who observed, and for how long.
	code, stdout, stderr = runCLI(t, "qp-leaks", "--agent-socket", sock)
	if code != 1 || stderr != "" {
		t.Fatalf("qp-leaks from the agent: exit %d, stderr %q", code, stderr)
	}
	for _, s := range []string{"rxe0  pid 42 (app) cgroup /system.slice/app.service\n", "stale-error-qp", "qpn 17 RC ERR for 90.0s", "observed by the agent for 90s, probes off"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("text output lacks %q:\n%s", s, stdout)
		}
	}

	// Options go to the agent: nothing is older than 2 minutes.
	code, stdout, _ = runCLI(t, "qp-leaks", "-j", "--agent-socket", sock, "--min-age", "2m", "--rule", "stale-error-qp", "--dev", "rxe0")
	if code != 0 || !strings.Contains(stdout, `"findings":[]`) || !strings.Contains(stdout, `"source":"agent"`) {
		t.Errorf("qp-leaks --min-age 2m: exit %d, %s", code, stdout)
	}
	// A bad rule is refused before anyone is asked.
	code, _, stderr = runCLI(t, "qp-leaks", "--agent-socket", sock, "--rule", "bogus")
	if code != 2 || !strings.Contains(stderr, `unknown rule "bogus"`) {
		t.Errorf("qp-leaks --rule bogus: exit %d, stderr %q", code, stderr)
	}
}

// Without an agent qp-leaks observes the host itself: quietly when no
// agent runs, with a warning when the socket answers badly. This host's
// kernel may have no RDMA netlink; then the local observation fails with
// rdmanl's error, which still shows that it ran.
func TestQPLeaksFallback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.sock")
	ln, err := net.Listen("unix", bad)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "teapot", http.StatusTeapot)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	live := serveAgent(t)
	tests := []struct {
		name     string
		args     []string
		wantWarn bool
		wantLog  string
	}{
		{"no socket", []string{"--agent-socket", filepath.Join(dir, "missing.sock")}, false, `level=DEBUG msg="no agent, observing locally"`},
		{"--no-agent with an agent running", []string{"--agent-socket", live, "--no-agent"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"qp-leaks", "-j", "-v", "--watch", "1s", "--interval", "100ms"}, tt.args...)
			code, stdout, stderr := runCLI(t, args...)
			local := false
			switch code {
			case 0, 1:
				local = strings.Contains(stdout, `"source":"local"`)
			case 2:
				local = strings.Contains(stderr, "rdmatool: rdmanl: ")
			}
			if !local {
				t.Errorf("rdmatool %s: exit %d, stdout %q, stderr %q; want a local observation", strings.Join(args, " "), code, stdout, stderr)
			}
			if got := strings.Contains(stderr, "level=WARN"); got != tt.wantWarn {
				t.Errorf("warning logged %v, want %v: %s", got, tt.wantWarn, stderr)
			}
			if !strings.Contains(stderr, tt.wantLog) {
				t.Errorf("stderr lacks %q: %s", tt.wantLog, stderr)
			}
			if tt.wantLog == "" && strings.Contains(stderr, "agent") {
				t.Errorf("--no-agent asked the agent: %s", stderr)
			}
		})
	}
	// Something that is not the agent answers on the socket: an error that
	// says so, and no local observation behind the user's back.
	code, stdout, stderr := runCLI(t, "qp-leaks", "-j", "--watch", "1s", "--agent-socket", bad)
	if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "rdmatool: agent: ask "+bad+": HTTP 418 I'm a teapot (observe locally with --no-agent)") {
		t.Errorf("qp-leaks with a teapot on the socket: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Without -v, the missing agent is not mentioned at all.
	_, _, stderr = runCLI(t, "qp-leaks", "--watch", "1s", "--agent-socket", filepath.Join(dir, "missing.sock"))
	if strings.Contains(stderr, "agent") {
		t.Errorf("a missing agent logged without -v: %s", stderr)
	}
}

func TestAgentCmdFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--max-qp", "rxe0"}, `--max-qp: leakwatch: max_qp "rxe0": want DEV=N`},
		{[]string{"agent", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"agent", "extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

// TestRenderLeaksThreads: QPs created by two threads of one process are one
// group, under the process, and each finding names its thread when it is
// not the main one.
func TestRenderLeaksThreads(t *testing.T) {
	t.Parallel()
	f := leakwatch.Finding{Rule: leakwatch.RuleStaleErrorQP, Severity: leakwatch.SeverityWarning, Device: "rxe0", Type: "RC", State: "ERR",
		Owner: leakwatch.Owner{Comm: "app", TGID: 100}, AgeSeconds: 6, Hint: "destroy it"}
	main, worker := f, f
	main.QPN, main.PID = 17, 100
	worker.QPN, worker.PID = 18, 101
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{main, worker}
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "rxe0  pid 100 (app)") != 1 || !strings.Contains(out, "qpn 18 RC ERR thread 101 for") || strings.Contains(out, "thread 100") {
		t.Errorf("text report:\n%s\nwant one group for pid 100 and thread 101 named on qpn 18 only", out)
	}
}

// Kernel QPs of rdma_cm are grouped under their ULP; a drain still
// waiting, or one that took long, is said on the finding's line.
func TestRenderLeaksULPDrain(t *testing.T) {
	t.Parallel()
	f := leakwatch.Finding{Rule: leakwatch.RuleSRQDrainStalled, Severity: leakwatch.SeverityCritical, Device: "siw0", Type: "RC", State: "ERR",
		Owner: leakwatch.Owner{Comm: "rdma_cm", KernName: "rdma_cm", ULP: "nvmet_rdma"}, SRQ: true, SRQN: 1, QPN: 20, AgeSeconds: 12, DrainSeconds: 12, Draining: true, Hint: "run it without an SRQ"}
	done := f
	done.QPN, done.Severity, done.State, done.Draining, done.DrainSeconds, done.AgeSeconds = 21, leakwatch.SeverityError, "destroyed", false, 60.3, 5
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{f, done}
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"siw0  kernel [rdma_cm] ulp nvmet_rdma\n", "qpn 20 RC ERR srqn 1 draining for 12.0s", "qpn 21 RC destroyed srqn 1 drain took 60.3s for 5.0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report:\n%s\nwant %q", out, want)
		}
	}
}

// Kernel QPs of one module created by different threads, told apart in
// the summary (its groups carry the command: leakwatch's
// TestSummarizeKernelThreads), are listed under one line, which names the
// module only; the totals are the summary's.
func TestRenderLeaksKernelThreads(t *testing.T) {
	t.Parallel()
	f := leakwatch.Finding{Rule: leakwatch.RuleStaleErrorQP, Severity: leakwatch.SeverityWarning, Device: "rxe0", Type: "RC", State: "ERR",
		Owner: leakwatch.Owner{Comm: "kworker/0:1", KernName: "rdma_cm", ULP: "nvmet_rdma"}, QPN: 30, AgeSeconds: 9, Hint: "destroy it"}
	other := f
	other.QPN, other.Comm = 31, "kworker/1:2"
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{f, other}
	rep.Summary = []leakwatch.Group{
		{Device: "rxe0", Rule: f.Rule, Severity: f.Severity, Owner: f.Owner, Count: 1, QPNs: "30", MaxAgeSeconds: 9, Hint: f.Hint},
		{Device: "rxe0", Rule: f.Rule, Severity: f.Severity, Owner: other.Owner, Count: 1, QPNs: "31", MaxAgeSeconds: 9, Hint: f.Hint},
	}
	rep.FindingsTotal = 2
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "rxe0  kernel [rdma_cm] ulp nvmet_rdma\n") != 1 || !strings.Contains(out, "qpn 30 RC ERR for 9.0s") ||
		!strings.Contains(out, "qpn 31 RC ERR for 9.0s") || !strings.Contains(out, "2 findings (2 warning) over") {
		t.Errorf("text report:\n%s\nwant both QPs under one line and the summary's totals", out)
	}
}

// A zombie context belongs to no device: its group says so, and its line
// names the deleted node instead of a QP.
func TestRenderLeaksZombie(t *testing.T) {
	t.Parallel()
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{{Rule: leakwatch.RuleZombieUverbsContext, Severity: leakwatch.SeverityWarning,
		Owner: leakwatch.Owner{PID: 300, TGID: 300, Comm: "stuck"}, AgeSeconds: 12, Hint: "reopen",
		Evidence: []leakwatch.Evidence{{Source: "scan", What: "holds fd 3 /dev/infiniband/uverbs0 (deleted); no verbs context on any device"}}}}
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	want := "(unregistered device)  pid 300 (stuck)\n  warning  zombie-uverbs-context         holds fd 3 /dev/infiniband/uverbs0 (deleted); no verbs context on any device for 12.0s\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("text report:\n%s\nwant it to begin with\n%s", b.String(), want)
	}
}

// An MR leak is no QP's: its line says how the owner's MRs grew.
func TestRenderLeaksMRLeak(t *testing.T) {
	t.Parallel()
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{{Rule: leakwatch.RuleMRLeak, Severity: leakwatch.SeverityError, Device: "rxe0",
		Owner: leakwatch.Owner{PID: 300, TGID: 300, Comm: "client"}, AgeSeconds: 600, Count: 7, Hint: "deregister",
		Evidence: []leakwatch.Evidence{{Source: "scan", What: "MRs 1 → 7 (+6, +24 KiB) in 10m0s over 12 QP creates while its live QPs did not grow"}}}}
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	want := "rxe0  pid 300 (client)\n  error    mr-leak                       MRs 1 → 7 (+6, +24 KiB) in 10m0s over 12 QP creates while its live QPs did not grow\n           deregister\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("text report:\n%s\nwant it to begin with\n%s", b.String(), want)
	}
}

// A report over no device says so in words, and a failed scan is named.
func TestRenderLeaksNoDevices(t *testing.T) {
	t.Parallel()
	rep := agentapi.CheckReport{Report: leakwatch.Report{Findings: []leakwatch.Finding{}}, Probes: "off", Source: "agent",
		ScanError: "rdmanl: dump QPs of rxe0: interrupted"}
	rep.ObservedSeconds = 15
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	want := "0 findings over 0 QPs on no devices, observed by the agent for 15s, probes off; scans failed: rdmanl: dump QPs of rxe0: interrupted\n"
	if b.String() != want {
		t.Errorf("renderLeaks:\n got  %q\n want %q", b.String(), want)
	}
}

// Durations that make no sense are refused before netlink or the agent is
// asked.
func TestDurationFlags(t *testing.T) {
	t.Parallel()
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"qp-leaks", "--min-age", "-5s"}, "rdmatool: --min-age -5s: want a duration at least 0s\n"},
		{[]string{"qp-leaks", "--watch", "-1s"}, "rdmatool: --watch -1s: want a duration at least 1s\n"},
		{[]string{"qp-leaks", "--watch", "0"}, "rdmatool: --watch 0s: want a duration at least 1s\n"},
		{[]string{"qp-leaks", "--watch", "1ns"}, "rdmatool: --watch 1ns: want a duration at least 1s\n"},
		{[]string{"qp-leaks", "--interval", "-1s"}, "rdmatool: --interval -1s: want a duration from 100ms to 10s\n"},
		{[]string{"qp-leaks", "--interval", "1ns"}, "rdmatool: --interval 1ns: want a duration from 100ms to 10s\n"},
		{[]string{"qp-leaks", "--watch", "2s", "--interval", "5s"}, "rdmatool: --interval 5s: want a duration from 100ms to 2s\n"},
		{[]string{"agent", "--interval", "-1s"}, "rdmatool: --interval -1s: want a duration at least 1s\n"},
		{[]string{"agent", "--interval", "1ns"}, "rdmatool: --interval 1ns: want a duration at least 1s\n"},
		{[]string{"trace", "--duration", "-1s"}, "rdmatool: --duration -1s: want a duration at least 100ms\n"},
		{[]string{"trace", "--duration", "1ns"}, "rdmatool: --duration 1ns: want a duration at least 100ms\n"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			args := slices.Clone(tt.args)
			switch tt.args[0] {
			case "agent":
				args = append(args, "--socket", nowhere)
			case "qp-leaks":
				args = append(args, "--agent-socket", nowhere)
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != 2 || stdout != "" || stderr != tt.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// A bad configuration file stops the agent before it starts: one line
// naming the file, line and key, exit 2.
func TestAgentConfigRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(bad, []byte("interval: 10s\nmax_qp:\n  rxe0: many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A good policy file; a flag that contradicts it is refused as well.
	pol := filepath.Join(dir, "policy.yaml")
	conflict := filepath.Join(dir, "conflict.yaml")
	// The socket and metrics_address are checked as their flags are, at
	// their line (a bad metrics_address was the agent's error, without
	// the file and line, after its warning that netlink is not there).
	port := filepath.Join(dir, "port.yaml")
	longSocket := filepath.Join(dir, "socket.yaml")
	for path, body := range map[string]string{pol: "policy:\n  stale_qps: 10\n", conflict: "policy:\n  mode: reset\n  method: netdev-bounce\n",
		port: "interval: 10s\nmetrics_address: 127.0.0.1:99999\n", longSocket: "socket: /" + strings.Repeat("s", 107) + "\n"} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad}, "rdmatool: agent: config " + bad + ":3: max_qp.rxe0: \"many\": want a positive number\n"},
		{[]string{"--config", filepath.Join(dir, "none.yaml")}, "rdmatool: agent: config " + filepath.Join(dir, "none.yaml") + ": no such file or directory\n"},
		{[]string{"--config", pol, "--policy-dry-run"}, "rdmatool: agent: policy.dry_run: set with mode observe, which never resets: a dry run needs mode reset\n"},
		{[]string{"--config", pol, "--policy", "fix"}, "rdmatool: --policy \"fix\": want observe or reset\n"},
		{[]string{"--config", conflict}, "rdmatool: agent: config " + conflict + ":3: policy.method: netdev-bounce keeps every QP: it cannot free a device's QPs\n"},
		{[]string{"--config", port}, "rdmatool: agent: config " + port + ":2: metrics_address: \"127.0.0.1:99999\": port \"99999\" is not a number up to 65535\n"},
		{[]string{"--config", longSocket}, "rdmatool: agent: config " + longSocket + ":1: socket: \"/" + strings.Repeat("s", 63) + "\" (108 bytes): a unix socket's path holds at most 107 bytes\n"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"agent", "--socket", filepath.Join(dir, "s")}, tt.args...)...)
		if code != 2 || stdout != "" || stderr != tt.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

// Thousands of findings read as a few groups first, and the report says
// how many it did not list QP by QP.
func TestRenderLeaksSummaryFirst(t *testing.T) {
	t.Parallel()
	var fs []leakwatch.Finding
	for qpn := uint32(17); qpn < 17+1000; qpn++ {
		fs = append(fs, leakwatch.Finding{Rule: leakwatch.RuleStaleErrorQP, Severity: leakwatch.SeverityWarning, Device: "rxe0",
			QPN: qpn, Owner: leakwatch.Owner{PID: 42, TGID: 42, Comm: "app"}, Type: "RC", State: "ERR", AgeSeconds: 30})
	}
	fs = append(fs, leakwatch.Finding{Rule: leakwatch.RuleLastWQENotEmitted, Severity: leakwatch.SeverityError, Device: "siw0", QPN: 3, Owner: leakwatch.Owner{KernName: "nvmet_rdma", Comm: "nvmet_rdma"}})
	rep := agentapi.CheckReport{Source: "agent", Probes: "on", Devices: []string{"rxe0", "siw0"}}
	rep.Summary = []leakwatch.Group{ // as leakwatch groups them: most severe first
		{Device: "siw0", Rule: leakwatch.RuleLastWQENotEmitted, Severity: leakwatch.SeverityError, Owner: leakwatch.Owner{KernName: "nvmet_rdma", Comm: "nvmet_rdma"}, Count: 1, QPNs: "3"},
		{Device: "rxe0", Rule: leakwatch.RuleStaleErrorQP, Severity: leakwatch.SeverityWarning, Owner: leakwatch.Owner{PID: 42, Comm: "app"}, Count: 1000, QPNs: "17-1016", MaxAgeSeconds: 30},
	}
	rep.FindingsTotal = len(fs)
	rep.Findings, rep.FindingsOmitted = fs[:10], len(fs)-10
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"1001 findings in 2 groups:\n  siw0  error    last-wqe-not-emitted          1 QPs  kernel [nvmet_rdma]  qpn 3  oldest 0.0s\n" +
			"  rxe0  warning  stale-error-qp                1000 QPs  pid 42 (app)  qpn 17-1016  oldest 30.0s\n\n",
		"991 more findings not listed QP by QP (--limit 0 lists them all)\n",
		"1001 findings (1 error, 1000 warning) over",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "qpn "); n != 12 { // 2 groups, 10 listed
		t.Errorf("%d qpn mentions, want 12:\n%s", n, out)
	}
	code, _, stderr := runCLI(t, "qp-leaks", "--limit", "-1", "--agent-socket", filepath.Join(t.TempDir(), "none"))
	if code != 2 || stderr != "rdmatool: --limit -1: want 0 (all) or more\n" {
		t.Errorf("--limit -1: exit %d, %q", code, stderr)
	}
}

// TestQPLeaksDevAgentWithoutNetlink: asked about one device, an agent
// that cannot read RDMA netlink knows no device and answers "no RDMA
// device"; qp-leaks says what is wrong instead (issue 24), as it does for
// the question about every device. An agent that reads netlink and has no
// such device is still answered so.
func TestQPLeaksDevAgentWithoutNetlink(t *testing.T) {
	t.Parallel()
	// The agent's history after its device listing failed as it fails on
	// a kernel without RDMA netlink.
	st := watch.NewState(leakwatch.Config{ProbesReason: "no BTF"}, time.Now)
	st.ScanFailed("", &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT})
	sock := serveAPI(t, st)
	code, stdout, stderr := runCLI(t, "qp-leaks", "--dev", "rxe0", "--agent-socket", sock)
	want := "rdmatool: agent: the agent on " + sock + " cannot read RDMA netlink: rdmanl: open netlink socket: protocol not supported\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Errorf("qp-leaks --dev rxe0, agent without netlink: exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, want)
	}

	code, _, stderr = runCLI(t, "qp-leaks", "--dev", "rxe9", "--agent-socket", serveAgent(t))
	if code != 2 || !strings.Contains(stderr, `agent: no RDMA device "rxe9"`) {
		t.Errorf("qp-leaks --dev rxe9, agent with rxe0: exit %d, stderr %q; want 2 and no RDMA device", code, stderr)
	}
}

// The shells complete qp-leaks --rule with the rule IDs, and nothing else.
func TestQPLeaksRuleCompletion(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCLI(t, "__complete", "qp-leaks", "--rule", "")
	want := strings.Join(leakwatch.Rules(), "\n") + "\n:4\n"
	if code != 0 || stdout != want {
		t.Errorf("completion of --rule: exit %d, %q; want %q", code, stdout, want)
	}
}

// TestRenderLeaksStacks: with --stacks each finding says where its QP was
// created (a kernel QP its stack) and the findings are counted by site
// before the totals; without it the text has no site.
func TestRenderLeaksStacks(t *testing.T) {
	t.Parallel()
	user := leakwatch.Finding{Rule: leakwatch.RuleNeverConnectedQP, Severity: leakwatch.SeverityWarning, Device: "rxe0", QPN: 17, Type: "RC", State: "INIT",
		Owner: leakwatch.Owner{PID: 100, TGID: 100, Comm: "app"}, AgeSeconds: 6, Hint: "connect it",
		Site: "app!connect_peer+0x4c", SiteVia: "rdma_create_qp", SiteFile: "/usr/bin/app", SiteBuildID: "3f0e", SiteOffset: 0x1a2c,
		Stack: []string{"app!reconnect+0x20", "app!main+0x1c"}}
	kernel := leakwatch.Finding{Rule: leakwatch.RuleSRQDrainStalled, Severity: leakwatch.SeverityCritical, Device: "rxe0", QPN: 20, Type: "RC", State: "ERR",
		Owner: leakwatch.Owner{Comm: "rdma_cm", KernName: "rdma_cm", ULP: "nvmet_rdma"}, Hint: "no SRQ",
		Stack: []string{"nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]", "nvmet_rdma_cm_handler+0x3a [nvmet_rdma]"}}
	var rep agentapi.CheckReport
	rep.Findings = []leakwatch.Finding{user, kernel}
	rep.Sites = []leakwatch.SiteGroup{
		{Device: "rxe0", Site: user.Site, SiteVia: user.SiteVia, SiteBuildID: "3f0e", QPs: 30000, Rules: map[string]int{leakwatch.RuleNeverConnectedQP: 29000, leakwatch.RuleStaleErrorQP: 1000}},
		{Device: "rxe0", Site: kernel.Stack[0], QPs: 1, Rules: map[string]int{leakwatch.RuleSRQDrainStalled: 1}},
	}
	rep.SitesOmitted = 2
	var b strings.Builder
	if err := renderLeaks(&b, rep, leaksView{stacks: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"           created at app!connect_peer+0x4c via rdma_create_qp (/usr/bin/app build-id 3f0e offset 0x1a2c)\n" +
			"             called from app!reconnect+0x20\n             called from app!main+0x1c\n           connect it\n",
		"           created by kernel stack:\n             nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]\n             nvmet_rdma_cm_handler+0x3a [nvmet_rdma]\n",
		"by creation site:\n  rxe0  30000 QPs created at app!connect_peer+0x4c via rdma_create_qp  (never-connected-qp 29000, stale-error-qp 1000)\n" +
			"  rxe0  1 QPs created at nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]  (srq-drain-stalled 1)\n  2 more sites\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report with --stacks:\n%s\nwant %q", out, want)
		}
	}
	b.Reset()
	if err := renderLeaks(&b, rep, leaksView{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "created") {
		t.Errorf("text report without --stacks:\n%s", b.String())
	}
	rep.Sites, rep.SitesOmitted = nil, 0
	b.Reset()
	if err := renderLeaks(&b, rep, leaksView{stacks: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "by creation site: no finding's creation site is known\n") {
		t.Errorf("text report with --stacks and no sites:\n%s", b.String())
	}
}

// TestRenderLeaksByPeer: with --by-peer the findings are listed under the
// peer of their QPs' rdma_cm connections, the peers with most findings
// first and those without one last, each peer's under its devices and
// owners as without it; every finding is then counted by peer, also those
// --limit leaves out. The text is testdata/qp-leaks-by-peer.txt (-update
// rewrites it).
func TestRenderLeaksByPeer(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := watch.NewState(leakwatch.Config{ProbesReason: "no BTF"}, func() time.Time { return now })
	rxe, siw := rdmanl.Device{Index: 1, Name: "rxe0"}, rdmanl.Device{Index: 2, Name: "siw0"}
	st.SetDevices([]rdmanl.Device{rxe, siw}, nil, now)
	qp := func(lqpn uint32, state rdmanl.QPState, pid uint32) rdmanl.QP {
		return rdmanl.QP{LQPN: lqpn, Type: rdmanl.QPTypeRC, State: state, Port: 1, Owner: rdmanl.Owner{PID: pid}}
	}
	kern := qp(3, rdmanl.QPStateErr, 0)
	kern.Owner = rdmanl.Owner{KernName: "rdma_cm"}
	st.Scan(leakwatch.Scan{Started: now, Time: now, Devices: []leakwatch.DeviceScan{
		{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 100), qp(18, rdmanl.QPStateErr, 100), qp(19, rdmanl.QPStateInit, 100), qp(20, rdmanl.QPStateErr, 200)},
			Owners: map[uint32]leakwatch.Owner{100: {TGID: 100, Comm: "app"}, 200: {TGID: 200, Comm: "other"}},
			Peers:  map[uint32]string{17: "192.0.2.7", 18: "192.0.2.7", 19: "192.0.2.9"}},
		{Device: siw, QPs: []rdmanl.QP{kern}, ULPs: map[uint32]string{3: "nvmet_rdma"}, Peers: map[uint32]string{3: "2001:db8::2"}},
	}})
	now = now.Add(time.Minute)
	var out strings.Builder
	for _, limit := range []int{0, 2} {
		rep, _ := st.Report(leakwatch.Query{MinAge: 5 * time.Second, Limit: limit})
		rep.Source = "agent"
		fmt.Fprintf(&out, "--limit %d:\n", limit)
		if err := renderLeaks(&out, rep, leaksView{byPeer: true}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join("testdata", "qp-leaks-by-peer.txt")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("%s changed (-want +got):\n%s", path, diff)
	}
}
