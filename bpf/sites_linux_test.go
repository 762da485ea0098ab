//go:build linux && (amd64 || arm64)

package bpf

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/symbolize"
)

func TestVerbsLibrary(t *testing.T) {
	t.Parallel()
	for base, want := range map[string]string{
		"libibverbs.so": "libibverbs", "libibverbs.so.1": "libibverbs", "libibverbs.so.1.14.44.0": "libibverbs",
		"librdmacm.so.1.3.44.0": "librdmacm", "libibverbs.a": "", "libibverbs.so1": "", "libmlx5.so.1": "",
		"librxe-rdmav34.so": "", "libibverbs": "",
	} {
		if got := verbsLibrary(base); got != want {
			t.Errorf("verbsLibrary(%q) = %q, want %q", base, got, want)
		}
	}
}

func TestLibFuncName(t *testing.T) {
	t.Parallel()
	for id, want := range map[uint8]string{1: "ibv_create_qp", 2: "rdma_create_qp", 3: "rdma_create_qp_ex",
		4: "rdma_create_ep", 0: "unknown(0)", 9: "unknown(9)"} {
		if got := libFuncName(id); got != want {
			t.Errorf("libFuncName(%d) = %q, want %q", id, got, want)
		}
	}
}

// hostLibrary returns the host's copy of a verbs library, skipping t when
// there is none.
func hostLibrary(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range hostLibDirs {
		if p, err := filepath.EvalSymlinks(filepath.Join(dir, name)); err == nil {
			return p
		}
	}
	t.Skipf("no %s on this host", name)
	return ""
}

// TestLibFuncOffsets holds the offsets found in the host's libraries to
// what the ELF symbol tables say, both versions of ibv_create_qp included.
func TestLibFuncOffsets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lib, file string
		want      []string
	}{
		{"libibverbs", "libibverbs.so.1", []string{"ibv_create_qp", "ibv_create_qp"}},
		{"librdmacm", "librdmacm.so.1", []string{"rdma_create_ep", "rdma_create_qp", "rdma_create_qp_ex"}},
	} {
		t.Run(tt.lib, func(t *testing.T) {
			path := hostLibrary(t, tt.file)
			got, err := libFuncOffsets(path, tt.lib)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var names []string
			for _, fo := range got {
				names = append(names, fo.name)
				// The bytes at the offset are the function's first.
				sym := symbolAt(t, f, fo.name, fo.offset)
				code := make([]byte, 4)
				want := make([]byte, 4)
				if _, err := f.Sections[sym.Section].ReadAt(want, int64(sym.Value-f.Sections[sym.Section].Addr)); err != nil {
					t.Fatal(err)
				}
				r, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				_, err = r.ReadAt(code, int64(fo.offset))
				r.Close()
				if err != nil || !slices.Equal(code, want) {
					t.Errorf("%s at file offset %#x: % x, the symbol's code starts % x (%v)", fo.name, fo.offset, code, want, err)
				}
			}
			slices.Sort(names)
			if diff := cmp.Diff(tt.want, names); diff != "" {
				t.Errorf("functions (-want +got):\n%s", diff)
			}
		})
	}
}

// symbolAt finds the .dynsym function name whose file offset is off.
func symbolAt(t *testing.T, f *elf.File, name string, off uint64) elf.Symbol {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if o, ok := fileOffset(f, s.Value); ok && o == off && s.Name == name {
			return s
		}
	}
	t.Fatalf("no symbol %s at file offset %#x", name, off)
	return elf.Symbol{}
}

