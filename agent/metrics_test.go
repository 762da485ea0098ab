package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rdmatool/rdmatool/agentapi/query"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
	"go.uber.org/goleak"
)

// scrape GETs url and parses the Prometheus text it returns.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	fams, body, err := scrapeErr(url)
	if err != nil {
		t.Fatal(err)
	}
	return fams, body
}

func scrapeErr(url string) (map[string]*dto.MetricFamily, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %s\n%s", url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, "", fmt.Errorf("parse %s: %w\n%s", url, err, body)
	}
	return fams, string(body), nil
}

// value returns the value of the series of name with exactly labels, and
// whether there is one.
// deviceValue scrapes url for the value of name on the device's series
// (device and node_guid, and the labels kv gives in pairs); -1 when the
// scrape fails, 0 when there is no such series.
func deviceValue(url, dev, guid, name string, kv ...string) float64 {
	fams, _, err := scrapeErr(url)
	if err != nil {
		return -1
	}
	labels := map[string]string{"device": dev, "node_guid": guid}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	v, _ := value(fams, name, labels)
	return v
}

func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

var guidRXE = "0211:22ff:fe33:4455"

// replay is a probe source that yields its events and ends, having lost
// lost events.
type replay struct {
	events []bpf.Event
	lost   uint64
	stacks bpf.StackStats
}

