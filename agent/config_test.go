package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
)

func ptr[T any](v T) *T { return &v }

func TestParseConfig(t *testing.T) {
	full := `
socket: /run/x/agent.sock
metrics_address: "[::1]:9999"
interval: 30s
reconcile: 10m
retain: 1h
probes: false
max_qp:
  mlx5_0: 131072
  rxe0: 1024
`
	got, err := ParseConfig("a.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Socket: ptr("/run/x/agent.sock"), MetricsAddress: ptr("[::1]:9999"), Interval: ptr(30 * time.Second),
		Reconcile: ptr(10 * time.Minute), Retain: ptr(time.Hour), Probes: ptr(false), MaxQP: map[string]uint64{"mlx5_0": 131072, "rxe0": 1024}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	pol, err := ParseConfig("a.yaml", []byte("policy:\n  mode: reset\n  dry_run: true\n  qp_use: 0.5\n  stale_qps: 0\n  stale_rules: [stale-error-qp]\n  for: 0s\n  cooldown: 10m\n  max_per_hour: 3\n  method: relink\n  grace: 0s\n  timeout: 1m\n"))
	wantPol := Policy{Mode: PolicyReset, DryRun: true, QPUse: 0.5, StaleQPs: 0, StaleRules: []string{"stale-error-qp"}, For: 0,
		Cooldown: 10 * time.Minute, MaxPerHour: 3, Method: "relink", Grace: 0, Timeout: time.Minute}
	if err != nil || pol.Policy == nil || !cmp.Equal(*pol.Policy, wantPol) {
		t.Errorf("policy: %+v, %v; want %+v", pol.Policy, err, wantPol)
	}
	// Left out, a key keeps its default.
	pol, err = ParseConfig("a.yaml", []byte("policy:\n  mode: reset\n"))
	wantPol = DefaultPolicy()
	wantPol.Mode = PolicyReset
	if err != nil || pol.Policy == nil || !cmp.Equal(*pol.Policy, wantPol) {
		t.Errorf("policy with mode only: %+v, %v; want %+v", pol.Policy, err, wantPol)
	}
	for _, empty := range []string{"", "# only comments\n", "---\n", "~\n"} {
		if c, err := ParseConfig("a.yaml", []byte(empty)); err != nil || !cmp.Equal(c, Config{}) {
			t.Errorf("ParseConfig(%q) = %+v, %v; want an empty Config", empty, c, err)
		}
	}
}

// Every bad file is refused with the file, the line and the key.
func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"intervall: 10s\n", `agent: config a.yaml:1: intervall: unknown key (valid: exhaustion_threshold, interval, max_qp, metrics_address, names_map, policy, probes, reconcile, rename, rename_force, retain, socket)`},
		{"rename: map,uuid\n", `agent: config a.yaml:1: rename: unknown policy "uuid"`},
		{"names_map: names.conf\n", `agent: config a.yaml:1: names_map: "names.conf": want an absolute path`},
		{"exhaustion_threshold: 80\n", `agent: config a.yaml:1: exhaustion_threshold: "80": want a share of max_qp above 0 and at most 1`},
		{"exhaustion_threshold: high\n", `agent: config a.yaml:1: exhaustion_threshold: "high"`},
		{"probes: true\ninterval: 10\n", `agent: config a.yaml:2: interval: "10": want a duration of at least 1s, such as 30s or 5m`},
		{"interval: 100ms\n", `agent: config a.yaml:1: interval: "100ms": want a duration of at least 1s`},
		{"reconcile: [1m]\n", `agent: config a.yaml:1: reconcile: want a duration such as 30s or 5m`},
		{"retain:\n", `agent: config a.yaml:1: retain: want a duration`},
		{"probes: yes\n", `agent: config a.yaml:1: probes: "yes": want true or false`},
		{"socket: agent.sock\n", `agent: config a.yaml:1: socket: "agent.sock": want an absolute path`},
		{"socket: {a: b}\n", `agent: config a.yaml:1: socket: want a string`},
		{"max_qp: 5\n", `agent: config a.yaml:1: max_qp: want a mapping of device names to QP limits`},
		{"max_qp:\n  rxe0: lots\n", `agent: config a.yaml:2: max_qp.rxe0: "lots": want a positive number`},
		{"max_qp:\n  rxe0: 0\n", `agent: config a.yaml:2: max_qp.rxe0: max_qp "rxe0=0"`},
		{"max_qp:\n  rxe0: 1\n  rxe0: 2\n", `agent: config a.yaml:3: max_qp.rxe0:`},
		{"interval: 10s\ninterval: 20s\n", `agent: config a.yaml:2: interval: given twice (first on line 1)`},
		{"- interval\n", `agent: config a.yaml:1: want a mapping of keys to values`},
		{"interval: 10s\n---\nreconcile: 1m\n", `agent: config a.yaml:2: a second YAML document`},
		{"interval: [\n", `agent: config a.yaml: `},
		// The policy: its keys, their types, and contradictions, at the
		// key at fault (or the mapping when the file leaves it out).
		{"policy: reset\n", `agent: config a.yaml:1: policy: want a mapping`},
		{"policy:\n  mode: fix\n", `agent: config a.yaml:2: policy.mode: "fix": want observe or reset`},
		{"policy:\n  mode: reset\n  qp_usage: 0.9\n", `agent: config a.yaml:3: policy.qp_usage: unknown key (valid: cooldown, dry_run, for, grace, max_per_hour, method, mode, qp_use, stale_qps, stale_rules, timeout)`},
		{"policy:\n  qp_use: 90%\n", `agent: config a.yaml:2: policy.qp_use: "90%": want a share of max_qp from 0 to 1`},
		{"policy:\n  qp_use: 90\n", `agent: config a.yaml:2: policy.qp_use: 90: want a share of max_qp from 0 to 1`},
		{"policy:\n  stale_qps: -1\n", `agent: config a.yaml:2: policy.stale_qps: "-1": want a whole number`},
		{"policy:\n  for: soon\n", `agent: config a.yaml:2: policy.for: "soon": want a duration`},
		{"policy:\n  cooldown: 100ms\n", `agent: config a.yaml:2: policy.cooldown: "100ms": want a duration of at least 1s`},
		{"policy:\n  method: reboot\n", `agent: config a.yaml:2: policy.method: unknown method "reboot"`},
		{"policy:\n  stale_rules: stale-error-qp\n", `agent: config a.yaml:2: policy.stale_rules: want a list of rule names`},
		{"policy:\n  mode: reset\n  stale_rules: [stale-error-qp, qp-exhaustion]\n", `agent: config a.yaml:3: policy.stale_rules: qp-exhaustion: a device rule, not a QP rule`},
		{"policy:\n  stale_rules: [stale-eror-qp]\n", `agent: config a.yaml:2: policy.stale_rules: unknown rule "stale-eror-qp" (valid: stale-error-qp,`},
		{"policy:\n  dry_run: true\n", `agent: config a.yaml:2: policy.dry_run: set with mode observe, which never resets`},
		{"policy:\n  mode: reset\n  method: netdev-bounce\n", `agent: config a.yaml:3: policy.method: netdev-bounce keeps every QP`},
		{"policy:\n  mode: reset\n  qp_use: 0\n  stale_qps: 0\n", `agent: config a.yaml:3: policy.qp_use: 0 with stale_qps 0: the policy would reset healthy devices`},
		{"policy:\n  mode: reset\n  max_per_hour: 0\n", `agent: config a.yaml:3: policy.max_per_hour: 0: want at least 1`},
		{"policy:\n  mode: reset\n  for: 2h\n", `agent: config a.yaml:2: policy.cooldown: 1h0m0s is shorter than for (2h0m0s)`},
		{"policy:\n  stale_rules: []\n", `agent: config a.yaml:2: policy.stale_rules: empty with stale_qps 100`},
		{"policy:\n  mode: reset\n  mode: observe\n", `agent: config a.yaml:3: policy.mode: given twice (first on line 2)`},
	} {
		_, err := ParseConfig("a.yaml", []byte(tt.in))
		var ce *ConfigError
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.As(err, &ce) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseConfig(%q) = %v; want one line starting %q", tt.in, err, tt.want)
		}
	}
}

