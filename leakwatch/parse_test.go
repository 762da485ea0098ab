package leakwatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMaxQP(t *testing.T) {
	tests := []struct {
		name    string
		specs   []string
		want    map[string]uint64
		wantErr string
	}{
		{"none", nil, map[string]uint64{}, ""},
		{"two devices", []string{"rxe0=100", "siw0=7"}, map[string]uint64{"rxe0": 100, "siw0": 7}, ""},
		{"a device twice", []string{"rxe0=100", "siw0=7", "rxe0=200"}, nil, `leakwatch: max_qp "rxe0=100" and "rxe0=200": one limit per device`},
		{"a device twice, the same limit", []string{"rxe0=5", "rxe0=5"}, nil, `leakwatch: max_qp "rxe0=5" and "rxe0=5": one limit per device`},
		{"a long spec is cut", []string{strings.Repeat("x", 1<<20)}, nil, `leakwatch: max_qp "` + strings.Repeat("x", 64) + `" (1048576 bytes): want DEV=N with N > 0`},
		{"no device", []string{"=5"}, nil, `leakwatch: max_qp "=5": want DEV=N with N > 0`},
		{"zero", []string{"rxe0=0"}, nil, `leakwatch: max_qp "rxe0=0": want DEV=N with N > 0`},
		{"not a number", []string{"rxe0=x"}, nil, `leakwatch: max_qp "rxe0=x": want DEV=N with N > 0`},
		{"no equals sign", []string{"rxe0"}, nil, `leakwatch: max_qp "rxe0": want DEV=N with N > 0`},
		{"negative", []string{"rxe0=-1"}, nil, `leakwatch: max_qp "rxe0=-1": want DEV=N with N > 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMaxQP(tt.specs)
			if tt.wantErr != "" {
				var me *MaxQPError
				if err == nil || err.Error() != tt.wantErr || !errors.As(err, &me) || me.Spec != tt.specs[len(tt.specs)-1] ||
					"leakwatch: "+me.Err.Error() != tt.wantErr {
					t.Fatalf("ParseMaxQP(%q) error %v, want a *MaxQPError %q", tt.specs, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseMaxQP(%q) (-want +got):\n%s", tt.specs, diff)
			}
		})
	}
}

func TestCheckRules(t *testing.T) {
	if err := CheckRules(Rules()); err != nil {
		t.Errorf("every rule: %v", err)
	}
	err := CheckRules([]string{RuleStaleErrorQP, "stale-qp"})
	if !errors.Is(err, ErrUnknownRule) {
		t.Fatalf("CheckRules with stale-qp: %v, want ErrUnknownRule", err)
	}
	want := `leakwatch: unknown rule "stale-qp" (valid: stale-error-qp, never-connected-qp, srq-destroy-without-last-wqe, last-wqe-not-emitted, last-wqe-unhandled, xrc-tgt-orphan, srq-drain-stalled, qp-exhaustion, qp-create-failing, qp-error-storm, mr-leak, zombie-uverbs-context)`
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	var re *RuleError
	if !errors.As(err, &re) || re.Rule != "stale-qp" || "leakwatch: "+re.Err.Error() != want {
		t.Errorf("error %#v, want a *RuleError for stale-qp", err)
	}
}

func FuzzParseMaxQP(f *testing.F) {
	for _, s := range []string{"rxe0=100", "=5", "rxe0=0", "a=b=c", "rxe0=18446744073709551615", "rxe0=18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMaxQP([]string{s})
		if err == nil {
			for dev, n := range m {
				if dev == "" || n == 0 {
					t.Errorf("ParseMaxQP(%q) = %v", s, m)
				}
			}
		}
	})
}