func (r replay) Events(context.Context) iter.Seq2[bpf.Event, error] {
	return func(yield func(bpf.Event, error) bool) {
		for _, ev := range r.events {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

func (r replay) Stats() (bpf.Stats, error)           { return bpf.Stats{Lost: r.lost}, nil }
func (r replay) StackStats() (bpf.StackStats, error) { return r.stacks, nil }
func (r replay) Close() error                        { return nil }

func TestMetrics(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := newState(leakwatch.Config{MaxQP: map[string]uint64{"rxe0": 100}}, clock, "v9")
	st.sockConns.Add(3) // as newServer counts them
	st.SetProbes(true, "")
	dev := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x021122fffe334455}
	st.ScanSucceeded("")
	st.setDevices([]rdmanl.Device{dev}, nil, now)
	qps := []rdmanl.QP{
		{LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}},
		{LQPN: 18, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}},
		{LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, Port: 1, Owner: rdmanl.Owner{KernName: "ib_core"}},
	}
	st.Scan(leakwatch.Scan{Started: now.Add(-250 * time.Millisecond), Time: now, Devices: []leakwatch.DeviceScan{{
		Device: dev, QPs: qps, Owners: map[uint32]leakwatch.Owner{42: {TGID: 40, Comm: "app"}}}}})
	st.SetResources([]rdmanl.Summary{{DevIndex: 1, DevName: "rxe0", Counts: []rdmanl.ResourceCount{{Name: "qp", Current: 3}, {Name: "mr", Current: 7}}}}, "rxe0")
	st.ScanFailed("rxe0", io.ErrUnexpectedEOF)
	// An MR dump: process 40 (thread 42) with two MRs, rds_rdma with one
	// of 16 KiB, eleven processes /proc does not know with one each: the
	// three with the highest PIDs are "(other)".
	mrs := &leakwatch.MRDump{Device: dev, Time: now, Owners: map[uint32]leakwatch.Owner{42: {TGID: 40, Comm: "app"}}}
	owners := []rdmanl.Owner{{PID: 42}, {PID: 42}, {KernName: "rds_rdma"}}
	for pid := range uint32(11) {
		owners = append(owners, rdmanl.Owner{PID: 100 + pid})
	}
	for i, o := range owners {
		length := uint64(4096)
		if o.Kernel() {
			length = 16384
		}
		mrs.Add(rdmanl.MR{MRN: uint32(i + 1), Len: length, Owner: o})
	}
	st.ScanMRs(mrs)
	// A QP event and a device event read, two lost.
	// A QP created through rdma_create_qp by a process gone before its
	// site was named ("?"), and three creates the device refused: each
	// failure counted once.
	created := bpf.Event{Kind: bpf.KindQPCreate, Time: now, DevIndex: 1, DevName: "rxe0", QPN: 19, QPType: rdmanl.QPTypeRC, PID: 1 << 30, TID: 1 << 30,
		Comm: "app", Via: "rdma_create_qp", ViaReturn: 0x401234}
	refused := func(errno int32) bpf.Event { e := created; e.QPN, e.Result = 0, -errno; return e }
	probes := replay{lost: 2, stacks: bpf.StackStats{Refused: 4, Held: 300, Capacity: 2048}, events: []bpf.Event{
		{Kind: bpf.KindQPModify, Time: now, DevIndex: 1, DevName: "rxe0", QPN: 17, NewState: rdmanl.QPStateErr, HasState: true},
		{Kind: bpf.KindDeviceEvent, Time: now, DevIndex: 1, DevName: "rxe0"},
		created, refused(22), refused(22), refused(12),
		// QP 19 fails (the provider's access error), QP 18 is moved
		// from Error to RESET and back by its consumer: one entry each;
		// QP 17, first seen in Error, entered it before it was seen.
		{Kind: bpf.KindQPEvent, Time: now, DevIndex: 1, DevName: "rxe0", QPN: 19, IBEvent: 3},
		{Kind: bpf.KindQPModify, Time: now, DevIndex: 1, DevName: "rxe0", QPN: 18, NewState: rdmanl.QPStateReset, HasState: true},
		{Kind: bpf.KindQPModify, Time: now, DevIndex: 1, DevName: "rxe0", QPN: 18, NewState: rdmanl.QPStateErr, HasState: true},
	}}
	sites := watch.NewSites(slog.New(slog.DiscardHandler), t.TempDir())
	if err := watch.FollowProbes(t.Context(), probes, st.State, "", time.Hour, sites, nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second) // past the findings' min age

	srv := httptest.NewServer(metricsHandler(st, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	fams, body := scrape(t, srv.URL+"/metrics")

	d := map[string]string{"device": "rxe0", "node_guid": guidRXE}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"device": d["device"], "node_guid": d["node_guid"]}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rdmatool_probes_up", nil, 1},
		{"rdmatool_netlink_up", nil, 1},
		{"rdmatool_probe_events_lost_total", nil, 2},
		{"rdmatool_probe_stacks_refused_total", nil, 4},
		{"rdmatool_probe_stacks", nil, 300},
		{"rdmatool_probe_stacks_capacity", nil, 2048},
		{"rdmatool_probe_events_total", map[string]string{"kind": "qp_modify"}, 3},
		{"rdmatool_probe_events_total", map[string]string{"kind": "qp_event"}, 1},
		{"rdmatool_probe_events_total", map[string]string{"kind": "device_event"}, 1},
		{"rdmatool_qps", with("type", "RC", "state", "ERR"), 2},
		{"rdmatool_qps", with("type", "GSI", "state", "RTS"), 1},
		{"rdmatool_owner_qps", with("pid", "40", "comm", "app", "ulp", ""), 2},
		{"rdmatool_owner_qps", with("pid", "0", "comm", "ib_core", "ulp", ""), 1},
		{"rdmatool_creation_site_qps", with("site", "? via rdma_create_qp"), 1},
		{"rdmatool_qp_create_failures_total", with("errno", "EINVAL", "site", "? via rdma_create_qp"), 2},
		{"rdmatool_qp_create_failures_total", with("errno", "ENOMEM", "site", "? via rdma_create_qp"), 1},
		{"rdmatool_qp_errors_total", with("cause", "QP_ACCESS_ERR"), 1},
		{"rdmatool_qp_errors_total", with("cause", "modify"), 1},
		// QP 19's failure is kept for qp-error-storm, QP 18's modify not.
		{"rdmatool_watcher_list_entries", with("list", "qp_errors"), 1},
		{"rdmatool_agent_connections", map[string]string{"listener": "socket"}, 3},
		{"rdmatool_agent_connections", map[string]string{"listener": "metrics"}, 0},
		{"rdmatool_watcher_list_entries", with("list", "create_failures"), 3},
		{"rdmatool_device_resources", with("resource", "mr"), 7},
		{"rdmatool_mrs", d, 14},
		{"rdmatool_mr_bytes", d, 13*4096 + 16384},
		{"rdmatool_mr_dumps_total", d, 1},
		{"rdmatool_owner_mrs", with("pid", "40", "comm", "app", "ulp", ""), 2},
		{"rdmatool_owner_mr_bytes", with("pid", "40", "comm", "app", "ulp", ""), 8192},
		{"rdmatool_owner_mrs", with("pid", "0", "comm", "rds_rdma", "ulp", "rds_rdma"), 1},
		{"rdmatool_owner_mr_bytes", with("pid", "0", "comm", "rds_rdma", "ulp", "rds_rdma"), 16384},
		{"rdmatool_owner_mrs", with("pid", "107", "comm", "", "ulp", ""), 1},
		{"rdmatool_owner_mrs", with("pid", "", "comm", "(other)", "ulp", ""), 3},
		{"rdmatool_owner_mr_bytes", with("pid", "", "comm", "(other)", "ulp", ""), 3 * 4096},
		{"rdmatool_device_resources", with("resource", "qp"), 3},
		{"rdmatool_device_max_qps", d, 100},
		{"rdmatool_device_qp_use_ratio", d, 0.03},
		{"rdmatool_findings", with("rule", leakwatch.RuleStaleErrorQP, "severity", "warning"), 2},
		{"rdmatool_scans_total", d, 1},
		{"rdmatool_scan_errors_total", d, 1},
		{"rdmatool_scan_duration_seconds", d, 0.25},
		{"rdmatool_agent_start_time_seconds", nil, float64(now.Add(-10 * time.Second).Unix())},
	} {
		labels := c.labels
		if labels == nil {
			labels = map[string]string{}
		}
		got, ok := value(fams, c.name, labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, labels, got, ok, c.want)
		}
	}
	if f := fams["rdmatool_agent_build_info"]; f == nil || len(f.Metric) != 1 || !strings.Contains(f.Metric[0].String(), `value:"v9"`) {
		t.Errorf("build info: %v", f)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
	// Prometheus' own linter: names, units, suffixes, help on every metric.
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}

	// A renamed device's series go with its old name; only /metrics is served.
	st.setDevices([]rdmanl.Device{{Index: 1, Name: "roce0", NodeGUID: dev.NodeGUID}}, nil, now)
	fams, _ = scrape(t, srv.URL+"/metrics")
	if _, ok := value(fams, "rdmatool_scans_total", d); ok {
		t.Error("the old name's scan counter is still exported")
	}
	for _, path := range []string{"/", "/metrics/x", "/v1/status"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		}
	}
}

