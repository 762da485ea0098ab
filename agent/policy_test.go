package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/rdmatool/rdmatool/watch"
	"go.uber.org/goleak"
)

func TestPolicyCheck(t *testing.T) {
	if err := DefaultPolicy().Check(); err != nil {
		t.Errorf("the default policy: %v", err)
	}
	on := DefaultPolicy()
	on.Mode = PolicyReset
	for _, tt := range []struct {
		name string
		mod  func(p *Policy)
		key  string
	}{
		{"mode", func(p *Policy) { p.Mode = "fix" }, "mode"},
		{"dry run while observing", func(p *Policy) { p.Mode, p.DryRun = PolicyObserve, true }, "dry_run"},
		{"use above 1", func(p *Policy) { p.QPUse = 1.5 }, "qp_use"},
		{"no threshold", func(p *Policy) { p.QPUse, p.StaleQPs = 0, 0 }, "qp_use"},
		{"negative for", func(p *Policy) { p.For = -time.Second }, "for"},
		{"cooldown within for", func(p *Policy) { p.For, p.Cooldown = time.Hour, time.Minute }, "cooldown"},
		{"no resets an hour", func(p *Policy) { p.MaxPerHour = 0 }, "max_per_hour"},
		{"negative grace", func(p *Policy) { p.Grace = -1 }, "grace"},
		{"no timeout", func(p *Policy) { p.Timeout = 0 }, "timeout"},
		{"unknown method", func(p *Policy) { p.Method = "reboot" }, "method"},
		{"a method that frees nothing", func(p *Policy) { p.Method = reset.MethodNetdevBounce }, "method"},
		{"no stale rules", func(p *Policy) { p.StaleRules = nil }, "stale_rules"},
		{"a device rule", func(p *Policy) { p.StaleRules = []string{"qp-exhaustion"} }, "stale_rules"},
		{"an unknown rule", func(p *Policy) { p.StaleRules = []string{"stale-qp"} }, "stale_rules"},
	} {
		p := on
		p.StaleRules = slices.Clone(on.StaleRules)
		tt.mod(&p)
		err := p.Check()
		var pe *PolicyError
		ok := errors.As(err, &pe)
		if !ok || pe.Key != tt.key {
			t.Errorf("%s: Check() = %v, want a PolicyError at %s", tt.name, err, tt.key)
		}
	}
	// Only stale QPs, or only use, is a policy.
	for _, mod := range []func(p *Policy){func(p *Policy) { p.QPUse = 0 }, func(p *Policy) { p.StaleQPs, p.StaleRules = 0, nil }} {
		p := on
		mod(&p)
		if err := p.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", p, err)
		}
	}
}

