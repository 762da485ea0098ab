package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/agentapi/query"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/rdmatool/rdmatool/watch"
)

// Policy modes. The names are API (config and flags).
const (
	// PolicyObserve never acts: the agent only reports.
	PolicyObserve = "observe"
	// PolicyReset resets a device whose thresholds held long enough.
	PolicyReset = "reset"
)

// Policy decisions, as logged and as the metrics' decision label. The
// names are API.
const (
	// DecisionReset: the agent reset the device.
	DecisionReset = "reset"
	// DecisionDryRun: it would have reset the device (Policy.DryRun).
	DecisionDryRun = "dry_run"
	// DecisionCooldown: the device was reset less than Policy.Cooldown ago.
	DecisionCooldown = "cooldown"
	// DecisionHourlyLimit: Policy.MaxPerHour resets in the last hour.
	DecisionHourlyLimit = "hourly_limit"
	// DecisionInProgress: a reset of the device has not returned yet.
	DecisionInProgress = "in_progress"
	// DecisionNoMaxQP: the stale QPs crossed their threshold, but the
	// device's max_qp is not known, so its use cannot be judged.
	DecisionNoMaxQP = "no_max_qp"
)

// Policy is the agent's remediation policy: with Mode PolicyReset, a device
// with at least StaleQPs stale QPs (QPs with findings of StaleRules) while
// at least QPUse of its max_qp is in use, both for at least For, is reset
// with the reset package (Method, Grace, Timeout), at most once per
// Cooldown per device and MaxPerHour times an hour on the host.
type Policy struct {
	Mode   string
	DryRun bool
	// QPUse is the share of max_qp in use (0 < x <= 1); 0 leaves use out
	// of the condition.
	QPUse float64
	// StaleQPs is how many stale QPs the device must have; 0 leaves them
	// out of the condition.
	StaleQPs int
	// StaleRules are the QP rules whose findings make a QP stale.
	StaleRules []string
	For        time.Duration
	Cooldown   time.Duration
	MaxPerHour int
	Method     reset.Method
	Grace      time.Duration
	Timeout    time.Duration
}

// defaultStaleRules are the rules whose QPs hold resources for nothing:
// left in Error, waiting for an event that does not come or was missed,
// orphaned XRC targets, drains that stall.
var defaultStaleRules = []string{
	leakwatch.RuleStaleErrorQP, leakwatch.RuleLastWQENotEmitted, leakwatch.RuleLastWQEUnhandled,
	leakwatch.RuleXRCTgtOrphan, leakwatch.RuleSRQDrainStalled,
}

// DefaultPolicy observes; its thresholds are what PolicyReset uses when the
// configuration leaves them out.
func DefaultPolicy() Policy {
	return Policy{
		Mode: PolicyObserve, QPUse: 0.9, StaleQPs: 100, StaleRules: slices.Clone(defaultStaleRules),
		For: 5 * time.Minute, Cooldown: time.Hour, MaxPerHour: 1, Method: reset.MethodAuto,
		Grace: 30 * time.Second, Timeout: 2 * time.Minute,
	}
}

// PolicyError is a policy that makes no sense; Key names the setting as
// the configuration file's policy mapping spells it ("method").
type PolicyError struct {
	Key string
	Err error
}