// TestRunServesMetrics runs the agent with metrics on a loopback port:
// the scans of a fake host show up in /metrics, and a bad or busy address
// stops the agent at start.
func TestRunServesMetrics(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()

	host := rdmanltest.NewHost(rxe)
	host.SetQPs(rxe.Index, qp(17, rdmanl.QPStateErr, 0), qp(18, rdmanl.QPStateRTS, 0))
	d := watch.Deps{Log: slog.New(slog.DiscardHandler), Dial: dialer(host)}
	opts := RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond, retry: time.Hour, NoProbes: true, MetricsAddress: addr}
	// The port is taken: the agent refuses to start.
	if err := Run(context.Background(), d, opts); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run on a busy metrics port: %v", err)
	}
	ln.Close()
	// A malformed address is refused before anything starts or logs
	// (it was after the warning that netlink is not there).
	var logs syncBuffer
	dials := 0
	early := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: func() (watch.Netlink, error) {
		dials++
		return host.Dial(), nil
	}}
	for _, bad := range []string{"localhost", "127.0.0.1:http", "127.0.0.1:70000", ":"} {
		o := opts
		o.MetricsAddress = bad
		if err := Run(context.Background(), early, o); err == nil || !strings.HasPrefix(err.Error(), "agent: metrics address "+strconv.Quote(bad)+": ") {
			t.Errorf("Run with metrics address %q: %v", bad, err)
		}
	}
	if dials != 0 || logs.String() != "" {
		t.Errorf("Run with a malformed metrics address dialed netlink %d times and logged %q before refusing it", dials, logs.String())
	}
	if _, err := os.Lstat(opts.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run with a malformed metrics address made its socket: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, d, opts) }()
	defer stopRun(t, cancel, done)
	waitFor(t, "rxe0's QPs in /metrics", func() bool {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		rts, ok1 := value(fams, "rdmatool_qps", map[string]string{"device": "rxe0", "node_guid": rxe.NodeGUID.String(), "type": "RC", "state": "RTS"})
		n, ok2 := value(fams, "rdmatool_device_resources", map[string]string{"device": "rxe0", "node_guid": rxe.NodeGUID.String(), "resource": "qp"})
		return ok1 && ok2 && rts == 1 && n == 2
	})
	// The scrape that reads it is a connection of /metrics; an idle
	// connection to the socket counts while it is open.
	c, err := net.Dial("unix", opts.Socket)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the socket's connection and the scrape's counted", func() bool {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		sock, ok1 := value(fams, "rdmatool_agent_connections", map[string]string{"listener": "socket"})
		scrapes, ok2 := value(fams, "rdmatool_agent_connections", map[string]string{"listener": "metrics"})
		return err == nil && ok1 && ok2 && sock == 1 && scrapes >= 1
	})
	c.Close()
	waitFor(t, "the socket's connection gone", func() bool {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		sock, ok := value(fams, "rdmatool_agent_connections", map[string]string{"listener": "socket"})
		return err == nil && ok && sock == 0
	})
}

