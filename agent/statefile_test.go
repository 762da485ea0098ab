package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
	"go.uber.org/goleak"
)

// procWithBoot is a /proc that holds only the boot's id.
func procWithBoot(t testing.TB, boot string) string {
	t.Helper()
	proc := t.TempDir()
	dir := filepath.Join(proc, "sys", "kernel", "random")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(boot+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	return proc
}

// testClock is a clock the test sets while the agent reads it.
type testClock struct{ t atomic.Int64 }

func (c *testClock) set(t time.Time)      { c.t.Store(t.UnixNano()) }
func (c *testClock) now() time.Time       { return time.Unix(0, c.t.Load()).UTC() }
func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }

// runAgent runs the agent on host until until returns true, and returns
// its log (Debug and up).
func runAgent(t *testing.T, host *rdmanltest.Host, proc string, clock *testClock, o RunOptions, until func(sock string, logs *syncBuffer) bool) string {
	t.Helper()
	var logs syncBuffer
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Dial: dialer(host), ProcRoot: proc, Now: clock.now}
	o.Socket = filepath.Join(t.TempDir(), "agent.sock")
	o.Interval, o.Reconcile, o.retry, o.Version, o.NoProbes = 10*time.Millisecond, 10*time.Millisecond, time.Hour, "test", true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, o) }()
	waitFor(t, "the agent", func() bool { return until(o.Socket, &logs) })
	stopRun(t, cancel, done)
	return logs.String()
}

// qpAges maps the QPs of a report's findings to their rule and age.
func qpAges(rep agentapi.CheckReport) map[uint32]string {
	out := map[uint32]string{}
	for _, f := range rep.Findings {
		out[f.QPN] = f.Rule + " " + time.Duration(f.AgeSeconds*float64(time.Second)).String()
	}
	return out
}