// The commented default file parses, documents every key, and is all
// comments: installing it changes nothing.
func TestDefaultConfigFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "packaging", "rdmatool", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ParseConfig("agent.yaml", b); err != nil || !cmp.Equal(c, Config{}) {
		t.Errorf("the default file sets something: %+v, %v", c, err)
	}
	uncommented := regexp.MustCompile(`(?m)^#([a-z_]+):`).ReplaceAll(b, []byte("$1:"))
	uncommented = regexp.MustCompile(`(?m)^#  `).ReplaceAll(uncommented, []byte("  "))
	c, err := ParseConfig("agent.yaml", uncommented)
	if err != nil {
		t.Fatalf("the default file's values do not parse: %v", err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^#([a-z_]+):`).FindAllSubmatch(b, -1) {
		documented = append(documented, string(m[1]))
	}
	slices.Sort(documented)
	if !slices.Equal(documented, slices.Sorted(maps.Keys(configKeys))) {
		t.Errorf("documented keys %v, known %v", documented, slices.Sorted(maps.Keys(configKeys)))
	}
	// The values shown are the defaults.
	if *c.Socket != DefaultSocket || *c.MetricsAddress != DefaultMetricsAddress || *c.Reconcile != DefaultReconcile || *c.Interval != 10*time.Second || !*c.Probes ||
		*c.Rename != "" || *c.NamesMap != rename.DefaultMapFile || *c.RenameForce || *c.ExhaustionThreshold != 0.8 ||
		!cmp.Equal(*c.Policy, DefaultPolicy()) {
		t.Errorf("the default file shows other values than the defaults: %+v", c)
	}
}

func TestLoadConfigMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if c, err := LoadConfig(path, true); err != nil || !cmp.Equal(c, Config{}) {
		t.Errorf("missing optional file: %+v, %v", c, err)
	}
	if _, err := LoadConfig(path, false); err == nil || err.Error() != "agent: config "+path+": no such file or directory" {
		t.Errorf("missing file asked for: %v", err)
	}
}

func TestApplyAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("interval: 30s\nreconcile: 10m\nmax_qp: {rxe0: 100, siw0: 200}\n")
	given := func(key string) bool { return key == "reconcile" }
	base := RunOptions{Interval: 10 * time.Second, Reconcile: time.Minute, MaxQP: map[string]uint64{"siw0": 5}}
	c, err := LoadConfig(path, false)
	if err != nil {
		t.Fatal(err)
	}
	running := base
	c.Apply(&running, given)
	// The file's interval; the command line's reconcile; max_qp merged,
	// the command line's siw0 winning.
	if running.Interval != 30*time.Second || running.Reconcile != time.Minute ||
		!cmp.Equal(running.MaxQP, map[string]uint64{"rxe0": 100, "siw0": 5}) {
		t.Errorf("applied: %+v", running)
	}
	write("interval: 30s\nmax_qp: {rxe0: 300}\n")
	r, err := ReloadFrom(path, false, base, running, given)
	if err != nil || r.Reconcile != time.Minute || !cmp.Equal(r.MaxQP, map[string]uint64{"rxe0": 300, "siw0": 5}) {
		t.Errorf("reload: %+v, %v", r, err)
	}
	if r.Policy == nil || !cmp.Equal(*r.Policy, DefaultPolicy()) {
		t.Errorf("reload without a policy: %+v, want the default", r.Policy)
	}
	// The policy reloads; a policy flag wins over the file, and a file
	// that contradicts a flag is refused.
	write("interval: 30s\npolicy:\n  mode: reset\n  stale_qps: 5\n")
	r, err = ReloadFrom(path, false, base, running, given)
	if err != nil || r.Policy == nil || r.Policy.Mode != PolicyReset || r.Policy.StaleQPs != 5 {
		t.Errorf("reload with a policy: %+v, %v", r.Policy, err)
	}
	flagged := base
	flagged.Policy = DefaultPolicy()
	flagged.Policy.DryRun = true
	withFlag := func(key string) bool { return key == "reconcile" || key == "policy_dry_run" }
	r, err = ReloadFrom(path, false, flagged, running, withFlag)
	if err != nil || r.Policy == nil || r.Policy.Mode != PolicyReset || !r.Policy.DryRun {
		t.Errorf("reload with --policy-dry-run: %+v, %v", r.Policy, err)
	}
	write("interval: 30s\npolicy:\n  mode: observe\n")
	if _, err := ReloadFrom(path, false, flagged, running, withFlag); err == nil || !strings.Contains(err.Error(), "policy.dry_run: set with mode observe") {
		t.Errorf("reload of mode observe under --policy-dry-run: %v", err)
	}
	for file, want := range map[string]string{
		"interval: 1m\n":                           "interval: changed from 30s to 1m0s, which takes a restart (nothing reloaded)",
		"interval: 30s\nx: 1\n":                    "x: unknown key",
		"interval: 30s\nsocket: /run/other.sock\n": "socket: changed from  to /run/other.sock",
	} {
		write(file)
		if _, err := ReloadFrom(path, false, base, running, given); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("reload of %q: %v; want %q", file, err, want)
		}
	}
}