// The findings a scrape exports are those of the history at that scrape:
// one right after a QP left Error no longer counts it, and a QP that
// reaches the min age counts with no other change.
func TestMetricsFindingsFollow(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := newState(leakwatch.Config{}, clock, "v9")
	dev := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x021122fffe334455}
	st.setDevices([]rdmanl.Device{dev}, nil, now)
	inErr := func(qpns ...uint32) leakwatch.Scan {
		s := leakwatch.Scan{Time: now, Devices: []leakwatch.DeviceScan{{Device: dev}}}
		for _, n := range qpns {
			s.Devices[0].QPs = append(s.Devices[0].QPs, rdmanl.QP{LQPN: n, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}})
		}
		return s
	}
	st.Scan(inErr(17, 18))
	srv := httptest.NewServer(metricsHandler(st, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	stale := func() float64 {
		return deviceValue(srv.URL+"/metrics", "rxe0", guidRXE, "rdmatool_findings", "rule", leakwatch.RuleStaleErrorQP, "severity", "warning")
	}
	now = now.Add(query.DefaultMinAge)
	if n := stale(); n != 2 {
		t.Fatalf("%g stale-error-qp findings at the min age, want 2", n)
	}
	st.Scan(inErr(17))
	if n := stale(); n != 1 {
		t.Errorf("%g stale-error-qp findings right after QP 18 went, want 1", n)
	}
	st.Scan(inErr(17, 19))
	now = now.Add(query.DefaultMinAge - time.Nanosecond)
	if n := stale(); n != 1 {
		t.Errorf("%g stale-error-qp findings before QP 19 reached the min age, want 1", n)
	}
	now = now.Add(time.Nanosecond)
	if n := stale(); n != 2 {
		t.Errorf("%g stale-error-qp findings once QP 19 reached the min age, want 2", n)
	}
}

// BenchmarkScrape is what a scrape of the agent's metrics and an interval
// of its reset policy cost with 60,000 QPs tracked, each a
// never-connected-qp finding, and 100,000 MRs of four processes: the
// state's collector alone (collect), the whole /metrics answer with the
// Go runtime's and the process's metrics (http), and the policy's
// evidence (policy), with nothing changed since the last of them; and
// scrapes 5 s apart (collect-5s-apart).
func BenchmarkScrape(b *testing.B) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := newState(leakwatch.Config{}, clock, "v9")
	st.SetProbes(true, "")
	dev := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x021122fffe334455}
	st.setDevices([]rdmanl.Device{dev}, nil, now)
	qps := make([]rdmanl.QP, 60000)
	for i := range qps {
		qps[i] = rdmanl.QP{LQPN: uint32(17 + i), Type: rdmanl.QPTypeRC, State: rdmanl.QPStateInit, Port: 1, Owner: rdmanl.Owner{PID: uint32(42 + i%4)}}
	}
	st.Scan(leakwatch.Scan{Started: now, Time: now, Devices: []leakwatch.DeviceScan{{Device: dev, QPs: qps}}})
	st.SetResources([]rdmanl.Summary{{DevIndex: 1, DevName: "rxe0", Counts: []rdmanl.ResourceCount{{Name: "qp", Current: 60000}, {Name: "mr", Current: 100000}}}}, "rxe0")
	mrs := &leakwatch.MRDump{Device: dev, Time: now}
	for i := range uint32(100000) {
		mrs.Add(rdmanl.MR{MRN: i, Len: 4096, Owner: rdmanl.Owner{PID: 42 + i%4}})
	}
	st.ScanMRs(mrs)
	now = now.Add(time.Minute)
	p := DefaultPolicy()
	p.Mode = PolicyReset
	st.setPolicy(p)
	c := newCollector(st)
	collect := func() int {
		ch := make(chan prometheus.Metric, 1024)
		go func() { c.Collect(ch); close(ch) }()
		n := 0
		for range ch {
			n++
		}
		return n
	}
	if e := st.policyEvidence(p.StaleRules); len(e) != 1 || e[0].Stale != 0 {
		b.Fatalf("policy evidence %+v, want rxe0 with no stale QPs", e)
	}
	b.Run("collect", func(b *testing.B) {
		for b.Loop() {
			collect()
		}
	})
	b.Run("collect-5s-apart", func(b *testing.B) {
		for b.Loop() {
			now = now.Add(5 * time.Second)
			collect()
		}
	})
	h := metricsHandler(st, slog.New(slog.DiscardHandler))
	b.Run("http", func(b *testing.B) {
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `rule="never-connected-qp",severity="warning"} 60000`) {
				b.Fatalf("status %d, body without the 60000 findings:\n%s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("policy", func(b *testing.B) {
		for b.Loop() {
			st.policyEvidence(p.StaleRules)
		}
	})
}

