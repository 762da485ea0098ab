package leakwatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrUnknownRule is returned for a rule ID that names no rule.
var ErrUnknownRule = errors.New("unknown rule")

// CheckRules returns an error matching ErrUnknownRule, naming the first
// unknown ID and the valid ones, when ids holds an ID that is not a rule.
func CheckRules(ids []string) error {
	for _, id := range ids {
		if !slices.Contains(Rules(), id) {
			return fmt.Errorf("leakwatch: %w %q (valid: %s)", ErrUnknownRule, id, strings.Join(Rules(), ", "))
		}
	}
	return nil
}

// ParseMaxQP reads QP limits written DEV=N (N > 0), one per device name;
// a later one for the same device wins. No specs give an empty map.
func ParseMaxQP(specs []string) (map[string]uint64, error) {
	m := make(map[string]uint64, len(specs))
	for _, s := range specs {
		dev, n, ok := strings.Cut(s, "=")
		v, err := strconv.ParseUint(n, 10, 64)
		if !ok || dev == "" || err != nil || v == 0 {
			return nil, fmt.Errorf("leakwatch: max_qp %q: want DEV=N with N > 0", s)
		}
		m[dev] = v
	}
	return m, nil
}
