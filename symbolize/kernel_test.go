package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKernelSites(t *testing.T) {
	k, err := NewKernel("testdata/kallsyms-synthetic")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		addr  uint64
		frame bool
		want  string // Site.String(); "" for ErrNoSymbol
	}{
		{"module function", 0xffffffffc0b52a30 + 0x1f0, false, "nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]"},
		{"module function's start", 0xffffffffc0b53100, false, "nvmet_rdma_queue_connect+0x0 [nvmet_rdma]"},
		{"return past a function's last call", 0xffffffffc0b53100, true, "nvmet_rdma_create_queue_ib+0x6d0 [nvmet_rdma]"},
		{"return address", 0xffffffffc0a15e40 + 0x2c, true, "ib_create_qp_kernel+0x2c [ib_core]"},
		{"module's last function", 0xffffffffc0b5bfff, false, "nvmet_rdma_cm_handler+0x7fff [nvmet_rdma]"},
		{"past the module's end", 0xffffffffc0b5c000, false, ""},
		{"after a module's data", 0xffffffffc0a40010, false, ""},
		{"module function after data", 0xffffffffc0a40110, false, "ib_core_after_data+0x10 [ib_core]"},
		{"vmlinux function", 0xffffffff810a1c30 + 0x25, false, "do_one_initcall+0x25"},
		{"vmlinux local function", 0xffffffff810a2010, false, "kthread+0x10"},
		{"aliases: the first listed", 0xffffffff81000000, false, "_stext+0x0"},
		{"init text", 0xffffffff83783020, false, "start_kernel+0x10"},
		{"past _etext", 0xffffffff82209990, false, ""},
		{"rodata", 0xffffffff82400010, false, ""},
		{"past _einittext", 0xffffffff837f8920, false, ""},
		{"per-CPU offset", 0x1010, false, ""},
		{"zero", 0, false, ""},
		{"zero as a return address", 0, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := k.Site
			if tt.frame {
				lookup = k.Frame
			}
			got, err := lookup(tt.addr)
			if tt.want == "" {
				if !errors.Is(err, ErrNoSymbol) || got != (Site{Kernel: true}) {
					t.Fatalf("(%+v, %v), want an empty kernel site and ErrNoSymbol", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want || !got.Kernel {
				t.Errorf("%+v (%q), want %q", got, got.String(), tt.want)
			}
		})
	}
	_, err = k.Site(0xffffffff82209990)
	if want := "symbolize: kernel address 0xffffffff82209990: no kernel symbol holds the address"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestKernelRestricted(t *testing.T) {
	_, err := NewKernel("testdata/kallsyms-restricted")
	if !errors.Is(err, ErrRestricted) {
		t.Fatalf("error %v, want ErrRestricted", err)
	}
	want := "symbolize: read testdata/kallsyms-restricted/kallsyms: kernel addresses hidden (kallsyms reads zero)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestKernelRefresh loads a module after kallsyms was read: its address is
// not named after the module before it, and Site reads kallsyms again on
// finding /proc/modules changed.
func TestKernelRefresh(t *testing.T) {
	syms, mods, root, k := syntheticKernel(t)
	if changed, err := k.Refresh(); changed || err != nil {
		t.Fatalf("Refresh() = %v, %v with nothing changed", changed, err)
	}
	const rxeCreateQP = 0xffffffffc0c01200
	// rdma_rxe loads after nvmet_rdma, but kallsyms is not read yet.
	mods = append(mods, "rdma_rxe 172032 0 - Live 0xffffffffc0c00000\n"...)
	if err := os.WriteFile(filepath.Join(root, "modules"), mods, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Site(rxeCreateQP + 0x10); !errors.Is(err, ErrNoSymbol) {
		t.Errorf("before kallsyms lists rdma_rxe: (%v, %v), want ErrNoSymbol", got, err)
	}
	syms = append(syms, "ffffffffc0c01200 t rxe_create_qp\t[rdma_rxe]\n"...)
	if err := os.WriteFile(filepath.Join(root, "kallsyms"), syms, 0o644); err != nil {
		t.Fatal(err)
	}
	// The failed lookup above read kallsyms again already: modules are as
	// it saw them, so Site does not read it again by itself.
	if changed, err := k.Refresh(); changed || err != nil {
		t.Fatalf("Refresh() = %v, %v", changed, err)
	}
	// rdma_rxe loaded again at another address.
	mods = []byte(strings.Replace(string(mods), "0xffffffffc0c00000", "0xffffffffc0c01000", 1))
	if err := os.WriteFile(filepath.Join(root, "modules"), mods, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := k.Site(rxeCreateQP + 0x10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Site{Kernel: true, Symbol: "rxe_create_qp", SymbolOffset: 0x10, Module: "rdma_rxe"}); got != want {
		t.Errorf("after the reload: %+v, want %+v", got, want)
	}
}

// TestKernelBPFMoved: an fentry trampoline made after kallsyms was read
// (no module changed) is named once kallsyms lists it, by a read for the
// address; reads for addresses no symbol holds are bounded, once a
// second and once a minute for the same address.
func TestKernelBPFMoved(t *testing.T) {
	syms, _, root, k := syntheticKernel(t)
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	k.now = func() time.Time { return now }
	reads := 0
	frame := func(addr uint64) (Site, error) {
		t.Helper()
		before := k.tab.Load()
		s, err := k.Frame(addr)
		if k.tab.Load() != before {
			reads++
		}
		return s, err
	}
	const tramp, other = 0xffffffffc0c7d000, 0xffffffffc0b60000 // other: past nvmet_rdma
	syms = append(syms, "ffffffffc0c7d000 t bpf_trampoline_6442491234\t[bpf]\n"...)
	if err := os.WriteFile(filepath.Join(root, "kallsyms"), syms, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := frame(tramp + 0x3e)
	if want := (Site{Kernel: true, Symbol: "bpf_trampoline_6442491234", SymbolOffset: 0x3e, Module: "bpf"}); err != nil || got != want || reads != 1 {
		t.Fatalf("a trampoline made after the read: (%+v, %v) after %d reads, want %+v after 1", got, err, reads, want)
	}
	// Another address no symbol holds, within the second: not read for.
	if _, err := frame(other); !errors.Is(err, ErrNoSymbol) || reads != 1 {
		t.Errorf("unnamed address within a second: %v after %d reads, want ErrNoSymbol after 1", err, reads)
	}
	now = now.Add(2 * time.Second)
	if _, err := frame(other); !errors.Is(err, ErrNoSymbol) || reads != 2 {
		t.Errorf("unnamed address: %v after %d reads, want ErrNoSymbol after 2", err, reads)
	}
	// The same address again: not read for until a minute passed.
	now = now.Add(2 * time.Second)
	if _, err := frame(other); !errors.Is(err, ErrNoSymbol) || reads != 2 {
		t.Errorf("the same unnamed address again: %v after %d reads, want ErrNoSymbol after 2", err, reads)
	}
	syms = append(syms, "ffffffffc0b60000 t bpf_prog_6deef7357e7b4530_qp_create\t[bpf]\n"...)
	if err := os.WriteFile(filepath.Join(root, "kallsyms"), syms, 0o644); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if got, err := frame(other + 0x20); err != nil || got.Symbol != "bpf_prog_6deef7357e7b4530_qp_create" || reads != 3 {
		t.Errorf("a minute on, a program there: (%+v, %v) after %d reads, want bpf_prog_6deef7357e7b4530_qp_create after 3", got, err, reads)
	}
	// Named addresses read nothing.
	if _, err := frame(tramp + 0x10); err != nil || reads != 3 {
		t.Errorf("a named address: %v after %d reads, want 3", err, reads)
	}
}

// syntheticKernel is a Kernel of testdata/kallsyms-synthetic in a /proc
// of its own (root), with the files' contents.
func syntheticKernel(t *testing.T) (syms, mods []byte, root string, k *Kernel) {
	t.Helper()
	syms, err := os.ReadFile("testdata/kallsyms-synthetic/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	mods, err = os.ReadFile("testdata/kallsyms-synthetic/modules")
	if err != nil {
		t.Fatal(err)
	}
	root = fixtureProc(t, map[string]string{"kallsyms": string(syms), "modules": string(mods)})
	if k, err = NewKernel(root); err != nil {
		t.Fatal(err)
	}
	return syms, mods, root, k
}

// TestKernelHost reads this host's kallsyms and names a function as
// kallsyms lists it.
func TestKernelHost(t *testing.T) {
	k, err := NewKernel("/proc")
	if errors.Is(err, ErrRestricted) || errors.Is(err, os.ErrNotExist) {
		t.Skipf("kallsyms unreadable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[1] != "T" || fields[2] != "schedule" {
			continue
		}
		got, err := k.Frame(hexU(t, fields[0]) + 0x10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Site{Kernel: true, Symbol: "schedule", SymbolOffset: 0x10, Module: moduleOf(fields)}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		return
	}
	t.Skip("kallsyms lists no schedule")
}

func moduleOf(fields []string) string {
	if len(fields) < 4 {
		return ""
	}
	return strings.Trim(fields[3], "[]")
}

// FuzzKallsyms parses any kallsyms text and looks an address up in it: no
// panic, and a site found is a function at or before the address.
func FuzzKallsyms(f *testing.F) {
	syms, err := os.ReadFile("testdata/kallsyms-synthetic/kallsyms")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(syms, uint64(0xffffffffc0b52c20))
	f.Add([]byte("ffffffff81000000 T _stext\n0 t x\t[\n"), uint64(0xffffffff81000010))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		tab, err := parseKallsyms(bytes.NewReader(data))
		if err != nil {
			return
		}
		tab.ends = make([]uint64, len(tab.modules))
		s, ok := tab.site(addr)
		if ok && (s.Symbol == "" || s.SymbolOffset > addr || !s.Kernel) {
			t.Fatalf("site(%#x) = %+v", addr, s)
		}
	})
}
