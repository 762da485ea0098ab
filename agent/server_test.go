package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	rxe = rdmanl.Device{Index: 1, Name: "rxe0"}
	siw = rdmanl.Device{Index: 2, Name: "siw0"}
)

func qp(lqpn uint32, state rdmanl.QPState, pid uint32) rdmanl.QP {
	return rdmanl.QP{LQPN: lqpn, Type: rdmanl.QPTypeRC, State: state, Port: 1, Owner: rdmanl.Owner{PID: pid}}
}

// dialer dials host's clients as watch.Deps.Dial does.
func dialer(host *rdmanltest.Host) func() (watch.Netlink, error) {
	return func() (watch.Netlink, error) { return host.Dial(), nil }
}

// askStatus asks the agent on sock for its status (GET /v1/status).
func askStatus(ctx context.Context, sock string) (agentapi.Status, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/status", nil)
	if err != nil {
		return agentapi.Status{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return agentapi.Status{}, err
	}
	defer resp.Body.Close()
	var st agentapi.Status
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /v1/status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// serveIdle serves the agent's API over a history of rxe0's QP 17 in ERR,
// as Run does (listen, newServer), with connections idle for longer than
// idle closed, until the test ends.
func serveIdle(t *testing.T, idle time.Duration) string {
	t.Helper()
	st := watch.NewState(leakwatch.Config{}, time.Now)
	st.Scan(leakwatch.Scan{Time: time.Now(), Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42)}}}})
	srv := newServer(agentapi.Handler(st, "test"), slog.New(slog.DiscardHandler), idle, new(atomic.Int64))
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return sock
}

func TestListen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "rdmatool")
	sock := filepath.Join(dir, "agent.sock")
	ln, err := listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	if m := mode(sock); m.Type() != os.ModeSocket || m.Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket 0600", m)
	}
	if m := mode(dir); !m.IsDir() || m.Perm()&^0o755 != 0 {
		t.Errorf("directory mode %v, want at most 0755", m)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the socket", len(entries))
	}
	// A second agent must not take the socket of a live one.
	if _, err := listen(sock); err == nil || !strings.Contains(err.Error(), "another agent is listening") {
		t.Errorf("listen over a live agent: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
	// A stale socket is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	ln, err = listen(sock)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect to the new socket: %v", err)
	}
	conn.Close()
	ln.Close()
	// Anything else is left alone.
	if err := os.WriteFile(sock, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(sock); !errors.Is(err, os.ErrExist) {
		t.Errorf("listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(sock); string(b) != "data" {
		t.Errorf("the regular file was changed")
	}
}

// Any path a unix socket can have is one the agent listens on, however
// deep its directory (the socket was staged in a directory below it, at a
// path up to 18 bytes longer, and a short name in a deep directory failed
// with "bind: invalid argument"); a longer one is refused, saying why.
func TestListenLongPath(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, strings.Repeat("d", agentapi.MaxSocketPath-len(tmp)-3))
	sock := filepath.Join(dir, "a")
	if len(sock) != agentapi.MaxSocketPath {
		t.Fatalf("socket path of %d bytes, want %d", len(sock), agentapi.MaxSocketPath)
	}
	ln, err := listen(sock)
	if err != nil {
		t.Fatalf("listen on a path of %d bytes: %v", len(sock), err)
	}
	defer ln.Close()
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v, %v; want a socket 0600", fi, err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conn.Close()
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the socket", len(entries))
	}
	long := sock + "b"
	want := `agent: listen on "` + long[:64] + `" (108 bytes): a unix socket's path holds at most 107 bytes`
	if _, err := listen(long); err == nil || err.Error() != want {
		t.Errorf("listen on a path of 108 bytes: %v; want %q", err, want)
	}
	if _, err := os.Lstat(long); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket made at a path of 108 bytes: %v", err)
	}
}

// Run without ib_core: it serves the socket, keeps trying netlink and the
// probes every retry, and on cancel removes the socket and returns nil.
func TestRunWaitsForIBCore(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	dials, opens := make(chan struct{}, 100), make(chan struct{}, 100)
	d := watch.Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (watch.Netlink, error) {
			dials <- struct{}{}
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
		},
		OpenProbes: func(context.Context, *slog.Logger) (watch.EventSource, error) {
			opens <- struct{}{}
			return nil, fmt.Errorf("bpf: open: %w", bpf.ErrNoIBCore)
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, RunOptions{Socket: sock, retry: 10 * time.Millisecond, Version: "test"}) }()
	for _, ch := range []chan struct{}{dials, dials, dials, opens, opens, opens} {
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not retry netlink and the probes")
		}
	}
	st, err := askStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Probes != "off" || st.ProbesError != "bpf: open: ib_core is not loaded" || st.Scans != 0 || st.Version != "test" || st.LastScanSeconds != -1 ||
		st.ScanError != "rdmanl: open netlink socket: protocol not supported" {
		t.Errorf("status %+v", st)
	}
	// qp-leaks gets an error, not an empty report over no devices.
	_, err = watch.Check(t.Context(), watch.Deps{Dial: d.Dial}, watch.CheckOptions{AgentSocket: sock, MinAge: time.Second})
	if want := "agent: the agent on " + sock + " cannot read RDMA netlink: rdmanl: open netlink socket: protocol not supported"; err == nil || err.Error() != want {
		t.Errorf("Check with an agent that cannot scan: %v, want %q", err, want)
	}
	stopRun(t, cancel, done)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Run: %v", err)
	}
}

