package vmtest

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Site is a user QP's creation site as rdmatool reports it (trace -j's
// site fields, a qp-leaks finding's): the call (FILE!SYMBOL+0xOFF, or
// FILE+0xOFF where the file has no symbol there), the library function
// it called, the file, its GNU build ID and the call instruction's file
// offset.
type Site struct {
	Call, Via, File, BuildID string
	Offset                   uint64
}

// Binary is an executable a lab test holds creation sites to, read with
// debug/elf (the guest has no binutils).
type Binary struct {
	Path    string // resolved, as /proc/PID/maps names it
	BuildID string
	f       *elf.File
	raw     *os.File
}

// OpenBinary opens the executable at path (symlinks resolved) and reads
// its GNU build ID, failing t if it has none.
func OpenBinary(t testing.TB, path string) *Binary {
	t.Helper()
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() }) //nolint:errcheck // read only
	f, err := elf.NewFile(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := &Binary{Path: path, f: f, raw: raw}
	// The note: namesz, descsz, type 3 (NT_GNU_BUILD_ID), "GNU\0", the ID.
	if sec := f.Section(".note.gnu.build-id"); sec != nil {
		if d, err := sec.Data(); err == nil && len(d) >= 16 && binary.LittleEndian.Uint32(d[8:]) == 3 && string(d[12:16]) == "GNU\x00" {
			if n := binary.LittleEndian.Uint32(d[4:]); 16+int(n) <= len(d) {
				b.BuildID = hex.EncodeToString(d[16 : 16+n])
			}
		}
	}
	if b.BuildID == "" {
		t.Fatalf("%s has no GNU build ID note", path)
	}
	return b
}

// Stripped reports whether the binary has no symbol table of its own
// (.symtab), as distributions ship their binaries.
func (b *Binary) Stripped() bool { return b.f.Section(".symtab") == nil }

// CheckCall holds a site to this binary: the site names the file, its
// build ID and the library function via, and at its file offset there is a
// call instruction (into the PLT or through the GOT, on x86; BL or BLR on
// arm64). With fn set, the binary's symbol table must put the offset in
// function fn, and the call reads BASENAME!fn+0xOFF; without it (a stripped
// binary) the call must at least name the file. what says which QP.
func (b *Binary) CheckCall(t testing.TB, what string, s Site, fn, via string) {
	t.Helper()
	if s.Via != via || s.File != b.Path || s.BuildID != b.BuildID {
		t.Errorf("%s: site %q via %q in %q (build id %q); want via %s in %s (build id %s)",
			what, s.Call, s.Via, s.File, s.BuildID, via, b.Path, b.BuildID)
		return
	}
	var vaddr uint64
	found := false
	for _, p := range b.f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Off <= s.Offset && s.Offset < p.Off+p.Filesz {
			vaddr, found = s.Offset-p.Off+p.Vaddr, true
		}
	}
	if !found {
		t.Errorf("%s: site offset %#x is in no executable segment of %s", what, s.Offset, b.Path)
		return
	}
	base := filepath.Base(b.Path)
	if fn != "" {
		syms, err := b.f.Symbols()
		if err != nil {
			t.Fatalf("%s symbols: %v", b.Path, err)
		}
		var sym *elf.Symbol
		for i, y := range syms {
			if elf.ST_TYPE(y.Info) == elf.STT_FUNC && y.Value <= vaddr && vaddr < y.Value+y.Size {
				sym = &syms[i]
			}
		}
		if sym == nil || sym.Name != fn {
			t.Errorf("%s: site offset %#x (address %#x) is in %v, want %s", what, s.Offset, vaddr, sym, fn)
			return
		}
		if want := fmt.Sprintf("%s!%s+0x%x", base, fn, vaddr-sym.Value); s.Call != want {
			t.Errorf("%s: site %q, want %q", what, s.Call, want)
		}
	} else if len(s.Call) <= len(base) || s.Call[:len(base)] != base {
		t.Errorf("%s: site %q does not name %s", what, s.Call, base)
	}
	code := make([]byte, 8)
	if _, err := b.raw.ReadAt(code, int64(s.Offset)); err != nil {
		t.Fatal(err)
	}
	switch b.f.Machine {
	case elf.EM_X86_64:
		switch {
		case code[0] == 0xe8: // call rel32: into the library function's PLT stub
			target := vaddr + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(code[1:]))))
			if sec := b.sectionOf(target); sec != ".plt" && sec != ".plt.sec" {
				t.Errorf("%s: the call at %#x goes to %#x in %q, want the PLT", what, vaddr, target, sec)
			}
		case code[0] == 0xff && code[1]>>3&7 == 2: // call *GOT(%rip) (-fno-plt)
		default:
			t.Errorf("%s: the bytes at file offset %#x, % x, are no call instruction", what, s.Offset, code)
		}
	case elf.EM_AARCH64:
		if insn := binary.LittleEndian.Uint32(code); insn&0xfc000000 != 0x94000000 && insn&0xfffffc1f != 0xd63f0000 {
			t.Errorf("%s: the instruction at file offset %#x, %#08x, is no BL or BLR", what, s.Offset, insn)
		}
	}
}

// CheckCallsAbove holds the calls above a creation site (a site's stack,
// from a program built with frame pointers) to program prog: its own
// calls, prog!FUNCTION+0xOFF, up to its main. what says which QP.
func CheckCallsAbove(t testing.TB, what, prog string, stack []string) {
	t.Helper()
	i := slices.IndexFunc(stack, func(f string) bool { return strings.HasPrefix(f, prog+"!main+0x") })
	if i < 0 || slices.ContainsFunc(stack[:i+1], func(f string) bool { return !strings.HasPrefix(f, prog+"!") }) {
		t.Errorf("%s: calls above the site %q, want %s's up to %s!main", what, stack, prog, prog)
	}
}

func (b *Binary) sectionOf(addr uint64) string {
	for _, s := range b.f.Sections {
		if s.Addr <= addr && addr < s.Addr+s.Size && s.Flags&elf.SHF_ALLOC != 0 {
			return s.Name
		}
	}
	return ""
}
