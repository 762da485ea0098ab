package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/opfile"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"go.yaml.in/yaml/v3"
)

// DefaultConfig is where the agent reads its configuration file.
const DefaultConfig = "/etc/rdmatool/agent.yaml"

// maxConfigSize bounds a configuration file; the shipped one, every key
// commented, is under 4 KiB, and max_qp for 2,000 devices about 40 KiB.
// yaml.v3 builds a node for every scalar of the file before it is
// checked, about 280 bytes a byte of a flow list: a file of 1 MiB made the
// agent allocate 284 MiB at its start and at each reload (against a
// DaemonSet's 512 MiB limit); 64 KiB holds that to about 18 MiB.
const maxConfigSize = 64 << 10

// Config is the agent's configuration file as decoded. The yaml tags are
// its keys; the type of each field reads and checks the key's value. Every
// key is optional: one the file leaves out is nil. Apply lays the file
// under the command line's flags.
type Config struct {
	Socket         *socketPath     `yaml:"socket"`
	MetricsAddress *metricsAddress `yaml:"metrics_address"`
	Interval       *duration       `yaml:"interval"`
	Reconcile      *duration       `yaml:"reconcile"`
	Retain         *duration       `yaml:"retain"`
	Probes         *boolean        `yaml:"probes"`
	MaxQP          maxQP           `yaml:"max_qp"`
	// Rename is the rename policies applied to devices as they appear
	// ("map,guid"; "" for none), NamesMap the map policy's file,
	// RenameForce whether user-assigned names are replaced too.
	Rename      *renamePolicies `yaml:"rename"`
	NamesMap    *absPath        `yaml:"names_map"`
	RenameForce *boolean        `yaml:"rename_force"`
	// ExhaustionThreshold is the share of max_qp in use that qp-exhaustion
	// reports (0 < x <= 1).
	ExhaustionThreshold *threshold `yaml:"exhaustion_threshold"`
	// CreateFailures and CreateFailureWindow are what qp-create-failing
	// reports: at least that many failed QP creates on a device within
	// the window.
	CreateFailures      *positive `yaml:"create_failures"`
	CreateFailureWindow *duration `yaml:"create_failure_window"`
	// ErrorStormCycles and ErrorStormWindow are what qp-error-storm
	// reports: an owner whose QPs on a device failed into Error in at
	// least that many reconnect cycles within the window.
	ErrorStormCycles *positive `yaml:"error_storm_cycles"`
	ErrorStormWindow *duration `yaml:"error_storm_window"`
	// MRLeakGrowth and MRLeakWindow are what mr-leak reports: an owner
	// whose MRs on a device grew by at least that many within the window,
	// over as many QP creates, while its live QPs did not grow.
	MRLeakGrowth *positive `yaml:"mr_leak_growth"`
	MRLeakWindow *duration `yaml:"mr_leak_window"`
	// Policy is the file's policy mapping: what it sets of the
	// remediation policy, over DefaultPolicy (Config.policy).
	Policy *policyConfig `yaml:"policy"`
	// StateFile is where the history is kept across restarts ("" for
	// nowhere), StateInterval the time between its saves.
	StateFile     *optionalPath `yaml:"state_file"`
	StateInterval *duration     `yaml:"state_interval"`
}

// policyConfig is the policy mapping of a configuration file; its yaml
// tags are the mapping's keys.
type policyConfig struct {
	Mode       *policyMode  `yaml:"mode"`
	DryRun     *boolean     `yaml:"dry_run"`
	QPUse      *share       `yaml:"qp_use"`
	StaleQPs   *count       `yaml:"stale_qps"`
	StaleRules *ruleList    `yaml:"stale_rules"`
	For        *delay       `yaml:"for"`
	Cooldown   *duration    `yaml:"cooldown"`
	MaxPerHour *count       `yaml:"max_per_hour"`
	Method     *resetMethod `yaml:"method"`
	Grace      *delay       `yaml:"grace"`
	Timeout    *duration    `yaml:"timeout"`
}

