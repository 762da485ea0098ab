package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
	"go.uber.org/goleak"
)

// stopRun cancels a Run started with done as its result and requires it
// to return nil within a minute.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop")
	}
}

// waitFor polls cond (the agent's goroutines change what it reads) until
// it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The agent scans each device on its own, applies probe events while a
// scan of another device hangs, ends the QPs of a device that goes away,
// and on cancel leaves no goroutine, socket or netlink client behind.
func TestRunPerDevice(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := rdmanltest.NewHost(rxe, siw)
	host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateErr, 0))
	host.SetQPs(siw.Index, qp(3, rdmanl.QPStateRTS, 0))
	src := &stream{closed: make(chan struct{}), events: []bpf.Event{
		{Kind: bpf.KindQPCreate, Time: time.Now(), DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7, Comm: "app"},
		{Kind: bpf.KindDeviceEvent, Time: time.Now(), DevIndex: rxe.Index, DevName: rxe.Name, IBEvent: bpf.IBEventDeviceFatal},
	}}
	d := watch.Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       dialer(host),
		OpenProbes: func(context.Context, *slog.Logger) (watch.EventSource, error) { return src, nil },
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, Reconcile: 10 * time.Millisecond, retry: time.Hour, Version: "test"})
	}()
	status := func() agentapi.Status {
		st, err := askStatus(context.Background(), sock)
		if err != nil {
			return agentapi.Status{}
		}
		return st
	}
	waitFor(t, "both devices scanned and the probe's QP", func() bool {
		st := status()
		return st.Probes == "on" && host.Dumps("rxe0") > 1 && host.Dumps("siw0") > 1 && st.QPs == 3
	})
	// siw0's dump hangs: rxe0 is still scanned and its history current.
	host.Block("siw0")
	before := host.Dumps("rxe0")
	waitFor(t, "rxe0 scanned while siw0's dump hangs", func() bool { return host.Dumps("rxe0") > before+3 })

	// siw0 goes away: its scanner stops and its QPs end.
	host.Set([]rdmanl.Device{rxe}, map[uint32][]rdmanl.QP{rxe.Index: {qp(17, rdmanl.QPStateErr, 0)}})
	waitFor(t, "siw0 gone", func() bool {
		st := status()
		return slices.Equal(st.Devices, []string{"rxe0"}) && st.QPs == 1
	})
	if st := status(); st.ScanError != "" {
		t.Errorf("scan error %q after siw0 went away", st.ScanError)
	}
	rep, err := agentapi.Ask(context.Background(), sock, leakwatch.Query{MinAge: 0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Rule, Device string
		QPN          uint32
	}
	var findings []got
	for _, f := range rep.Findings {
		findings = append(findings, got{f.Rule, f.Device, f.QPN})
	}
	if diff := cmp.Diff([]got{{leakwatch.RuleStaleErrorQP, "rxe0", 17}}, findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	stopRun(t, cancel, done)
	select {
	case <-src.closed:
	default:
		t.Error("the probes were not closed")
	}
	if n := host.Open(); n != 0 {
		t.Errorf("%d netlink clients left open", n)
	}
}

// SIGTERM stops the agent whatever a reload is doing: a reload blocked
// for good (a file system that hangs) holds back neither the cancellation
// nor Run's return, and is logged as still running.
func TestRunStopsDuringReload(t *testing.T) {
	// Keep SIGHUP from killing the test binary whatever the timing.
	ignore := make(chan os.Signal, 1)
	signal.Notify(ignore, syscall.SIGHUP)
	defer signal.Stop(ignore)

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reloaded := make(chan struct{})
	reload := func() (Reloadable, error) {
		once.Do(func() { close(entered) })
		<-release
		defer close(reloaded)
		return Reloadable{}, errors.New("released")
	}
	// The reload is released, and its goroutine ends, before the test
	// returns.
	t.Cleanup(func() {
		close(release)
		<-reloaded
	})
	var logs syncBuffer
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: dialer(rdmanltest.NewHost(rxe))}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, NoProbes: true, retry: time.Hour, Reload: reload})
	}()
	waitFor(t, "the agent answering", func() bool {
		_, err := askStatus(context.Background(), sock)
		return err == nil
	})
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("SIGHUP did not reload")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop within 10s of its cancellation while a reload was blocked")
	}
	if !strings.Contains(logs.String(), `msg="stopping during a configuration reload, which is left unfinished"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}

// A SIGHUP while the state file loads (before the agent serves) does not
// kill the agent: it is a reload, made once the agent serves.
func TestSIGHUPWhileTheStateLoads(t *testing.T) {
	reloads := make(chan struct{}, 4)
	reload := func() (Reloadable, error) {
		reloads <- struct{}{}
		return Reloadable{}, nil
	}
	var logs syncBuffer
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: dialer(rdmanltest.NewHost(rxe))}
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	hupped := make(chan struct{})
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, NoProbes: true, retry: time.Hour, Reload: reload,
			StateFile: filepath.Join(dir, "state.json"), beforeLoad: func() {
				syscall.Kill(os.Getpid(), syscall.SIGHUP)
				close(hupped)
			}})
	}()
	<-hupped
	select {
	case <-reloads:
	case err := <-done:
		t.Fatalf("Run ended after a SIGHUP while its state loaded: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the SIGHUP while the state loaded made no reload")
	}
	if _, err := askStatus(context.Background(), sock); err != nil {
		t.Errorf("the agent does not answer after the SIGHUP: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
