package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
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

// TestCreationSiteUser symbolizes a return address of this process as a
// uprobe would have read it, and one of a process that is gone.
func TestCreationSiteUser(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("call sites are decoded on amd64 and arm64")
	}
	pcs := make([]uintptr, 1)
	runtime.Callers(1, pcs) // a return address in this function
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newCreationSites(slog.New(slog.DiscardHandler), "/proc")
	ev := bpf.Event{Kind: bpf.KindQPCreate, PID: uint32(os.Getpid()), Via: "rdma_create_qp", ViaReturn: uint64(pcs[0])}
	s := c.site(&ev)
	// go test strips the binaries it runs (go test -c does not): then the
	// site is the file's offset and build ID.
	want := filepath.Base(exe) + "!github.com/rdmatool/rdmatool/cmd/rdmatool.TestCreationSiteUser+0x"
	if f, err := elf.Open(exe); err == nil {
		if _, err := f.Symbols(); errors.Is(err, elf.ErrNoSymbols) {
			want = filepath.Base(exe) + "+0x"
		}
		f.Close()
	}
	if s.user == nil || !strings.HasPrefix(s.user.Site, want) || s.user.SiteFile != exe || s.user.SiteOffset == 0 ||
		s.user.SiteBuildID == "" || s.user.SiteVia != "rdma_create_qp" {
		t.Errorf("site of this test's call = %+v, want %s... in %s via rdma_create_qp", s.user, want, exe)
	}
	if s.short() != s.user.Site {
		t.Errorf("short() = %q, want %q", s.short(), s.user.Site)
	}

	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	ev.PID = uint32(cmd.ProcessState.Pid())
	if s := c.site(&ev); s.user == nil || s.user.Site != "?" || s.user.SiteFile != "" || s.user.SiteVia != "rdma_create_qp" {
		t.Errorf("site in a process gone = %+v, want ? via rdma_create_qp", s.user)
	}

	for _, other := range []bpf.Event{
		{Kind: bpf.KindQPCreate, PID: ev.PID},                                     // no uprobe saw it
		{Kind: bpf.KindQPModify, PID: ev.PID, Via: "x", Stack: []uint64{1}},       // not a create
		{Kind: bpf.KindQPCreate, Probe: "ib_create_qp_kernel", Stack: []uint64{}}, // an empty stack
	} {
		if s := c.site(&other); s.user != nil || len(s.stack) != 0 {
			t.Errorf("site of %+v = %+v, want none", other, s)
		}
	}
}

// TestCreationSiteKernel names a kernel stack through a fixture
// kallsyms: the probe's frames (BPF program, trampoline, the probed
// function where fentry called the trampoline) are left out, and an
// address no function holds is shown in hex.
func TestCreationSiteKernel(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	kallsyms := "ffffffff81000000 T _stext\n" +
		"ffffffff81100000 T ib_register_device_fake\n" +
		"ffffffff81100400 t after_fake\n" +
		"ffffffffc0001000 t bpf_trampoline_6442\t[bpf]\n" +
		"ffffffffc0002000 t bpf_prog_1234_fexit_create_qp_kernel\t[bpf]\n" +
		"ffffffffc0a00000 t create_mad_qp\t[ib_core]\n" +
		"ffffffffc0a00080 T ib_create_qp_kernel\t[ib_core]\n" +
		"ffffffffc0a00100 t ib_mad_init_device\t[ib_core]\n" +
		"ffffffffc0b00000 t rxe_register_device\t[rdma_rxe]\n"
	modules := "ib_core 65536 1 - Live 0xffffffffc0a00000\nrdma_rxe 65536 0 - Live 0xffffffffc0b00000\n"
	for name, content := range map[string]string{"kallsyms": kallsyms, "modules": modules} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newCreationSites(slog.New(slog.DiscardHandler), root)
	ev := bpf.Event{Kind: bpf.KindQPCreate, Probe: "ib_create_qp_kernel", KernOwner: "ib_core",
		Stack: []uint64{0xffffffffc0002040, 0xffffffffc0001010, 0xffffffffc0a00089, 0xffffffffc0a0005d, 0xffffffffc0a00130, 0xffffffffc0b00020,
			0xffffffff81100010, 0xffffffffc0f00000}}
	s := c.site(&ev)
	want := []string{"create_mad_qp+0x5d [ib_core]", "ib_mad_init_device+0x30 [ib_core]", "rxe_register_device+0x20 [rdma_rxe]",
		"ib_register_device_fake+0x10", "0xffffffffc0f00000"}
	if diff := cmp.Diff(want, s.stack); diff != "" || s.user != nil {
		t.Errorf("stack (-want +got):\n%s", diff)
	}
	if s.short() != want[0] {
		t.Errorf("short() = %q, want %q", s.short(), want[0])
	}

	noKallsyms := newCreationSites(slog.New(slog.DiscardHandler), t.TempDir())
	if s := noKallsyms.site(&ev); len(s.stack) != len(ev.Stack) || s.stack[0] != "0xffffffffc0002040" {
		t.Errorf("stack without kallsyms = %v, want every address in hex", s.stack)
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