// example is what checkKeys shows for a policy that is not a mapping.
func (policyConfig) example() string { return "{mode: reset, qp_use: 0.9}" }

// policy is the policy the file gives: DefaultPolicy with what the
// mapping sets, unchecked; nil when the file has no policy.
func (c Config) policy() *Policy {
	f := c.Policy
	if f == nil {
		return nil
	}
	p := DefaultPolicy()
	if f.Mode != nil {
		p.Mode = string(*f.Mode)
	}
	if f.DryRun != nil {
		p.DryRun = bool(*f.DryRun)
	}
	if f.QPUse != nil {
		p.QPUse = float64(*f.QPUse)
	}
	if f.StaleQPs != nil {
		p.StaleQPs = int(*f.StaleQPs)
	}
	if f.StaleRules != nil {
		p.StaleRules = slices.Clone(*f.StaleRules)
	}
	if f.For != nil {
		p.For = time.Duration(*f.For)
	}
	if f.Cooldown != nil {
		p.Cooldown = time.Duration(*f.Cooldown)
	}
	if f.MaxPerHour != nil {
		p.MaxPerHour = int(*f.MaxPerHour)
	}
	if f.Method != nil {
		p.Method = reset.Method(*f.Method)
	}
	if f.Grace != nil {
		p.Grace = time.Duration(*f.Grace)
	}
	if f.Timeout != nil {
		p.Timeout = time.Duration(*f.Timeout)
	}
	return &p
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
	b.WriteString("agent: config")
	if e.Path != "" {
		b.WriteString(" " + e.Path)
	}
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		key := e.Key
		if len(key) > quote.Max || strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) {
			// A key with a line break stays on one line, a long one is
			// cut.
			key = quote.String(key)
		}
		b.WriteString(": " + key)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads (through opfile: a regular file of at most 64 KiB) and
// checks the configuration file at path. A missing file is an empty
// Config when optional (the default path), an error otherwise. Unknown
// keys, values of the wrong type, durations below a second and malformed
// max_qp entries are errors naming the key and line. When ctx ends before
// the read does (a file on a hung file system), LoadConfig returns
// ctx.Err() at once.
func LoadConfig(ctx context.Context, path string, optional bool) (Config, error) {
	b, err := opfile.ReadContext(ctx, path, maxConfigSize)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return Config{}, err
	}
	if errors.Is(err, fs.ErrNotExist) && optional {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, &ConfigError{Path: path, Err: opfileCause(err)}
	}
	return parseConfig(path, b)
}

// opfileCause is why opfile refused or could not read a file, without the
// path its *opfile.Error or *fs.PathError names: the agent's own error
// names the file.
func opfileCause(err error) error {
	var oe *opfile.Error
	var pe *fs.PathError
	switch {
	case errors.As(err, &oe):
		return oe.Err
	case errors.As(err, &pe):
		return pe.Err
	}
	return err
}