// TestMetricsHostileHost scrapes an agent whose host is hostile: a QP
// owner named with bytes that are not UTF-8 (a thread's PR_SET_NAME or an
// executable's file name), and a device deleted and registered again
// under its name, each registration with refused creates and QP errors,
// and a refused create whose device the probes missed. The scrape is
// whole: every family once per label set, the name valid UTF-8, the
// counters continued, no series with an empty device, and the handler
// counts no error.
func TestMetricsHostileHost(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := newState(leakwatch.Config{}, clock, "v9")
	st.SetProbes(true, "")
	first := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x021122fffe334455}
	again := rdmanl.Device{Index: 2, Name: "rxe0", NodeGUID: first.NodeGUID}
	st.ScanSucceeded("")
	st.setDevices([]rdmanl.Device{first}, nil, now)
	const hostile = "q\xffp\xfe\x80work"
	scan := func(dev rdmanl.Device) {
		st.Scan(leakwatch.Scan{Started: now, Time: now, Devices: []leakwatch.DeviceScan{{Device: dev, QPs: []rdmanl.QP{
			{LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, Port: 1, Owner: rdmanl.Owner{PID: 42}}}, Owners: map[uint32]leakwatch.Owner{42: {TGID: 42, Comm: hostile}}}}})
		mrs := &leakwatch.MRDump{Device: dev, Time: now, Owners: map[uint32]leakwatch.Owner{42: {TGID: 42, Comm: hostile}}}
		mrs.Add(rdmanl.MR{MRN: 1, Len: 4096, Owner: rdmanl.Owner{PID: 42}})
		st.ScanMRs(mrs)
	}
	follow := func(dev rdmanl.Device) {
		created := bpf.Event{Kind: bpf.KindQPCreate, Time: now, DevIndex: dev.Index, DevName: dev.Name, QPN: 19, QPType: rdmanl.QPTypeRC,
			PID: 42, TID: 42, Comm: hostile}
		refused := created
		refused.QPN, refused.Result = 0, -12
		missed := refused
		missed.DevIndex, missed.DevName = 0, ""
		probes := replay{events: []bpf.Event{created, refused, missed,
			{Kind: bpf.KindQPEvent, Time: now, DevIndex: dev.Index, DevName: dev.Name, QPN: 19, IBEvent: 3}}}
		sites := watch.NewSites(slog.New(slog.DiscardHandler), t.TempDir())
		if err := watch.FollowProbes(t.Context(), probes, st.State, "", time.Hour, sites, nil); err != nil {
			t.Fatal(err)
		}
	}
	scan(first)
	follow(first)
	srv := httptest.NewServer(metricsHandler(st, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	d := map[string]string{"device": "rxe0", "node_guid": guidRXE}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(d)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	check := func(when string, want float64) map[string]*dto.MetricFamily {
		t.Helper()
		fams, body := scrape(t, srv.URL+"/metrics")
		for _, f := range fams {
			seen := map[string]bool{}
			for _, m := range f.Metric {
				key := m.String()
				if m.Counter != nil {
					key = strings.Replace(key, m.Counter.String(), "", 1)
				}
				if m.Gauge != nil {
					key = strings.Replace(key, m.Gauge.String(), "", 1)
				}
				if seen[key] {
					t.Errorf("%s: %s has a label set twice: %s", when, f.GetName(), key)
				}
				seen[key] = true
				for _, l := range m.Label {
					if !utf8.ValidString(l.GetValue()) {
						t.Errorf("%s: %s{%s=%q}: not UTF-8", when, f.GetName(), l.GetName(), l.GetValue())
					}
					if l.GetName() == "device" && l.GetValue() == "" {
						t.Errorf("%s: %s has a series of device \"\"", when, f.GetName())
					}
				}
			}
		}
		if !strings.Contains(body, `comm="q`+"\ufffd"+`p`+"\ufffd\ufffd"+`work"`) {
			t.Errorf("%s: the owner's name is not in the scrape with its bad bytes replaced:\n%s", when, body)
		}
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"rdmatool_qp_create_failures_total", with("errno", "ENOMEM", "site", ""), want},
			{"rdmatool_qp_errors_total", with("cause", "QP_ACCESS_ERR"), want},
			{"rdmatool_qp_create_failures_unattributed_total", map[string]string{}, want},
			{"rdmatool_findings", with("rule", leakwatch.RuleStaleErrorQP, "severity", "warning"), 1},
			{"promhttp_metric_handler_errors_total", map[string]string{"cause": "gathering"}, 0},
		} {
			if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
				t.Errorf("%s: %s%v = %v (present %v), want %v", when, c.name, c.labels, got, ok, c.want)
			}
		}
		return fams
	}
	now = now.Add(10 * time.Second) // past the findings' min age
	check("first registration", 1)

	// Deleted, listed without it, then registered again under its name.
	st.setDevices(nil, []uint32{1}, now)
	st.setDevices([]rdmanl.Device{again}, nil, now)
	scan(again)
	follow(again)
	now = now.Add(10 * time.Second)
	fams := check("registered again", 2)
	if got, _ := value(fams, "rdmatool_gone_device_counters", map[string]string{}); got != 0 {
		t.Errorf("rdmatool_gone_device_counters = %v with the device back, want 0", got)
	}
	st.setDevices(nil, []uint32{2}, now)
	fams, _ = scrape(t, srv.URL+"/metrics")
	if got, _ := value(fams, "rdmatool_gone_device_counters", map[string]string{}); got != 1 {
		t.Errorf("rdmatool_gone_device_counters = %v with rxe0 gone, want 1", got)
	}
}

