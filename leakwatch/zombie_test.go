package leakwatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// zombie-uverbs-context on the facts a scan brings: reported once the
// zombie has been seen for MinAge, aged from its first sighting, gone when
// a later look no longer finds it, skipped with the reason when the
// processes could not be read, and left as it was by scans that did not
// look.
func TestZombieUverbsContext(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	q := Query{MinAge: 5 * time.Second, Rules: []string{RuleZombieUverbsContext}}
	rules := func() (Report, []Skipped) {
		r := findings(w, q)
		return r, r.SkippedRules
	}
	if r, skipped := rules(); len(r.Findings) != 0 || len(skipped) != 1 || skipped[0].Reason != "no scan of the host's processes yet" {
		t.Fatalf("before any look: %+v", r)
	}
	app := ZombieContext{Owner: Owner{PID: 300, Comm: "app", Cgroup: "/system.slice/app.service"}, Files: []string{"fd 3 /dev/infiniband/uverbs0"}}
	other := ZombieContext{Owner: Owner{PID: 200, Comm: "other"}, Files: []string{"fd 5 /dev/infiniband/uverbs1", "fd 6 /dev/infiniband/uverbs1"}}
	w.Scan(Scan{Time: c.at(0), Zombies: &Zombies{Contexts: []ZombieContext{app}}})
	w.Scan(Scan{Time: c.at(4 * time.Second), Zombies: &Zombies{Contexts: []ZombieContext{other, app}}})
	w.Scan(scanWithoutLook(c.at(6 * time.Second))) // a per-device scan: the last look stands
	c.at(6 * time.Second)
	r, skipped := rules()
	want := []Finding{{
		Rule: RuleZombieUverbsContext, Severity: SeverityWarning, Owner: Owner{PID: 300, TGID: 300, Comm: "app", Cgroup: "/system.slice/app.service"},
		AgeSeconds: 6,
		Evidence:   []Evidence{{Time: t0, Source: "scan", What: "holds fd 3 /dev/infiniband/uverbs0 (deleted); no verbs context on any device"}},
	}}
	ignore := cmpopts.IgnoreFields(Finding{}, "Hint", "Spec")
	if diff := cmp.Diff(want, r.Findings, ignore); diff != "" || len(skipped) != 0 {
		t.Errorf("at 6s (-want +got):\n%s\nskipped %+v", diff, skipped)
	}
	c.at(9 * time.Second)
	if r, _ := rules(); len(r.Findings) != 2 || r.Findings[0].PID != 200 || r.Findings[1].PID != 300 || r.Findings[0].AgeSeconds != 5 {
		t.Errorf("at 9s both, by pid, other aged from 4s: %+v", r.Findings)
	}
	if r := w.Evaluate(Query{MinAge: time.Second, Rules: []string{RuleZombieUverbsContext}, Device: "rxe0"}); len(r.Findings) != 0 {
		t.Errorf("a query for one device reported zombies, which belong to none: %+v", r.Findings)
	}
	// app closed its fd; other could not be read this time.
	w.Scan(Scan{Time: c.at(10 * time.Second), Zombies: &Zombies{Contexts: []ZombieContext{other}, Unreadable: 3}})
	r, skipped = rules()
	if len(r.Findings) != 1 || r.Findings[0].PID != 200 || len(skipped) != 1 ||
		skipped[0].Reason != "evaluated only in part: the open files of 3 processes could not be read (needs root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE)" {
		t.Errorf("after app closed, 3 unreadable: %+v, skipped %+v", r.Findings, skipped)
	}
	w.Scan(Scan{Time: c.at(11 * time.Second), Zombies: &Zombies{Err: "open /proc: permission denied"}})
	if r, skipped := rules(); len(r.Findings) != 0 || len(skipped) != 1 || skipped[0].Reason != "cannot read the processes: open /proc: permission denied" {
		t.Errorf("a failed look: %+v, skipped %+v", r.Findings, skipped)
	}
}

func scanWithoutLook(t time.Time) Scan { return Scan{Time: t} }
