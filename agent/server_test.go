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
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t0.Add(d)
	return c.t
}

var (
	rxe = rdmanl.Device{Index: 1, Name: "rxe0"}
	siw = rdmanl.Device{Index: 2, Name: "siw0"}
)

func qp(lqpn uint32, state rdmanl.QPState, pid uint32) rdmanl.QP {
	return rdmanl.QP{LQPN: lqpn, Type: rdmanl.QPTypeRC, State: state, Port: 1, Owner: rdmanl.Owner{PID: pid}}
}

// history is an agent state after 60s: rxe0 QP 17 in ERR and QP 18 in
// INIT since 0s, siw0 QP 20 in ERR since 50s.
func history(t *testing.T) (*State, *clock) {
	t.Helper()
	c := &clock{t: t0}
	st := NewState(leakwatch.Config{ProbesReason: "no BTF"}, c.now, "v1.2.3")
	st.setDevices([]rdmanl.Device{rxe, siw}, nil, t0)
	owners := map[uint32]leakwatch.Owner{42: {Comm: "app", Cgroup: "/system.slice/app.service"}}
	for _, at := range []time.Duration{0, 50 * time.Second} {
		s := leakwatch.Scan{Started: c.set(at), Time: c.set(at), Devices: []leakwatch.DeviceScan{
			{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPStateInit, 42)}, Owners: owners},
			{Device: siw, QPs: []rdmanl.QP{qp(20, rdmanl.QPStateReset, 43)}},
		}}
		if at > 0 {
			s.Devices[1].QPs[0].State = rdmanl.QPStateErr
		}
		st.Scan(s)
	}
	st.Zombies(&leakwatch.Zombies{}, c.set(55*time.Second)) // a look at the processes found none
	st.setLost(3)
	c.set(60 * time.Second)
	return st, c
}

// serve runs the agent's handler over st on a unix socket in a temporary
// directory until the test ends.
func serve(t *testing.T, st *State) string {
	t.Helper()
	return serveIdle(t, st, idleTimeout)
}

// serveIdle is serve with the agent's server closing connections idle for
// longer than idle.
func serveIdle(t *testing.T, st *State, idle time.Duration) string {
	t.Helper()
	return serveWith(t, newServer(NewHandler(st), slog.New(slog.DiscardHandler), idle))
}

