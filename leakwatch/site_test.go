package leakwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestSiteString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		site Site
		want string
	}{
		{Site{Call: "app!connect_peer+0x4c", Via: "rdma_create_qp", File: "/usr/bin/app"}, "app!connect_peer+0x4c via rdma_create_qp"},
		{Site{Call: "?", Via: "ibv_create_qp"}, "? via ibv_create_qp"},
		{Site{Stack: []string{"create_mad_qp+0x5d [ib_core]", "ib_mad_init_device+0x30 [ib_core]"}}, "create_mad_qp+0x5d [ib_core]"},
		{Site{Stack: []string{}}, ""},
		{Site{}, ""},
	}
	for _, tt := range tests {
		if got := tt.site.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.site, got, tt.want)
		}
		if tt.site.IsZero() != (tt.want == "") {
			t.Errorf("%+v.IsZero() = %v", tt.site, tt.site.IsZero())
		}
	}
}

// The QPs a process makes at one site share one copy of it, whatever
// strings each event came with; a scan, a rename and an owner lookup keep
// it; a QP the probes did not see created has none.
func TestHistorySite(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	site := func() Site {
		return Site{Call: strings.Clone("app!connect_peer+0x4c"), Via: "rdma_create_qp", File: strings.Clone("/usr/bin/app"), BuildID: "3f0e", Offset: 0x1a2c}
	}
	for qpn := uint32(17); qpn < 20; qpn++ {
		e := create(c.at(0), rxe, qpn, false)
		e.Site = site()
		w.Event(e)
	}
	w.Scan(scan(c.at(time.Second), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42),
		qp(19, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(20, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	w.Event(Event{Kind: EventDeviceRenamed, Time: c.at(2 * time.Second), DevIndex: rxe.Index, DevName: rxe.Name, NewName: "fab0"})
	w.ResolveOwners(func(uint32) (Owner, bool) { return Owner{TGID: 42, Comm: "app2"}, true })
	h17, h18 := w.qps[qpKey{rxe.Index, 17}], w.qps[qpKey{rxe.Index, 18}]
	if diff := cmp.Diff(site(), h17.Site()); diff != "" {
		t.Errorf("site (-want +got):\n%s", diff)
	}
	if h17.names != h18.names || h17.Device() != "fab0" || h17.Owner().Comm != "app2" {
		t.Errorf("QPs 17 and 18 share no names (%v, %v), or lost the rename or the owner: %s, %+v", h17.names, h18.names, h17.Device(), h17.Owner())
	}
	if s := w.qps[qpKey{rxe.Index, 20}].Site(); !s.IsZero() {
		t.Errorf("a QP only scanned has site %+v", s)
	}

	// Their findings name the site, and the report groups them by it.
	c.at(time.Minute)
	rep := w.Evaluate(Query{MinAge: time.Second, Rules: []string{RuleNeverConnectedQP}})
	for _, f := range rep.Findings {
		want := Finding{Site: "app!connect_peer+0x4c", SiteVia: "rdma_create_qp", SiteFile: "/usr/bin/app", SiteBuildID: "3f0e", SiteOffset: 0x1a2c}
		if f.QPN == 20 {
			want = Finding{}
		}
		got := Finding{Site: f.Site, SiteVia: f.SiteVia, SiteFile: f.SiteFile, SiteBuildID: f.SiteBuildID, SiteOffset: f.SiteOffset, Stack: f.Stack}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("QP %d's finding's site (-want +got):\n%s", f.QPN, diff)
		}
	}
	wantSites := []SiteGroup{{Device: "fab0", Site: "app!connect_peer+0x4c", SiteVia: "rdma_create_qp", SiteBuildID: "3f0e", QPs: 3,
		Rules: map[string]int{RuleNeverConnectedQP: 3}}}
	if diff := cmp.Diff(wantSites, rep.Sites); diff != "" || len(rep.Findings) != 4 {
		t.Errorf("%d findings; sites (-want +got):\n%s", len(rep.Findings), diff)
	}
}
