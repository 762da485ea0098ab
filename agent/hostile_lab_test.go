package agent

import (
	"os"
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
	// The agent inherits the test's environment.
	t.Setenv("NOTIFY_SOCKET", filepath.Join(tmp, "nobody"))
	t.Setenv("WATCHDOG_USEC", "1")
	logs, exited, stop, proc := labAgent(t, "--config", conf, "--socket", sock, "--metrics-address", "127.0.0.1:0", "--no-probes")
	waitLab(t, time.Minute, exited, logs, "an answer on a socket path of 107 bytes", func() bool {
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
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLab(t, time.Minute, exited, logs, "the reload refused", func() bool {
		return strings.Contains(logs.String(), `msg="configuration reload refused, keeping the running one"`) &&
			strings.Contains(logs.String(), "not a regular file (a named pipe)")
	})
	start := time.Now()
	stop() // SIGTERM: exit 0
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the agent took %s to exit after SIGTERM, want at most 10s", took)
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 20 {
		t.Errorf("the agent logged %d lines:\n%s", lines, logs.String())
	}
}
