package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// noRDMA is a kernel without RDMA netlink, as this host's: every dial
// fails as it does where ib_core is not loaded. Commands run on it touch
// no netlink, /proc, /sys or probes of the host.
func noRDMA(t testing.TB) *kernelDeps {
	return &kernelDeps{
		dial: func() (*rdmanl.Client, error) {
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
		},
		now:  time.Now,
		proc: t.TempDir(),
		sys:  t.TempDir(),
	}
}

// runAgentFlags runs rdmatool agent with args on a kernel without RDMA,
// serving a socket in a temporary directory and no metrics unless args
// say otherwise, for at most two seconds: an agent that starts is ended
// by the deadline (exit status 130), which no refused flag gives.
func runAgentFlags(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	base := []string{"agent", "--socket", filepath.Join(t.TempDir(), "agent.sock"), "--metrics-address", "", "--no-probes",
		"--config", filepath.Join("testdata", "agent-empty.yaml"), "--state-file", filepath.Join(t.TempDir(), "state.json")}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = runRootContext(ctx, newRootCmdWith(&globals{kernel: noRDMA(t)}), append(base, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestAgentFlagsRefused: the agent's numbers refuse NaN and infinities
// (issue 24: --exhaustion-threshold NaN was taken, and qp-exhaustion could
// then never fire), its paths what the kernel would refuse, its limits a
// device given twice; each is one line and exit status 2, before the
// agent starts.
func TestAgentFlagsRefused(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("s", 120)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--exhaustion-threshold", "NaN"}, "rdmatool: --exhaustion-threshold NaN: want a share of max_qp above 0 and at most 1"},
		{[]string{"--exhaustion-threshold", "nan"}, "rdmatool: --exhaustion-threshold NaN: want a share"},
		{[]string{"--exhaustion-threshold", "Inf"}, "rdmatool: --exhaustion-threshold +Inf: want a share"},
		{[]string{"--exhaustion-threshold", "-Infinity"}, "rdmatool: --exhaustion-threshold -Inf: want a share"},
		{[]string{"--exhaustion-threshold", "0"}, "rdmatool: --exhaustion-threshold 0: want a share"},
		{[]string{"--exhaustion-threshold", "1.5"}, "rdmatool: --exhaustion-threshold 1.5: want a share"},
		{[]string{"--socket", "agent.sock"}, `rdmatool: --socket "agent.sock": want an absolute path`},
		{[]string{"--socket", ""}, `rdmatool: --socket "": want a path`},
		{[]string{"--socket", long}, `rdmatool: --socket "/sss`},
		{[]string{"--socket", "/run/" + strings.Repeat("n", 256) + "/a.sock"}, `: a name in it is longer than a file name can be (255 bytes)`},
		{[]string{"--config", ""}, `rdmatool: --config "": want a path`},
		{[]string{"--names-map", ""}, `rdmatool: --names-map "": want a path`},
		{[]string{"--names-map", "names.conf"}, `rdmatool: --names-map "names.conf": want an absolute path`},
		{[]string{"--state-file", "rel.json"}, `rdmatool: --state-file "rel.json": want an absolute path`},
		{[]string{"--policy", "observe", "--policy-dry-run"}, `rdmatool: --policy-dry-run: set with --policy observe, which never resets: a dry run needs --policy reset`},
		{[]string{"--state-file", "/"}, `rdmatool: --state-file "/": want a file's path, not a directory's`},
		{[]string{"--state-file", "/var/lib/" + strings.Repeat("n", 256) + "/state.json"}, `rdmatool: --state-file "/var/lib/nnn`},
		{[]string{"--state-interval", "0s"}, `rdmatool: --state-interval 0s: want a duration at least 1s`},
		{[]string{"--mr-leak-growth", "0"}, `rdmatool: --mr-leak-growth 0: want 1 or more`},
		{[]string{"--mr-leak-window", "100ms"}, `rdmatool: --mr-leak-window 100ms: want a duration at least 1s`},
		{[]string{"--max-qp", "rxe0=5", "--max-qp", "rxe0=6"}, `rdmatool: --max-qp: leakwatch: max_qp "rxe0=5" and "rxe0=6": one limit per device`},
		{[]string{"--log-format", "xml"}, `rdmatool: --log-format "xml": want text or json`},
		{[]string{"--policy", strings.Repeat("p", 1<<20)}, `rdmatool: --policy "` + strings.Repeat("p", 64) + `" (1048576 bytes): want observe or reset`},
		// Checked before the agent starts (it was by the agent, after its
		// warning that netlink is not there: two lines).
		{[]string{"--metrics-address", "127.0.0.1:99999"}, `rdmatool: --metrics-address "127.0.0.1:99999": port "99999" is not a number up to 65535`},
		{[]string{"--metrics-address", "localhost"}, `rdmatool: --metrics-address "localhost": want HOST:PORT, such as 127.0.0.1:10095`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runAgentFlags(t, tt.args...)
			if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "rdmatool: ") || !strings.Contains(stderr, tt.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("agent %q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
	// What the checks take starts the agent, which the deadline stops:
	// the refusals above are the flags', not the harness's.
	if code, _, stderr := runAgentFlags(t, "--exhaustion-threshold", "0.5", "--socket", filepath.Join(t.TempDir(), strings.Repeat("s", 40))); code != 0 || !strings.Contains(stderr, "msg=listening") {
		t.Errorf("agent with good flags: exit %d, stderr %q; want it started, then stopped (0)", code, stderr)
	}
	// --state-file "" keeps no state: nothing read, nothing written.
	if code, _, stderr := runAgentFlags(t, "--state-file", ""); code != 0 || strings.Contains(stderr, "state") || strings.Contains(stderr, "history") {
		t.Errorf("agent --state-file \"\": exit %d, stderr %q; want it started without a state file", code, stderr)
	}
	// The history is saved where --state-file says, when the agent stops.
	state := filepath.Join(t.TempDir(), "state.json")
	if code, _, stderr := runAgentFlags(t, "--state-file", state); code != 0 || !strings.Contains(stderr, `msg="history saved"`) {
		t.Errorf("agent --state-file %s: exit %d, stderr %q", state, code, stderr)
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("no history saved: %v", err)
	}
	// The longest path a unix socket takes is 107 bytes: the agent
	// serves one that long, however deep its directory (a short name in
	// a deep directory failed with "bind: invalid argument").
	code, _, stderr := runAgentFlags(t, "--socket", "/"+strings.Repeat("s", 107))
	if code != 2 || !strings.Contains(stderr, "(108 bytes): a unix socket's path holds at most 107 bytes") {
		t.Errorf("agent --socket of 108 bytes: exit %d, stderr %q", code, stderr)
	}
	tmp := t.TempDir()
	deep := filepath.Join(tmp, strings.Repeat("d", 107-len(tmp)-3), "a")
	if code, _, stderr := runAgentFlags(t, "--socket", deep); len(deep) != 107 || code != 0 || !strings.Contains(stderr, "msg=listening") {
		t.Errorf("agent --socket of %d bytes: exit %d, stderr %q; want it started, then stopped (0)", len(deep), code, stderr)
	}
}