// serveWith runs srv on a fresh unix socket until the test ends.
func serveWith(t *testing.T, srv *http.Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(sock)
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

type leak struct {
	Rule, Device string
	QPN, PID     uint32
	Age          float64
}

func leaks(rep CheckReport) []leak {
	out := []leak{}
	for _, f := range rep.Findings {
		out = append(out, leak{f.Rule, f.Device, f.QPN, f.PID, f.AgeSeconds})
	}
	return out
}

func TestAsk(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	tests := []struct {
		name        string
		o           CheckOptions
		want        []leak
		wantDevices []string
		wantSkipped int
	}{
		{"defaults of the CLI", CheckOptions{MinAge: 5 * time.Second}, []leak{
			{"stale-error-qp", "rxe0", 17, 42, 60}, {"never-connected-qp", "rxe0", 18, 42, 60}, {"stale-error-qp", "siw0", 20, 43, 10},
		}, []string{"rxe0", "siw0"}, 5},
		{"longer than siw0's ERR", CheckOptions{MinAge: 30 * time.Second}, []leak{
			{"stale-error-qp", "rxe0", 17, 42, 60}, {"never-connected-qp", "rxe0", 18, 42, 60},
		}, []string{"rxe0", "siw0"}, 5},
		{"one device", CheckOptions{Device: "siw0", MinAge: time.Second}, []leak{
			{"stale-error-qp", "siw0", 20, 43, 10},
		}, []string{"siw0"}, 5},
		{"one rule", CheckOptions{MinAge: time.Second, Rules: []string{"never-connected-qp"}}, []leak{
			{"never-connected-qp", "rxe0", 18, 42, 60},
		}, []string{"rxe0", "siw0"}, 0},
		{"max_qp", CheckOptions{MinAge: time.Second, Rules: []string{"qp-exhaustion"}, MaxQP: map[string]uint64{"rxe0": 2, "siw0": 1}}, []leak{
			{"qp-exhaustion", "rxe0", 0, 0, 0}, {"qp-exhaustion", "siw0", 0, 0, 0},
		}, []string{"rxe0", "siw0"}, 0},
	}
	// With --no-probes, the probe rules are skipped as in a local run.
	st.SetProbes(true, "")
	rep, err := Ask(t.Context(), sock, CheckOptions{MinAge: 5 * time.Second, NoProbes: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "off" || rep.ProbesError != "disabled by --no-probes" || len(rep.SkippedRules) != 5 ||
		rep.SkippedRules[0].Reason != "needs the eBPF probes: disabled by --no-probes" || len(rep.Findings) != 3 {
		t.Errorf("--no-probes report: probes %s (%s), skipped %+v, %d findings", rep.Probes, rep.ProbesError, rep.SkippedRules, len(rep.Findings))
	}
	if rep, err = Ask(t.Context(), sock, CheckOptions{MinAge: 5 * time.Second}); err != nil || rep.Probes != "on" || len(rep.SkippedRules) != 1 {
		t.Errorf("report with probes: %+v, %v", rep, err)
	}
	st.SetProbes(false, "no BTF")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Ask(t.Context(), sock, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, leaks(rep)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDevices, rep.Devices); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if rep.Source != "agent" || !rep.ObservedSince.Equal(t0) || rep.ObservedSeconds != 60 || rep.Scans != 4 ||
				rep.Probes != "off" || rep.ProbesError != "no BTF" || rep.LostEvents != 3 || len(rep.SkippedRules) != tt.wantSkipped {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

// The answer is the JSON object qp-leaks prints, field for field, with
// the agent's source and start.
func TestQPLeaksJSON(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	body := rawGet(t, sock, "/v1/qp-leaks?dev=rxe0&min_age=1m&rule=stale-error-qp", http.StatusOK)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"findings", "skipped_rules", "observed_seconds", "qps", "probes", "probes_error", "lost_events", "scans", "devices", "source", "observed_since"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("no %q in %s", f, body)
		}
	}
	if got := string(fields["source"]); got != `"agent"` {
		t.Errorf("source %s", got)
	}
	if got := string(fields["observed_since"]); got != `"2026-01-01T00:00:00Z"` {
		t.Errorf("observed_since %s", got)
	}
	var findings []map[string]json.RawMessage
	if err := json.Unmarshal(fields["findings"], &findings); err != nil || len(findings) != 1 {
		t.Fatalf("findings %s: %v", fields["findings"], err)
	}
	if got := string(findings[0]["cgroup"]); got != `"/system.slice/app.service"` {
		t.Errorf("cgroup %s", got)
	}
}

func rawGet(t *testing.T, sock, path string, wantCode int) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://agent" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Errorf("GET %s: %s, want %d: %s", path, resp.Status, wantCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: content type %q", path, ct)
	}
	return string(b)
}

func TestBadQueries(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	tests := []struct {
		path string
		code int
		want string
	}{
		{"/v1/qp-leaks?rule=bogus", 400, `agent: query: leakwatch: unknown rule \"bogus\" (valid: stale-error-qp, `},
		{"/v1/qp-leaks?min_age=5", 400, `agent: min_age \"5\": want a duration such as 5s`},
		{"/v1/qp-leaks?min_age=-1s", 400, `agent: min_age \"-1s\"`},
		{"/v1/qp-leaks?min_age=1s&min_age=2s", 400, `agent: parameter min_age given 2 times`},
		{"/v1/qp-leaks?watch=10s", 400, `agent: unknown parameter \"watch\"`},
		{"/v1/qp-leaks?max_qp=rxe0", 400, `agent: query: leakwatch: max_qp \"rxe0\": want DEV=N with N \u003e 0`},
		{"/v1/qp-leaks?no_probes=maybe", 400, `agent: no_probes \"maybe\": want 1 or 0`},
		{"/v1/qp-leaks?limit=-1", 400, `agent: limit \"-1\": want a number of findings, 0 for all`},
		{"/v1/qp-leaks?limit=99999999999", 400, `agent: limit \"99999999999\"`},
		{"/v1/qp-leaks?dev=mlx5_0", 404, `agent: no RDMA device \"mlx5_0\"`},
		{"/v1/status?x=1", 400, `agent: /v1/status takes no parameters`},
		{"/v2/qp-leaks", 404, `agent: no such endpoint \"GET\" \"/v2/qp-leaks\"`},
		{"//v1/status", 404, `agent: no such endpoint \"GET\" \"//v1/status\"`},
		{"/v1/./status", 404, `agent: no such endpoint \"GET\" \"/v1/./status\"`},
		{"/v1/qp-leaks?dev=rxe0;x", 400, `agent: malformed query \"dev=rxe0;x\"`},
		{"/v1/qp-leaks?min_age=%zz", 400, `agent: malformed query \"min_age=%zz\"`},
		{"/v1/status?%", 400, `agent: malformed query \"%\"`},
		{"/v1/qp-leaks?dev=" + strings.Repeat("x", 10000), 404, `agent: no RDMA device \"` + strings.Repeat("x", 64) + `\" (10000 bytes)`},
		// leakwatch quotes a rule in full: the answer cuts the text.
		{"/v1/qp-leaks?rule=" + strings.Repeat("x", 10000), 400, `agent: query: leakwatch: unknown rule \"xxxx`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			body := rawGet(t, sock, tt.path, tt.code)
			if !strings.HasPrefix(body, `{"error":"`+tt.want) || strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "}\n") || len(body) > 1024 {
				t.Errorf("body %q, want one line {\"error\":%q...}", body, tt.want)
			}
		})
	}
	// The client turns them into errors that carry the agent's message.
	_, err := Ask(t.Context(), sock, CheckOptions{Device: "mlx5_0"})
	if err == nil || !strings.Contains(err.Error(), `agent: no RDMA device "mlx5_0" (HTTP 404)`) || errors.Is(err, ErrNoAgent) {
		t.Errorf("Ask for an unknown device: %v", err)
	}
}

