package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/watch"
)

// TestSiteJSON: a qp_create line with a site is the event's line with the
// site's fields after its own, byte for byte what encoding/json writes for
// them; without a site the line is the event's alone.
func TestSiteJSON(t *testing.T) {
	t.Parallel()
	odd := "a\"b\\<c>&\x1b\xff" // escaped as encoding/json does
	tests := []struct {
		name string
		site eventSite
		want any
	}{
		{"user site", eventSite{user: &userSiteJSON{Site: "qpwork!create_qps_verbs+0x4c", SiteFile: "/opt/qpwork",
			SiteBuildID: "3f0e", SiteOffset: 0x1a2c, SiteVia: "ibv_create_qp"}}, nil},
		{"user site with odd names", eventSite{user: &userSiteJSON{Site: odd, SiteFile: odd, SiteVia: odd}}, nil},
		{"partial user site", eventSite{user: &userSiteJSON{Site: "?", SiteVia: "rdma_create_qp"}}, nil},
		{"kernel stack", eventSite{stack: []string{"create_mad_qp+0x5d [ib_core]", "0xffffffffc0a1b2c3", odd}}, nil},
		{"empty kernel stack", eventSite{stack: []string{}}, nil},
	}
	ev := traceEvents[0]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.site.appendJSON(ev.AppendJSON(nil))
			var want []byte
			var err error
			if tt.site.user != nil {
				want, err = json.Marshal(struct {
					bpf.EventJSON
					userSiteJSON
				}{eventJSON(t, ev), *tt.site.user})
			} else {
				want, err = json.Marshal(struct {
					bpf.EventJSON
					kernelSiteJSON
				}{eventJSON(t, ev), kernelSiteJSON{tt.site.stack}})
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("line (-encoding/json +appendJSON):\n%s", diff)
			}
		})
	}
	plain := ev.AppendJSON(nil)
	if got := (eventSite{}).appendJSON(bytes.Clone(plain)); !bytes.Equal(got, plain) {
		t.Errorf("no site: %s, want %s", got, plain)
	}
}

// eventJSON decodes the event's own line into its schema.
func eventJSON(t *testing.T, ev bpf.Event) bpf.EventJSON {
	t.Helper()
	var j bpf.EventJSON
	dec := json.NewDecoder(bytes.NewReader(ev.AppendJSON(nil)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestEventSiteOf: a user site becomes trace's user fields, a kernel
// stack its stack, anything else no site.
func TestEventSiteOf(t *testing.T) {
	t.Parallel()
	sites := watch.NewSites(slog.New(slog.DiscardHandler), t.TempDir())
	ev := bpf.Event{Kind: bpf.KindQPCreate, PID: 1 << 30, Via: "rdma_create_qp", ViaReturn: 0x1234}
	if s := eventSiteOf(sites, &ev); s.user == nil || !cmp.Equal(*s.user, userSiteJSON{Site: "?", SiteVia: "rdma_create_qp"}) || s.short() != "?" {
		t.Errorf("site of a create in a process gone = %+v, want ? via rdma_create_qp", s.user)
	}
	ev = bpf.Event{Kind: bpf.KindQPCreate, Probe: "ib_create_qp_kernel", Stack: []uint64{0xffffffffc0f00000}}
	if s := eventSiteOf(sites, &ev); s.user != nil || !cmp.Equal(s.stack, []string{"0xffffffffc0f00000"}) || s.short() != s.stack[0] {
		t.Errorf("site of a kernel create without kallsyms = %+v", s)
	}
	ev = bpf.Event{Kind: bpf.KindQPCreate}
	if s := eventSiteOf(sites, &ev); s.has() {
		t.Errorf("site of a create no probe saw = %+v, want none", s)
	}
}

// TestAppendTraceTextSite: a text line ends in "at SITE", with -d the
// library function after it.
func TestAppendTraceTextSite(t *testing.T) {
	t.Parallel()
	ev := traceEvents[0]
	ev.Via = "ibv_create_qp"
	want := "2026-01-02T03:04:05.123456789Z qp_create rxe0 qpn 17 qp-type RC srqn 3 result 0 pid 272 comm qpwork at qpwork!create_qps_verbs+0x4c\n"
	if got := string(appendTraceText(nil, ev, "qpwork!create_qps_verbs+0x4c", false)); got != want {
		t.Errorf("appendTraceText:\n got %q\nwant %q", got, want)
	}
	got := string(appendTraceText(nil, ev, "qpwork!create_qps_verbs+0x4c", true))
	if !strings.HasSuffix(got, " probe ib_create_qp_user at qpwork!create_qps_verbs+0x4c via ibv_create_qp\n") {
		t.Errorf("appendTraceText -d: %q", got)
	}
}

func TestSitesNote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    bpf.Sites
		want string
	}{
		{bpf.Sites{Libraries: []string{"/usr/lib/libibverbs.so.1.14.44.0", "/usr/lib/librdmacm.so.1.3.44.0"}},
			"; sites: uprobes on 2 libraries (/usr/lib/libibverbs.so.1.14.44.0, /usr/lib/librdmacm.so.1.3.44.0)"},
		{bpf.Sites{Err: os.ErrPermission}, "; sites: uprobes on 0 libraries, missing: permission denied"},
		{bpf.Sites{}, "; sites: uprobes on 0 libraries"},
	}
	for _, tt := range tests {
		if got := sitesNote(tt.s); got != tt.want {
			t.Errorf("sitesNote(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
