//go:build linux

package main

import (
	"bufio"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"golang.org/x/sys/unix"
)

// rdmatoolEnv makes TestHelperRdmatool run rdmatool.
const rdmatoolEnv = "RDMATOOL_TEST_RUN"

// TestHelperRdmatool runs rdmatool as its main does, signals included,
// with the test binary's arguments after "--", and exits with its status,
// when RDMATOOL_TEST_RUN is set; it does nothing otherwise.
func TestHelperRdmatool(t *testing.T) {
	if os.Getenv(rdmatoolEnv) == "" {
		return
	}
	os.Exit(run(flag.Args(), os.Stdout, os.Stderr))
}

// startRdmatool starts this test binary as rdmatool with args, its
// stderr's lines sent on the returned channel; the process is killed when
// the test ends, if it has not exited.
func startRdmatool(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestHelperRdmatool$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), rdmatoolEnv+"=1")
	// A pipe of the test's own, not StderrPipe: the test waits for the
	// process while its stderr is still read.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		for sc := bufio.NewScanner(r); sc.Scan(); {
			select {
			case lines <- sc.Text():
			default: // the test reads what it waits for; the rest may go
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		<-done
		r.Close()
	})
	return cmd, lines
}

// waitLine waits up to timeout for a line of lines containing want.
func waitLine(t *testing.T, lines <-chan string, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the process ended its stderr before %q", want)
			}
			if strings.Contains(line, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q on stderr within %s", want, timeout)
		}
	}
}

// The agent, run as its binary is, with its configuration replaced by a
// named pipe nobody writes to and SIGHUP sent: the reload is refused at
// once, and SIGTERM then ends the agent with status 0 (issue 24: the
// reload blocked in open(), and the process never exited).
func TestAgentFIFOReloadThenSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(conf, []byte("interval: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	cmd, lines := startRdmatool(t, "agent", "--config", conf, "--socket", sock, "--metrics-address", "", "--no-probes")
	waitLine(t, lines, "msg=listening", time.Minute)
	if _, err := agentapi.AskStatus(t.Context(), sock); err != nil {
		t.Fatalf("the agent does not answer: %v", err)
	}
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(conf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines, `msg="configuration reload refused, keeping the running one"`, time.Minute)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the agent exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit within 10s of SIGTERM")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
}
