package leakwatch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRanges(t *testing.T) {
	for _, tt := range []struct {
		in   []uint32
		want string
	}{
		{nil, ""}, {[]uint32{5}, "5"}, {[]uint32{19, 17, 18, 21}, "17-19,21"}, {[]uint32{1, 1, 2}, "1-2"},
		{[]uint32{4294967295, 4294967294, 0}, "0,4294967294-4294967295"},
	} {
		if got := ranges(tt.in); got != tt.want {
			t.Errorf("ranges(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// groups is the summary of a report whose findings are fs.
func groups(fs []Finding) []Group {
	var s summarizer
	for i := range fs {
		s.add(&fs[i])
	}
	return s.result()
}

func TestSummarizeAndLimit(t *testing.T) {
	var fs []Finding
	for qpn := uint32(17); qpn < 17+1000; qpn++ {
		fs = append(fs, Finding{Rule: RuleStaleErrorQP, Severity: SeverityWarning, Device: "rxe0", QPN: qpn, Owner: Owner{PID: 43, TGID: 42, Comm: "app"}, AgeSeconds: float64(qpn) / 10})
	}
	fs = append(fs,
		Finding{Rule: RuleLastWQENotEmitted, Severity: SeverityError, Device: "siw0", QPN: 3, Owner: Owner{KernName: "nvmet_rdma", Comm: "nvmet_rdma"}, AgeSeconds: 9},
		Finding{Rule: RuleLastWQENotEmitted, Severity: SeverityError, Device: "siw0", QPN: 5, Owner: Owner{KernName: "nvmet_rdma", Comm: "nvmet_rdma"}, AgeSeconds: 7},
		Finding{Rule: RuleQPExhaustion, Severity: SeverityCritical, Device: "rxe0", Count: 1001, Limit: 1024})
	got := groups(fs)
	want := []Group{
		{Device: "rxe0", Rule: RuleQPExhaustion, Severity: SeverityCritical, Count: 1},
		{Device: "siw0", Rule: RuleLastWQENotEmitted, Severity: SeverityError, Owner: Owner{Comm: "nvmet_rdma", KernName: "nvmet_rdma"}, Count: 2, QPNs: "3,5", MaxAgeSeconds: 9},
		{Device: "rxe0", Rule: RuleStaleErrorQP, Severity: SeverityWarning, Owner: Owner{PID: 42, Comm: "app"}, Count: 1000, QPNs: "17-1016", MaxAgeSeconds: 101.6},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
	limited := func(limit int) []Finding {
		k := keeper{limit: limit}
		for i := range fs {
			k.offer(&fs[i], nil)
		}
		return k.findings()
	}
	// The most severe are kept, then the first in the report's order, and
	// listed in the report's order.
	kept := limited(10)
	var got10 []found
	for _, f := range kept {
		got10 = append(got10, found{f.Rule, f.Device, f.QPN, f.PID})
	}
	want10 := []found{{RuleQPExhaustion, "rxe0", 0, 0}}
	for qpn := uint32(17); qpn < 24; qpn++ {
		want10 = append(want10, found{RuleStaleErrorQP, "rxe0", qpn, 43})
	}
	want10 = append(want10, found{RuleLastWQENotEmitted, "siw0", 3, 0}, found{RuleLastWQENotEmitted, "siw0", 5, 0})
	if d := cmp.Diff(want10, got10); d != "" {
		t.Errorf("limit 10 (-want +got):\n%s", d)
	}
	if n := len(limited(0)); n != len(fs) {
		t.Errorf("limit 0 kept %d of %d", n, len(fs))
	}
	if n := len(limited(-1)); n != 0 {
		t.Errorf("limit -1 kept %d", n)
	}
	if n := len(limited(5000)); n != len(fs) {
		t.Errorf("limit 5000 kept %d of %d", n, len(fs))
	}
}

// Kernel QPs of one module created by different threads are told apart
// in the summary: its groups carry the command.
func TestSummarizeKernelThreads(t *testing.T) {
	f := Finding{Rule: RuleStaleErrorQP, Severity: SeverityWarning, Device: "rxe0", Type: "RC", State: "ERR",
		Owner: Owner{Comm: "kworker/0:1", KernName: "rdma_cm", ULP: "nvmet_rdma"}, QPN: 30, AgeSeconds: 9, Hint: "destroy it"}
	other := f
	other.QPN, other.Comm = 31, "kworker/1:2"
	want := []Group{
		{Device: "rxe0", Rule: RuleStaleErrorQP, Severity: SeverityWarning, Owner: f.Owner, Count: 1, QPNs: "30", MaxAgeSeconds: 9, Hint: "destroy it"},
		{Device: "rxe0", Rule: RuleStaleErrorQP, Severity: SeverityWarning, Owner: other.Owner, Count: 1, QPNs: "31", MaxAgeSeconds: 9, Hint: "destroy it"},
	}
	if d := cmp.Diff(want, groups([]Finding{f, other})); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
}

// The owner's keys keep their place in a report's JSON: a finding writes
// its embedded Owner in the Owner's field order (tgid included); a group
// writes pid, comm, kern_name, ulp, cgroup and container_id, without tgid,
// as groups always have, and reads back as it was.
func TestOwnerJSON(t *testing.T) {
	owner := Owner{PID: 43, TGID: 42, Comm: "a<p>p", Cgroup: "/app.slice", ContainerID: "c0ffee", KernName: "rdma_cm", ULP: "nvmet_rdma"}
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"finding", Finding{Rule: RuleStaleErrorQP, Severity: SeverityWarning, Device: "rxe0", QPN: 17, Type: "RC", State: "ERR", Owner: owner, Peer: "192.0.2.7", Evidence: []Evidence{}},
			`{"rule":"stale-error-qp","severity":"warning","device":"rxe0","qpn":17,"type":"RC","state":"ERR",` +
				`"pid":43,"tgid":42,"comm":"a\u003cp\u003ep","cgroup":"/app.slice","container_id":"c0ffee","kern_name":"rdma_cm","ulp":"nvmet_rdma",` +
				`"peer":"192.0.2.7","srq":false,"srqn":0,"age_seconds":0,"evidence":[],"hint":"","spec":"","count":0,"limit":0,"drain_seconds":0,"draining":false}`},
		{"group", Group{Device: "rxe0", Rule: RuleStaleErrorQP, Severity: SeverityWarning, Owner: owner.asProcess(), Count: 2, QPNs: "17-18", MaxAgeSeconds: 1.5, Hint: "h"},
			`{"device":"rxe0","rule":"stale-error-qp","severity":"warning",` +
				`"pid":42,"comm":"a\u003cp\u003ep","kern_name":"rdma_cm","ulp":"nvmet_rdma","cgroup":"/app.slice","container_id":"c0ffee",` +
				`"count":2,"qpns":"17-18","max_age_seconds":1.5,"hint":"h"}`},
		{"groups in a report", Report{Summary: []Group{{Device: "rxe0", Owner: Owner{PID: 7}}}},
			`{"summary":[{"device":"rxe0","rule":"","severity":"","pid":7,"comm":"","kern_name":"","ulp":"","cgroup":"","container_id":"","count":0,"qpns":"","max_age_seconds":0,"hint":""}],` +
				`"findings":null,"findings_omitted":0,"findings_total":0,"skipped_rules":null,"peers":null,"peers_omitted":0,"observed_seconds":0,"qps":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("JSON\n got  %s\n want %s", b, tt.want)
			}
			back := reflect.New(reflect.TypeOf(tt.v))
			if err := json.Unmarshal(b, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.v, back.Elem().Interface()); diff != "" {
				t.Errorf("read back (-wrote +read):\n%s", diff)
			}
		})
	}
}

// Findings are grouped by device and creation site too, the largest
// group first, at most maxSiteGroups of them; findings without a site are
// in no group, and a report none of whose findings has one has no sites.
func TestSummarizeSites(t *testing.T) {
	t.Parallel()
	var s summarizer
	user := Site{Call: "app!connect_peer+0x4c", Via: "rdma_create_qp", File: "/usr/bin/app", BuildID: "3f0e", Offset: 0x1a2c}
	add := func(rule, dev string, site Site, n int) {
		for range n {
			f := Finding{Rule: rule, Device: dev}
			f.setSite(site)
			s.add(&f)
		}
	}
	add(RuleNeverConnectedQP, "rxe0", user, 30)
	add(RuleStaleErrorQP, "rxe0", user, 5)
	add(RuleStaleErrorQP, "siw0", user, 2)
	stack := make([]string, 12)
	for i := range stack {
		stack[i] = fmt.Sprintf("f%d+0x10 [nvmet_rdma]", i)
	}
	add(RuleSRQDrainStalled, "rxe0", Site{Stack: stack}, 3)
	add(RuleStaleErrorQP, "rxe0", Site{}, 100)
	got, omitted := s.siteResult()
	want := []SiteGroup{
		{Device: "rxe0", Site: user.Call, SiteVia: "rdma_create_qp", SiteBuildID: "3f0e", QPs: 35, Rules: map[string]int{RuleNeverConnectedQP: 30, RuleStaleErrorQP: 5}},
		{Device: "rxe0", Site: "f0+0x10 [nvmet_rdma]", QPs: 3, Rules: map[string]int{RuleSRQDrainStalled: 3}},
		{Device: "siw0", Site: user.Call, SiteVia: "rdma_create_qp", SiteBuildID: "3f0e", QPs: 2, Rules: map[string]int{RuleStaleErrorQP: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" || omitted != 0 {
		t.Errorf("sites (-want +got), %d omitted:\n%s", omitted, diff)
	}
	f := Finding{}
	f.setSite(Site{Stack: stack})
	if len(f.Stack) != maxStackFrames || f.Stack[0] != stack[0] {
		t.Errorf("a finding's stack: %v, want the innermost %d frames", f.Stack, maxStackFrames)
	}

	var many summarizer
	for i := range maxSiteGroups + 3 {
		f := Finding{Rule: RuleStaleErrorQP, Device: "rxe0", Site: fmt.Sprintf("app!f%d+0x1", i)}
		many.add(&f)
	}
	if got, omitted := many.siteResult(); len(got) != maxSiteGroups || omitted != 3 {
		t.Errorf("%d site groups, %d omitted; want %d and 3", len(got), omitted, maxSiteGroups)
	}

	var none summarizer
	none.add(&Finding{Rule: RuleStaleErrorQP, Device: "rxe0"})
	if got, omitted := none.siteResult(); got != nil || omitted != 0 {
		t.Errorf("no sites: %v, %d", got, omitted)
	}
	b, err := json.Marshal(Report{})
	if err != nil || strings.Contains(string(b), "site") {
		t.Errorf("a report without sites: %s, %v", b, err)
	}
}
