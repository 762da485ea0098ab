package watch

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agentapi"
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

// history is a history after 60s: rxe0 QP 17 in ERR and QP 18 in INIT
// since 0s, siw0 QP 20 in ERR since 50s.
func history(t *testing.T) (*State, *clock) {
	t.Helper()
	c := &clock{t: t0}
	st := NewState(leakwatch.Config{ProbesReason: "no BTF"}, c.now)
	st.SetDevices([]rdmanl.Device{rxe, siw}, nil, t0)
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

// serve answers the agent's API (agentapi.Handler, as agent v1.2.3) from
// st on a unix socket in a temporary directory until the test ends.
func serve(t *testing.T, st *State) string {
	t.Helper()
	return serveWith(t, &http.Server{Handler: agentapi.Handler(st, "v1.2.3")})
}

// serveWith runs srv on a fresh unix socket until the test ends.
func serveWith(t *testing.T, srv *http.Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
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

// ask asks the agent on sock what Check would ask it for o.
func ask(t *testing.T, sock string, o CheckOptions) (agentapi.CheckReport, error) {
	return agentapi.Ask(t.Context(), sock, o.query(), o.AgentTimeout)
}

type leak struct {
	Rule, Device string
	QPN, PID     uint32
	Age          float64
}

func leaks(rep agentapi.CheckReport) []leak {
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
		}, []string{"rxe0", "siw0"}, 8},
		{"longer than siw0's ERR", CheckOptions{MinAge: 30 * time.Second}, []leak{
			{"stale-error-qp", "rxe0", 17, 42, 60}, {"never-connected-qp", "rxe0", 18, 42, 60},
		}, []string{"rxe0", "siw0"}, 8},
		{"one device", CheckOptions{Device: "siw0", MinAge: time.Second}, []leak{
			{"stale-error-qp", "siw0", 20, 43, 10},
		}, []string{"siw0"}, 8},
		{"one rule", CheckOptions{MinAge: time.Second, Rules: []string{"never-connected-qp"}}, []leak{
			{"never-connected-qp", "rxe0", 18, 42, 60},
		}, []string{"rxe0", "siw0"}, 0},
		{"max_qp", CheckOptions{MinAge: time.Second, Rules: []string{"qp-exhaustion"}, MaxQP: map[string]uint64{"rxe0": 2, "siw0": 1}}, []leak{
			{"qp-exhaustion", "rxe0", 0, 0, 0}, {"qp-exhaustion", "siw0", 0, 0, 0},
		}, []string{"rxe0", "siw0"}, 0},
	}
	// With --no-probes, the probe rules are skipped as in a local run.
	st.SetProbes(true, "")
	rep, err := ask(t, sock, CheckOptions{MinAge: 5 * time.Second, NoProbes: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "off" || rep.ProbesError != "disabled by --no-probes" || len(rep.SkippedRules) != 8 ||
		rep.SkippedRules[0].Reason != "needs the eBPF probes: disabled by --no-probes" || len(rep.Findings) != 3 {
		t.Errorf("--no-probes report: probes %s (%s), skipped %+v, %d findings", rep.Probes, rep.ProbesError, rep.SkippedRules, len(rep.Findings))
	}
	if rep, err = ask(t, sock, CheckOptions{MinAge: 5 * time.Second}); err != nil || rep.Probes != "on" || len(rep.SkippedRules) != 2 { // qp-exhaustion, and mr-leak before an MR dump
		t.Errorf("report with probes: %+v, %v", rep, err)
	}
	st.SetProbes(false, "no BTF")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ask(t, sock, tt.o)
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

func TestStatus(t *testing.T) {
	st, c := history(t)
	st.SetProbes(true, "")
	st.ScanFailed("rxe0", errors.New("rdmanl: dump QPs of rxe0: interrupted"))
	c.set(62 * time.Second)
	got := st.Status()
	want := agentapi.Status{Started: t0, Probes: "on", Scans: 4, ScanError: "rdmanl: dump QPs of rxe0: interrupted",
		LastScanSeconds: 12, Devices: []string{"rxe0", "siw0"}, QPs: 3, LostEvents: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
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
			st.probeEvent(bpf.KindQPCreate.String(), &leakwatch.Event{Kind: leakwatch.EventQPCreated, Time: at, DevIndex: 1, DevName: "rxe0", QPN: uint32(100 + i), QPType: rdmanl.QPTypeRC, TID: 42})
			if i%20 == 0 {
				st.Scan(leakwatch.Scan{Started: at, Time: at, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42)}}}})
				st.setLost(uint64(i))
			}
		}
	}()
	for range 20 {
		if _, err := ask(t, sock, CheckOptions{MinAge: time.Second}); err != nil {
			t.Error(err)
		}
		st.Status()
	}
	wg.Wait()
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
	var ae *agentapi.AskError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), `agent: no RDMA device "mlx5_0" (HTTP 404)`) || dialed {
		t.Errorf("Check for a device the agent does not have: %v (observed locally: %v); want the agent's 404", err, dialed)
	}
	_, err = Check(t.Context(), d, CheckOptions{AgentSocket: filepath.Join(t.TempDir(), "none.sock"), MinAge: time.Second, Watch: time.Second})
	if !dialed || !errors.Is(err, syscall.EPROTONOSUPPORT) {
		t.Errorf("Check with no agent: %v (observed locally: %v); want the local observation's netlink error", err, dialed)
	}
}

// limit caps the findings listed QP by QP; the summary still counts all.
func TestAskLimit(t *testing.T) {
	st, _ := history(t)
	sock := serve(t, st)
	all, err := ask(t, sock, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if all.FindingsTotal < 2 || len(all.Findings) != all.FindingsTotal || all.FindingsOmitted != 0 {
		t.Fatalf("limit 0: %d listed of %d, %d omitted", len(all.Findings), all.FindingsTotal, all.FindingsOmitted)
	}
	one, err := ask(t, sock, CheckOptions{Limit: 1})
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
		agentapi.Handler(st, "v1.2.3").ServeHTTP(&flushHook{w, func() {
			flushes.Add(1)
			// What the evaluation would see if the device went now.
			st.mu.Lock()
			st.devices = slices.DeleteFunc(slices.Clone(st.devices), func(d string) bool { return d == "siw0" })
			st.mu.Unlock()
		}}, r)
	})})
	_, err := Check(t.Context(), Deps{}, CheckOptions{AgentSocket: sock, Device: "siw0", MinAge: time.Second, AgentTimeout: time.Minute})
	var ae *agentapi.AskError
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
	agentapi.Handler(st, "v1.2.3").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/qp-leaks?min_age=1s", nil))
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
	var ae *agentapi.AskError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "timeout awaiting response headers") || dialed {
		t.Errorf("an agent that never answers: %v (observed locally: %v); want an AskError for the answer that did not begin", err, dialed)
	}
}
