package leakwatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// failed is a QP create on dev that the provider refused with errno at
// the site call (none when "").
func failed(at time.Time, errno int32, call string) Event {
	e := ev(at, EventQPCreated, rxe, 0)
	e.Result = -errno
	if call != "" {
		e.Site = Site{Call: call, Via: "ibv_create_qp", File: "/usr/bin/qpwork", BuildID: "3f0e", Offset: 0x1a2c}
	}
	return e
}

func TestQPCreateFailingThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cfg    Config
		at     []time.Duration // failures, from t0
		now    time.Duration
		want   bool
		wantN  uint64
		wantAt float64 // age_seconds
	}{
		{"none", Config{}, nil, time.Minute, false, 0, 0},
		{"9 in 5m", Config{}, spaced(9, 10*time.Second), 2 * time.Minute, false, 0, 0},
		{"10 in 5m", Config{}, spaced(10, 10*time.Second), 2 * time.Minute, true, 10, 120},
		{"10, the first out of the window", Config{}, spaced(10, 30*time.Second), 5*time.Minute + time.Second, false, 0, 0},
		{"10, all in the window at its edge", Config{}, spaced(10, 30*time.Second), 5 * time.Minute, true, 10, 300},
		{"3 with a threshold of 3", Config{CreateFailures: 3, CreateFailureWindow: time.Minute}, spaced(3, time.Second), 10 * time.Second, true, 3, 10},
		{"3 over a window of 1s", Config{CreateFailures: 3, CreateFailureWindow: time.Second}, spaced(3, time.Second), 3 * time.Second, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(Config{Probes: true, CreateFailures: tt.cfg.CreateFailures, CreateFailureWindow: tt.cfg.CreateFailureWindow}, c.now)
			w.Scan(scan(c.at(0), rxe))
			for _, d := range tt.at {
				w.Event(failed(c.at(d), 22, "qpwork!create_qps_verbs+0x4c"))
			}
			c.at(tt.now)
			rep := w.Evaluate(Query{Rules: []string{RuleQPCreateFailing}})
			if got := len(rep.Findings) == 1; got != tt.want {
				t.Fatalf("findings %+v, want one: %v", rep.Findings, tt.want)
			}
			if tt.want && (rep.Findings[0].Count != tt.wantN || rep.Findings[0].AgeSeconds != tt.wantAt) {
				t.Errorf("count %d for %gs, want %d for %gs", rep.Findings[0].Count, rep.Findings[0].AgeSeconds, tt.wantN, tt.wantAt)
			}
			if w.LiveQPs() != 0 {
				t.Errorf("a failed create made a history")
			}
		})
	}
}

// spaced is n times from 0, every d.
func spaced(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * d
	}
	return out
}