// SIGHUP reloads: a good reload changes max_qp at once (the metrics show
// it); a refused one is logged and changes nothing.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	// Keep SIGHUP from killing the test binary whatever the timing.
	ignore := make(chan os.Signal, 1)
	signal.Notify(ignore, syscall.SIGHUP)
	defer signal.Stop(ignore)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	next := Reloadable{MaxQP: map[string]uint64{"rxe0": 500}, Reconcile: time.Minute}
	var nextErr error
	reload := func() (Reloadable, error) {
		mu.Lock()
		defer mu.Unlock()
		return next, nextErr
	}
	host := newFakeHost(rxe)
	var logs syncBuffer
	d := Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: host.dial}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond,
			NoProbes: true, Retry: time.Hour, MetricsAddress: addr, MaxQP: map[string]uint64{"rxe0": 100}, Reload: reload})
	}()
	defer stopRun(t, cancel, done)
	maxQP := func() float64 {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		if err != nil {
			return -1
		}
		v, _ := value(fams, "rdmatool_device_max_qps", map[string]string{"device": "rxe0", "node_guid": rdmanl.GUID(rxe.NodeGUID).String()})
		return v
	}
	waitFor(t, "max_qp 100 in /metrics", func() bool { return maxQP() == 100 })
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "max_qp 500 after SIGHUP", func() bool { return maxQP() == 500 })

	mu.Lock()
	next, nextErr = Reloadable{MaxQP: map[string]uint64{"rxe0": 900}}, errors.New("agent: config a.yaml:1: intervall: unknown key")
	mu.Unlock()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "intervall: unknown key") })
	if v := maxQP(); v != 500 {
		t.Errorf("max_qp %v after a refused reload, want 500 kept", v)
	}
	if !strings.Contains(logs.String(), `msg="configuration reload refused, keeping the running one"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Whatever a configuration file holds, ParseConfig answers with a Config or
// one line naming the file, and never panics.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{"", "interval: 10s\n", "max_qp:\n  rxe0: 5\n", "probes: [\n", "a: b\n---\nc: d\n",
		"rename: map,guid\nnames_map: /etc/x\n", "exhaustion_threshold: 0.5\n", "{interval: 1m, reconcile: 5m}\n", "&a [*a]\n",
		"policy:\n  mode: reset\n  stale_rules: [stale-error-qp]\n  for: 1m\n", "policy: {mode: reset, dry_run: true, qp_use: 0.5, method: relink}\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := ParseConfig("f.yaml", b)
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "agent: config f.yaml")) {
			t.Errorf("error %q: want one line naming the file", err)
		}
	})
}
