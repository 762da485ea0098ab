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
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/watch"
	"go.yaml.in/yaml/v3"
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
	got, err := parseConfig("a.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Socket: ptr[socketPath]("/run/x/agent.sock"), MetricsAddress: ptr[metricsAddress]("[::1]:9999"), Interval: ptr(duration(30 * time.Second)),
		Reconcile: ptr(duration(10 * time.Minute)), Retain: ptr(duration(time.Hour)), Probes: ptr[boolean](false), MaxQP: maxQP{"mlx5_0": 131072, "rxe0": 1024}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	rest, err := parseConfig("a.yaml", []byte("rename: map,guid\nnames_map: /etc/x\nrename_force: true\nexhaustion_threshold: 0.5\nstate_file: /var/x.json\nstate_interval: 1m\n"+
		"create_failures: 3\ncreate_failure_window: 1m\nerror_storm_cycles: 4\nerror_storm_window: 2m\nmr_leak_growth: 6\nmr_leak_window: 20m\n"))
	wantRest := Config{Rename: ptr[renamePolicies]("map,guid"), NamesMap: ptr[absPath]("/etc/x"), RenameForce: ptr[boolean](true),
		ExhaustionThreshold: ptr[threshold](0.5), StateFile: ptr[optionalPath]("/var/x.json"), StateInterval: ptr(duration(time.Minute)),
		CreateFailures: ptr[positive](3), CreateFailureWindow: ptr(duration(time.Minute)),
		ErrorStormCycles: ptr[positive](4), ErrorStormWindow: ptr(duration(2 * time.Minute)),
		MRLeakGrowth: ptr[positive](6), MRLeakWindow: ptr(duration(20 * time.Minute))}
	if d := cmp.Diff(wantRest, rest); err != nil || d != "" {
		t.Errorf("rename, threshold and state keys: %v (-want +got):\n%s", err, d)
	}
	// "" keeps no state.
	if c, err := parseConfig("a.yaml", []byte("state_file: \"\"\n")); err != nil || c.StateFile == nil || *c.StateFile != "" {
		t.Errorf("state_file \"\": %+v, %v", c.StateFile, err)
	}
	pol, err := parseConfig("a.yaml", []byte("policy:\n  mode: reset\n  dry_run: true\n  qp_use: 0.5\n  stale_qps: 0\n  stale_rules: [stale-error-qp]\n  for: 0s\n  cooldown: 10m\n  max_per_hour: 3\n  method: relink\n  grace: 0s\n  timeout: 1m\n"))
	wantPol := Policy{Mode: PolicyReset, DryRun: true, QPUse: 0.5, StaleQPs: 0, StaleRules: []string{"stale-error-qp"}, For: 0,
		Cooldown: 10 * time.Minute, MaxPerHour: 3, Method: "relink", Grace: 0, Timeout: time.Minute}
	if p := pol.policy(); err != nil || p == nil || !cmp.Equal(*p, wantPol) {
		t.Errorf("policy: %+v, %v; want %+v", p, err, wantPol)
	}
	// Left out, a key keeps its default.
	pol, err = parseConfig("a.yaml", []byte("policy:\n  mode: reset\n"))
	wantPol = DefaultPolicy()
	wantPol.Mode = PolicyReset
	if p := pol.policy(); err != nil || p == nil || !cmp.Equal(*p, wantPol) {
		t.Errorf("policy with mode only: %+v, %v; want %+v", p, err, wantPol)
	}
	for _, empty := range []string{"", "# only comments\n", "---\n", "~\n"} {
		if c, err := parseConfig("a.yaml", []byte(empty)); err != nil || !cmp.Equal(c, Config{}) {
			t.Errorf("parseConfig(%q) = %+v, %v; want an empty Config", empty, c, err)
		}
	}
}

