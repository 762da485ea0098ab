package watch

import (
	"debug/elf"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
)

// TestSiteUser symbolizes a return address of this process as a
// uprobe would have read it, and one of a process that is gone.
func TestSiteUser(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("call sites are decoded on amd64 and arm64")
	}
	pcs := make([]uintptr, 1)
	runtime.Callers(1, pcs) // a return address in this function
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := NewSites(slog.New(slog.DiscardHandler), "/proc")
	ev := bpf.Event{Kind: bpf.KindQPCreate, PID: uint32(os.Getpid()), Via: "rdma_create_qp", ViaReturn: uint64(pcs[0])}
	s := c.Site(&ev)
	// go test strips the binaries it runs (go test -c does not): then the
	// site is the file's offset and build ID.
	want := filepath.Base(exe) + "!github.com/rdmatool/rdmatool/watch.TestSiteUser+0x"
	if f, err := elf.Open(exe); err == nil {
		if _, err := f.Symbols(); errors.Is(err, elf.ErrNoSymbols) {
			want = filepath.Base(exe) + "+0x"
		}
		f.Close()
	}
	if !strings.HasPrefix(s.Call, want) || s.File != exe || s.Offset == 0 || s.BuildID == "" || s.Via != "rdma_create_qp" {
		t.Errorf("site of this test's call = %+v, want %s... in %s via rdma_create_qp", s, want, exe)
	}
	if s.String() != s.Call+" via rdma_create_qp" || s.Stack != nil {
		t.Errorf("String() = %q, stack %q", s.String(), s.Stack)
	}
	// The frames above: named up to the first in no file of the process.
	above := make([]uintptr, 1)
	runtime.Callers(2, above) // a return address in testing.tRunner
	ev.UserStack = []uint64{uint64(above[0]), 0x10, uint64(above[0])}
	if s := c.Site(&ev); len(s.Stack) != 1 || !strings.HasPrefix(s.Stack[0], filepath.Base(exe)) {
		t.Errorf("frames above the call = %q, want one in %s", s.Stack, filepath.Base(exe))
	}
	ev.UserStack = nil

	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	ev.PID = uint32(cmd.ProcessState.Pid())
	if s := c.Site(&ev); s.Call != "?" || s.File != "" || s.Via != "rdma_create_qp" {
		t.Errorf("site in a process gone = %+v, want ? via rdma_create_qp", s)
	}

	for _, other := range []bpf.Event{
		{Kind: bpf.KindQPCreate, PID: ev.PID},                                     // no uprobe saw it
		{Kind: bpf.KindQPModify, PID: ev.PID, Via: "x", Stack: []uint64{1}},       // not a create
		{Kind: bpf.KindQPCreate, Probe: "ib_create_qp_kernel", Stack: []uint64{}}, // an empty stack
	} {
		if s := c.Site(&other); !s.IsZero() {
			t.Errorf("site of %+v = %+v, want none", other, s)
		}
	}
}

// TestSiteKernel names a kernel stack through a fixture
// kallsyms: the probe's frames (BPF program, trampoline, the probed
// function where fentry called the trampoline) are left out, and an
// address no function holds is shown in hex.
func TestSiteKernel(t *testing.T) {
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
	c := NewSites(slog.New(slog.DiscardHandler), root)
	ev := bpf.Event{Kind: bpf.KindQPCreate, Probe: "ib_create_qp_kernel", KernOwner: "ib_core",
		Stack: []uint64{0xffffffffc0002040, 0xffffffffc0001010, 0xffffffffc0a00089, 0xffffffffc0a0005d, 0xffffffffc0a00130, 0xffffffffc0b00020,
			0xffffffff81100010, 0xffffffffc0f00000}}
	s := c.Site(&ev)
	want := []string{"create_mad_qp+0x5d [ib_core]", "ib_mad_init_device+0x30 [ib_core]", "rxe_register_device+0x20 [rdma_rxe]",
		"ib_register_device_fake+0x10", "0xffffffffc0f00000"}
	if diff := cmp.Diff(want, s.Stack); diff != "" || s.Call != "" || s.Via != "" {
		t.Errorf("stack (-want +got):\n%s", diff)
	}
	if s.String() != want[0] {
		t.Errorf("String() = %q, want %q", s.String(), want[0])
	}

	noKallsyms := NewSites(slog.New(slog.DiscardHandler), t.TempDir())
	if s := noKallsyms.Site(&ev); len(s.Stack) != len(ev.Stack) || s.Stack[0] != "0xffffffffc0002040" {
		t.Errorf("stack without kallsyms = %v, want every address in hex", s.Stack)
	}
	if noKallsyms.KernelErr() == "" || c.KernelErr() != "" {
		t.Errorf("KernelErr() = %q without kallsyms, %q with", noKallsyms.KernelErr(), c.KernelErr())
	}
}

func TestSitesError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    bpf.Sites
		want string
	}{
		{bpf.Sites{Libraries: []string{"/usr/lib/libibverbs.so.1"}}, ""},
		{bpf.Sites{Err: errors.New("uprobes refused: operation not permitted")}, "no uprobes (uprobes refused: operation not permitted)"},
		{bpf.Sites{Libraries: []string{"/usr/lib/libibverbs.so.1"}, Err: errors.New("/srv/lib/librdmacm.so.1: permission denied")},
			"uprobes on 1 libraries, missing: /srv/lib/librdmacm.so.1: permission denied"},
		{bpf.Sites{}, "no uprobes (no libibverbs or librdmacm found)"},
	}
	for _, tt := range tests {
		if got := sitesError(tt.s); got != tt.want {
			t.Errorf("sitesError(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

// A report says why user QPs have no site while the probes are on, and
// says nothing of sites when they are off.
func TestReportSitesError(t *testing.T) {
	t.Parallel()
	st := NewState(leakwatch.Config{}, func() time.Time { return t0 })
	st.SetProbes(true, "")
	st.setSitesError("no uprobes (lockdown)")
	if rep, _ := st.Report(leakwatch.Query{}); rep.SitesError != "no uprobes (lockdown)" {
		t.Errorf("probes on: sites_error %q", rep.SitesError)
	}
	if rep, _ := st.Report(leakwatch.Query{SkipProbeRules: "disabled by --no-probes"}); rep.SitesError != "" {
		t.Errorf("--no-probes: sites_error %q", rep.SitesError)
	}
	st.SetProbes(false, "no BTF")
	if rep, _ := st.Report(leakwatch.Query{}); rep.SitesError != "" {
		t.Errorf("probes off: sites_error %q", rep.SitesError)
	}
}
