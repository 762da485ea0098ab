package query

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
)

// DefaultMinAge is min_age when a query leaves it out, as for the CLI.
const DefaultMinAge = 5 * time.Second

// Quote is s for an error message, cut at quote.Max (64) bytes: the quoting
// of every rdmatool error, quote.String.
func Quote(s string) string { return quote.String(s) }

// Parse reads the parameters of /v1/qp-leaks. Every parameter is optional;
// one that is unknown, malformed, or (but for rule and max_qp) given twice
// is an error.
func Parse(v url.Values) (leakwatch.Query, error) {
	q := leakwatch.Query{MinAge: DefaultMinAge}
	for name, vals := range v {
		switch name {
		case "dev", "min_age", "no_probes", "limit":
			if len(vals) != 1 {
				return q, fmt.Errorf("agent: parameter %s given %d times", name, len(vals))
			}
		case "rule", "max_qp":
		default:
			return q, fmt.Errorf("agent: unknown parameter %s (valid: dev, min_age, rule, max_qp, no_probes, limit)", Quote(name))
		}
	}
	q.Device = v.Get("dev")
	if s := v.Get("min_age"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return q, fmt.Errorf("agent: min_age %s: want a duration such as 5s", Quote(s))
		}
		q.MinAge = d
	}
	q.Rules = v["rule"]
	if err := leakwatch.CheckRules(q.Rules); err != nil {
		return q, fmt.Errorf("agent: query: %w", err)
	}
	if len(v["max_qp"]) > 0 {
		m, err := leakwatch.ParseMaxQP(v["max_qp"])
		if err != nil {
			return q, fmt.Errorf("agent: query: %w", err)
		}
		q.MaxQP = m
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.ParseUint(s, 10, 31)
		if err != nil {
			return q, fmt.Errorf("agent: limit %s: want a number of findings, 0 for all", Quote(s))
		}
		q.Limit = int(n)
	}
	switch v.Get("no_probes") {
	case "", "0", "false":
	case "1", "true":
		q.SkipProbeRules = "disabled by --no-probes"
	default:
		return q, fmt.Errorf("agent: no_probes %s: want 1 or 0", Quote(v.Get("no_probes")))
	}
	return q, nil
}
