package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/vmtest"
	"golang.org/x/sys/unix"
)

// Issue 24's hostile inputs to the agent, on the binary in the guest: a
// socket path of 107 bytes in a deep directory (bind failed: invalid
// argument), a watchdog of a microsecond with a NOTIFY_SOCKET nobody
// listens on (190,000 warnings in 2 s), and the configuration swapped for
// a named pipe, then SIGHUP and SIGTERM (the reload hung, and the agent
// never exited). The agent serves the socket, warns once, refuses the
// reload and exits 0 at once.
func TestLabAgentHostileInputs(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	tmp := t.TempDir()
	sock := filepath.Join(tmp, strings.Repeat("d", agentapi.MaxSocketPath-len(tmp)-3), "a")
	conf := filepath.Join(tmp, "agent.yaml")
	if err := os.WriteFile(conf, []byte("interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "agent", "--config", conf, "--socket", sock, "--metrics-address", "127.0.0.1:0", "--no-probes")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(tmp, "nobody"), "WATCHDOG_USEC=1")
	var logs syncBuffer
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
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			select {
			case <-exited:
				t.Fatalf("the agent exited while waiting for %s: %s", what, logs.String())
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 60s; agent log:\n%s", what, logs.String())
			}
		}
	}
	wait("an answer on a socket path of 107 bytes", func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Scans > 0
	})
	// Two seconds of a failing watchdog at most every 100 ms: one warning.
	time.Sleep(2 * time.Second)
	if n := strings.Count(logs.String(), "sd_notify WATCHDOG failed"); n != 1 {
		t.Errorf("%d warnings of failed watchdog pets in 2s, want 1", n)
	}
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(conf, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	wait("the reload refused", func() bool {
		return strings.Contains(logs.String(), `msg="configuration reload refused, keeping the running one"`) &&
			strings.Contains(logs.String(), "not a regular file (a named pipe)")
	})
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent did not exit within 10s of SIGTERM: %s", logs.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the agent exited %d after SIGTERM: %s", code, logs.String())
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 20 {
		t.Errorf("the agent logged %d lines:\n%s", lines, logs.String())
	}
}