// The finding names the device, the count, the rate, the errnos and the
// sites of the failures, the most frequent site as its own; error
// severity; without the probes the rule is skipped with their reason.
func TestQPCreateFailingEvidence(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	for i := range 8 {
		w.Event(failed(c.at(time.Duration(i)*time.Second), 22, "qpwork!create_qps_verbs+0x4c"))
	}
	w.Event(failed(c.at(10*time.Second), 12, "qpwork!create_qp_rdmacm+0x30"))
	w.Event(failed(c.at(11*time.Second), 12, ""))
	w.Event(failed(c.at(12*time.Second), 12, "qpwork!create_qp_rdmacm+0x30"))
	w.Event(failed(c.at(13*time.Second), 200, "qpwork!create_qp_rdmacm+0x30"))
	c.at(time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleQPCreateFailing}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	f := rep.Findings[0]
	f.Hint, f.Spec = "", ""
	want := Finding{Rule: RuleQPCreateFailing, Severity: SeverityError, Device: "rxe0", Count: 12, AgeSeconds: 60,
		Site: "qpwork!create_qps_verbs+0x4c", SiteVia: "ibv_create_qp", SiteFile: "/usr/bin/qpwork", SiteBuildID: "3f0e", SiteOffset: 0x1a2c,
		Evidence: []Evidence{
			{Time: t0, Source: "probe", What: "12 QP creates failed in 5m0s (2.4 a minute): EINVAL 8, ENOMEM 3, errno 200 1"},
			{Time: t0.Add(time.Minute), Source: "probe", What: "8 at qpwork!create_qps_verbs+0x4c via ibv_create_qp"},
			{Time: t0.Add(time.Minute), Source: "probe", What: "3 at qpwork!create_qp_rdmacm+0x30 via ibv_create_qp"},
			{Time: t0.Add(time.Minute), Source: "probe", What: "1 at no site known"},
			{Time: t0.Add(13 * time.Second), Source: "probe", What: "last failure: errno 200"},
		}}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("finding (-want +got):\n%s", diff)
	}
	if h := rep.Findings[0].Hint; h == "" || rep.Findings[0].Spec == "" {
		t.Errorf("hint %q, spec %q", h, rep.Findings[0].Spec)
	}
	if len(rep.Sites) != 1 || rep.Sites[0].Rules[RuleQPCreateFailing] != 1 {
		t.Errorf("sites %+v, want the finding's site", rep.Sites)
	}

	w.SetProbes(false, "no BTF")
	rep = w.Evaluate(Query{Rules: []string{RuleQPCreateFailing}})
	if diff := cmp.Diff([]Skipped{{RuleQPCreateFailing, "needs the eBPF probes: no BTF"}}, rep.SkippedRules); diff != "" || len(rep.Findings) != 0 {
		t.Errorf("without probes: %d findings, skipped (-want +got):\n%s", len(rep.Findings), diff)
	}
}

// A device keeps its newest 1,024 failures: a window holding them all
// reports at least that many.
func TestQPCreateFailingBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	for i := range MaxCreateFailures + 100 {
		w.Event(failed(c.at(time.Duration(i)*time.Millisecond), 12, ""))
	}
	if n := w.devs[rxe.Index].failures.len(); n != MaxCreateFailures {
		t.Errorf("%d failures kept, want %d", n, MaxCreateFailures)
	}
	rep := w.Evaluate(Query{Rules: []string{RuleQPCreateFailing}})
	if len(rep.Findings) != 1 || rep.Findings[0].Count != MaxCreateFailures ||
		rep.Findings[0].Evidence[0].What[:len("at least 1024 ")] != "at least 1024 " {
		t.Errorf("findings %+v", rep.Findings)
	}
}

// CreateFailures counts every failure by errno and site, a device's
// first ten sites each on their own, the rest as OtherSite.
func TestCreateFailures(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	for i := range maxFailureSites + 2 {
		w.Event(failed(c.at(0), 12, fmt.Sprintf("app!f%02d+0x1", i)))
	}
	w.Event(failed(c.at(0), 12, "app!f00+0x1"))
	w.Event(failed(c.at(0), 22, ""))
	got := w.CreateFailures()
	if len(got) != 1 || got[0].Name != "rxe0" {
		t.Fatalf("CreateFailures = %+v", got)
	}
	counts := map[string]uint64{}
	var total uint64
	for _, fc := range got[0].Counts {
		counts[fc.Errno+" "+fc.Site] = fc.Count
		total += fc.Count
	}
	if total != maxFailureSites+4 || counts["ENOMEM app!f00+0x1 via ibv_create_qp"] != 2 || counts["ENOMEM other"] != 2 ||
		counts["EINVAL "] != 1 || len(got[0].Counts) != maxFailureSites+2 {
		t.Errorf("counts %v", counts)
	}
}

func TestErrnoName(t *testing.T) {
	t.Parallel()
	for errno, want := range map[int32]string{12: "ENOMEM", -22: "EINVAL", 95: "EOPNOTSUPP", 4095: "errno 4095"} {
		if got := ErrnoName(errno); got != want {
			t.Errorf("ErrnoName(%d) = %q, want %q", errno, got, want)
		}
	}
}