// The engine over a timeline: thresholds must hold for For; a reset is
// followed by in_progress until it returns, then cooldown, then the hourly
// limit; a decision is reported when it changes; a device whose thresholds
// drop starts over; dry runs keep a cadence of their own.
func TestPolicyEngine(t *testing.T) {
	p := DefaultPolicy()
	p.Mode, p.QPUse, p.StaleQPs, p.For, p.Cooldown, p.MaxPerHour = PolicyReset, 0.5, 10, time.Minute, 10*time.Minute, 1
	dev := func(name string, qps uint64, stale int) policyEvidence {
		return policyEvidence{Device: name, NodeGUID: "0211:22ff:fe33:4455", QPs: qps, MaxQP: 100, Stale: stale}
	}
	g := newPolicyEngine()
	at := t0.Add
	decided := func(ds []policyDecision) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Device+" "+d.Decision)
		}
		return out
	}
	steps := []struct {
		at   time.Duration
		dev  policyEvidence
		want []string
		done bool // the reset returned before this step
	}{
		{0, dev("rxe0", 40, 20), nil, false},                // use below 50%
		{10 * time.Second, dev("rxe0", 60, 5), nil, false},  // too few stale QPs
		{20 * time.Second, dev("rxe0", 60, 20), nil, false}, // crossed: the clock starts
		{70 * time.Second, dev("rxe0", 60, 20), nil, false}, // 50s held
		{80 * time.Second, dev("rxe0", 60, 20), []string{"rxe0 reset"}, false},
		{90 * time.Second, dev("rxe0", 60, 20), nil, false}, // a new episode starts
		{150 * time.Second, dev("rxe0", 60, 20), []string{"rxe0 in_progress"}, false},
		{160 * time.Second, dev("rxe0", 60, 20), nil, false}, // unchanged: not repeated
		// Back under another name (same GUID): still the same device.
		{170 * time.Second, dev("roce0", 60, 20), []string{"roce0 cooldown"}, true},
		{180 * time.Second, dev("roce0", 60, 20), nil, false},
		{190 * time.Second, dev("roce0", 10, 0), nil, false}, // dropped: over
		{200 * time.Second, dev("roce0", 60, 20), nil, false},
		{259 * time.Second, dev("roce0", 60, 20), nil, false},
		{260 * time.Second, dev("roce0", 60, 20), []string{"roce0 cooldown"}, false},
		// Cooldown over (80s + 10m), but one reset an hour.
		{700 * time.Second, dev("roce0", 60, 20), []string{"roce0 hourly_limit"}, false},
		{3680 * time.Second, dev("roce0", 60, 20), []string{"roce0 reset"}, false},
	}
	for _, s := range steps {
		if s.done {
			g.finished(s.dev.key())
		}
		if got := decided(g.decide(p, at(s.at), []policyEvidence{s.dev})); !cmp.Equal(got, s.want) {
			t.Errorf("at %s with %+v: decisions %v, want %v", s.at, s.dev, got, s.want)
		}
	}

	// A dry run: the same cadence, and no busy device.
	g = newPolicyEngine()
	p.DryRun = true
	for _, s := range []struct {
		at   time.Duration
		want []string
	}{{0, nil}, {time.Minute, []string{"rxe0 dry_run"}}, {2 * time.Minute, nil}, {3 * time.Minute, []string{"rxe0 cooldown"}}, {12 * time.Minute, []string{"rxe0 hourly_limit"}}} {
		if got := decided(g.decide(p, at(s.at), []policyEvidence{dev("rxe0", 60, 20)})); !cmp.Equal(got, s.want) {
			t.Errorf("dry run at %s: %v, want %v", s.at, got, s.want)
		}
	}
	// Turning the dry run off inherits nothing from it.
	p.DryRun = false
	if got := decided(g.decide(p, at(13*time.Minute), []policyEvidence{dev("rxe0", 60, 20)})); !cmp.Equal(got, []string{"rxe0 reset"}) {
		t.Errorf("after the dry run: %v, want a reset", got)
	}

	// Use cannot be judged without max_qp; observe decides nothing.
	g = newPolicyEngine()
	p.DryRun = false
	unknown := dev("siw0", 60, 20)
	unknown.MaxQP = 0
	if got := decided(g.decide(p, at(0), []policyEvidence{unknown})); !cmp.Equal(got, []string{"siw0 no_max_qp"}) {
		t.Errorf("no max_qp: %v", got)
	}
	p.Mode = PolicyObserve
	if got := g.decide(p, at(time.Hour), []policyEvidence{dev("rxe0", 100, 100)}); got != nil {
		t.Errorf("observe decided %v", got)
	}
}