// parseConfig decodes and checks a configuration file's contents; path
// names it in errors. The file holds one YAML document: a mapping of the
// keys Config's yaml tags name, each at most once, decoded strictly
// (yaml.v3's KnownFields), then validate. Empty, comments only or null
// is an empty Config. Every error is a *ConfigError naming the file, the
// line and the dotted key at fault; for YAML that does not parse it wraps
// yaml.v3's own error, which names the line.
func parseConfig(path string, b []byte) (Config, error) {
	located := func(err *ConfigError) (Config, error) {
		err.Path = path
		return Config{}, err
	}
	// yaml.v3 refuses a control character without saying where: the
	// first one's line is said here.
	if i := bytes.IndexFunc(b, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f }); i >= 0 {
		return located(&ConfigError{Line: bytes.Count(b[:i], []byte("\n")) + 1,
			Err: fmt.Errorf("a control character (%s): YAML takes none but tab and newline", quote.String(string(b[i])))})
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, nil // empty, or comments only
		}
		return located(&ConfigError{Err: err})
	}
	// A second document is refused whether it parses or not: one that
	// does not is an error too, never ignored.
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return located(&ConfigError{Line: extra.Line, Err: errors.New("a second YAML document; the file holds one")})
	case !errors.Is(err, io.EOF):
		return located(&ConfigError{Err: fmt.Errorf("a second YAML document, which does not parse (the file holds one): %w", err)})
	}
	if len(doc.Content) == 0 {
		return Config{}, nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return Config{}, nil
	}
	if top.Kind != yaml.MappingNode {
		return located(&ConfigError{Line: top.Line, Err: errors.New("want a mapping of keys to values")})
	}
	if err := checkKeys(top, reflect.TypeFor[Config](), ""); err != nil {
		return located(err)
	}
	var c Config
	strict := yaml.NewDecoder(bytes.NewReader(b))
	strict.KnownFields(true)
	if err := strict.Decode(&c); err != nil {
		var ve *valueError
		var te *yaml.TypeError
		switch {
		case errors.As(err, &ve):
			return located(ve.at(keyAt(top, ve.node, "")))
		case errors.As(err, &te): // checkKeys refuses what yaml.v3 reports so first
			return located(&ConfigError{Err: errors.New(strings.Join(te.Errors, "; "))})
		}
		return located(&ConfigError{Err: err})
	}
	if err := c.validate(); err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			ce = &ConfigError{Err: err}
		}
		ce.Line = lineOf(top, ce.Key)
		return located(ce)
	}
	return c, nil
}

// validate checks what no single value shows: that the policy, laid over
// DefaultPolicy, makes sense and does not contradict itself
// (Policy.Check). The error is a *ConfigError naming the key at fault,
// "policy.cooldown", without file and line (parseConfig adds them).
func (c Config) validate() error {
	p := c.policy()
	if p == nil {
		return nil
	}
	if err := p.Check(); err != nil {
		var pe *PolicyError
		if errors.As(err, &pe) {
			return &ConfigError{Key: "policy." + pe.Key, Err: pe.Err}
		}
		return &ConfigError{Key: "policy", Err: err}
	}
	return nil
}

// checkKeys checks the mapping n, to be decoded into a struct of type t,
// for what yaml.v3 would report without a key, or take without asking the
// field's type: a key that none of t's yaml tags names, a key given twice
// or a merge key ("<<") is refused; a null value (yaml.v3 leaves the field
// unset) or an alias (yaml.v3 hands the type the anchored value) goes to
// the field's type, which refuses it in its own words. A value read into
// a struct must be a mapping, checked the same way. prefix is the dotted
// path of n ("policy.").
func checkKeys(n *yaml.Node, t reflect.Type, prefix string) *ConfigError {
	fields := yamlFields(t)
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + k.Value
		ft, known := fields[k.Value]
		if line, dup := first[k.Value]; dup {
			return &ConfigError{Line: k.Line, Key: key, Err: fmt.Errorf("given twice (first on line %d)", line)}
		}
		if !known || k.Kind != yaml.ScalarNode {
			valid := slices.Sorted(maps.Keys(fields))
			return &ConfigError{Line: k.Line, Key: key, Err: fmt.Errorf("unknown key (valid: %s)", strings.Join(valid, ", "))}
		}
		first[k.Value] = k.Line
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			if v.Kind != yaml.MappingNode {
				want := "want a mapping"
				if ex, ok := reflect.Zero(ft).Interface().(interface{ example() string }); ok {
					want += ", such as " + ex.example()
				}
				return &ConfigError{Line: v.Line, Key: key, Err: errors.New(want)}
			}
			if err := checkKeys(v, ft, key+"."); err != nil {
				return err
			}
			continue
		}
		if v.Kind != yaml.AliasNode && v.Tag != "!!null" {
			continue
		}
		err := errors.New("want a value")
		if u, ok := reflect.New(ft).Interface().(yaml.Unmarshaler); ok {
			err = u.UnmarshalYAML(v)
		}
		var ve *valueError
		if errors.As(err, &ve) {
			return ve.at(key)
		}
		if err != nil {
			return &ConfigError{Line: v.Line, Key: key, Err: err}
		}
	}
	return nil
}

