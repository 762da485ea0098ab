package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"go.yaml.in/yaml/v3"
)

// DefaultConfig is where the agent reads its configuration file.
const DefaultConfig = "/etc/rdmatool/agent.yaml"

// Config is the agent's configuration file. Every key is optional; flags
// given on the command line override it.
type Config struct {
	Socket         *string
	MetricsAddress *string
	Interval       *time.Duration
	Reconcile      *time.Duration
	Retain         *time.Duration
	Probes         *bool
	MaxQP          map[string]uint64
	// Rename is the rename policies applied to devices as they appear
	// ("map,guid"; "" for none), NamesMap the map policy's file,
	// RenameForce whether user-assigned names are replaced too.
	Rename      *string
	NamesMap    *string
	RenameForce *bool
	// ExhaustionThreshold is the share of max_qp in use that qp-exhaustion
	// reports (0 < x <= 1).
	ExhaustionThreshold *float64
	// Policy is the remediation policy: DefaultPolicy with what the
	// file's policy mapping sets, checked; nil when the file has none.
	Policy *Policy
}

// configKeys are the keys a configuration file may have, with how each is
// read into a Config.
var configKeys = map[string]func(c *Config, n *yaml.Node) error{
	"socket":               func(c *Config, n *yaml.Node) error { return setString(&c.Socket, n, checkAbsolute) },
	"metrics_address":      func(c *Config, n *yaml.Node) error { return setString(&c.MetricsAddress, n, nil) },
	"interval":             func(c *Config, n *yaml.Node) error { return setDuration(&c.Interval, n) },
	"reconcile":            func(c *Config, n *yaml.Node) error { return setDuration(&c.Reconcile, n) },
	"retain":               func(c *Config, n *yaml.Node) error { return setDuration(&c.Retain, n) },
	"probes":               func(c *Config, n *yaml.Node) error { return setBool(&c.Probes, n) },
	"max_qp":               setMaxQP,
	"rename":               func(c *Config, n *yaml.Node) error { return setString(&c.Rename, n, checkPolicies) },
	"names_map":            func(c *Config, n *yaml.Node) error { return setString(&c.NamesMap, n, checkAbsolute) },
	"rename_force":         func(c *Config, n *yaml.Node) error { return setBool(&c.RenameForce, n) },
	"exhaustion_threshold": setThreshold,
	"policy":               setPolicy,
}

// ConfigError is a configuration file's first problem, located.
type ConfigError struct {
	Path string
	Line int    // 0 when the file as a whole is at fault
	Key  string // the key at fault, dotted ("max_qp.rxe0"); "" when none
	Err  error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("agent: config " + e.Path)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		key := e.Key
		if strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) {
			key = strconv.Quote(key) // a key with a line break stays on one line
		}
		b.WriteString(": " + key)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads and checks the configuration file at path. A missing
// file is an empty Config when optional (the default path), an error
// otherwise. Unknown keys, values of the wrong type, durations below a
// second and malformed max_qp entries are errors naming the key and line.
func LoadConfig(path string, optional bool) (Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && optional {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, &ConfigError{Path: path, Err: unwrapPath(err)}
	}
	return ParseConfig(path, b)
}