func TestStatus(t *testing.T) {
	st, c := history(t)
	st.SetProbes(true, "")
	st.scanFailed("rxe0", errors.New("rdmanl: dump QPs of rxe0: interrupted"))
	c.set(62 * time.Second)
	sock := serve(t, st)
	got, err := AskStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	want := Status{Version: "v1.2.3", Started: t0, Probes: "on", Scans: 4, ScanError: "rdmanl: dump QPs of rxe0: interrupted",
		LastScanSeconds: 12, Devices: []string{"rxe0", "siw0"}, QPs: 3, LostEvents: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestAskWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	// A socket file that nobody accepts on, left by an agent that died.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	// Something else answers HTTP on a socket.
	other := filepath.Join(dir, "other.sock")
	oln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "{}") })}
	go srv.Serve(oln)
	t.Cleanup(func() { srv.Close() })
	tests := []struct {
		socket    string
		wantNoAgt bool
		want      string
	}{
		{filepath.Join(dir, "missing.sock"), true, "no agent is listening"},
		{stale, true, "no agent is listening"},
		{other, false, "the answer is not an agent report"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.socket), func(t *testing.T) {
			_, err := Ask(t.Context(), tt.socket, CheckOptions{MinAge: time.Second})
			if err == nil || errors.Is(err, ErrNoAgent) != tt.wantNoAgt || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "agent: ask "+tt.socket) {
				t.Errorf("Ask: %v; want an error, ErrNoAgent %v, containing %q", err, tt.wantNoAgt, tt.want)
			}
		})
	}
}