// yamlFields maps the yaml tag of each field of the struct type t to the
// field's type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" {
			fields[name] = f.Type
		}
	}
	return fields
}

// keyAt is the dotted key whose value in the mapping n (or in a mapping
// within it) is at value's position in the file; "" when none is.
func keyAt(n, value *yaml.Node, prefix string) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Line == value.Line && v.Column == value.Column {
			return prefix + k.Value
		}
		if v.Kind == yaml.MappingNode {
			if key := keyAt(v, value, prefix+k.Value+"."); key != "" {
				return key
			}
		}
	}
	return ""
}

// lineOf is the line of the dotted key in the mapping n or, when the file
// does not set it, of the mapping that would hold it.
func lineOf(n *yaml.Node, key string) int {
	line := n.Line
	for name := range strings.SplitSeq(key, ".") {
		i := 0
		for i+1 < len(n.Content) && n.Content[i].Value != name {
			i += 2
		}
		if i+1 >= len(n.Content) {
			return n.Line
		}
		line, n = n.Content[i].Line, n.Content[i+1]
	}
	return line
}

// valueError is a value its type refuses: node is the value (keyAt finds
// its key), entry the entry within it at fault ("rxe0" of max_qp; ""
// for the value as a whole), line where.
type valueError struct {
	node  *yaml.Node
	entry string
	line  int
	err   error
}

func (e *valueError) Error() string { return e.err.Error() }
func (e *valueError) Unwrap() error { return e.err }

// at is the error located at the value of key.
func (e *valueError) at(key string) *ConfigError {
	if e.entry != "" {
		key += "." + e.entry
	}
	return &ConfigError{Line: e.line, Key: key, Err: e.err}
}

// refuse is a value type's refusal of the value n.
func refuse(n *yaml.Node, format string, a ...any) error {
	return &valueError{node: n, line: n.Line, err: fmt.Errorf(format, a...)}
}

// The value types below are the configuration file's kinds of value: each
// reads one YAML value and refuses, in the words an operator sees, what
// its keys do not take. yaml.v3 asks them about every value but a null
// (which it leaves unset) or an alias (for which it asks about the
// anchored value); checkKeys hands them those as written.

// scalar refuses n unless it is a scalar other than null.
func scalar(n *yaml.Node, want string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return refuse(n, "want %s", want)
	}
	return nil
}

// absPath is an absolute path.
type absPath string

func (p *absPath) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "a string"); err != nil {
		return err
	}
	if !strings.HasPrefix(n.Value, "/") {
		return refuse(n, "%s: want an absolute path", quote.String(n.Value))
	}
	if err := opfile.CheckPath(n.Value); err != nil {
		return refuse(n, "%s: %w", quote.String(n.Value), err)
	}
	if strings.HasSuffix(n.Value, "/") {
		return refuse(n, "%s: want a file's path, not a directory's", quote.String(n.Value))
	}
	*p = absPath(n.Value)
	return nil
}

// socketPath is the agent's socket: an absolute path that a unix socket
// can have (agentapi.CheckSocketPath).
type socketPath string

func (p *socketPath) UnmarshalYAML(n *yaml.Node) error {
	var abs absPath
	if err := abs.UnmarshalYAML(n); err != nil {
		return err
	}
	if err := agentapi.CheckSocketPath(n.Value); err != nil {
		return refuse(n, "%s: %w", quote.String(n.Value), err)
	}
	*p = socketPath(abs)
	return nil
}

// metricsAddress is HOST:PORT, or "" for no metrics
// (CheckMetricsAddress).
type metricsAddress string

func (a *metricsAddress) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "HOST:PORT, or \"\" for none"); err != nil {
		return err
	}
	if err := CheckMetricsAddress(n.Value); err != nil {
		return refuse(n, "%s: %w", quote.String(n.Value), err)
	}
	*a = metricsAddress(n.Value)
	return nil
}

