package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
)

// stuckDisk is a state file's writing that blocks, as on a file system
// that hangs, until released; then it writes as writeAtomic does, unless
// the test is over.
type stuckDisk struct {
	calls     atomic.Int32
	blocked   chan struct{} // closed when a write blocks
	release   chan struct{}
	released  atomic.Bool
	abandoned atomic.Bool
}

func newStuckDisk(t *testing.T) *stuckDisk {
	d := &stuckDisk{blocked: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { // a writer left blocked returns, and writes nothing in a removed directory
		d.abandoned.Store(true)
		d.unblock()
	})
	return d
}

func (d *stuckDisk) write(path string, maxSize int64, write func(io.Writer) error) (int64, error) {
	if d.calls.Add(1) == 1 {
		close(d.blocked)
	}
	<-d.release
	if d.abandoned.Load() {
		return 0, errors.New("the test is over")
	}
	return writeAtomic(path, maxSize, write)
}

func (d *stuckDisk) unblock() {
	if d.released.CompareAndSwap(false, true) {
		close(d.release)
	}
}

// awaitBlocked waits for a write to block.
func (d *stuckDisk) awaitBlocked(t *testing.T) {
	t.Helper()
	select {
	case <-d.blocked:
	case <-time.After(time.Minute):
		t.Fatal("no save began writing")
	}
}

// within fails the test unless call returns within a second.
func within(t *testing.T, what string, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { call(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("%s did not return within a second while a save was writing", what)
	}
}

// saveMetrics checks what the agent's metrics say of the saves: whether
// one is being written, and how many ended ok, failed or timed out.
func saveMetrics(t *testing.T, st *state, inFlight float64, ok, failed, timeout float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(st))
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		fams[f.GetName()] = f
	}
	got := map[string]float64{}
	for _, k := range []string{"in_flight", "ok", "failed", "timeout"} {
		var v float64
		var found bool
		if k == "in_flight" {
			v, found = value(fams, "rdmatool_state_save_in_flight", nil)
		} else {
			v, found = value(fams, "rdmatool_state_saves_total", map[string]string{"result": k})
		}
		if !found {
			v = -1
		}
		got[k] = v
	}
	want := map[string]float64{"in_flight": inFlight, "ok": ok, "failed": failed, "timeout": timeout}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rdmatool_state_save_in_flight and rdmatool_state_saves_total by result (-want +got):\n%s", diff)
	}
}

// A save holds the history's lock only to copy it: while its writing
// hangs, the history answers (Status, the socket's and the metrics'
// reads) and takes scans, and what is written is the history as copied.
func TestSaveWritesWithoutTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	st.saves.kept = true
	st.SetDevices([]rdmanl.Device{rxe}, nil, t0)
	st.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateInit, 42)}}}})
	f := newStateFile(path, "", "test", slog.New(slog.DiscardHandler))
	disk := newStuckDisk(t)
	f.write = disk.write

	saved := make(chan struct{})
	go func() { f.saveLogged(context.Background(), st, t0, time.Minute); close(saved) }()
	disk.awaitBlocked(t)
	within(t, "Status", func() { st.Status() })
	within(t, "a scan", func() {
		st.Scan(leakwatch.Scan{Time: t0.Add(time.Second), Devices: []leakwatch.DeviceScan{{Device: rxe,
			QPs: []rdmanl.QP{qp(17, rdmanl.QPStateInit, 42), qp(18, rdmanl.QPStateInit, 42)}}}})
	})
	within(t, "a scrape", func() { saveMetrics(t, st, 1, 0, 0, 0) })
	if n := st.Status().QPs; n != 2 {
		t.Errorf("%d QPs after the scan, want 2", n)
	}
	disk.unblock()
	<-saved
	saveMetrics(t, st, 0, 1, 0, 0)
	restored := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	newStateFile(path, "", "test", slog.New(slog.DiscardHandler)).load(restored, t0)
	if r := restored.Restored(); r.QPs != 1 {
		t.Errorf("%d QPs in the file, want the 1 the history held when the save began", r.QPs)
	}
}