// twice is a collector that gives one label set twice, then another
// series.
type twice struct{ d *prometheus.Desc }

func (c twice) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c twice) Collect(ch chan<- prometheus.Metric) {
	e := &emitter{ch: ch, seen: map[string]struct{}{}}
	e.emit(c.d, prometheus.GaugeValue, 1, "a\xff")
	e.emit(c.d, prometheus.GaugeValue, 2, "a\xff")
	e.emit(c.d, prometheus.GaugeValue, 3, "b")
}

// A label set given twice is left out once and counted by the handler;
// the rest of the scrape is served, with the bad byte replaced.
func TestEmitterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(twice{prometheus.NewDesc("rdmatool_test", "A test.", []string{"l"}, nil)})
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
	srv := httptest.NewServer(h)
	defer srv.Close()
	scrape(t, srv.URL) // the first scrape counts its error after it gathered
	fams, body := scrape(t, srv.URL)
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{{map[string]string{"l": "a\ufffd"}, 1}, {map[string]string{"l": "b"}, 3}} {
		if got, ok := value(fams, "rdmatool_test", c.labels); !ok || got != c.want {
			t.Errorf("rdmatool_test%v = %v (present %v), want %v:\n%s", c.labels, got, ok, c.want, body)
		}
	}
	if got, _ := value(fams, "promhttp_metric_handler_errors_total", map[string]string{"cause": "gathering"}); got != 1 {
		t.Errorf("promhttp_metric_handler_errors_total{cause=gathering} = %v after two scrapes, want the first one's", got)
	}
}