// Every bad file is refused with the file, the line and the key.
func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"intervall: 10s\n", `agent: config a.yaml:1: intervall: unknown key (valid: create_failure_window, create_failures, error_storm_cycles, error_storm_window, exhaustion_threshold, interval, max_qp, metrics_address, mr_leak_growth, mr_leak_window, names_map, policy, probes, reconcile, rename, rename_force, retain, socket, state_file, state_interval)`},
		{"rename: map,uuid\n", `agent: config a.yaml:1: rename: unknown policy "uuid"`},
		{"names_map: names.conf\n", `agent: config a.yaml:1: names_map: "names.conf": want an absolute path`},
		{"exhaustion_threshold: 80\n", `agent: config a.yaml:1: exhaustion_threshold: "80": want a share of max_qp above 0 and at most 1`},
		{"exhaustion_threshold: high\n", `agent: config a.yaml:1: exhaustion_threshold: "high"`},
		{"create_failures: 0\n", `agent: config a.yaml:1: create_failures: "0": want a whole number, 1 or more`},
		{"create_failure_window: 10ms\n", `agent: config a.yaml:1: create_failure_window: "10ms"`},
		{"error_storm_cycles: -1\n", `agent: config a.yaml:1: error_storm_cycles: "-1": want a whole number, 1 or more`},
		{"error_storm_window: 1\n", `agent: config a.yaml:1: error_storm_window: "1"`},
		{"mr_leak_growth: 0\n", `agent: config a.yaml:1: mr_leak_growth: "0": want a whole number, 1 or more`},
		{"mr_leak_window: 500ms\n", `agent: config a.yaml:1: mr_leak_window: "500ms": want a duration of at least 1s`},
		{"probes: true\ninterval: 10\n", `agent: config a.yaml:2: interval: "10": want a duration of at least 1s, such as 30s or 5m`},
		{"interval: 100ms\n", `agent: config a.yaml:1: interval: "100ms": want a duration of at least 1s`},
		{"reconcile: [1m]\n", `agent: config a.yaml:1: reconcile: want a duration such as 30s or 5m`},
		{"retain:\n", `agent: config a.yaml:1: retain: want a duration`},
		{"probes: yes\n", `agent: config a.yaml:1: probes: "yes": want true or false`},
		{"socket: agent.sock\n", `agent: config a.yaml:1: socket: "agent.sock": want an absolute path`},
		{"socket: {a: b}\n", `agent: config a.yaml:1: socket: want a string`},
		// A unix socket's path holds 107 bytes: checked as --socket is.
		{"socket: /" + strings.Repeat("s", 107) + "\n", `agent: config a.yaml:1: socket: "/sss` + strings.Repeat("s", 60) + `" (108 bytes): a unix socket's path holds at most 107 bytes`},
		{"socket: \"/run/a\\0b\"\n", `agent: config a.yaml:1: socket: "/run/a\x00b": a path has no NUL byte`},
		// The metrics address is checked as --metrics-address is, at its
		// line.
		{"interval: 10s\nmetrics_address: 127.0.0.1:99999\n", `agent: config a.yaml:2: metrics_address: "127.0.0.1:99999": port "99999" is not a number up to 65535`},
		{"metrics_address: localhost\n", `agent: config a.yaml:1: metrics_address: "localhost": want HOST:PORT, such as 127.0.0.1:10095`},
		{"metrics_address: [a]\n", `agent: config a.yaml:1: metrics_address: want HOST:PORT, or "" for none`},
		// What the file says is quoted cut.
		{"interval: " + strings.Repeat("x", 100000) + "\n", `agent: config a.yaml:1: interval: "` + strings.Repeat("x", 64) + `" (100000 bytes): want a duration of at least 1s`},
		{strings.Repeat("k", 1000) + ": 1\n", `agent: config a.yaml:1: "` + strings.Repeat("k", 64) + `" (1000 bytes): unknown key`},
		{"max_qp:\n  " + strings.Repeat("d", 1000) + ": x\n", `agent: config a.yaml:2: "max_qp.` + strings.Repeat("d", 57) + `" (1007 bytes): "x": want a positive number`},
		{"policy:\n  mode: " + strings.Repeat("m", 100000) + "\n", `agent: config a.yaml:2: policy.mode: "` + strings.Repeat("m", 64) + `" (100000 bytes): want observe or reset`},
		{"state_file: state.json\n", `agent: config a.yaml:1: state_file: "state.json": want an absolute path, or "" for none`},
		{"state_file:\n", `agent: config a.yaml:1: state_file: want a string`},
		{"state_file: /" + strings.Repeat("s", 5000) + "\n", `agent: config a.yaml:1: state_file: "/` + strings.Repeat("s", 63) + `" (5001 bytes): longer than a path can be (4095 bytes)`},
		{"state_file: /var/" + strings.Repeat("s", 256) + "\n", `agent: config a.yaml:1: state_file: "/var/` + strings.Repeat("s", 59) + `" (261 bytes): a name in it is longer than a file name can be (255 bytes)`},
		{"state_file: \"/var/a\\0b\"\n", `agent: config a.yaml:1: state_file: "/var/a\x00b": a path has no NUL byte`},
		{"names_map: /etc/" + strings.Repeat("n", 256) + "\n", `agent: config a.yaml:1: names_map: "/etc/` + strings.Repeat("n", 59) + `" (261 bytes): a name in it is longer than a file name can be (255 bytes)`},
		{"state_interval: 0s\n", `agent: config a.yaml:1: state_interval: "0s": want a duration of at least 1s`},
		{"max_qp: 5\n", `agent: config a.yaml:1: max_qp: want a mapping of device names to QP limits`},
		{"max_qp:\n  rxe0: lots\n", `agent: config a.yaml:2: max_qp.rxe0: "lots": want a positive number`},
		{"interval: 10s\nsocket: \"/run/a\x01b\"\n", `agent: config a.yaml:2: a control character ("\x01"): YAML takes none but tab and newline`},
		{"max_qp:\n  rxe0: [1, 2]\n", `agent: config a.yaml:2: max_qp.rxe0: a list: want a positive number`},
		{"max_qp:\n  rxe0: {a: 1}\n", `agent: config a.yaml:2: max_qp.rxe0: a mapping: want a positive number`},
		{"max_qp: {\"\": 5}\n", `agent: config a.yaml:1: max_qp: an empty key: want a device name`},
		{"state_file: /\n", `agent: config a.yaml:1: state_file: "/": want a file's path, not a directory's`},
		{"names_map: /etc/rdmatool/\n", `agent: config a.yaml:1: names_map: "/etc/rdmatool/": want a file's path, not a directory's`},
		{"max_qp:\n  rxe0: 0\n", `agent: config a.yaml:2: max_qp.rxe0: max_qp "rxe0=0"`},
		{"max_qp:\n  rxe0: 1\n  rxe0: 2\n", `agent: config a.yaml:3: max_qp.rxe0:`},
		{"interval: 10s\ninterval: 20s\n", `agent: config a.yaml:2: interval: given twice (first on line 1)`},
		{"- interval\n", `agent: config a.yaml:1: want a mapping of keys to values`},
		{"interval: 10s\n---\nreconcile: 1m\n", `agent: config a.yaml:2: a second YAML document`},
		{"interval: 10s\n---\nreconcile: [\n", `agent: config a.yaml: a second YAML document, which does not parse (the file holds one): yaml: line 3:`},
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
		// Not a number, however YAML spells it.
		{"exhaustion_threshold: .nan\n", `agent: config a.yaml:1: exhaustion_threshold: ".nan": want a share of max_qp above 0 and at most 1`},
		{"exhaustion_threshold: .inf\n", `agent: config a.yaml:1: exhaustion_threshold: ".inf": want a share of max_qp above 0 and at most 1`},
		{"policy:\n  qp_use: .nan\n", `agent: config a.yaml:2: policy.qp_use: NaN: want a share of max_qp from 0 to 1`},
		// What yaml.v3 would take without asking: nulls, aliases, merge
		// keys, YAML 1.1's booleans, numbers in other bases.
		{"probes:\n", `agent: config a.yaml:1: probes: "": want true or false`},
		{"max_qp:\n", `agent: config a.yaml:1: max_qp: want a mapping of device names to QP limits`},
		{"policy:\n", `agent: config a.yaml:1: policy: want a mapping, such as {mode: reset, qp_use: 0.9}`},
		{"policy:\n  stale_rules: ~\n", `agent: config a.yaml:2: policy.stale_rules: want a list of rule names`},
		{"interval: &i 10s\nreconcile: *i\n", `agent: config a.yaml:2: reconcile: want a duration such as 30s or 5m`},
		{"defaults: &d {interval: 10s}\n", `agent: config a.yaml:1: defaults: unknown key`},
		{"<<: {interval: 10s}\n", `agent: config a.yaml:1: <<: unknown key`},
		{"policy:\n  <<: {mode: reset}\n", `agent: config a.yaml:2: policy.<<: unknown key`},
		{"rename_force: on\n", `agent: config a.yaml:1: rename_force: "on": want true or false`},
		{"max_qp:\n  rxe0: 0x400\n", `agent: config a.yaml:2: max_qp.rxe0: max_qp "rxe0=0x400"`},
		{"max_qp:\n  rxe0:\n", `agent: config a.yaml:2: max_qp.rxe0: "": want a positive number`},
		{"policy:\n  mode: [reset]\n", `agent: config a.yaml:2: policy.mode: want observe or reset`},
		{"policy:\n  method: {a: b}\n", `agent: config a.yaml:2: policy.method: want a reset method, such as auto`},
		{"policy:\n  max_per_hour: 1.5\n", `agent: config a.yaml:2: policy.max_per_hour: "1.5": want a whole number`},
		{"policy:\n  grace: -1s\n", `agent: config a.yaml:2: policy.grace: "-1s": want a duration, 0s or more`},
		{"rename: ''\nrename: guid\n", `agent: config a.yaml:2: rename: given twice (first on line 1)`},
		{"rename: map,,guid\n", `agent: config a.yaml:1: rename: empty policy in "map,,guid"`},
		{"interval: 1m\nmax_qp:\n  rxe0: 5\npolicy:\n  mode: reset\n  cooldown: 1m\n  for: 2m\n", `agent: config a.yaml:6: policy.cooldown: 1m0s is shorter than for (2m0s)`},
	} {
		_, err := parseConfig("a.yaml", []byte(tt.in))
		var ce *ConfigError
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.As(err, &ce) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 1024 {
			t.Errorf("parseConfig(%s) = %v; want one short line starting %q", quote.String(tt.in), err, tt.want)
		}
	}
}

