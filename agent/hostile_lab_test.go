package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
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

// Issue 39's notify socket nobody reads, on the binary in the guest: its
// queue full (systemd wedged, a container's init that never reads), with
// the watchdog on. The agent warns that READY and the watchdog's pet
// failed, goes on serving, and on SIGTERM exits 0 within a few seconds
// with its history saved (it stayed blocked on the write until SIGKILL,
// saving nothing).
func TestLabAgentNotifySocketStalled(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	tmp := t.TempDir()
	notify := filepath.Join(tmp, "notify")
	reader, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close() // never read
	filler, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	queued := 0
	for ; queued < 100_000; queued++ {
		filler.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := filler.Write([]byte("STATUS=filler")); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("filling the notify socket: %v", err)
			}
			break
		}
	}
	if queued == 0 || queued == 100_000 {
		t.Fatalf("%d datagrams queued on the notify socket: want it full", queued)
	}
	t.Setenv("NOTIFY_SOCKET", notify)
	t.Setenv("WATCHDOG_USEC", "2000000")
	state := filepath.Join(tmp, "state.json")
	sock := filepath.Join(tmp, "agent.sock")
	logs, exited, stop, _ := labAgent(t, "--socket", sock, "--state-file", state, "--interval", "1s", "--no-probes")
	waitLab(t, time.Minute, exited, logs, "the agent's answer and a watchdog pet that failed", func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Scans > 0 && strings.Contains(logs.String(), "sd_notify WATCHDOG failed")
	})
	if !strings.Contains(logs.String(), "sd_notify READY failed") {
		t.Errorf("no warning that READY was not sent: %s", logs.String())
	}
	start := time.Now()
	stop() // SIGTERM: exit 0 within 30 s, or the test fails
	took := time.Since(start)
	t.Logf("with %d datagrams queued on a notify socket nobody reads, the agent stopped %s after SIGTERM", queued, took.Round(10*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the agent took %s to exit after SIGTERM, want at most 5s (each write to the notify socket waits 1s at most)", took)
	}
	if fi, err := os.Stat(state); err != nil || fi.Size() == 0 {
		t.Errorf("the history was not saved at the stop: %v: %s", err, logs.String())
	}
}

// holdConnsEnv, in the environment of this test binary run again, makes
// TestLabMetricsConnectionsNobody the client that holds the connections.
const holdConnsEnv = "RDMATOOL_TEST_HOLD_CONNS"

// Issue 39's local user who owes the agent nothing: nobody opens 2,000
// connections to /metrics and sends nothing on them. The agent serves 64
// (more wait in the kernel's backlog), so its RSS grows by what those
// cost, not 2,000 (about 40 KiB each: 80 MB; 223 MB was seen before the
// cap); its socket, another listener, answers meanwhile; once nobody
// leaves, a scrape is answered, and rdmatool_agent_connections counts it
// alone.
func TestLabMetricsConnectionsNobody(t *testing.T) {
	if addr := os.Getenv(holdConnsEnv); addr != "" {
		holdConns(t, addr)
		return
	}
	vmtest.Require(t, vmtest.RXE)
	const addr = "127.0.0.1:19102"
	const conns = 2000
	tmp := t.TempDir()
	sock := filepath.Join(tmp, "agent.sock")
	logs, exited, stop, proc := labAgent(t, "--socket", sock, "--metrics-address", addr, "--interval", "1s", "--no-probes")
	defer stop()
	waitLab(t, time.Minute, exited, logs, "a scrape", func() bool {
		_, _, err := scrapeErr("http://" + addr + "/metrics")
		return err == nil
	})
	before := vmRSS(t, proc.Pid)
	// This test binary again, as nobody, holds the connections until its
	// stdin closes.
	cmd := exec.Command(os.Args[0], "-test.run=^TestLabMetricsConnectionsNobody$")
	cmd.Env = append(os.Environ(), holdConnsEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if want := fmt.Sprintf("held %d\n", conns); err != nil || line != want {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("nobody's client said %q (%v), want %q", line, err, want)
	}
	time.Sleep(2 * time.Second) // the agent takes what it takes of them
	held := vmRSS(t, proc.Pid)
	st, err := askStatus(t.Context(), sock)
	if err != nil || st.Scans == 0 {
		t.Errorf("the agent's socket while nobody holds /metrics: %+v, %v", st, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("nobody's client: %v", err)
	}
	t.Logf("%d idle connections from nobody: the agent's RSS %d KiB → %d KiB", conns, before, held)
	if held-before > 16<<10 {
		t.Errorf("the agent's RSS grew by %d KiB with %d idle connections held, want at most 16 MiB (64 served, about 40 KiB each)", held-before, conns)
	}
	waitLab(t, 30*time.Second, exited, logs, "a scrape that counts itself alone", func() bool {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		n, ok := value(fams, "rdmatool_agent_connections", map[string]string{"listener": "metrics"})
		return err == nil && ok && n == 1
	})
}

// holdConns, as nobody, opens 2,000 connections to addr, sends nothing,
// says "held N" and waits for its stdin to close.
func holdConns(t *testing.T, addr string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	var cs []net.Conn
	for range 2000 {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(cs)+1, err)
		}
		cs = append(cs, c)
	}
	fmt.Printf("held %d\n", len(cs))
	io.Copy(io.Discard, os.Stdin)
	for _, c := range cs {
		c.Close()
	}
}

// vmRSS is a process's resident set in KiB (/proc/PID/status).
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib); err == nil {
				return kib
			}
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