func TestListen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "rdmatool")
	sock := filepath.Join(dir, "agent.sock")
	ln, err := Listen(sock)
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
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another agent is listening") {
		t.Errorf("Listen over a live agent: %v", err)
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
	ln, err = Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
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
	if _, err := Listen(sock); !errors.Is(err, os.ErrExist) {
		t.Errorf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(sock); string(b) != "data" {
		t.Errorf("the regular file was changed")
	}
}

// The loop feeds the state while the socket answers: go test -race checks
// that they are serialized.
func TestStateConcurrent(t *testing.T) {
	st, c := history(t)
	sock := serve(t, st)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			at := c.set(time.Minute + time.Duration(i)*time.Millisecond)
			st.Event(leakwatch.Event{Kind: leakwatch.EventQPCreated, Time: at, DevIndex: 1, DevName: "rxe0", QPN: uint32(100 + i), QPType: rdmanl.QPTypeRC, TID: 42})
			if i%20 == 0 {
				st.Scan(leakwatch.Scan{Started: at, Time: at, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42)}}}})
				st.setLost(uint64(i))
			}
		}
	}()
	for range 20 {
		if _, err := Ask(t.Context(), sock, CheckOptions{MinAge: time.Second}); err != nil {
			t.Error(err)
		}
		if _, err := AskStatus(t.Context(), sock); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
}

// Run without ib_core: it serves the socket, keeps trying netlink and the
// probes every Retry, and on cancel removes the socket and returns nil.
func TestRunWaitsForIBCore(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	dials, opens := make(chan struct{}, 100), make(chan struct{}, 100)
	d := Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (Netlink, error) {
			dials <- struct{}{}
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
		},
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) {
			opens <- struct{}{}
			return nil, fmt.Errorf("bpf: open: %w", bpf.ErrNoIBCore)
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, RunOptions{Socket: sock, Retry: 10 * time.Millisecond, Version: "test"}) }()
	for _, ch := range []chan struct{}{dials, dials, dials, opens, opens, opens} {
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not retry netlink and the probes")
		}
	}
	st, err := AskStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Probes != "off" || st.ProbesError != "bpf: open: ib_core is not loaded" || st.Scans != 0 || st.Version != "test" || st.LastScanSeconds != -1 ||
		st.ScanError != "rdmanl: open netlink socket: protocol not supported" {
		t.Errorf("status %+v", st)
	}
	// qp-leaks gets an error, not an empty report over no devices.
	_, err = Check(t.Context(), Deps{Dial: d.Dial}, CheckOptions{AgentSocket: sock, MinAge: time.Second})
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
	d := Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (Netlink, error) {
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EACCES}
		},
	}
	if err := Run(t.Context(), d, RunOptions{Socket: sock}); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Run with netlink refused: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket made although Run failed: %v", err)
	}
	st, _ := history(t)
	live := serve(t, st)
	d.Dial = func() (Netlink, error) {
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
	d := Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func() (Netlink, error) {
			return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
		},
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil },
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, RunOptions{Socket: sock, Retry: time.Hour}) }()
	select {
	case <-src.closed:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the failed probe source was not closed")
	}
	st, err := AskStatus(t.Context(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Probes != "off" || st.ProbesError != "probe stream failed: bpf: read ring buffer: bad" || st.QPs != 1 {
		t.Errorf("status %+v; want probes off because the stream failed, and the QP it saw", st)
	}
	stopRun(t, cancel, done)
}

// Check observes locally only when no agent is there; an agent that
// refuses the question is reported, not bypassed.
func TestCheckReportsTheAgentsRefusal(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	dialed := false
	d := Deps{Dial: func() (Netlink, error) {
		dialed = true
		return nil, &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
	}}
	_, err := Check(t.Context(), d, CheckOptions{AgentSocket: sock, Device: "mlx5_0", MinAge: time.Second, Watch: time.Second})
	var ae *AskError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), `agent: no RDMA device "mlx5_0" (HTTP 404)`) || dialed {
		t.Errorf("Check for a device the agent does not have: %v (observed locally: %v); want the agent's 404", err, dialed)
	}
	_, err = Check(t.Context(), d, CheckOptions{AgentSocket: filepath.Join(t.TempDir(), "none.sock"), MinAge: time.Second, Watch: time.Second})
	if !dialed || !errors.Is(err, syscall.EPROTONOSUPPORT) {
		t.Errorf("Check with no agent: %v (observed locally: %v); want the local observation's netlink error", err, dialed)
	}
}