// The agent with a reset policy on a fake host: a device whose stale QPs
// and use cross the thresholds is reset once, through RunOptions.reset
// with the policy's method, grace and timeout; when its QPs come back
// stale within the cooldown it is not reset again; the metrics count both
// decisions and the reset.
func TestRunPolicy(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	host := rdmanltest.NewHost(rxe)
	stale := func(first uint32) []rdmanl.QP {
		var qps []rdmanl.QP
		for i := range uint32(6) {
			qps = append(qps, qp(first+i, rdmanl.QPStateErr, 42))
		}
		return qps
	}
	host.Set([]rdmanl.Device{rxe}, map[uint32][]rdmanl.QP{rxe.Index: stale(100)})
	// The clock runs 100 times faster than the test: QPs age past the
	// findings' min age (5s) in 50ms.
	base := time.Now()
	now := func() time.Time { return base.Add(100 * time.Since(base)) }
	var mu sync.Mutex
	var resets []reset.Options
	d := watch.Deps{Log: slog.New(slog.DiscardHandler), Dial: dialer(host), Now: now}
	fakeReset := func(ctx context.Context, o reset.Options) (reset.Report, error) {
		mu.Lock()
		resets = append(resets, o)
		mu.Unlock()
		host.Set([]rdmanl.Device{rxe}, map[uint32][]rdmanl.QP{}) // the reset ends the QPs
		return reset.Report{Device: o.Device, Method: reset.MethodRelink, Result: reset.ResultDone}, nil
	}
	pol := DefaultPolicy()
	pol.Mode, pol.QPUse, pol.StaleQPs, pol.For, pol.Cooldown, pol.Method, pol.Grace, pol.Timeout =
		PolicyReset, 0.5, 5, 10*time.Second, time.Hour, reset.MethodRelink, 3*time.Second, 7*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond,
			NoProbes: true, retry: time.Hour, MetricsAddress: addr, MaxQP: map[string]uint64{"rxe0": 10},
			Policy: pol, ResetHelper: []string{"/usr/sbin/rdmatool", "reset-helper"}, reset: fakeReset})
	}()
	defer stopRun(t, cancel, done)
	guid := rxe.NodeGUID.String()
	metric := func(name string, kv ...string) float64 {
		return deviceValue("http://"+addr+"/metrics", "rxe0", guid, name, kv...)
	}
	waitFor(t, "a reset counted", func() bool {
		return metric("rdmatool_resets_total", "method", "relink", "result", "done") == 1
	})
	if metric("rdmatool_policy_decisions_total", "decision", "reset") != 1 {
		t.Errorf("reset decisions: %v, want 1", metric("rdmatool_policy_decisions_total", "decision", "reset"))
	}
	mu.Lock()
	got := slices.Clone(resets)
	mu.Unlock()
	want := reset.Options{Device: "rxe0", Method: reset.MethodRelink, Grace: 3 * time.Second, Timeout: 7 * time.Second, Yes: true,
		Helper: []string{"/usr/sbin/rdmatool", "reset-helper"}, Who: "rdmatool agent (policy)"}
	if len(got) != 1 || !cmp.Equal(got[0], want, cmp.FilterPath(func(p cmp.Path) bool { return strings.HasSuffix(p.String(), "Log") }, cmp.Ignore())) {
		t.Fatalf("resets %+v, want one: %+v", got, want)
	}
	// Stale again within the cooldown: not reset, and the metrics say why.
	host.Set([]rdmanl.Device{rxe}, map[uint32][]rdmanl.QP{rxe.Index: stale(200)})
	waitFor(t, "a cooldown decision", func() bool { return metric("rdmatool_policy_decisions_total", "decision", "cooldown") == 1 })
	mu.Lock()
	n := len(resets)
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d resets within the cooldown, want 1", n)
	}
	fams, _, err := scrapeErr("http://" + addr + "/metrics")
	if info, _ := value(fams, "rdmatool_policy_info", map[string]string{"mode": "reset", "dry_run": "false"}); err != nil || info != 1 {
		t.Errorf("rdmatool_policy_info{mode=reset,dry_run=false} = %v (%v), want 1", info, err)
	}
}

// A reset policy cannot start without a way to run the reset.
func TestRunPolicyNeedsHelper(t *testing.T) {
	pol := DefaultPolicy()
	pol.Mode = PolicyReset
	err := Run(context.Background(), watch.Deps{Dial: dialer(rdmanltest.NewHost())}, RunOptions{Socket: filepath.Join(t.TempDir(), "a.sock"), Policy: pol})
	if !errors.Is(err, errNoHelper) {
		t.Errorf("Run = %v, want %v", err, errNoHelper)
	}
	pol.StaleQPs, pol.QPUse = 0, 0
	err = Run(context.Background(), watch.Deps{Dial: dialer(rdmanltest.NewHost())}, RunOptions{Socket: filepath.Join(t.TempDir(), "a.sock"), Policy: pol})
	if err == nil || !strings.Contains(err.Error(), "agent: policy.qp_use: 0 with stale_qps 0") {
		t.Errorf("Run with a policy without thresholds = %v", err)
	}
}
