package vmtest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Event is one line of qpwork's or rdswork's output (see vmtest/workloads/README.md).
type Event struct {
	Event        string  `json:"event"`
	Dev          string  `json:"dev"`
	QPN          uint32  `json:"qpn"`
	PeerQPN      uint32  `json:"peer_qpn"`
	Type         string  `json:"type"`
	State        string  `json:"state"`
	SRQN         uint32  `json:"srqn"`
	PID          int     `json:"pid"`
	ChildPID     int     `json:"child_pid"`
	QPs          int     `json:"qps"`
	Code         int     `json:"code"`
	Received     bool    `json:"received"`
	UsAfterErr   int64   `json:"us_after_err"`
	WCStatus     string  `json:"wc_status"`
	Op           string  `json:"op"`
	Msg          string  `json:"msg"`
	Errno        int     `json:"errno"`
	Cycles       int64   `json:"cycles"`
	Seconds      float64 `json:"seconds"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	AsyncEvents  int     `json:"async_events"` // --churn's
	// --reconnect's: reconnect_start, cycle and reconnect.
	Connection  int    `json:"connection"`
	ClientQPN   uint32 `json:"client_qpn"`
	TargetQPN   uint32 `json:"target_qpn"`
	RKey        uint32 `json:"rkey"`
	TargetRKey  uint32 `json:"target_rkey"`
	Status      string `json:"status"`
	TargetMRs   int    `json:"target_mrs"`
	WriteErrors int    `json:"write_errors"`
	Connections int    `json:"connections"`
	// rdswork's: mapped and cycle (N, RKey, Status), get_mr (Errno).
	N   int    `json:"n"`
	Raw string `json:"-"`
}

// Workload is a running qpwork (or rdswork) process.
type Workload struct {
	t      testing.TB
	prog   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	events []Event
	notify chan struct{}
	done   chan struct{}
	err    error
}

// StartWorkload runs qpwork with args, reading its JSON lines as they come.
// Add "--hold stdin" to keep it holding its QPs until Release. The process is
// killed when the test ends, if still running.
func StartWorkload(t testing.TB, args ...string) *Workload {
	t.Helper()
	return startWorkload(t, "qpwork", nil, nil, args)
}

// StartRDSWork runs rdswork (vmtest/workloads/rdswork.c: two RDS sockets
// over rds_rdma) with args, as StartWorkload runs qpwork.
func StartRDSWork(t testing.TB, args ...string) *Workload {
	t.Helper()
	return startWorkload(t, "rdswork", nil, nil, args)
}

// StartWorkloadWrapped is StartWorkload with qpwork run by a wrapper
// command: wrap's program is started with wrap's arguments, qpwork's path
// and args, and must exec qpwork in the end (its pid is the workload's).
func StartWorkloadWrapped(t testing.TB, wrap []string, args ...string) *Workload {
	t.Helper()
	return startWorkload(t, "qpwork", nil, wrap, args)
}

// StartWorkloadAs is StartWorkload with qpwork running as user uid and
// group gid: a workload of another user than root.
func StartWorkloadAs(t testing.TB, uid, gid uint32, args ...string) *Workload {
	t.Helper()
	return startWorkload(t, "qpwork", &syscall.Credential{Uid: uid, Gid: gid}, nil, args)
}

// StartWorkloadNamed is StartWorkloadAs with qpwork copied to a file
// named name (in a directory of its own that uid can read) and run from
// there: its process name (comm) and the file of its creation sites are
// name, whatever bytes it holds.
func StartWorkloadNamed(t testing.TB, uid, gid uint32, name string, args ...string) *Workload {
	t.Helper()
	dir, err := os.MkdirTemp("", "named-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(Bin(t, "qpwork"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return startWorkload(t, path, &syscall.Credential{Uid: uid, Gid: gid}, nil, args)
}

// startWorkload runs prog: a program of the lab's (Bin), or a path.
func startWorkload(t testing.TB, prog string, cred *syscall.Credential, wrap, args []string) *Workload {
	t.Helper()
	path := prog
	if !strings.Contains(prog, "/") {
		path = Bin(t, prog)
	}
	argv := append(append(slices.Clone(wrap), path), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", prog, args, err)
	}
	w := &Workload{t: t, prog: prog, cmd: cmd, stdin: stdin, notify: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			var ev Event
			line := sc.Text()
			if json.Unmarshal([]byte(line), &ev) != nil {
				ev = Event{Event: "unparsed"}
			}
			ev.Raw = line
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
		err := cmd.Wait()
		if err != nil && stderr.Len() > 0 {
			err = &exitError{err: err, stderr: strings.TrimSpace(stderr.String())}
		}
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			cmd.Process.Kill()
			<-w.done
		}
	})
	return w
}

type exitError struct {
	err    error
	stderr string
}

func (e *exitError) Error() string { return e.err.Error() + ": " + e.stderr }
func (e *exitError) Unwrap() error { return e.err }

// PID is the workload's process id.
func (w *Workload) PID() int { return w.cmd.Process.Pid }

// Events returns the lines read so far.
func (w *Workload) Events() []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Event(nil), w.events...)
}

// WaitFor waits until a line of the given event kind arrives and returns it,
// failing t on timeout, on an "error" line, or when the process ends first.
func (w *Workload) WaitFor(kind string, timeout time.Duration) Event {
	w.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		evs := w.Events()
		for _, ev := range evs[seen:] {
			if ev.Event == "error" {
				w.t.Fatalf("%s failed: %s", w.prog, ev.Raw)
			}
			if ev.Event == kind {
				return ev
			}
		}
		seen = len(evs)
		select {
		case <-w.notify:
		case <-w.done:
			if evs := w.Events(); len(evs) > seen {
				continue
			}
			w.t.Fatalf("%s ended (%v) before %q; output: %v", w.prog, w.err, kind, raws(w.Events()))
		case <-deadline.C:
			w.t.Fatalf("no %q from %s within %s; output: %v", kind, w.prog, timeout, raws(w.Events()))
		}
	}
}

// QPs returns the "qp" lines read so far.
func (w *Workload) QPs() []Event { return Filter(w.Events(), "qp") }

// Release closes the workload's stdin, ending a "--hold stdin", and waits for
// it to exit, failing t when it does not exit cleanly in time.
func (w *Workload) Release(timeout time.Duration) []Event {
	w.t.Helper()
	_ = w.stdin.Close() // an error: qpwork is gone, which Wait reports
	return w.Wait(timeout)
}

// Wait waits for the workload to exit and returns every line it printed.
func (w *Workload) Wait(timeout time.Duration) []Event {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.t.Fatalf("%s did not exit within %s; output: %v", w.prog, timeout, raws(w.Events()))
	}
	if w.err != nil {
		w.t.Fatalf("%s: %v; output: %v", w.prog, w.err, raws(w.Events()))
	}
	return w.Events()
}

// Filter returns the events of one kind.
func Filter(evs []Event, kind string) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Event == kind {
			out = append(out, ev)
		}
	}
	return out
}

func raws(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Raw
	}
	return out
}

// RdmaJSON runs iproute2's rdma with -j and args in the guest and decodes
// the array it prints; any failure ends the test.
func RdmaJSON(t testing.TB, args ...string) []map[string]any {
	t.Helper()
	out, err := exec.Command("rdma", append([]string{"-j"}, args...)...).Output()
	if err != nil {
		t.Fatalf("rdma -j %v: %v", args, err)
	}
	var v []map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("rdma -j %v: %v: %s", args, err, out)
	}
	return v
}
