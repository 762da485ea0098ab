package agentapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var (
	t0  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rxe = rdmanl.Device{Index: 1, Name: "rxe0"}
)

// source is a Source over one watcher, on devices rxe0 and siw0: rxe0's QP
// 17, owned by pid 42 (app, in /system.slice/app.service), has been in ERR
// since t0, and it is a minute later.
type source struct {
	mu        sync.Mutex
	w         *leakwatch.Watcher
	devices   []string
	scanError string
}

func newSource() *source {
	now := t0
	w := leakwatch.New(leakwatch.Config{}, func() time.Time { return now })
	w.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{
		{LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}}},
		Owners: map[uint32]leakwatch.Owner{42: {Comm: "app", Cgroup: "/system.slice/app.service"}}}}})
	now = t0.Add(time.Minute)
	return &source{w: w, devices: []string{"rxe0", "siw0"}}
}

func (s *source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Started: s.w.Started(), Probes: "off", LastScanSeconds: -1, Devices: slices.Clone(s.devices), QPs: s.w.LiveQPs(), ScanError: s.scanError}
}

func (s *source) HasDevice(dev string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return dev == "" || slices.Contains(s.devices, dev)
}

func (s *source) Report(q leakwatch.Query) (CheckReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.Device != "" && !slices.Contains(s.devices, q.Device) {
		return CheckReport{}, false
	}
	return CheckReport{Report: s.w.Evaluate(q), Probes: "off", Devices: slices.Clone(s.devices), ObservedSince: s.w.Started()}, true
}

// serve answers the API from src on a unix socket in a temporary
// directory until the test ends.
func serve(t *testing.T, src Source) string {
	t.Helper()
	return serveWith(t, &http.Server{Handler: Handler(src, "test")})
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

// rawGet GETs path from the API on sock and returns the answer's body; its
// status should be wantCode, its content JSON.
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

// FuzzHandler asks the agent's API anything a client could send as path,
// query and method: the answer is one JSON object and a status the API
// documents, never a panic.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ method, target string }{
		{"GET", "/v1/qp-leaks"}, {"GET", "/v1/qp-leaks?dev=rxe0&min_age=5s&rule=stale-error-qp&max_qp=rxe0=10&no_probes=1"},
		{"GET", "/v1/status"}, {"POST", "/v1/status"}, {"GET", "/v1/qp-leaks?min_age=-1s"}, {"GET", "//v1/status"},
		{"GET", "/v1/qp-leaks?dev=%zz"}, {"HEAD", "/v1/qp-leaks?rule=x&rule=y"},
	} {
		f.Add(s.method, s.target)
	}
	h := Handler(newSource(), "fuzz")
	f.Fuzz(func(t *testing.T, method, target string) {
		req, err := http.NewRequest(method, "http://agent", nil)
		if err != nil {
			return
		}
		req.URL.Opaque = "" // the target as sent, uncleaned
		req.URL.Path, req.URL.RawQuery, _ = bytesCut(target, '?')
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 404, 405, 503:
		default:
			t.Fatalf("%s %q: status %d", method, target, rec.Code)
		}
		if method == http.MethodHead {
			return
		}
		body := rec.Body.Bytes()
		if !json.Valid(body) || bytes.Count(body, []byte("\n")) != 1 || (rec.Code != 200 && len(body) > 1024) {
			t.Fatalf("%s %q: %d body %q", method, target, rec.Code, body)
		}
	})
}

