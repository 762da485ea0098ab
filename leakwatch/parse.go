package leakwatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// ErrUnknownRule is returned for a rule ID that names no rule.
var ErrUnknownRule = errors.New("unknown rule")

// CheckRules returns a *RuleError matching ErrUnknownRule, naming the
// first unknown ID and the valid ones, when ids holds an ID that is not a
// rule.
func CheckRules(ids []string) error {
	for _, id := range ids {
		if !slices.Contains(Rules(), id) {
			return &RuleError{Rule: id, Err: fmt.Errorf("%w %s (valid: %s)", ErrUnknownRule, quote.String(id), strings.Join(Rules(), ", "))}
		}
	}
	return nil
}

// RuleError is a rule ID CheckRules refuses: Rule as given, and Err why,
// without the package's prefix, for a caller that names the setting its
// own way.
type RuleError struct {
	Rule string
	Err  error
}

func (e *RuleError) Error() string { return "leakwatch: " + e.Err.Error() }
func (e *RuleError) Unwrap() error { return e.Err }

// ParseMaxQP reads QP limits written DEV=N (N > 0), one per device name.
// No specs give an empty map. A malformed spec, or a second one for a
// device (which of the two would be meant?), is a *MaxQPError naming it
// (and the first).
func ParseMaxQP(specs []string) (map[string]uint64, error) {
	m := make(map[string]uint64, len(specs))
	for i, s := range specs {
		dev, n, ok := strings.Cut(s, "=")
		v, err := strconv.ParseUint(n, 10, 64)
		if !ok || dev == "" || err != nil || v == 0 {
			return nil, &MaxQPError{Spec: s, Err: fmt.Errorf("max_qp %s: want DEV=N with N > 0", quote.String(s))}
		}
		if _, twice := m[dev]; twice {
			first := slices.IndexFunc(specs[:i], func(p string) bool { return strings.HasPrefix(p, dev+"=") })
			return nil, &MaxQPError{Spec: s, Err: fmt.Errorf("max_qp %s and %s: one limit per device", quote.String(specs[first]), quote.String(s))}
		}
		m[dev] = v
	}
	return m, nil
}

// MaxQPError is a QP limit ParseMaxQP refuses: Spec as given, and Err why,
// without the package's prefix, for a caller that names the setting its
// own way.
type MaxQPError struct {
	Spec string
	Err  error
}

func (e *MaxQPError) Error() string { return "leakwatch: " + e.Err.Error() }
func (e *MaxQPError) Unwrap() error { return e.Err }
