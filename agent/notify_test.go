package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
)

// runLogged runs the agent without probes, its socket in dir, its log in
// logs, until cancel; done gives Run's result.
func runLogged(dir string) (logs *syncBuffer, cancel context.CancelFunc, done chan error) {
	logs = &syncBuffer{}
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(logs, nil)), Dial: dialer(rdmanltest.NewHost(rxe))}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: filepath.Join(dir, "agent.sock"), NoProbes: true, retry: time.Hour})
	}()
	return logs, cancel, done
}

// notifySocket listens as systemd does on a datagram socket in dir, named
// in NOTIFY_SOCKET until the test ends.
func notifySocket(t *testing.T, dir string) *net.UnixConn {
	t.Helper()
	ns := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", ns)
	return conn
}

// Under systemd (NOTIFY_SOCKET, WATCHDOG_USEC) the agent says READY once it
// serves, pets the watchdog at half its period, and says STOPPING on its
// way out.
func TestRunNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	conn := notifySocket(t, dir)
	t.Setenv("WATCHDOG_USEC", "1000000")
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(want string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			select {
			case m := <-msgs:
				if m == want {
					return time.Since(start)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %q from the agent", want)
			}
		}
	}
	host := rdmanltest.NewHost(rxe)
	d := watch.Deps{Log: slog.New(slog.DiscardHandler), Dial: dialer(host)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sock := filepath.Join(dir, "agent.sock")
	go func() { done <- Run(ctx, d, RunOptions{Socket: sock, NoProbes: true, retry: time.Hour}) }()
	next("READY=1")
	if _, err := askStatus(context.Background(), sock); err != nil {
		t.Errorf("READY sent but the socket does not answer: %v", err)
	}
	next("WATCHDOG=1")
	if gap := next("WATCHDOG=1"); gap > 900*time.Millisecond {
		t.Errorf("watchdog petted %s apart, want half of WatchdogSec (500ms)", gap)
	}
	cancel()
	next("STOPPING=1")
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A watchdog period of a microsecond and a NOTIFY_SOCKET nobody listens on
// (what made 190,000 warnings in 2 s) give one warning for the failing
// pets, which come at most every 100 ms.
func TestWatchdogBrokenNotifySocket(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "nobody"))
	t.Setenv("WATCHDOG_USEC", "1")
	logs, cancel, done := runLogged(dir)
	waitFor(t, "the first failed pet", func() bool { return strings.Contains(logs.String(), "sd_notify WATCHDOG failed") })
	// Pets go on failing: five more at most, or 50,000 before.
	time.Sleep(500 * time.Millisecond)
	stopRun(t, cancel, done)
	if n := strings.Count(logs.String(), "sd_notify WATCHDOG failed"); n != 1 {
		t.Errorf("%d warnings of failed pets in 500 ms, want 1", n)
	}
}

// A notify socket whose reader has stopped reading (its queue full) makes
// each write give up at its deadline instead of blocking: the watchdog
// goes on, and an agent told to stop says STOPPING (in vain) and ends.
func TestNotifySocketNobodyReads(t *testing.T) {
	dir := t.TempDir()
	notifySocket(t, dir) // nobody reads it
	// Fill the socket's queue (net.unix.max_dgram_qlen datagrams, or its
	// buffer): then a write blocks until its deadline.
	var full bool
	for i := 0; i < 10000 && !full; i++ {
		start := time.Now()
		_, err := sdNotify("WATCHDOG=1", 50*time.Millisecond)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write %d: %v, want a deadline exceeded", i, err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("write %d gave up after %s, want its deadline of 50ms", i, took)
			}
			full = true
		}
	}
	if !full {
		t.Fatal("10,000 datagrams went to a socket nobody reads")
	}

	t.Setenv("WATCHDOG_USEC", "200000")
	logs, cancel, done := runLogged(dir)
	waitFor(t, "a failed pet", func() bool { return strings.Contains(logs.String(), "sd_notify WATCHDOG failed") })
	if !strings.Contains(logs.String(), "i/o timeout") {
		t.Errorf("the failed pet's warning does not say it timed out:\n%s", logs.String())
	}
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(3 * notifyTimeout):
		buf := make([]byte, 1<<20)
		t.Fatalf("Run still running %s after its stop, its notify socket full; log:\n%s\ngoroutines:\n%s", time.Since(stopped), logs.String(), buf[:runtime.Stack(buf, true)])
	}
}