func (e *PolicyError) Error() string { return "policy." + e.Key + ": " + e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// Check refuses a policy that makes no sense or contradicts itself.
func (p Policy) Check() error {
	bad := func(key, format string, a ...any) error {
		return &PolicyError{Key: key, Err: fmt.Errorf(format, a...)}
	}
	switch {
	case p.Mode != PolicyObserve && p.Mode != PolicyReset:
		return bad("mode", "%s: want %s or %s", quote.String(p.Mode), PolicyObserve, PolicyReset)
	case p.DryRun && p.Mode != PolicyReset:
		return bad("dry_run", "set with mode %s, which never resets: a dry run needs mode %s", p.Mode, PolicyReset)
	case !(p.QPUse >= 0 && p.QPUse <= 1): // NaN too
		return bad("qp_use", "%g: want a share of max_qp from 0 to 1, such as 0.9", p.QPUse)
	case p.StaleQPs < 0:
		return bad("stale_qps", "%d: must not be negative", p.StaleQPs)
	case p.QPUse == 0 && p.StaleQPs == 0:
		return bad("qp_use", "0 with stale_qps 0: the policy would reset healthy devices")
	case p.For < 0:
		return bad("for", "%s: must not be negative", p.For)
	case p.Cooldown < p.For:
		return bad("cooldown", "%s is shorter than for (%s): a device could be reset again before a new episode was seen whole", p.Cooldown, p.For)
	case p.MaxPerHour < 1:
		return bad("max_per_hour", "%d: want at least 1 (mode %s turns resets off)", p.MaxPerHour, PolicyObserve)
	case p.Grace < 0:
		return bad("grace", "%s: must not be negative", p.Grace)
	case p.Timeout <= 0:
		return bad("timeout", "%s: must be more than 0", p.Timeout)
	}
	if _, err := reset.ParseMethod(string(p.Method)); err != nil {
		var me *reset.MethodError
		if errors.As(err, &me) {
			err = me.Err
		}
		return &PolicyError{Key: "method", Err: err}
	}
	if p.Method == reset.MethodNetdevBounce {
		return bad("method", "%s keeps every QP: it cannot free a device's QPs", p.Method)
	}
	if p.StaleQPs > 0 && len(p.StaleRules) == 0 {
		return bad("stale_rules", "empty with stale_qps %d: no QP could count as stale", p.StaleQPs)
	}
	if err := leakwatch.CheckRules(p.StaleRules); err != nil {
		var re *leakwatch.RuleError
		if errors.As(err, &re) {
			err = re.Err
		}
		return &PolicyError{Key: "stale_rules", Err: err}
	}
	for _, r := range p.StaleRules {
		if !leakwatch.IsQPRule(r) {
			return bad("stale_rules", "%s: a device rule, not a QP rule", r)
		}
	}
	return nil
}

// policyEvidence is what a decision about a device rests on.
type policyEvidence struct {
	Device   string
	NodeGUID string
	QPs      uint64 // in use, from the device's resource summary
	MaxQP    uint64 // configured, else learned; 0 unknown
	Stale    int    // QPs with a finding of a stale rule
	ByRule   map[string]int
}

func (e policyEvidence) key() string {
	if e.NodeGUID != "" && e.NodeGUID != rdmanl.GUID(0).String() {
		return e.NodeGUID // a reset may bring the device back under another name
	}
	return "name " + e.Device
}

// policyDecision is one decision about a device.
type policyDecision struct {
	policyEvidence
	Decision string
	Held     time.Duration // how long the thresholds had held
}

// policyEngine decides. It keeps per device when its thresholds began to
// hold, its last reset and its last decision (a decision is reported when
// it changes, a reset every time), and the host's resets of the last hour.
// Dry runs keep a timeline of their own, so that turning DryRun off does
// not inherit cooldowns from resets that never happened.
type policyEngine struct {
	since    map[string]time.Time
	last     map[string]string
	lastDone [2]map[string]time.Time // [dry run]
	done     [2][]time.Time          // [dry run], within the last hour
	busy     map[string]bool
}

func newPolicyEngine() *policyEngine {
	return &policyEngine{
		since: map[string]time.Time{}, last: map[string]string{}, busy: map[string]bool{},
		lastDone: [2]map[string]time.Time{{}, {}},
	}
}

// crossed says whether e crosses p's thresholds, and whether use could be
// judged at all.
func (p Policy) crossed(e policyEvidence) (crossed, useKnown bool) {
	if p.StaleQPs > 0 && e.Stale < p.StaleQPs {
		return false, true
	}
	if p.QPUse > 0 {
		if e.MaxQP == 0 {
			return false, false
		}
		if float64(e.QPs) < p.QPUse*float64(e.MaxQP) {
			return false, true
		}
	}
	return true, true
}

// decide returns the decisions due at now over the devices' evidence. A
// device whose thresholds no longer hold starts over.
func (g *policyEngine) decide(p Policy, now time.Time, devs []policyEvidence) []policyDecision {
	if p.Mode != PolicyReset {
		clear(g.since)
		clear(g.last)
		return nil
	}
	dry := 0
	if p.DryRun {
		dry = 1
	}
	g.done[dry] = slices.DeleteFunc(g.done[dry], func(t time.Time) bool { return now.Sub(t) >= time.Hour })
	var out []policyDecision
	report := func(e policyEvidence, decision string, held time.Duration) {
		k := e.key()
		if decision == g.last[k] && decision != DecisionReset && decision != DecisionDryRun {
			return
		}
		g.last[k] = decision
		out = append(out, policyDecision{policyEvidence: e, Decision: decision, Held: held})
	}
	for _, e := range devs {
		k := e.key()
		crossed, useKnown := p.crossed(e)
		if !useKnown {
			delete(g.since, k)
			report(e, DecisionNoMaxQP, 0)
			continue
		}
		if !crossed {
			delete(g.since, k)
			delete(g.last, k)
			continue
		}
		since, ok := g.since[k]
		if !ok {
			g.since[k] = now
			since = now
		}
		held := now.Sub(since)
		if held < p.For {
			continue
		}
		switch last, ok := g.lastDone[dry][k]; {
		case g.busy[k]:
			report(e, DecisionInProgress, held)
		case ok && now.Sub(last) < p.Cooldown:
			report(e, DecisionCooldown, held)
		case len(g.done[dry]) >= p.MaxPerHour:
			report(e, DecisionHourlyLimit, held)
		default:
			decision := DecisionReset
			if p.DryRun {
				decision = DecisionDryRun
			} else {
				g.busy[k] = true
			}
			g.lastDone[dry][k] = now
			g.done[dry] = append(g.done[dry], now)
			delete(g.since, k) // the next episode starts from zero
			report(e, decision, held)
		}
	}
	return out
}

// finished marks the reset of the device with key k as returned.
func (g *policyEngine) finished(k string) { delete(g.busy, k) }

// runPolicy applies the policy every Interval until ctx ends, then waits
// for the resets it started. Decisions are logged with their evidence and
// counted in st.
func runPolicy(ctx context.Context, d watch.Deps, o RunOptions, st *state, log *slog.Logger) {
	g := newPolicyEngine()
	var wg sync.WaitGroup
	defer wg.Wait()
	finished := make(chan string)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case k := <-finished:
			g.finished(k)
			continue
		case <-tick.C:
		}
		p := st.policy()
		if p.Mode != PolicyReset {
			g.decide(p, d.Now(), nil)
			continue
		}
		for _, dec := range g.decide(p, d.Now(), st.policyEvidence(p.StaleRules)) {
			st.policyDecided(dec)
			logDecision(log, p, dec)
			if dec.Decision != DecisionReset {
				continue
			}
			ro := reset.Options{
				Device: dec.Device, Method: p.Method, Grace: p.Grace, Timeout: p.Timeout, Yes: true,
				Helper: o.ResetHelper, Who: "rdmatool agent (policy)", Log: log,
			}
			if o.Rename != nil {
				ro.Rename = *o.Rename // the reset sets which device, and forces
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep, err := o.reset(ctx, ro)
				st.resetDone(dec.policyEvidence, rep, err)
				select {
				case finished <- dec.key():
				case <-ctx.Done():
				}
			}()
		}
	}
}