func bytesCut(s string, sep byte) (before, after string, found bool) {
	if i := bytes.IndexByte([]byte(s), sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// The answer is the JSON object qp-leaks prints, field for field, with
// the agent's source and start.
func TestQPLeaksJSON(t *testing.T) {
	sock := serve(t, newSource())
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

// /v1/status answers the source's status as the agent of its version.
func TestStatus(t *testing.T) {
	var got Status
	if err := json.Unmarshal([]byte(rawGet(t, serve(t, newSource()), "/v1/status", http.StatusOK)), &got); err != nil {
		t.Fatal(err)
	}
	want := Status{Version: "test", Started: t0, Probes: "off", LastScanSeconds: -1, Devices: []string{"rxe0", "siw0"}, QPs: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestBadQueries(t *testing.T) {
	sock := serve(t, newSource())
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
	_, err := Ask(t.Context(), sock, leakwatch.Query{Device: "mlx5_0"}, 0)
	if err == nil || !strings.Contains(err.Error(), `agent: no RDMA device "mlx5_0" (HTTP 404)`) || errors.Is(err, ErrNoAgent) {
		t.Errorf("Ask for an unknown device: %v", err)
	}
}

// Asked about a device while it cannot list any, the agent answers the
// listing's error with 503, not that the device is missing (it said "no
// RDMA device" about any); asked about every device, it answers its
// report, which says the same in scan_error.
func TestNoDeviceListing(t *testing.T) {
	src := newSource()
	src.devices, src.scanError = nil, "rdmanl: open netlink socket: protocol not supported"
	sock := serve(t, src)
	body := rawGet(t, sock, "/v1/qp-leaks?dev=rxe0", http.StatusServiceUnavailable)
	if want := `{"error":"agent: cannot list the RDMA devices to find \"rxe0\": rdmanl: open netlink socket: protocol not supported"}` + "\n"; body != want {
		t.Errorf("body %s, want %s", body, want)
	}
	_, err := Ask(t.Context(), sock, leakwatch.Query{Device: "rxe0"}, 0)
	if want := `agent: cannot list the RDMA devices to find "rxe0": rdmanl: open netlink socket: protocol not supported (HTTP 503)`; err == nil || !strings.HasSuffix(err.Error(), want) || errors.Is(err, ErrNoAgent) {
		t.Errorf("Ask about rxe0: %v; want ...%s", err, want)
	}
	rawGet(t, sock, "/v1/qp-leaks", http.StatusOK)
	// An agent that lists devices, or has not listed any yet, does not
	// have the one asked about.
	src.mu.Lock()
	src.devices = []string{"siw0"}
	src.mu.Unlock()
	rawGet(t, sock, "/v1/qp-leaks?dev=rxe0", http.StatusNotFound)
	src.mu.Lock()
	src.devices, src.scanError = nil, ""
	src.mu.Unlock()
	rawGet(t, sock, "/v1/qp-leaks?dev=rxe0", http.StatusNotFound)
}

// Methods other than GET and HEAD get 405 with Allow, as HTTP says.
func TestMethods(t *testing.T) {
	sock := serve(t, newSource())
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
			_, err := Ask(t.Context(), tt.socket, leakwatch.Query{MinAge: time.Second}, 0)
			if err == nil || errors.Is(err, ErrNoAgent) != tt.wantNoAgt || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "agent: ask "+tt.socket) {
				t.Errorf("Ask: %v; want an error, ErrNoAgent %v, containing %q", err, tt.wantNoAgt, tt.want)
			}
		})
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

// A finding's creation site and the report's sites reach the client as
// the agent has them.
func TestQPLeaksSites(t *testing.T) {
	src := newSource()
	site := leakwatch.Site{Call: "app!connect_peer+0x4c", Via: "rdma_create_qp", File: "/usr/bin/app", BuildID: "3f0e", Offset: 0x1a2c}
	src.w.Event(leakwatch.Event{Kind: leakwatch.EventQPCreated, Time: t0, DevIndex: rxe.Index, DevName: rxe.Name, QPN: 30,
		QPType: rdmanl.QPTypeRC, PID: 42, TID: 42, Comm: "app", Site: site})
	sock := serve(t, src)
	rep, err := Ask(t.Context(), sock, leakwatch.Query{MinAge: time.Second, Rules: []string{leakwatch.RuleNeverConnectedQP}}, time.Minute)
	if err != nil || len(rep.Findings) != 1 {
		t.Fatalf("Ask: %+v, %v", rep.Findings, err)
	}
	f := rep.Findings[0]
	got := leakwatch.Site{Call: f.Site, Via: f.SiteVia, File: f.SiteFile, BuildID: f.SiteBuildID, Offset: f.SiteOffset}
	if diff := cmp.Diff(site, got); diff != "" {
		t.Errorf("finding's site (-want +got):\n%s", diff)
	}
	want := []leakwatch.SiteGroup{{Device: "rxe0", Site: site.Call, SiteVia: site.Via, SiteBuildID: site.BuildID, QPs: 1,
		Rules: map[string]int{leakwatch.RuleNeverConnectedQP: 1}}}
	if diff := cmp.Diff(want, rep.Sites); diff != "" {
		t.Errorf("sites (-want +got):\n%s", diff)
	}
}