// ParseConfig checks a configuration file's contents; path names it in
// errors.
func ParseConfig(path string, b []byte) (Config, error) {
	var c Config
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // empty, or comments only
		}
		return c, &ConfigError{Path: path, Err: errors.New(strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return c, &ConfigError{Path: path, Line: extra.Line, Err: errors.New("a second YAML document; the file holds one")}
	}
	if len(doc.Content) == 0 {
		return c, nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return c, nil
	}
	if top.Kind != yaml.MappingNode {
		return c, &ConfigError{Path: path, Line: top.Line, Err: errors.New("want a mapping of keys to values")}
	}
	if _, err := readMapping(&c, top, configKeys); err != nil {
		var ce *ConfigError
		errors.As(err, &ce)
		ce.Path = path
		return c, ce
	}
	return c, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readMapping reads the mapping n into dst, each key with its function in
// keys. An unknown key, a key given twice or a value its function refuses
// is a *ConfigError at that key's line (without Path), a nested key's
// error named by its dotted path ("policy.qp_use"). It returns the line of
// each key read.
func readMapping[T any](dst *T, n *yaml.Node, keys map[string]func(*T, *yaml.Node) error) (map[string]int, error) {
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		set, ok := keys[k.Value]
		if !ok || k.Kind != yaml.ScalarNode {
			valid := slices.Sorted(maps.Keys(keys))
			return nil, &ConfigError{Line: k.Line, Key: k.Value, Err: fmt.Errorf("unknown key (valid: %s)", strings.Join(valid, ", "))}
		}
		if line, dup := lines[k.Value]; dup {
			return nil, &ConfigError{Line: k.Line, Key: k.Value, Err: fmt.Errorf("given twice (first on line %d)", line)}
		}
		lines[k.Value] = k.Line
		if err := set(dst, v); err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) { // a nested key
				ce.Key = k.Value + "." + ce.Key
				return nil, ce
			}
			return nil, &ConfigError{Line: v.Line, Key: k.Value, Err: err}
		}
	}
	return lines, nil
}

func scalar(n *yaml.Node, want string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return fmt.Errorf("want %s", want)
	}
	return nil
}

func setString(dst **string, n *yaml.Node, check func(string) error) error {
	if err := scalar(n, "a string"); err != nil {
		return err
	}
	if check != nil {
		if err := check(n.Value); err != nil {
			return err
		}
	}
	s := n.Value
	*dst = &s
	return nil
}

func checkAbsolute(s string) error {
	if !strings.HasPrefix(s, "/") {
		return fmt.Errorf("%q: want an absolute path", s)
	}
	return nil
}

func setDuration(dst **time.Duration, n *yaml.Node) error {
	d, err := duration(n, time.Second)
	if err != nil {
		return err
	}
	*dst = &d
	return nil
}

// duration reads a duration of at least min.
func duration(n *yaml.Node, min time.Duration) (time.Duration, error) {
	if err := scalar(n, "a duration such as 30s or 5m"); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil || d < min {
		if min > 0 {
			return 0, fmt.Errorf("%q: want a duration of at least %s, such as 30s or 5m", n.Value, min)
		}
		return 0, fmt.Errorf("%q: want a duration, 0s or more, such as 30s or 5m", n.Value)
	}
	return d, nil
}

func setBool(dst **bool, n *yaml.Node) error {
	b, err := boolean(n)
	if err != nil {
		return err
	}
	*dst = &b
	return nil
}

func boolean(n *yaml.Node) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, fmt.Errorf("%q: want true or false", n.Value)
	}
	return b, nil
}

// number reads an int or a float.
func number(n *yaml.Node) (float64, bool) {
	var f float64
	ok := n.Kind == yaml.ScalarNode && (n.Tag == "!!float" || n.Tag == "!!int") && n.Decode(&f) == nil
	return f, ok
}

func setThreshold(c *Config, n *yaml.Node) error {
	f, ok := number(n)
	if !ok || f <= 0 || f > 1 {
		return fmt.Errorf("%q: want a share of max_qp above 0 and at most 1, such as 0.8", n.Value)
	}
	c.ExhaustionThreshold = &f
	return nil
}

func checkPolicies(s string) error {
	if s == "" {
		return nil
	}
	_, err := rename.ParsePolicies(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "rename: "))
	}
	return nil
}