// optionalPath is an absolute path, or "" for none.
type optionalPath string

func (p *optionalPath) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "a string"); err != nil {
		return err
	}
	if n.Value == "" {
		*p = ""
		return nil
	}
	var abs absPath
	if err := abs.UnmarshalYAML(n); err != nil {
		if !strings.HasPrefix(n.Value, "/") {
			return refuse(n, "%s: want an absolute path, or \"\" for none", quote.String(n.Value))
		}
		return err
	}
	*p = optionalPath(abs)
	return nil
}

// renamePolicies is a list of rename policies ("map,guid"), or "" for
// none.
type renamePolicies string

func (r *renamePolicies) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "a string"); err != nil {
		return err
	}
	if n.Value != "" {
		if _, err := rename.ParsePolicies(n.Value); err != nil {
			var pe *rename.PoliciesError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return &valueError{node: n, line: n.Line, err: err}
		}
	}
	*r = renamePolicies(n.Value)
	return nil
}

// boolean is true or false (not YAML 1.1's yes, no, on or off).
type boolean bool

func (b *boolean) UnmarshalYAML(n *yaml.Node) error {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return refuse(n, "%s: want true or false", quote.String(n.Value))
	}
	*b = boolean(v)
	return nil
}

// duration is a Go duration of at least a second.
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n, time.Second)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// delay is a Go duration, 0s or more.
type delay time.Duration

func (d *delay) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n, 0)
	if err != nil {
		return err
	}
	*d = delay(v)
	return nil
}

// parseDuration reads a duration of at least the given least.
func parseDuration(n *yaml.Node, least time.Duration) (time.Duration, error) {
	if err := scalar(n, "a duration such as 30s or 5m"); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil || d < least {
		if least > 0 {
			return 0, refuse(n, "%s: want a duration of at least %s, such as 30s or 5m", quote.String(n.Value), least)
		}
		return 0, refuse(n, "%s: want a duration, 0s or more, such as 30s or 5m", quote.String(n.Value))
	}
	return d, nil
}

// number reads an int or a float.
func number(n *yaml.Node) (float64, bool) {
	var f float64
	ok := n.Kind == yaml.ScalarNode && (n.Tag == "!!float" || n.Tag == "!!int") && n.Decode(&f) == nil
	return f, ok
}

// threshold is a share of max_qp above 0 and at most 1 (not NaN).
type threshold float64

func (t *threshold) UnmarshalYAML(n *yaml.Node) error {
	f, ok := number(n)
	if !ok || !(f > 0 && f <= 1) {
		return refuse(n, "%s: want a share of max_qp above 0 and at most 1, such as 0.8", quote.String(n.Value))
	}
	*t = threshold(f)
	return nil
}

// positive is a whole number, 1 or more: a count of failed QP creates,
// of reconnect cycles, of MRs.
type positive int

func (p *positive) UnmarshalYAML(n *yaml.Node) error {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 1 {
		return refuse(n, "%s: want a whole number, 1 or more", quote.String(n.Value))
	}
	*p = positive(v)
	return nil
}

// share is a number, which Policy.Check holds from 0 to 1.
type share float64

func (s *share) UnmarshalYAML(n *yaml.Node) error {
	f, ok := number(n)
	if !ok {
		return refuse(n, "%s: want a share of max_qp from 0 to 1, such as 0.9", quote.String(n.Value))
	}
	*s = share(f)
	return nil
}

// count is a whole number, 0 or more.
type count int

func (c *count) UnmarshalYAML(n *yaml.Node) error {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 0 {
		return refuse(n, "%s: want a whole number, 0 or more", quote.String(n.Value))
	}
	*c = count(v)
	return nil
}

// ruleList is a list of rule names, which Policy.Check checks.
type ruleList []string