// The commented default file parses, documents every key, and is all
// comments: installing it changes nothing. The values it shows are the
// code's defaults.
func TestDefaultConfigFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "packaging", "rdmatool", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := parseConfig("agent.yaml", b); err != nil || !cmp.Equal(c, Config{}) {
		t.Errorf("the default file sets something: %+v, %v", c, err)
	}
	uncommented := regexp.MustCompile(`(?m)^#([a-z_]+):`).ReplaceAll(b, []byte("$1:"))
	uncommented = regexp.MustCompile(`(?m)^#  `).ReplaceAll(uncommented, []byte("  "))
	c, err := parseConfig("agent.yaml", uncommented)
	if err != nil {
		t.Fatalf("the default file's values do not parse: %v", err)
	}
	// Every key is documented, the policy's too.
	var doc yaml.Node
	if err := yaml.Unmarshal(uncommented, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(n *yaml.Node) []string {
		var out []string
		for i := 0; i < len(n.Content); i += 2 {
			out = append(out, n.Content[i].Value)
		}
		return slices.Sorted(slices.Values(out))
	}
	top := doc.Content[0]
	if known := slices.Sorted(maps.Keys(yamlFields(reflect.TypeFor[Config]()))); !slices.Equal(keys(top), known) {
		t.Errorf("documented keys %v, known %v", keys(top), known)
	}
	if known := slices.Sorted(maps.Keys(yamlFields(reflect.TypeFor[policyConfig]()))); !slices.Equal(keys(top.Content[len(top.Content)-1]), known) {
		t.Errorf("documented policy keys %v, known %v", keys(top.Content[len(top.Content)-1]), known)
	}
	// The values shown are the defaults: the agent's, leakwatch's for
	// what the agent leaves to it, and none for max_qp (the entries
	// shown are examples: without one the agent asks the device).
	tests := []struct {
		key       string
		got, want any
	}{
		{"socket", string(*c.Socket), agentapi.DefaultSocket},
		{"metrics_address", string(*c.MetricsAddress), DefaultMetricsAddress},
		{"interval", time.Duration(*c.Interval), DefaultInterval},
		{"reconcile", time.Duration(*c.Reconcile), DefaultReconcile},
		{"retain", time.Duration(*c.Retain), leakwatch.DefaultRetain},
		{"probes", bool(*c.Probes), !RunOptions{}.NoProbes},
		{"rename", string(*c.Rename), ""},
		{"names_map", string(*c.NamesMap), rename.DefaultMapFile},
		{"rename_force", bool(*c.RenameForce), rename.Options{}.Force},
		{"exhaustion_threshold", float64(*c.ExhaustionThreshold), leakwatch.DefaultExhaustionThreshold},
		{"create_failures", int(*c.CreateFailures), leakwatch.DefaultCreateFailures},
		{"create_failure_window", time.Duration(*c.CreateFailureWindow), leakwatch.DefaultCreateFailureWindow},
		{"error_storm_cycles", int(*c.ErrorStormCycles), leakwatch.DefaultErrorStormCycles},
		{"error_storm_window", time.Duration(*c.ErrorStormWindow), leakwatch.DefaultErrorStormWindow},
		{"mr_leak_growth", int(*c.MRLeakGrowth), leakwatch.DefaultMRLeakGrowth},
		{"mr_leak_window", time.Duration(*c.MRLeakWindow), leakwatch.DefaultMRLeakWindow},
		{"state_file", string(*c.StateFile), DefaultStateFile},
		{"state_interval", time.Duration(*c.StateInterval), DefaultStateInterval},
		{"policy", *c.policy(), DefaultPolicy()},
	}
	for _, tt := range tests {
		if !cmp.Equal(tt.got, tt.want) {
			t.Errorf("the default file shows %s: %v, the default is %v", tt.key, tt.got, tt.want)
		}
	}
}

func TestLoadConfigMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if c, err := LoadConfig(context.Background(), path, true); err != nil || !cmp.Equal(c, Config{}) {
		t.Errorf("missing optional file: %+v, %v", c, err)
	}
	if _, err := LoadConfig(context.Background(), path, false); err == nil || err.Error() != "agent: config "+path+": no such file or directory" {
		t.Errorf("missing file asked for: %v", err)
	}
}

// LoadConfig reads through opfile: what is not a regular file, or is over
// 64 KiB, is refused, naming the file, optional or not. (opfile's tests hold
// a named pipe to a deadline; here one that blocked would hang the test.)
func TestLoadConfigNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#\n"), maxConfigSize/2+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo: "agent: config " + fifo + ": not a regular file (a named pipe)",
		zero: "agent: config " + zero + ": not a regular file (a character device)",
		dir:  "agent: config " + dir + ": not a regular file (a directory)",
		big:  "agent: config " + big + ": larger than 65536 bytes",
	} {
		for _, optional := range []bool{false, true} {
			_, err := LoadConfig(context.Background(), path, optional)
			var ce *ConfigError
			if err == nil || err.Error() != want || !errors.As(err, &ce) || ce.Path != path {
				t.Errorf("LoadConfig(%s, optional %v) = %v, want %q", path, optional, err, want)
			}
		}
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
	base := RunOptions{Interval: 10 * time.Second, Reconcile: time.Minute, MaxQP: map[string]uint64{"siw0": 5},
		StateFile: "/var/lib/x.json", StateInterval: DefaultStateInterval}
	c, err := LoadConfig(context.Background(), path, false)
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
		"interval: 30s\nsocket: /run/other.sock\n": "socket: changed from \"\" to \"/run/other.sock\"",
		"interval: 30s\nstate_file: \"\"\n":        "state_file: changed from \"/var/lib/x.json\" to \"\", which takes a restart",
		"interval: 30s\nstate_interval: 1m\n":      "state_interval: changed from 5m0s to 1m0s, which takes a restart",
		"interval: 30s\nmr_leak_window: 1h\n":      "mr_leak_window: changed from 0s to 1h0m0s, which takes a restart",
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
	host := rdmanltest.NewHost(rxe)
	var logs syncBuffer
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: dialer(host)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond,
			NoProbes: true, retry: time.Hour, MetricsAddress: addr, MaxQP: map[string]uint64{"rxe0": 100}, Reload: reload})
	}()
	defer stopRun(t, cancel, done)
	maxQP := func() float64 {
		fams, _, err := scrapeErr("http://" + addr + "/metrics")
		if err != nil {
			return -1
		}
		v, _ := value(fams, "rdmatool_device_max_qps", map[string]string{"device": "rxe0", "node_guid": rxe.NodeGUID.String()})
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

// Whatever a configuration file holds, parseConfig answers with a Config or
// one line naming the file, and never panics.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{"", "interval: 10s\n", "max_qp:\n  rxe0: 5\n", "probes: [\n", "a: b\n---\nc: d\n",
		"interval: &i 10s\nreconcile: *i\n", "<<: {interval: 1m}\n", "max_qp: {rxe0: 1, rxe0: 2}\n", "policy: ~\n",
		"rename: map,guid\nnames_map: /etc/x\n", "exhaustion_threshold: 0.5\n", "{interval: 1m, reconcile: 5m}\n", "&a [*a]\n",
		"policy:\n  mode: reset\n  stale_rules: [stale-error-qp]\n  for: 1m\n", "policy: {mode: reset, dry_run: true, qp_use: 0.5, method: relink}\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := parseConfig("f.yaml", b)
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "agent: config f.yaml")) {
			t.Errorf("error %q: want one line naming the file", err)
		}
	})
}

// A configuration file of the largest size, of what costs yaml.v3 the
// most memory (flow lists and mappings of one-letter scalars, nesting),
// costs a reload a bounded amount: at 1 MiB it was 284 MiB.
func TestParseConfigMemory(t *testing.T) {
	for name, in := range map[string]string{
		"a flow list":    "policy:\n  stale_rules: [" + strings.Repeat("a,", maxConfigSize/2-40) + "a]\n",
		"a flow mapping": "max_qp: {" + strings.Repeat("a: 1,", maxConfigSize/5-40) + "}\n",
		"block list":     "policy:\n  stale_rules:\n" + strings.Repeat("   - a\n", maxConfigSize/7-40),
		"nesting":        strings.Repeat("[", maxConfigSize-1),
	} {
		if len(in) > maxConfigSize {
			t.Fatalf("%s: %d bytes, over the %d a file may have", name, len(in), maxConfigSize)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := parseConfig("a.yaml", []byte(in))
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s of %d bytes: %d KiB allocated (%v)", name, len(in), allocated>>10, err)
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
		if allocated > 40<<20 {
			t.Errorf("%s of %d bytes: %d MiB allocated to parse it, want at most 40 MiB", name, len(in), allocated>>20)
		}
	}
}
