//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// callBPFEnv makes TestHelperCallBPF call bpf(2): the control that shows
// strace sees a bpf() call where this host allows tracing.
const callBPFEnv = "RDMATOOL_TEST_CALL_BPF"

// TestNoBPFCallAtStartup runs commands that do not trace, from the binary
// `go build` makes of this package (not the test binary, which links
// test-only packages), under `strace -f -e trace=bpf`, and finds no bpf()
// call: a udev helper and `rdmatool version` must not touch BPF. The
// commands may fail on a host without RDMA; only the system calls count.
func TestNoBPFCallAtStartup(t *testing.T) {
	t.Parallel()
	strace := requireTool(t, "strace")
	goTool := requireTool(t, "go")
	bin := filepath.Join(t.TempDir(), "rdmatool")
	if out, err := exec.CommandContext(t.Context(), goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The control: the test binary's bpf() call with command 0x7fffffff
	// is seen.
	control := exec.Command(os.Args[0], "-test.run=^TestHelperCallBPF$")
	control.Env = append(os.Environ(), callBPFEnv+"=1")
	if calls := bpfCalls(t, strace, control); !slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, "bpf(0x7fffffff") }) {
		t.Fatalf("strace did not see the bpf() call of a process that makes one; it saw %q", calls)
	}

	tests := []struct {
		name string
		args []string
	}{
		{"version", []string{"version"}},
		{"version -j", []string{"-j", "version"}},
		// What the udev rule runs; the device does not exist, so nothing is renamed.
		{"rename udev", []string{"rename", "udev", "rdmatool-test-nodev"}},
		// rename udev has no --dry-run flag: this one ends at flag
		// parsing, after every package's init has run.
		{"rename udev --dry-run", []string{"rename", "udev", "--dry-run", "rdmatool-test-nodev"}},
		{"rename --dry-run --all", []string{"rename", "--dry-run", "--all"}},
		{"help", []string{"--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if calls := bpfCalls(t, strace, exec.Command(bin, tt.args...)); len(calls) != 0 {
				t.Errorf("rdmatool %s made %d bpf() calls, want 0:\n%s", strings.Join(tt.args, " "), len(calls), strings.Join(calls, "\n"))
			}
		})
	}
}

// TestHelperCallBPF calls bpf(2) once with an invalid command when
// RDMATOOL_TEST_CALL_BPF is set, and does nothing otherwise.
func TestHelperCallBPF(t *testing.T) {
	if os.Getenv(callBPFEnv) == "" {
		return
	}
	// The kernel answers EINVAL (or EPERM); only the call matters.
	unix.Syscall(unix.SYS_BPF, 1<<31-1, 0, 0)
}

// bpfCalls runs cmd under strace and returns the bpf() calls it and its
// threads and children made, one line each.
func bpfCalls(t *testing.T, strace string, cmd *exec.Cmd) []string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "strace.log")
	st := exec.CommandContext(t.Context(), strace, append([]string{"-f", "-qq", "-e", "trace=bpf", "-e", "signal=none", "-o", log, cmd.Path}, cmd.Args[1:]...)...)
	st.Env = cmd.Env
	out, err := st.CombinedOutput()
	// strace exits with the traced command's status, which may fail here.
	b, rerr := os.ReadFile(log)
	if rerr != nil {
		t.Fatalf("strace %s: %v (%v)\n%s", cmd, rerr, err, out)
	}
	var calls []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "bpf(") {
			calls = append(calls, strings.TrimSpace(line))
		}
	}
	return calls
}

// requireTool returns the path of a program the test needs. Without it the
// test is skipped, except in CI (CI=true, as CI systems set it), where
// that is a failure: vmtest/install-deps.sh installs it.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s is needed and not installed (vmtest/install-deps.sh installs it): %v", name, err)
	}
	t.Skipf("%s is not installed (vmtest/install-deps.sh installs it): %v", name, err)
	return ""
}