// logDecision logs a decision with its evidence: a reset or a dry run at
// Warn (the agent acts, or would), the others at Info.
func logDecision(log *slog.Logger, p Policy, dec policyDecision) {
	level := slog.LevelInfo
	if dec.Decision == DecisionReset || dec.Decision == DecisionDryRun {
		level = slog.LevelWarn
	}
	use := 0.0
	if dec.MaxQP > 0 {
		use = float64(dec.QPs) / float64(dec.MaxQP)
	}
	rules := make([]string, 0, len(dec.ByRule))
	for r, n := range dec.ByRule {
		rules = append(rules, fmt.Sprintf("%s=%d", r, n))
	}
	slices.Sort(rules)
	log.Log(context.Background(), level, "policy decision", "decision", dec.Decision, "device", dec.Device,
		"node_guid", dec.NodeGUID, "qps", dec.QPs, "max_qp", dec.MaxQP, "qp_use", use, "stale_qps", dec.Stale,
		"stale_by_rule", strings.Join(rules, ","), "held_seconds", dec.Held.Seconds(),
		"threshold_qp_use", p.QPUse, "threshold_stale_qps", p.StaleQPs, "for_seconds", p.For.Seconds(),
		"method", string(p.Method))
}

// errNoHelper is Run's error when the reset policy has no way to run the
// reset's removal.
var errNoHelper = errors.New("agent: policy mode reset: no reset helper command")