// Methods other than GET and HEAD get 405 with Allow, as HTTP says.
func TestMethods(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, method := range []string{http.MethodPost, http.MethodDelete, "BREW"} {
		for _, path := range []string{"/v1/qp-leaks", "/v1/status"} {
			req, err := http.NewRequestWithContext(t.Context(), method, "http://agent"+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.HasPrefix(string(body), `{"error":"agent: `+path+` takes GET`) {
				t.Errorf("%s %s: %s, Allow %q, body %s", method, path, resp.Status, resp.Header.Get("Allow"), body)
			}
		}
	}
	resp, err := c.Head("http://agent/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /v1/status: %s", resp.Status)
	}
}

// The agent's server closes a keep-alive connection left idle.
func TestIdleConnectionsClosed(t *testing.T) {
	st, _ := history(t)
	sock := serveIdle(t, st, 50*time.Millisecond)
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

// limit caps the findings listed QP by QP; the summary still counts all.
func TestAskLimit(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	all, err := Ask(t.Context(), sock, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if all.FindingsTotal < 2 || len(all.Findings) != all.FindingsTotal || all.FindingsOmitted != 0 {
		t.Fatalf("limit 0: %d listed of %d, %d omitted", len(all.Findings), all.FindingsTotal, all.FindingsOmitted)
	}
	one, err := Ask(t.Context(), sock, CheckOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	counted := 0
	for _, g := range one.Summary {
		counted += g.Count
	}
	if len(one.Findings) != 1 || one.FindingsOmitted != all.FindingsTotal-1 || one.FindingsTotal != all.FindingsTotal || counted != all.FindingsTotal {
		t.Errorf("limit 1: %d listed, %d omitted, total %d, summary counts %d; all: %d", len(one.Findings), one.FindingsOmitted, one.FindingsTotal, counted, all.FindingsTotal)
	}
}

// TestWriteReportStreams checks that the answer written finding by finding
// is byte for byte what encoding the whole report gives.
func TestWriteReportStreams(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := []leakwatch.Evidence{{Time: t0, Source: "scan", What: "state ERR <&>"}}
	tests := []struct {
		name     string
		findings []leakwatch.Finding
	}{
		{"empty", []leakwatch.Finding{}},
		{"two", []leakwatch.Finding{
			{Rule: "stale-error-qp", Device: "rxe0", QPN: 17, Owner: leakwatch.Owner{Comm: `"findings":[]`}, Evidence: ev},
			{Rule: "stale-error-qp", Device: "rxe0", QPN: 18, AgeSeconds: 1.5, Evidence: []leakwatch.Evidence{}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := CheckReport{Report: leakwatch.Report{
				Summary:  []leakwatch.Group{{Device: "rxe0", Rule: "stale-error-qp", Count: 2, Owner: leakwatch.Owner{Comm: `x"findings":[]`}}},
				Findings: tt.findings, FindingsTotal: len(tt.findings), SkippedRules: []leakwatch.Skipped{},
			}, Devices: []string{"rxe0"}, Source: "agent", ObservedSince: t0}
			want := httptest.NewRecorder()
			writeJSON(want, http.StatusOK, rep)
			got := httptest.NewRecorder()
			writeReport(got, rep)
			if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
				t.Errorf("writeReport (-writeJSON +writeReport):\n%s", diff)
			}
		})
	}
}

// flushHook runs hook when the handler flushes, then flushes.
type flushHook struct {
	http.ResponseWriter
	hook func()
}

func (f *flushHook) Flush() {
	f.hook()
	f.ResponseWriter.(http.Flusher).Flush()
}

// The answer's status goes out before the evaluation (tens of thousands of
// findings take seconds), and a device removed in between is an error in
// the body, which qp-leaks reports as the agent's refusal.
func TestAnswerBeginsBeforeTheEvaluation(t *testing.T) {
	st, _ := history(t)
	var flushes atomic.Int32 // the server's goroutine counts, the test reads
	sock := serveWith(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		NewHandler(st).ServeHTTP(&flushHook{w, func() {
			flushes.Add(1)
			// What the evaluation would see if the device went now.
			st.mu.Lock()
			st.devices = slices.DeleteFunc(slices.Clone(st.devices), func(d string) bool { return d == "siw0" })
			st.mu.Unlock()
		}}, r)
	})})
	_, err := Check(t.Context(), Deps{}, CheckOptions{AgentSocket: sock, Device: "siw0", MinAge: time.Second, AgentTimeout: time.Minute})
	var ae *AskError
	if flushes.Load() != 1 || !errors.As(err, &ae) || !strings.Contains(err.Error(), `agent: no RDMA device "siw0" (removed while answering)`) {
		t.Errorf("siw0 removed once the answer began (flushes %d): %v; want the agent's error, from the body", flushes.Load(), err)
	}
	// rxe0 is still there: its report, begun the same way.
	rep, err := Check(t.Context(), Deps{}, CheckOptions{AgentSocket: sock, Device: "rxe0", MinAge: time.Second, AgentTimeout: time.Minute})
	if err != nil || rep.Source != "agent" || len(rep.Findings) == 0 || flushes.Load() != 2 {
		t.Errorf("rxe0 (flushes %d): %+v, %v", flushes.Load(), rep, err)
	}
	// A device the agent never had is refused before the answer begins.
	_, err = Check(t.Context(), Deps{}, CheckOptions{AgentSocket: sock, Device: "mlx5_9", MinAge: time.Second, AgentTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "HTTP 404") || flushes.Load() != 2 {
		t.Errorf("mlx5_9 (flushes %d): %v; want a 404 with nothing flushed", flushes.Load(), err)
	}
}

// AgentTimeout bounds the wait for an answer to begin, not its transfer:
// an answer listing every finding of 60,000 QPs takes seconds to arrive,
// and must not be cut by the wait meant for an agent that does not answer.
func TestAgentTimeoutBoundsTheAnswersStart(t *testing.T) {
	st, _ := history(t)
	rec := httptest.NewRecorder()
	NewHandler(st).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/qp-leaks?min_age=1s", nil))
	answer := rec.Body.Bytes()
	const wait = 50 * time.Millisecond
	slow := serveWith(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(answer[:len(answer)/2])
		w.(http.Flusher).Flush()
		time.Sleep(4 * wait) // the rest of a long answer, still coming
		w.Write(answer[len(answer)/2:])
	})})
	rep, err := Check(t.Context(), Deps{}, CheckOptions{AgentSocket: slow, MinAge: time.Second, AgentTimeout: wait})
	if err != nil || rep.Source != "agent" {
		t.Errorf("an answer that began at once and took %v to arrive, with AgentTimeout %v: %v", 4*wait, wait, err)
	}

	silent := serveWith(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; the client gives up
	})})
	dialed := false
	d := Deps{Dial: func() (Netlink, error) {
		dialed = true
		return nil, errors.New("observed locally")
	}}
	_, err = Check(t.Context(), d, CheckOptions{AgentSocket: silent, MinAge: time.Second, AgentTimeout: wait})
	var ae *AskError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "timeout awaiting response headers") || dialed {
		t.Errorf("an agent that never answers: %v (observed locally: %v); want an AskError for the answer that did not begin", err, dialed)
	}
}