func setMaxQP(c *Config, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("want a mapping of device names to QP limits, such as {mlx5_0: 131072}")
	}
	c.MaxQP = map[string]uint64{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		spec := k.Value + "=" + v.Value
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
			return &ConfigError{Line: v.Line, Key: k.Value, Err: fmt.Errorf("%q: want a positive number", v.Value)}
		}
		if _, dup := c.MaxQP[k.Value]; dup {
			return &ConfigError{Line: k.Line, Key: k.Value, Err: errors.New("given twice")}
		}
		m, err := leakwatch.ParseMaxQP([]string{spec})
		if err != nil {
			return &ConfigError{Line: v.Line, Key: k.Value, Err: errors.New(strings.TrimPrefix(err.Error(), "leakwatch: "))}
		}
		c.MaxQP[k.Value] = m[k.Value]
	}
	return nil
}

// Apply sets in o what the file gives, except what the command line gave:
// given reports whether the flag for a key was set (socket,
// metrics_address, interval, reconcile, probes, rename, names_map,
// rename_force, policy, policy_dry_run). max_qp merges, the command line's entries winning per
// device. The rename keys complete o.Rename, which the command line set
// (nil when it named no policies).
func (c Config) Apply(o *RunOptions, given func(key string) bool) {
	if c.Rename != nil && !given("rename") {
		o.Rename = nil
		if *c.Rename != "" {
			policies, _ := rename.ParsePolicies(*c.Rename) // checked when parsed
			o.Rename = &rename.Options{Policies: policies}
		}
	}
	if o.Rename != nil {
		r := *o.Rename
		if c.NamesMap != nil && !given("names_map") {
			r.MapFile, r.MapMustExist = *c.NamesMap, true
		}
		if c.RenameForce != nil && !given("rename_force") {
			r.Force = *c.RenameForce
		}
		o.Rename = &r
	}
	if c.Socket != nil && !given("socket") {
		o.Socket = *c.Socket
	}
	if c.MetricsAddress != nil && !given("metrics_address") {
		o.MetricsAddress = *c.MetricsAddress
	}
	if c.Interval != nil && !given("interval") {
		o.Interval = *c.Interval
	}
	if c.Reconcile != nil && !given("reconcile") {
		o.Reconcile = *c.Reconcile
	}
	if c.Retain != nil {
		o.Retain = *c.Retain
	}
	if c.ExhaustionThreshold != nil && !given("exhaustion_threshold") {
		o.ExhaustionThreshold = *c.ExhaustionThreshold
	}
	if c.Probes != nil && !given("probes") {
		o.NoProbes = !*c.Probes
	}
	if c.Policy != nil {
		p := *c.Policy
		if given("policy") {
			p.Mode = o.Policy.Mode
		}
		if given("policy_dry_run") {
			p.DryRun = o.Policy.DryRun
		}
		o.Policy = p
	}
	if len(c.MaxQP) > 0 {
		merged := make(map[string]uint64, len(c.MaxQP)+len(o.MaxQP))
		for k, v := range c.MaxQP {
			merged[k] = v
		}
		for k, v := range o.MaxQP {
			merged[k] = v
		}
		o.MaxQP = merged
	}
}

// policyKeys are the keys of the policy mapping, with how each is read.
var policyKeys = map[string]func(p *Policy, n *yaml.Node) error{
	"mode": func(p *Policy, n *yaml.Node) error {
		if err := scalar(n, "observe or reset"); err != nil {
			return err
		}
		p.Mode = n.Value
		return nil
	},
	"dry_run": func(p *Policy, n *yaml.Node) (err error) { p.DryRun, err = boolean(n); return err },
	"qp_use": func(p *Policy, n *yaml.Node) error {
		var ok bool
		if p.QPUse, ok = number(n); !ok {
			return fmt.Errorf("%q: want a share of max_qp from 0 to 1, such as 0.9", n.Value)
		}
		return nil
	},
	"stale_qps":    func(p *Policy, n *yaml.Node) error { return decodeCount(&p.StaleQPs, n) },
	"max_per_hour": func(p *Policy, n *yaml.Node) error { return decodeCount(&p.MaxPerHour, n) },
	"stale_rules": func(p *Policy, n *yaml.Node) error {
		var rules []string
		if n.Kind != yaml.SequenceNode || n.Decode(&rules) != nil {
			return errors.New("want a list of rule names, such as [stale-error-qp, last-wqe-not-emitted]")
		}
		p.StaleRules = rules
		return nil
	},
	"for":      func(p *Policy, n *yaml.Node) (err error) { p.For, err = duration(n, 0); return err },
	"cooldown": func(p *Policy, n *yaml.Node) (err error) { p.Cooldown, err = duration(n, time.Second); return err },
	"grace":    func(p *Policy, n *yaml.Node) (err error) { p.Grace, err = duration(n, 0); return err },
	"timeout":  func(p *Policy, n *yaml.Node) (err error) { p.Timeout, err = duration(n, time.Second); return err },
	"method": func(p *Policy, n *yaml.Node) error {
		if err := scalar(n, "a reset method, such as auto"); err != nil {
			return err
		}
		p.Method = reset.Method(n.Value)
		return nil
	},
}