// The agent saves its history when it stops and restores it when it
// starts again in the same boot: a QP its first scan lists as the same QP
// keeps its age (the upgrade: a QP stuck for an hour is still an
// hour old), a QP whose number another process's QP took is new, a QP
// gone meanwhile is dropped, and the history is observed since the first
// start. After a reboot the file is ignored.
func TestRunKeepsTheHistory(t *testing.T) {
	defer goleak.VerifyNone(t)
	dev := rxe
	dev.NodeGUID = 0x021122fffe334455
	host := rdmanltest.NewHost(dev)
	host.SetQPs(dev.Index, qp(17, rdmanl.QPStateInit, 42), qp(18, rdmanl.QPStateErr, 42), qp(19, rdmanl.QPStateErr, 42))
	state := filepath.Join(t.TempDir(), "state.json")
	proc := procWithBoot(t, "boot-1")
	clock := newTestClock(t0)
	o := RunOptions{StateFile: state}
	scanned := func(n int) func(string, *syncBuffer) bool {
		return func(sock string, _ *syncBuffer) bool {
			st, err := askStatus(context.Background(), sock)
			return err == nil && st.QPs == n && st.Scans > 0
		}
	}
	logs := runAgent(t, host, proc, clock, o, scanned(3))
	if !strings.Contains(logs, `msg="no state file: the history starts empty"`) || !strings.Contains(logs, `msg="history saved" source=agent path=`+state+" qps=3") {
		t.Errorf("first run's log:\n%s", logs)
	}
	fi, err := os.Stat(state)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("state file %v, %v; want mode 0600", fi, err)
	}

	// An hour later, the agent restarts: 17 is the same QP, 18 another
	// process's that reuses the number, 19 gone, 20 new.
	host.SetQPs(dev.Index, qp(17, rdmanl.QPStateInit, 42), qp(18, rdmanl.QPStateErr, 43), qp(20, rdmanl.QPStateInit, 42))
	clock.set(t0.Add(time.Hour))
	var rep agentapi.CheckReport
	logs = runAgent(t, host, proc, clock, o, func(sock string, logs *syncBuffer) bool {
		if !strings.Contains(logs.String(), "restored histories reconciled") {
			return false
		}
		clock.set(t0.Add(time.Hour + 10*time.Second))
		rep, err = agentapi.Ask(context.Background(), sock, leakwatch.Query{MinAge: 5 * time.Second}, 0)
		return err == nil
	})
	for _, want := range []string{`msg="history restored" source=agent path=` + state + " qps=3", `msg="restored histories reconciled" source=agent qps=3 kept=1 new=1 gone=1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log without %q:\n%s", want, logs)
		}
	}
	if diff := cmp.Diff(map[uint32]string{17: "never-connected-qp 1h0m10s", 18: "stale-error-qp 10s", 20: "never-connected-qp 10s"}, qpAges(rep)); diff != "" {
		t.Errorf("findings after the restart (-want +got):\n%s", diff)
	}
	if !rep.ObservedSince.Equal(t0) {
		t.Errorf("observed since %v, want the first start %v", rep.ObservedSince, t0)
	}

	// Another boot: nothing is restored.
	logs = runAgent(t, host, procWithBoot(t, "boot-2"), clock, o, scanned(3))
	if !strings.Contains(logs, `msg="state file from another boot: the history starts empty"`) || strings.Contains(logs, "history restored") {
		t.Errorf("log after a reboot:\n%s", logs)
	}
}

// The agent starts whatever is at the state file's path, and its stop
// replaces it with the history: a named pipe does not block it.
func TestRunStartsOverAPipe(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	if err := syscall.Mkfifo(state, 0o600); err != nil {
		t.Fatal(err)
	}
	host := rdmanltest.NewHost(rxe)
	host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateInit, 42))
	logs := runAgent(t, host, "", newTestClock(t0), RunOptions{StateFile: state}, func(sock string, _ *syncBuffer) bool {
		st, err := askStatus(context.Background(), sock)
		return err == nil && st.QPs == 1
	})
	if !strings.Contains(logs, `msg="state file ignored: the history starts empty" source=agent path=`+state+` err="agent: load state `+state+`: not a regular file (a named pipe)"`) {
		t.Errorf("log:\n%s", logs)
	}
	if fi, err := os.Lstat(state); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("after the stop: %v, %v; want the saved history", fi, err)
	}
}

// savedState is a state file with one QP, saved in the boot "boot-1".
func savedState(t testing.TB) []byte {
	t.Helper()
	st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	st.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42)}}}})
	f := newStateFile(filepath.Join(t.TempDir(), "state.json"), procWithBoot(t, "boot-1"), "test", slog.New(slog.DiscardHandler))
	if _, _, err := f.save(st, t0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A state file that is not one this agent reads, from another boot, or
// missing, is logged once (Warn when it is not one, Info otherwise) and
// ignored: the history starts empty. A good one is restored.
func TestStateFileIgnored(t *testing.T) {
	good := savedState(t)
	cut := bytes.LastIndexByte(good[:len(good)-1], '\n') + 1 // the end's line
	tests := []struct {
		name  string
		make  func(path string) error
		level string
		want  string
	}{
		{"good", func(p string) error { return os.WriteFile(p, good, 0o600) }, "INFO", `msg="history restored" path=PATH qps=1`},
		{"missing", func(string) error { return nil }, "INFO", `msg="no state file: the history starts empty"`},
		{"another boot", func(p string) error {
			return os.WriteFile(p, bytes.Replace(good, []byte(`"boot-1"`), []byte(`"boot-0"`), 1), 0o600)
		}, "INFO", `msg="state file from another boot: the history starts empty" path=PATH saved=2026-01-01T00:00:00.000Z boot_id=boot-0`},
		{"not JSON", func(p string) error { return os.WriteFile(p, []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o600) },
			"WARN", `err="agent: load state PATH: not an rdmatool agent state file: invalid character 'r' looking for beginning of value"`},
		{"another JSON file", func(p string) error { return os.WriteFile(p, []byte(`{"apiVersion":"v1"}`), 0o600) },
			"WARN", `err="agent: load state PATH: not an rdmatool agent state file: json: unknown field \"apiVersion\""`},
		{"another magic", func(p string) error { return os.WriteFile(p, []byte(`{"magic":"other state"}`), 0o600) },
			"WARN", `not an rdmatool agent state file: magic \"other state\""`},
		{"version 2 (before the protocol)", func(p string) error {
			return os.WriteFile(p, bytes.Replace(good, []byte(`"version":3,`), []byte(`"version":2,`), 1), 0o600)
		}, "INFO", `msg="history restored" path=PATH qps=1`},
		{"version 1 (before creation sites)", func(p string) error {
			return os.WriteFile(p, bytes.Replace(good, []byte(`"version":3,`), []byte(`"version":1,`), 1), 0o600)
		}, "INFO", `msg="history restored" path=PATH qps=1`},
		{"another version", func(p string) error {
			return os.WriteFile(p, bytes.Replace(good, []byte(`"version":3,`), []byte(`"version":99,`), 1), 0o600)
		}, "WARN", `err="agent: load state PATH: version 99; this agent reads versions 1 to 3"`},
		{"cut short at a line", func(p string) error { return os.WriteFile(p, good[:cut], 0o600) },
			"WARN", `err="agent: load state PATH: leakwatch: restore: record 4: EOF"`},
		{"cut short in a line", func(p string) error { return os.WriteFile(p, good[:len(good)/2], 0o600) },
			"WARN", `: unexpected EOF"`},
		{"corrupt", func(p string) error {
			return os.WriteFile(p, bytes.Replace(good, []byte(`"type":"RC"`), []byte(`"type":"RQ"`), 1), 0o600)
		}, "WARN", `type \"RQ\" or state \"ERR\" unknown"`},
		{"larger than 1 GiB", func(p string) error {
			if err := os.WriteFile(p, good, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, maxStateSize+1) // sparse
		}, "WARN", `err="agent: load state PATH: larger than 1073741824 bytes"`},
		{"a record of 20 MB", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			line := bytes.IndexByte(good, '\n') + 1
			f.Write(good[:line]) // the header
			f.Write([]byte(`{"watcher":{"started":"`))
			f.Write(bytes.Repeat([]byte("x"), 20<<20))
			f.Write([]byte("\"}}\n"))
			return f.Close()
		}, "WARN", `err="agent: load state PATH: leakwatch: restore: record 1: a record longer than 1048576 bytes"`},
		{"a key of 900 kB", func(p string) error {
			return os.WriteFile(p, []byte(`{"`+strings.Repeat("k", 900000)+`":1}`+"\n"), 0o600)
		}, "WARN", `not an rdmatool agent state file: json: unknown field \"kkkk`},
		{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o600) },
			"WARN", `err="agent: load state PATH: not a regular file (a named pipe)"`},
		{"link to a good file", func(p string) error {
			target := filepath.Join(filepath.Dir(p), "elsewhere.json")
			if err := os.WriteFile(target, good, 0o600); err != nil {
				return err
			}
			return os.Symlink(target, p)
		}, "WARN", `err="agent: load state PATH: not a regular file (a symbolic link)"`},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) },
			"WARN", `err="agent: load state PATH: not a regular file (a directory)"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			f := newStateFile(path, procWithBoot(t, "boot-1"), "test", slog.New(slog.NewTextHandler(&logs, nil)))
			st := newState(leakwatch.Config{}, func() time.Time { return t0.Add(time.Minute) }, "test")
			f.load(st, t0)
			want := strings.ReplaceAll(tt.want, "PATH", path)
			if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || len(lines[0]) > 2048 || !strings.Contains(lines[0], "level="+tt.level+" ") || !strings.Contains(lines[0], want) {
				t.Errorf("log %.2000q (%d bytes); want one line at %s with %q, at most 2 KiB", logs.String(), logs.Len(), tt.level, want)
			}
			if got := st.Restored().QPs; (tt.level == "INFO" && strings.Contains(tt.want, "restored")) != (got == 1) {
				t.Errorf("%d QPs restored", got)
			}
		})
	}
}

// The state file is written whole or not at all: a save that fails,
// however far it got, leaves what was there and no new file; the file is
// its owner's only; a link at the path is replaced, not followed.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if n, err := writeAtomic(path, 16, write("first")); n != 5 || err != nil {
		t.Fatalf("writeAtomic = %d, %v", n, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode() != 0o600 {
		t.Errorf("written %v, %v; want mode 0600", fi, err)
	}
	interrupted := errors.New("interrupted")
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		write func(io.Writer) error
		want  string
	}{
		{"interrupted", path, func(w io.Writer) error {
			if _, err := io.WriteString(w, "second, cut"); err != nil {
				return err
			}
			return interrupted
		}, "interrupted"},
		{"past the cap", path, write(strings.Repeat("x", 17)), "too large: more than 16 bytes"},
		{"no such directory", filepath.Join(dir, "none", "state.json"), write("x"), "no such file or directory"},
		{"a file for a directory", filepath.Join(notDir, "state.json"), write("x"), "not a directory"},
		{"a directory at the path", dir, write("x"), "file exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := writeAtomic(tt.path, 16, tt.write); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("writeAtomic = %v, want %q", err, tt.want)
			}
			if b, err := os.ReadFile(path); string(b) != "first" || err != nil {
				t.Errorf("the file holds %q, %v after a failed write", b, err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 2 { // state.json and file
				t.Errorf("left in the directory: %v", entries)
			}
		})
	}
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes in a read-only directory")
		}
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, err := writeAtomic(filepath.Join(ro, "state.json"), 16, write("x")); !errors.Is(err, os.ErrPermission) {
			t.Errorf("writeAtomic in a read-only directory = %v", err)
		}
	})
	t.Run("a link at the path", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "target")
		if err := os.WriteFile(target, []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(t.TempDir(), "state.json")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if _, err := writeAtomic(link, 16, write("saved")); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(target); string(b) != "kept" || err != nil {
			t.Errorf("the link's target holds %q, %v", b, err)
		}
		if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("at the path: %v, %v; want the saved file", fi, err)
		}
	})
}

// The history is saved every interval and sooner when the QPs tracked
// change by stateChange; what a crashed save left is removed at the start.
func TestKeepSaves(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	leftover := filepath.Join(dir, ".state.json.123456")
	if err := os.WriteFile(leftover, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := newTestClock(t0)
	st := newState(leakwatch.Config{}, clock.now, "test")
	var logs syncBuffer
	f := newStateFile(path, "", "test", slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	f.load(st, clock.now())
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a crashed save's file is still there: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.keep(ctx, st, time.Hour, time.Millisecond, clock.now); close(done) }()
	defer func() { cancel(); <-done }()
	saves := func() int { return strings.Count(logs.String(), `msg="history saved"`) }

	qps := make([]rdmanl.QP, stateChange)
	for i := range qps {
		qps[i] = qp(uint32(17+i), rdmanl.QPStateInit, 42)
	}
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	st.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: qps[:stateChange-1]}}})
	time.Sleep(50 * time.Millisecond)
	if n := saves(); n != 0 {
		t.Errorf("%d saves after %d new QPs, want none yet", n, stateChange-1)
	}
	st.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: qps}}})
	waitFor(t, "a save after a large change", func() bool { return saves() == 1 })
	clock.set(t0.Add(time.Hour))
	waitFor(t, "a save after the interval", func() bool { return saves() == 2 })
	if _, err := os.Stat(path); err != nil {
		t.Error(err)
	}
}

// state60k is an agent's state tracking 60,000 QPs on rxe0, as a scan
// leaves them: in INIT, owned by 30 processes in cgroups of their own.
func state60k(b *testing.B) *state {
	b.Helper()
	const n = 60000
	st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	qps := make([]rdmanl.QP, n)
	owners := map[uint32]leakwatch.Owner{}
	for i := range qps {
		pid := uint32(1000 + i%30)
		qps[i] = qp(uint32(17+i), rdmanl.QPStateInit, pid)
		qps[i].PDN = uint32(1 + i%30)
		owners[pid] = leakwatch.Owner{TGID: pid, Comm: "qpwork", Cgroup: "/system.slice/qpwork-" + strings.Repeat("x", 20) + ".service"}
	}
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	st.Scan(leakwatch.Scan{Time: t0.Add(123456789), Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: qps, Owners: owners}}})
	return st
}

// BenchmarkStateFile saves and loads the state file of 60,000 QPs: the
// file's bytes a QP and how long a save held the history's lock (its copy,
// locked-ms/op), and for a load the heap the restored histories hold
// a QP (heap-B/qp) and what the load allocated a QP, garbage included
// (alloc-B/qp).
func BenchmarkStateFile(b *testing.B) {
	st := state60k(b)
	path := filepath.Join(b.TempDir(), "state.json")
	f := newStateFile(path, "", "test", slog.New(slog.DiscardHandler))
	b.Run("save", func(b *testing.B) {
		var size int64
		var locked time.Duration
		n := 0
		for b.Loop() {
			began := time.Now()
			snap := st.SaveSnapshot() // what holds the history's lock
			locked += time.Since(began)
			n++
			var err error
			if _, size, err = f.writeSnapshot(snap, t0); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size)/60000, "bytes/qp")
		b.ReportMetric(float64(locked.Microseconds())/1000/float64(n), "locked-ms/op")
	})
	b.Run("load", func(b *testing.B) {
		var ms runtime.MemStats
		var heap, alloc float64
		for b.Loop() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before, allocBefore := ms.HeapAlloc, ms.TotalAlloc
			restored := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
			f.load(restored, t0)
			if n := restored.Restored().QPs; n != 60000 {
				b.Fatalf("%d QPs restored", n)
			}
			runtime.ReadMemStats(&ms)
			alloc = float64(ms.TotalAlloc-allocBefore) / 60000
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap = float64(ms.HeapAlloc-before) / 60000
			runtime.KeepAlive(restored)
		}
		b.ReportMetric(heap, "heap-B/qp")
		b.ReportMetric(alloc, "alloc-B/qp")
	})
}

// A save never writes over a file that is not a state file (state_file
// pointed at agent.yaml by mistake): it fails, and the file stays as it
// was. An empty file and a state file are replaced.
func TestStateSaveSparesAnotherFile(t *testing.T) {
	st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	for _, tt := range []struct {
		name, content string
		replaced      bool
	}{
		{"agent.yaml", "interval: 10s\nmax_qp:\n  rxe0: 40\n", false},
		{"a line longer than the header may be", strings.Repeat("x", 10000), false},
		{"another JSON file", `{"magic":"other state"}` + "\n", false},
		{"empty", "", true},
		{"a state file", string(savedState(t)), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o640); err != nil {
				t.Fatal(err)
			}
			f := newStateFile(path, procWithBoot(t, "boot-1"), "test", slog.New(slog.DiscardHandler))
			_, _, err := f.save(st, t0)
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.replaced {
				if err != nil || !bytes.HasPrefix(b, []byte(`{"magic":"rdmatool agent state"`)) {
					t.Errorf("save: %v; file %.80q; want the history saved over it", err, b)
				}
				return
			}
			if !errors.Is(err, errNotState) || !strings.Contains(err.Error(), "not writing over it") {
				t.Errorf("save: %v, want errNotState", err)
			}
			if string(b) != tt.content {
				t.Errorf("the file is now %.80q, want it as it was", b)
			}
		})
	}
}

// A second agent on the same state file is refused while the first runs,
// before it touches the file; once the first stopped, it starts.
func TestStateFileInUse(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	d := watch.Deps{Log: slog.New(slog.DiscardHandler), Dial: dialer(rdmanltest.NewHost(rxe))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	first := filepath.Join(dir, "first.sock")
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: first, NoProbes: true, retry: time.Hour, StateFile: state})
	}()
	waitFor(t, "the first agent", func() bool { _, err := askStatus(context.Background(), first); return err == nil })
	err := Run(context.Background(), d, RunOptions{Socket: filepath.Join(dir, "second.sock"), NoProbes: true, retry: time.Hour, StateFile: state})
	if !errors.Is(err, ErrStateInUse) || !strings.Contains(err.Error(), "agent: state file "+state+": in use by another agent ("+state+".lock is locked)") {
		t.Errorf("a second agent on the state file: %v, want ErrStateInUse", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "second.sock")); err == nil {
		t.Error("the refused agent left its socket")
	}
	stopRun(t, cancel, done)
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: first, NoProbes: true, retry: time.Hour, StateFile: state})
	}()
	waitFor(t, "the agent started again", func() bool { _, err := askStatus(context.Background(), first); return err == nil })
	stopRun(t, cancel, done)
}

// FuzzStateFile loads any state file: no panic; the history is restored,
// or starts empty with one log line of at most 2 KiB saying why.
func FuzzStateFile(f *testing.F) {
	good := savedState(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte(`"version":3,`), []byte(`"version":1,`), 1))
	f.Add([]byte("interval: 10s\n"))
	f.Add([]byte(`{"magic":"rdmatool agent state","version":3,"boot_id":"boot-1"}` + "\n" + `{"watcher":{}}` + "\n"))
	proc := procWithBoot(f, "boot-1")
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		sf := newStateFile(path, proc, "test", slog.New(slog.NewTextHandler(&logs, nil)))
		st := newState(leakwatch.Config{}, func() time.Time { return t0.Add(time.Minute) }, "test")
		sf.load(st, t0)
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 1 || len(lines[0]) > 2048 {
			t.Errorf("load logged %d lines, %d bytes: %.300q; want one of at most 2 KiB", len(lines), logs.Len(), logs.String())
		}
	})
}