// Run fails at once, leaving nothing behind, when netlink fails for
// another reason or the socket is taken.
func TestRunStartupFailure(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	d := watch.Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (watch.Netlink, error) {
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EACCES}
		},
	}
	if err := Run(t.Context(), d, RunOptions{Socket: sock}); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Run with netlink refused: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket made although Run failed: %v", err)
	}
	live := serveIdle(t, idleTimeout)
	d.Dial = func() (watch.Netlink, error) {
		return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
	}
	if err := Run(t.Context(), d, RunOptions{Socket: live}); err == nil || !strings.Contains(err.Error(), "another agent is listening") {
		t.Errorf("Run on a live agent's socket: %v", err)
	}
}

// stream is a probe source that yields its events, then fails with err or,
// when err is nil, waits for ctx like a tracer with nothing to read.
type stream struct {
	events []bpf.Event
	err    error
	closed chan struct{}
}

func (s *stream) Events(ctx context.Context) iter.Seq2[bpf.Event, error] {
	return func(yield func(bpf.Event, error) bool) {
		for _, ev := range s.events {
			if !yield(ev, nil) {
				return
			}
		}
		if s.err == nil {
			<-ctx.Done()
			return
		}
		yield(bpf.Event{}, s.err)
	}
}
func (s *stream) Close() error { close(s.closed); return nil }

// When the probe stream fails the agent keeps what it saw, goes on with
// netlink only, says why, and still stops cleanly.
func TestRunProbeStreamFails(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	src := &stream{
		events: []bpf.Event{{Kind: bpf.KindQPCreate, Time: time.Now(), DevIndex: 1, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, TID: 42}},
		err:    errors.New("bpf: read ring buffer: bad"),
		closed: make(chan struct{}),
	}
	d := watch.Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (watch.Netlink, error) {
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
		},
		OpenProbes: func(context.Context, *slog.Logger) (watch.EventSource, error) { return src, nil },
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, RunOptions{Socket: sock, retry: time.Hour}) }()
	select {
	case <-src.closed:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the failed probe source was not closed")
	}
	st, err := askStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Probes != "off" || st.ProbesError != "probe stream failed: bpf: read ring buffer: bad" || st.QPs != 1 {
		t.Errorf("status %+v; want probes off because the stream failed, and the QP it saw", st)
	}
	stopRun(t, cancel, done)
}

// The agent's server closes a keep-alive connection left idle.
func TestIdleConnectionsClosed(t *testing.T) {
	sock := serveIdle(t, 50*time.Millisecond)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /v1/status HTTP/1.1\r\nHost: agent\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The answer, then EOF once the connection sat idle for 50ms: a
	// connection the server kept open would run into the read deadline
	// instead, also one closed only by the 10s ReadTimeout, which
	// net/http takes for the idle timeout when IdleTimeout is unset.
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading until the server closed the idle connection: %v (read %q)", err, b)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.1 200 OK") {
		t.Errorf("answer %q", b)
	}
}

// Idle connections beyond maxConns (a local user opening thousands on
// /metrics or the socket) are not served, and so cost the agent nothing,
// until served ones end: then the next is answered. The server's count
// (rdmatool_agent_connections) follows.
func TestServeLimited(t *testing.T) {
	var served atomic.Int64 // connections the server serves now
	srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }),
		slog.New(slog.DiscardHandler), time.Minute, &served)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveLimited(srv, ln)
	}()
	defer func() {
		srv.Close()
		<-done
	}()
	var idle []net.Conn
	for range maxConns + 100 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	waitFor(t, "the first connections served", func() bool { return served.Load() >= maxConns })
	time.Sleep(200 * time.Millisecond) // what more would have been taken by now
	if n := served.Load(); n != maxConns {
		t.Errorf("%d idle connections served, want %d", n, maxConns)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	for _, c := range idle {
		c.Close()
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Errorf("GET once the idle connections closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GET not answered 10s after the idle connections closed")
	}
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "no connection counted", func() bool { return served.Load() == 0 })
}