func (r *ruleList) UnmarshalYAML(n *yaml.Node) error {
	var rules []string
	if n.Kind != yaml.SequenceNode || n.Decode(&rules) != nil {
		return refuse(n, "want a list of rule names, such as [stale-error-qp, last-wqe-not-emitted]")
	}
	*r = rules
	return nil
}

// policyMode is the policy's mode, which Policy.Check holds to observe or
// reset.
type policyMode string

func (m *policyMode) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "observe or reset"); err != nil {
		return err
	}
	*m = policyMode(n.Value)
	return nil
}

// resetMethod is a reset method's name, which Policy.Check checks.
type resetMethod string

func (m *resetMethod) UnmarshalYAML(n *yaml.Node) error {
	if err := scalar(n, "a reset method, such as auto"); err != nil {
		return err
	}
	*m = resetMethod(n.Value)
	return nil
}

// maxQP is a mapping of device names to QP limits, each a whole number
// above 0 (leakwatch.ParseMaxQP's), each device once.
type maxQP map[string]uint64

func (m *maxQP) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return refuse(n, "want a mapping of device names to QP limits, such as {mlx5_0: 131072}")
	}
	limits := maxQP{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		refuseEntry := func(at *yaml.Node, err error) error {
			return &valueError{node: n, entry: k.Value, line: at.Line, err: err}
		}
		switch {
		case k.Kind != yaml.ScalarNode || k.Value == "":
			return refuseEntry(k, errors.New("an empty key: want a device name"))
		case v.Kind == yaml.SequenceNode:
			return refuseEntry(v, errors.New("a list: want a positive number"))
		case v.Kind == yaml.MappingNode:
			return refuseEntry(v, errors.New("a mapping: want a positive number"))
		case v.Kind != yaml.ScalarNode || v.Tag != "!!int":
			return refuseEntry(v, fmt.Errorf("%s: want a positive number", quote.String(v.Value)))
		}
		if _, dup := limits[k.Value]; dup {
			return refuseEntry(k, errors.New("given twice"))
		}
		parsed, err := leakwatch.ParseMaxQP([]string{k.Value + "=" + v.Value})
		if err != nil {
			var me *leakwatch.MaxQPError
			if errors.As(err, &me) {
				err = me.Err
			}
			return refuseEntry(v, err)
		}
		limits[k.Value] = parsed[k.Value]
	}
	*m = limits
	return nil
}