// setPolicy reads the policy mapping over DefaultPolicy and checks the
// result: a contradiction is reported at the key it names, or at the
// mapping when the file does not set that key.
func setPolicy(c *Config, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("want a mapping, such as {mode: reset, qp_use: 0.9}")
	}
	p := DefaultPolicy()
	lines, err := readMapping(&p, n, policyKeys)
	if err != nil {
		return err
	}
	if err := p.Check(); err != nil {
		var pe *PolicyError
		if errors.As(err, &pe) {
			line := lines[pe.Key]
			if line == 0 {
				line = n.Line
			}
			return &ConfigError{Line: line, Key: pe.Key, Err: pe.Err}
		}
		return err
	}
	c.Policy = &p
	return nil
}

func decodeCount(dst *int, n *yaml.Node) error {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 0 {
		return fmt.Errorf("%q: want a whole number, 0 or more", n.Value)
	}
	*dst = v
	return nil
}

// ReloadFrom returns what a reload of the file at path changes in running,
// the options the agent was started with (base: those of the command line
// alone). A file that does not load, or that changes an option only a
// restart can (socket, metrics_address, interval, probes, retain, the
// rename keys), is an
// error and nothing is reloaded.
func ReloadFrom(path string, optional bool, base, running RunOptions, given func(key string) bool) (Reloadable, error) {
	c, err := LoadConfig(path, optional)
	if err != nil {
		return Reloadable{}, err
	}
	o := base
	c.Apply(&o, given)
	for _, k := range []struct {
		key      string
		old, new any
	}{
		{"socket", running.Socket, o.Socket},
		{"metrics_address", running.MetricsAddress, o.MetricsAddress},
		{"interval", running.Interval, o.Interval},
		{"probes", !running.NoProbes, !o.NoProbes},
		{"retain", running.Retain, o.Retain},
		{"exhaustion_threshold", running.ExhaustionThreshold, o.ExhaustionThreshold},
		{"rename", renameString(running.Rename), renameString(o.Rename)},
	} {
		if k.old != k.new {
			return Reloadable{}, &ConfigError{Path: path, Key: k.key,
				Err: fmt.Errorf("changed from %v to %v, which takes a restart (nothing reloaded)", k.old, k.new)}
		}
	}
	if o.Reconcile <= 0 {
		o.Reconcile = DefaultReconcile
	}
	if o.Policy.Mode == "" {
		o.Policy = DefaultPolicy()
	}
	if err := o.Policy.Check(); err != nil { // the command line's over the file's
		return Reloadable{}, &ConfigError{Path: path, Err: err}
	}
	return Reloadable{MaxQP: o.MaxQP, Reconcile: o.Reconcile, Policy: &o.Policy}, nil
}

// renameString is a comparable form of rename options.
func renameString(o *rename.Options) string {
	if o == nil {
		return "off"
	}
	return fmt.Sprintf("%v map %s force %v", o.Policies, o.MapFile, o.Force)
}
