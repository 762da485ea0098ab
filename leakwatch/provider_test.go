package leakwatch

import (
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestProviderLastWQE(t *testing.T) {
	for _, tt := range []struct {
		provider, release string
		want              LastWQE
	}{
		{"rxe", "6.1.0-56-amd64", LastWQENever},
		{"rxe", "6.12.43+deb12-amd64", LastWQEDelivered},
		{"rxe", "7.2.13+deb14-amd64", LastWQEDelivered},
		{"rxe", "6.5.0", LastWQEUnknown}, // between the lab's kernels: not guessed
		{"rxe", "garbage", LastWQEUnknown},
		{"siw", "6.1.0-56-amd64", LastWQENever},
		{"siw", "garbage", LastWQENever},
		{"mlx5", "5.14.0-427.el9.x86_64", LastWQEDelivered},
		{"mlx4", "6.1.0", LastWQEDelivered},
		{"irdma", "6.12.0", LastWQENever},
		{"bnxt_re", "6.12.0", LastWQEUnknown},
		{"", "6.12.0", LastWQEUnknown},
	} {
		got, source := ProviderLastWQE(tt.provider, tt.release)
		if got != tt.want || (got != LastWQEUnknown) != (source != "") {
			t.Errorf("ProviderLastWQE(%q, %q) = %v, %q; want %v with a source when known", tt.provider, tt.release, got, source, tt.want)
		}
	}
}

// An SRQ QP already in Error when watching began gets the diagnosis its
// provider calls for: not-emitted where the provider never delivers the
// event, unhandled where it does (it was due then), stale-error-qp where
// nothing is known; an event seen on the device counts as delivered.
func TestErrBeforeWatching(t *testing.T) {
	for _, tt := range []struct {
		name    string
		known   LastWQE
		learned bool
		want    []found
	}{
		{"never", LastWQENever, false, []found{{RuleLastWQENotEmitted, "rxe0", 17, 42}}},
		{"delivered", LastWQEDelivered, false, []found{{RuleLastWQEUnhandled, "rxe0", 17, 42}}},
		{"unknown", LastWQEUnknown, false, []found{{RuleStaleErrorQP, "rxe0", 17, 42}}},
		{"learned", LastWQEUnknown, true, []found{{RuleLastWQEUnhandled, "rxe0", 17, 42}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(Config{Probes: true}, c.now)
			s := scan(c.at(0), rxe, onSRQ(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 1), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42))
			s.Devices[0].LastWQE, s.Devices[0].LastWQESource = tt.known, "the table"
			w.Scan(s)
			if tt.learned { // another QP of the device got the event
				w.Event(create(c.at(time.Second), rxe, 30, true))
				w.Event(modify(c.at(time.Second), rxe, 30, rdmanl.QPStateErr))
				w.Event(lastWQE(c.at(time.Second), rxe, 30))
				w.Event(ev(c.at(time.Second), EventQPDestroyed, rxe, 30))
			}
			c.at(4 * time.Second)
			if got := summarize(w.Evaluate(Query{MinAge: 5 * time.Second})); len(got) != 0 {
				t.Errorf("before min age: %v", got)
			}
			c.at(10 * time.Second)
			got := summarize(w.Evaluate(Query{MinAge: 5 * time.Second}))
			if len(got) != len(tt.want) || got[0] != tt.want[0] {
				t.Errorf("findings %v, want %v", got, tt.want)
			}
		})
	}
}