// A save whose writing does not return within its deadline is given up:
// counted as a timeout and logged once (Warn); while it has not returned
// no other save begins (one writer at most on a file system that hangs),
// and the first save after it returned is written: saving "succeeded
// again".
func TestSaveTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
	st.saves.kept = true
	var logs syncBuffer
	f := newStateFile(path, "", "test", slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	disk := newStuckDisk(t)
	f.write = disk.write
	ctx := context.Background()

	f.saveLogged(ctx, st, t0, 10*time.Millisecond)
	disk.awaitBlocked(t)
	saveMetrics(t, st, 1, 0, 0, 1)
	for i := range 3 {
		f.saveLogged(ctx, st, t0.Add(time.Duration(i+1)*time.Minute), 10*time.Millisecond)
	}
	if n := disk.calls.Load(); n != 1 {
		t.Errorf("%d writes began while the first had not returned, want 1", n)
	}
	if n := strings.Count(logs.String(), `level=WARN msg="saving the history timed out: it will not survive a restart until a save ends" path=`+path+" timeout_seconds=0.01"); n != 1 {
		t.Errorf("the timeout logged %d times, want once:\n%s", n, logs.String())
	}
	saveMetrics(t, st, 1, 0, 0, 1)

	disk.unblock()
	waitFor(t, "the stuck save to return", func() bool { return !st.saves.copy().writing })
	saveMetrics(t, st, 0, 0, 0, 1) // counted once, as a timeout
	f.saveLogged(ctx, st, t0.Add(time.Hour), time.Minute)
	if n := disk.calls.Load(); n != 2 {
		t.Errorf("%d writes after the stuck one returned, want 2", n)
	}
	saveMetrics(t, st, 0, 1, 0, 1)
	if n, m := strings.Count(logs.String(), `level=INFO msg="saving the history succeeded again"`), strings.Count(logs.String(), `level=DEBUG msg="history saved"`); n != 1 || m != 1 {
		t.Errorf("the stuck save's return logged %d successes again, the next save %d saves; want 1 and 1:\n%s", n, m, logs.String())
	}
	if _, err := os.Stat(path); err != nil {
		t.Error(err)
	}
}

// SIGTERM always wins: the save at the stop is given up after its bound,
// whether its own writing hangs or an earlier save's has not returned
// (then no other begins), and Run returns nil, its log saying the history
// was not saved.
func TestRunStopSaveGivesUp(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration // between saves
		want     string
	}{
		{"the stop's save hangs", time.Hour, `level=WARN msg="stopping without saving the history: its save did not end in time" source=agent path=PATH timeout_seconds=0.2`},
		{"an earlier save hangs", 20 * time.Millisecond, `level=WARN msg="stopping without saving the history: an earlier save has not ended" source=agent path=PATH timeout_seconds=0.2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			disk := newStuckDisk(t)
			host := rdmanltest.NewHost(rxe)
			host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateInit, 42))
			var logs syncBuffer
			d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Dial: dialer(host), Now: time.Now}
			o := RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond, Reconcile: time.Hour,
				retry: time.Hour, Version: "test", NoProbes: true, StateFile: path, StateInterval: tt.interval,
				stateStop: 200 * time.Millisecond, writeState: disk.write}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Run(ctx, d, o) }()
			waitFor(t, "the agent", func() bool {
				st, err := askStatus(context.Background(), o.Socket)
				return err == nil && st.Scans > 0
			})
			if tt.interval < time.Second {
				waitFor(t, "a save to time out", func() bool { return strings.Contains(logs.String(), "saving the history timed out") })
			}
			stopped := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return with its save hanging")
			}
			took := time.Since(stopped)
			if took > 5*time.Second {
				t.Errorf("Run returned %v after the cancel, its save bounded to 200ms", took)
			}
			if want := strings.ReplaceAll(tt.want, "PATH", path); !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), `msg=stopped`) {
				t.Errorf("log without %q and the stop, after %v:\n%s", want, took, logs.String())
			}
			if n := disk.calls.Load(); n != 1 {
				t.Errorf("%d saves began writing, want 1: none while one hangs", n)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file: %v; want none written", err)
			}
			t.Logf("Run returned %v after the cancel", took.Round(time.Millisecond))
		})
	}
}