// openTestSites loads the uprobe programs alone, which need neither ib_core
// nor RDMA hardware, and returns them with the maps they use, by name.
func openTestSites(t *testing.T) (*sites, map[string]*ebpf.Map) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs")
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil {
		t.Skipf("no uprobe PMU: %v", err)
	}
	spec, err := loadQp()
	if err != nil {
		t.Fatal(err)
	}
	// Stacks on, as Open sets them with Options.Sites.
	if err := spec.Variables["kernel_stacks"].Set(uint32(1)); err != nil {
		t.Fatal(err)
	}
	maps := map[string]*ebpf.Map{}
	for _, name := range []string{"user_calls", "stacks0", "stacks1", "stack_gen", "counters"} {
		m, err := ebpf.NewMap(spec.Maps[name])
		if err != nil {
			t.Skipf("cannot create BPF maps here: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		maps[name] = m
	}
	// .rodata is made with each load, from the Variables.
	sub := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{".rodata": spec.Maps[".rodata"]}, Programs: spec.Programs,
		Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	for name := range maps {
		sub.Maps[name] = spec.Maps[name]
	}
	l := &loader{spec: sub, maps: maps, cache: btf.NewCache()}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := openSites(log, l, "/proc")
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Error(err)
		}
	})
	if s.err != nil {
		t.Fatalf("uprobe programs refused: %v", s.err)
	}
	return s, maps
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// fakeVerbs is a running testdata/fakeverbs.
type fakeVerbs struct {
	t     *testing.T
	bin   string
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startFakeVerbs(t *testing.T, bin string, env ...string) *fakeVerbs {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	return &fakeVerbs{t: t, bin: bin, stdin: stdin, out: bufio.NewReader(stdout)}
}

func (f *fakeVerbs) next() string {
	f.t.Helper()
	line, err := f.out.ReadString('\n')
	if err != nil {
		f.t.Fatalf("fakeverbs: %v", err)
	}
	return strings.TrimSpace(line)
}

// mappingOf returns the mapping of pid that holds addr as /proc/PID/maps
// prints it, the device as the kernel's dev_t.
func mappingOf(t *testing.T, pid uint32, addr uint64) procmaps.Ident {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var start, end, off, ino uint64
		var major, minor uint32
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s %x %x:%x %d", &start, &end, &perms, &off, &major, &minor, &ino); err != nil {
			t.Fatalf("maps line %q: %v", line, err)
		}
		if start <= addr && addr < end {
			return procmaps.Ident{Start: start, Offset: off, Ino: ino, Dev: major<<20 | minor}
		}
	}
	t.Fatalf("no mapping of pid %d holds %#x", pid, addr)
	return procmaps.Ident{}
}

// call waits until fakeverbs is inside its next create and returns the
// thread's key in user_calls.
func (f *fakeVerbs) call() (pid uint32, key uint64) {
	f.t.Helper()
	var tid uint32
	if line := f.next(); func() error { _, err := fmt.Sscanf(line, "call %d %d", &pid, &tid); return err }() != nil {
		f.t.Fatalf("fakeverbs printed %q, want a call", line)
	}
	return pid, uint64(pid)<<32 | uint64(tid)
}

// resume lets fakeverbs return from its create and waits until it has;
// it then waits for proceed before its next create.
func (f *fakeVerbs) resume() {
	f.t.Helper()
	io.WriteString(f.stdin, "\n")
	if line := f.next(); line != "returned" {
		f.t.Fatalf("fakeverbs printed %q, want returned", line)
	}
}

func (f *fakeVerbs) proceed() { io.WriteString(f.stdin, "\n") }

// TestSitesUprobes runs the uprobes on this host's libibverbs: a program
// calls ibv_create_qp on a fake protection domain whose provider is its
// own function (testdata/fakeverbs.c), which waits while the test reads
// what the entry recorded for the thread: where the outermost call
// returns to (a call in create_qp_plain, as symbolize names it), the
// function's cookie, and the depth of a nested call; the return clears
// it. A process with its own copy of libibverbs gets uprobes when it is
// scanned.
func TestSitesUprobes(t *testing.T) {
	lib := hostLibrary(t, "libibverbs.so.1")
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs libibverbs-dev")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakeverbs")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "testdata/fakeverbs.c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	s, maps := openTestSites(t)
	calls := maps["user_calls"]
	s.attachHost()
	host := s.report()
	if host.Err != nil || !slices.ContainsFunc(host.Libraries, func(p string) bool { return strings.Contains(p, "libibverbs.so") }) {
		t.Fatalf("Sites = %+v, want libibverbs and no error", host)
	}
	t.Logf("libraries: %v", host.Libraries)
	sym := symbolize.NewUser("/proc")
	recorded := func(t *testing.T, f *fakeVerbs, pid uint32, key uint64, wantDepth uint32) {
		t.Helper()
		var c qpUserCall
		if err := calls.Lookup(key, &c); err != nil {
			t.Fatalf("no call recorded for %#x: %v", key, err)
		}
		if c.Fn != 1 || c.Depth != wantDepth || c.Ustack < 0 {
			t.Errorf("recorded function %d, depth %d, user stack %d; want 1 (ibv_create_qp), %d, a stack", c.Fn, c.Depth, c.Ustack, wantDepth)
		}
		// bpf_find_vma's view of the return address's mapping is the
		// line of maps that holds it.
		vma := procmaps.Ident{Start: c.Vma.Start, Offset: c.Vma.Pgoff * pageSize, Ino: c.Vma.Ino, Dev: c.Vma.Dev}
		if want := mappingOf(t, pid, c.Ret); c.HasVma != 1 || vma != want {
			t.Errorf("recorded mapping of %#x: %+v (has_vma %d), want maps' %+v", c.Ret, vma, c.HasVma, want)
		}
		site, err := sym.CallSite(pid, c.Ret, vma)
		if err != nil || site.Symbol != "create_qp_plain" || site.Path != f.bin {
			t.Errorf("recorded return %#x: the call at %+v (%v), want one in %s's create_qp_plain", c.Ret, site, err, f.bin)
		}
	}
	gone := func(t *testing.T, key uint64) {
		t.Helper()
		var c qpUserCall
		if err := calls.Lookup(key, &c); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("after the return: %+v, %v; want the call gone", c, err)
		}
	}

	t.Run("host library", func(t *testing.T) {
		f := startFakeVerbs(t, bin)
		pid, key := f.call()
		recorded(t, f, pid, key, 1)
		if n, err := s.scan(pid, false); n != 0 || err != nil {
			t.Errorf("scan = %d, %v; want nothing new: its libibverbs is the host's", n, err)
		}
		f.resume()
		gone(t, key)
		f.proceed()
		_, key = f.call() // stub calls ibv_create_qp inside the first call
		recorded(t, f, pid, key, 2)
		f.resume()
		gone(t, key)
	})
	t.Run("own copy", func(t *testing.T) {
		libDir := filepath.Join(dir, "lib")
		if err := os.Mkdir(libDir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(lib)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(libDir, "libibverbs.so.1"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		f := startFakeVerbs(t, bin, "LD_LIBRARY_PATH="+libDir)
		pid, key := f.call()
		var c qpUserCall
		if err := calls.Lookup(key, &c); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("a call through a library without uprobes was recorded: %+v, %v", c, err)
		}
		if n, err := s.scan(pid, false); n != 1 || err != nil {
			t.Errorf("scan = %d, %v; want its own libibverbs attached", n, err)
		}
		if n, err := s.scan(pid, true); n != 0 || err != nil {
			t.Errorf("scan again = %d, %v; want nothing new", n, err)
		}
		if libs := s.report().Libraries; !slices.Contains(libs, filepath.Join(libDir, "libibverbs.so.1")) {
			t.Errorf("Sites().Libraries = %v, want the copy", libs)
		}
		f.resume()
		f.proceed()
		_, key = f.call()
		recorded(t, f, pid, key, 2)
		f.resume()
		gone(t, key)
	})
}