// policy is the policy in force.
func (s *state) policy() Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pol
}

// setPolicy puts p in force.
func (s *state) setPolicy(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pol = p
}

// policyEvidence is each listed device's evidence: QPs in use and max_qp,
// and its stale QPs (each counted once, whatever the number of rules it
// meets) counted now (watch.State.CountFindings). A device whose resources
// have not been read yet is left out.
func (s *state) policyEvidence(rules []string) []policyEvidence {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := s.CountFindings(query.DefaultMinAge)
	h := s.Snapshot()
	var out []policyEvidence
	for _, name := range h.Devices {
		m, ok := h.Scans[name]
		if !ok {
			continue
		}
		e := policyEvidence{Device: name, NodeGUID: h.GUIDs[name], MaxQP: s.maxQP[name], ByRule: map[string]int{}}
		if e.MaxQP == 0 {
			e.MaxQP = s.facts[name].MaxQP
		}
		var read bool
		if e.QPs, read = m.QPsInUse(); !read {
			continue
		}
		for _, r := range rules {
			if n := counts.QPs(name, []string{r}); n > 0 {
				e.ByRule[r] = n
			}
		}
		e.Stale = counts.QPs(name, rules)
		out = append(out, e)
	}
	return out
}

// policyDecided counts a decision.
func (s *state) policyDecided(d policyDecision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decisions[decisionKey{d.Device, d.NodeGUID, d.Decision}]++
}

// resetDone counts a reset the policy started, by its result: "done",
// "waiting" (the removal still waits for the device's holders) or
// "failed".
func (s *state) resetDone(e policyEvidence, rep reset.Report, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	result := rep.Result
	if result == "" || (err != nil && result == reset.ResultPlanned) {
		result = reset.ResultFailed
	}
	method := string(rep.Method)
	if method == "" {
		method = string(reset.MethodAuto)
	}
	s.resets[resetKey{e.Device, e.NodeGUID, method, result}]++
}

// renamed counts a rename the agent applied, under the name the device has
// after it.
func (s *state) renamed(r rename.Result) {
	name := r.From
	if r.Status == rename.StatusRenamed {
		name = r.To
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renames[renameKey{name, r.NodeGUID.String(), string(r.Status)}]++
}

// checkPolicy checks p, and that a reset policy can run the reset.
func checkPolicy(p Policy, helper []string) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if p.Mode == PolicyReset && !p.DryRun && len(helper) == 0 {
		return errNoHelper
	}
	return nil
}

// logPolicy says at start and at each reload what the policy is.
func logPolicy(log *slog.Logger, p Policy) {
	if p.Mode != PolicyReset {
		log.Info("policy: observe (the agent never resets a device)")
		return
	}
	log.Info("policy: reset", "dry_run", p.DryRun, "qp_use", p.QPUse, "stale_qps", p.StaleQPs,
		"stale_rules", strings.Join(p.StaleRules, ","), "for_seconds", p.For.Seconds(),
		"cooldown_seconds", p.Cooldown.Seconds(), "max_per_hour", p.MaxPerHour, "method", string(p.Method),
		"grace_seconds", p.Grace.Seconds(), "timeout_seconds", p.Timeout.Seconds())
}