// Apply sets in o what the file gives, except what the command line gave:
// given reports whether the flag for a key was set (socket,
// metrics_address, interval, reconcile, probes, rename, names_map,
// rename_force, exhaustion_threshold, create_failures,
// create_failure_window, error_storm_cycles, error_storm_window,
// mr_leak_growth, mr_leak_window, state_file, state_interval, policy,
// policy_dry_run). max_qp
// merges, the command line's entries winning per device. The rename keys
// complete o.Rename, which the command line set (nil when it named no
// policies).
func (c Config) Apply(o *RunOptions, given func(key string) bool) {
	if c.Rename != nil && !given("rename") {
		o.Rename = nil
		if *c.Rename != "" {
			policies, _ := rename.ParsePolicies(string(*c.Rename)) // checked when decoded
			o.Rename = &rename.Options{Policies: policies}
		}
	}
	if o.Rename != nil {
		r := *o.Rename
		if c.NamesMap != nil && !given("names_map") {
			r.MapFile, r.MapMustExist = string(*c.NamesMap), true
		}
		if c.RenameForce != nil && !given("rename_force") {
			r.Force = bool(*c.RenameForce)
		}
		o.Rename = &r
	}
	if c.Socket != nil && !given("socket") {
		o.Socket = string(*c.Socket)
	}
	if c.MetricsAddress != nil && !given("metrics_address") {
		o.MetricsAddress = string(*c.MetricsAddress)
	}
	if c.Interval != nil && !given("interval") {
		o.Interval = time.Duration(*c.Interval)
	}
	if c.Reconcile != nil && !given("reconcile") {
		o.Reconcile = time.Duration(*c.Reconcile)
	}
	if c.Retain != nil {
		o.Retain = time.Duration(*c.Retain)
	}
	if c.ExhaustionThreshold != nil && !given("exhaustion_threshold") {
		o.ExhaustionThreshold = float64(*c.ExhaustionThreshold)
	}
	if c.CreateFailures != nil && !given("create_failures") {
		o.CreateFailures = int(*c.CreateFailures)
	}
	if c.CreateFailureWindow != nil && !given("create_failure_window") {
		o.CreateFailureWindow = time.Duration(*c.CreateFailureWindow)
	}
	if c.ErrorStormCycles != nil && !given("error_storm_cycles") {
		o.ErrorStormCycles = int(*c.ErrorStormCycles)
	}
	if c.ErrorStormWindow != nil && !given("error_storm_window") {
		o.ErrorStormWindow = time.Duration(*c.ErrorStormWindow)
	}
	if c.MRLeakGrowth != nil && !given("mr_leak_growth") {
		o.MRLeakGrowth = int(*c.MRLeakGrowth)
	}
	if c.MRLeakWindow != nil && !given("mr_leak_window") {
		o.MRLeakWindow = time.Duration(*c.MRLeakWindow)
	}
	if c.Probes != nil && !given("probes") {
		o.NoProbes = !bool(*c.Probes)
	}
	if c.StateFile != nil && !given("state_file") {
		o.StateFile = string(*c.StateFile)
	}
	if c.StateInterval != nil && !given("state_interval") {
		o.StateInterval = time.Duration(*c.StateInterval)
	}
	if p := c.policy(); p != nil {
		if given("policy") {
			p.Mode = o.Policy.Mode
		}
		if given("policy_dry_run") {
			p.DryRun = o.Policy.DryRun
		}
		o.Policy = *p
	}
	if len(c.MaxQP) > 0 {
		merged := make(map[string]uint64, len(c.MaxQP)+len(o.MaxQP))
		maps.Copy(merged, c.MaxQP)
		maps.Copy(merged, o.MaxQP)
		o.MaxQP = merged
	}
}

// ReloadFrom returns what a reload of the file at path changes in running,
// the options the agent was started with (base: those of the command line
// alone). A file that does not load, or that changes an option only a
// restart can (socket, metrics_address, interval, probes, retain,
// exhaustion_threshold, create_failures, create_failure_window,
// error_storm_cycles, error_storm_window, mr_leak_growth, mr_leak_window,
// the rename keys, state_file, state_interval), is
// an error and nothing is reloaded.
func ReloadFrom(path string, optional bool, base, running RunOptions, given func(key string) bool) (Reloadable, error) {
	c, err := LoadConfig(context.Background(), path, optional) // reloadOnHUP stops waiting on SIGTERM
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
		{"create_failures", running.CreateFailures, o.CreateFailures},
		{"create_failure_window", running.CreateFailureWindow, o.CreateFailureWindow},
		{"error_storm_cycles", running.ErrorStormCycles, o.ErrorStormCycles},
		{"error_storm_window", running.ErrorStormWindow, o.ErrorStormWindow},
		{"mr_leak_growth", running.MRLeakGrowth, o.MRLeakGrowth},
		{"mr_leak_window", running.MRLeakWindow, o.MRLeakWindow},
		{"rename", renameString(running.Rename), renameString(o.Rename)},
		{"state_file", running.StateFile, o.StateFile},
		{"state_interval", running.StateInterval, o.StateInterval},
	} {
		if k.old != k.new {
			return Reloadable{}, &ConfigError{Path: path, Key: k.key,
				Err: fmt.Errorf("changed from %s to %s, which takes a restart (nothing reloaded)", shownValue(k.old), shownValue(k.new))}
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

// shownValue is a configuration value for a message: a string quoted (an
// empty one shows as ""), anything else as fmt prints it.
func shownValue(v any) string {
	if s, ok := v.(string); ok {
		return quote.String(s)
	}
	return fmt.Sprint(v)
}