// ownTypes returns the named types of the object that the kernel's BTF
// lacks (the ib_core ones), as a spec of their own: the kernel's types
// the object declares too (the mapping bpf_find_vma reads) would match
// twice.
func ownTypes(t *testing.T, types *btf.Spec) *btf.Spec {
	t.Helper()
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var own []btf.Type
	for typ := range types.All() {
		name := typ.TypeName()
		if _, isFunc := typ.(*btf.Func); name == "" || isFunc {
			continue
		}
		if _, err := kernel.AnyTypeByName(name); errors.Is(err, btf.ErrNotFound) {
			own = append(own, typ)
		}
	}
	b, err := btf.NewBuilder(own, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestKprobeProgramsVerify loads every kprobe, kretprobe and uprobe program
// on this host, kernel stacks on, so that its verifier checks them where
// ib_core is missing: their CO-RE relocations resolve against the object's
// own declarations of the ib_core types (ib.h), whose offsets are not the
// kernel's, which the kprobe programs only ever pass to
// bpf_probe_read_kernel. fentry/fexit programs need ib_core itself.
func TestKprobeProgramsVerify(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	if _, err := os.Stat("/sys/kernel/btf/ib_core"); err == nil {
		// The program's own types would then match the kernel's as well
		// (an ambiguous relocation): the lab tests load the programs
		// against the kernel's types, as Open does.
		t.Skip("ib_core is loaded: the lab tests verify the programs against its types")
	}
	if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie); err != nil {
		t.Skipf("kernel before 5.15 (bpf_get_attach_cookie): %v", err)
	}
	spec, err := loadQp()
	if err != nil {
		t.Fatal(err)
	}
	spec.Maps["events"].MaxEntries = 1 << 16
	if err := spec.Variables["kernel_stacks"].Set(uint32(1)); err != nil {
		t.Fatal(err)
	}
	maps := map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			t.Skipf("cannot create BPF maps here: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		maps[name] = m
	}
	l := &loader{spec: spec, maps: maps, cache: btf.NewCache(), opts: ebpf.ProgramOptions{ExtraRelocationTargets: []*btf.Spec{ownTypes(t, spec.Types)}}}
	var names []string
	for name, p := range spec.Programs {
		if p.Type == ebpf.Kprobe {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		progs, err := l.load(name)
		if err != nil {
			t.Errorf("load %s: %v", name, err)
			continue
		}
		progs[name].Close()
	}
	t.Logf("verified %d programs", len(names))
}
