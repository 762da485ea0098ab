package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const tinyBuildID = "dd084a2c30db243630ff2c3fdb3d00c301ad6c12"

// openTiny parses testdata/tiny.elf (see tiny.c): a fixed-address
// executable whose one PT_LOAD of code maps file offset 0 at 0x400000.
//
//	400144 <callee>:  ... 4 bytes
//	400148 <caller>:  400149 e8 f6 ff ff ff  call callee
//	                  400157 ff d0           call *%rax
//	40015f <_start>:  400165 e8 de ff ff ff  call caller
func openTiny(t testing.TB) (*elfFile, *os.File) {
	t.Helper()
	f, err := os.Open("testdata/tiny.elf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(ef)
	return parseELF(ef, fileKey(ef, id, ""), id), f
}

func TestTinyELF(t *testing.T) {
	e, f := openTiny(t)
	if e.buildID != tinyBuildID {
		t.Errorf("build ID %q, want %q", e.buildID, tinyBuildID)
	}
	site := func(off uint64, sym string, symOff uint64) Site {
		return Site{BuildID: tinyBuildID, Offset: off, Symbol: sym, SymbolOffset: symOff}
	}
	tests := []struct {
		name string
		off  uint64
		call bool
		want Site
	}{
		{"function start", 0x148, false, site(0x148, "caller", 0)},
		{"inside", 0x14e, false, site(0x14e, "caller", 6)},
		{"direct call", 0x14e, true, site(0x149, "caller", 1)},
		{"indirect call", 0x159, true, site(0x157, "caller", 0xf)},
		{"call as the last instruction", 0x16a, true, site(0x165, "_start", 6)},
		{"no call before: ret-1", 0x148, true, site(0x147, "callee", 3)},
		{"before the first function", 0x100, false, site(0x100, "", 0)},
		{"in no segment", 0x16c, false, site(0x16c, "", 0)},
		{"file start as a return address", 0, true, site(0, "", 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Site
			if tt.call {
				got = e.callSite(f, tt.off)
			} else {
				got = e.resolve(tt.off)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSymbolLookup(t *testing.T) {
	fn := func(name string, bind elf.SymBind, value, size uint64) elf.Symbol {
		return elf.Symbol{Name: name, Info: elf.ST_INFO(bind, elf.STT_FUNC), Section: 1, Value: value, Size: size}
	}
	e := &elfFile{}
	e.setSymbols(funcSymbols([]elf.Symbol{
		fn("__getpid", elf.STB_GLOBAL, 0x1000, 8), // aliases: getpid is the name
		fn("getpid", elf.STB_WEAK, 0x1000, 8),
		fn("_getpid_local", elf.STB_LOCAL, 0x1000, 0),
		fn("big", elf.STB_GLOBAL, 0x2000, 0x100),
		fn("inner", elf.STB_LOCAL, 0x2010, 0x10), // an entry point inside big
		fn("unsized", elf.STB_GLOBAL, 0x3000, 0),
		fn("next", elf.STB_GLOBAL, 0x3100, 0x10),
		{Name: "object", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Section: 1, Value: 0x3050, Size: 8},
		{Name: "undefined", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC), Section: elf.SHN_UNDEF},
		{Name: "ifunc", Info: elf.ST_INFO(elf.STB_GLOBAL, sttGNUIFunc), Section: 1, Value: 0x4000, Size: 0x20},
	}))
	tests := []struct {
		vaddr  uint64
		want   string
		wantOf uint64
	}{
		{0xfff, "", 0},
		{0x1000, "getpid", 0},
		{0x1007, "getpid", 7},
		{0x1008, "", 0}, // past the sized aliases
		{0x2018, "inner", 8},
		{0x2020, "big", 0x20}, // past inner, inside big
		{0x2100, "", 0},
		{0x3050, "unsized", 0x50}, // no size: the nearest before
		{0x310f, "next", 0xf},
		{0x4010, "ifunc", 0x10},
	}
	for _, tt := range tests {
		name, off, ok := e.symbol(tt.vaddr)
		if ok != (tt.want != "") || name != tt.want || off != tt.wantOf {
			t.Errorf("symbol(%#x) = %q+%#x %v, want %q+%#x", tt.vaddr, name, off, ok, tt.want, tt.wantOf)
		}
	}
}

// note encodes one ELF note, padded to align.
func note(bo binary.AppendByteOrder, name string, typ uint32, desc []byte, align int) []byte {
	pad := func(b []byte) []byte {
		for len(b)%align != 0 {
			b = append(b, 0)
		}
		return b
	}
	b := bo.AppendUint32(nil, uint32(len(name)))
	b = bo.AppendUint32(b, uint32(len(desc)))
	b = bo.AppendUint32(b, typ)
	b = pad(append(b, name...))
	return pad(append(b, desc...))
}

func TestNoteBuildID(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	id := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	property := note(le, "GNU\x00", 5, make([]byte, 12), 8) // NT_GNU_PROPERTY_TYPE_0
	tests := []struct {
		name  string
		notes []byte
		bo    interface {
			binary.ByteOrder
			binary.AppendByteOrder
		}
		align uint64
		want  string
	}{
		{"build ID", note(le, "GNU\x00", ntGNUBuildID, id, 4), le, 4, "deadbeef01"},
		{"after the ABI tag", append(note(le, "GNU\x00", 1, make([]byte, 16), 4), note(le, "GNU\x00", ntGNUBuildID, id, 4)...), le, 4, "deadbeef01"},
		{"8-aligned, after a property note", append(property, note(le, "GNU\x00", ntGNUBuildID, id, 8)...), le, 8, "deadbeef01"},
		{"big-endian", note(be, "GNU\x00", ntGNUBuildID, id, 4), be, 4, "deadbeef01"},
		{"another owner's type 3", note(le, "Go\x00\x00", ntGNUBuildID, id, 4), le, 4, ""},
		{"cut in the descriptor", note(le, "GNU\x00", ntGNUBuildID, id, 4)[:18], le, 4, ""},
		{"a name size past the end", le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 1<<31), 0), 3), le, 4, ""},
		{"empty descriptor", note(le, "GNU\x00", ntGNUBuildID, nil, 4), le, 4, ""},
		{"nothing", nil, le, 4, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := noteBuildID(bytes.NewReader(tt.notes), tt.bo, tt.align); got != tt.want {
				t.Errorf("noteBuildID = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWrappingSegment: a PT_LOAD whose addresses pass 2^64 (a damaged
// file) is not a segment; an offset in it has no address and no symbol.
func TestWrappingSegment(t *testing.T) {
	data, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		t.Fatal(err)
	}
	phoff := binary.LittleEndian.Uint64(data[0x20:])
	for _, vaddr := range []uint64{0xffff_ffff_ffff_ff00, 0x400000} {
		d := bytes.Clone(data)
		binary.LittleEndian.PutUint64(d[phoff+16:], vaddr) // the first program header's p_vaddr
		ef, err := elf.NewFile(bytes.NewReader(d))
		if err != nil {
			t.Fatal(err)
		}
		e := parseELF(ef, fileKey(ef, "", ""), "")
		s := e.resolve(0x14e)
		wantLoads, wantSym := 2, "caller" // tiny.elf's code and data
		if vaddr != 0x400000 {
			wantLoads, wantSym = 1, ""
		}
		if len(e.loads) != wantLoads || s.Symbol != wantSym {
			t.Errorf("p_vaddr %#x: %d segments, offset 0x14e in %q", vaddr, len(e.loads), s.Symbol)
		}
	}
}

func TestCallLen(t *testing.T) {
	// Code at 0x1000 (exec), data at 0x5000; the return address is 0x1100.
	loads := []load{{off: 0, vaddr: 0x1000, filesz: 0x1000, memsz: 0x1000, exec: true}, {off: 0x1000, vaddr: 0x5000, filesz: 0x100, memsz: 0x200}}
	amd64 := &elfFile{machine: elf.EM_X86_64, loads: loads}
	i386 := &elfFile{machine: elf.EM_386, loads: loads}
	arm64 := &elfFile{machine: elf.EM_AARCH64, loads: loads}
	const ret = 0x1100
	rel := func(b []byte, to uint64) []byte { // b with a rel32 to `to` from ret
		return binary.LittleEndian.AppendUint32(b, uint32(int32(int64(to)-ret)))
	}
	tests := []struct {
		name string
		e    *elfFile
		code []byte
		want int
	}{
		{"call rel32", amd64, rel([]byte{0x90, 0xe8}, 0x1050), 5},
		{"call rel32 out of the file", amd64, rel([]byte{0xe8}, 0x9000), 0},
		{"call rel32 into data", amd64, rel([]byte{0xe8}, 0x5000), 0},
		{"call *slot(%rip)", amd64, rel([]byte{0xff, 0x15}, 0x5010), 6},
		{"call *slot(%rip) past the data", amd64, rel([]byte{0xff, 0x15}, 0x6000), 0},
		{"call *%rax", amd64, []byte{0x48, 0x89, 0xc3, 0xff, 0xd0}, 2},
		{"call *%r8", amd64, []byte{0x41, 0xff, 0xd0}, 3},
		{"notrack call *%rax", amd64, []byte{0x3e, 0xff, 0xd0}, 3},
		{"notrack call *%r10", amd64, []byte{0x3e, 0x41, 0xff, 0xd2}, 4},
		{"call *8(%rax)", amd64, []byte{0xff, 0x50, 0x08}, 3},
		{"call *(%rax)", amd64, []byte{0xff, 0x10}, 2},
		{"call *(%rsp)", amd64, []byte{0xff, 0x14, 0x24}, 3},
		{"call *8(%rsp)", amd64, []byte{0xff, 0x54, 0x24, 0x08}, 4},
		{"call *0x110(%rax)", amd64, []byte{0xff, 0x90, 0x10, 0x01, 0x00, 0x00}, 6},
		{"call *0x110(%rsp)", amd64, []byte{0xff, 0x94, 0x24, 0x10, 0x01, 0x00, 0x00}, 7},
		{"call *table(,%rax,8)", amd64, []byte{0xff, 0x14, 0xc5, 0x00, 0x50, 0x00, 0x00}, 7},
		{"jmp *%rax", amd64, []byte{0xff, 0xe0}, 0},
		{"no call", amd64, []byte{0x90, 0x90, 0x90}, 0},
		{"nothing", amd64, nil, 0},
		{"i386 call rel32", i386, rel([]byte{0xe8}, 0x1050), 5},
		{"i386 call *slot", i386, binary.LittleEndian.AppendUint32([]byte{0xff, 0x15}, 0x5010), 6},
		{"i386: 0x41 is no prefix", i386, []byte{0x41, 0xff, 0xd0}, 2},
		{"arm64", arm64, []byte{0x00, 0x00, 0x00, 0x94}, 4},
		{"another machine", &elfFile{machine: elf.EM_RISCV}, []byte{0xe8, 0, 0, 0, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := callLen(tt.e, tt.code, ret); got != tt.want {
				t.Errorf("callLen(% x) = %d, want %d", tt.code, got, tt.want)
			}
		})
	}
}

// FuzzELF reads any bytes as an ELF file through debug/elf and this
// package's build ID, segment and symbol lookups: no panic, and a site's
// symbol offset is no more than the address
// (the link-time address its segment gives the file offset).
func FuzzELF(f *testing.F) {
	tiny, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny, uint64(0x14e))
	f.Add(tiny[:0x100], uint64(0x20))
	f.Fuzz(func(t *testing.T, data []byte, off uint64) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		id := buildID(ef)
		e := parseELF(ef, fileKey(ef, id, "fuzz"), id)
		r := bytes.NewReader(data)
		for _, s := range []Site{e.resolve(off), e.callSite(r, off)} {
			if s.Symbol == "" {
				continue
			}
			if _, va, ok := e.vaddr(s.Offset); !ok || s.SymbolOffset > va {
				t.Fatalf("site %#x: symbol %q at +%#x, address %#x (in a segment: %v)", s.Offset, s.Symbol, s.SymbolOffset, va, ok)
			}
		}
		for _, l := range e.loads {
			e.resolve(l.off)
			e.callSite(r, l.off+l.filesz/2)
		}
	})
}

// FuzzCallLen decodes any bytes before a return address: no panic, and a
// call no longer than the bytes.
func FuzzCallLen(f *testing.F) {
	f.Add([]byte{0xff, 0x15, 0x00, 0x40, 0x00, 0x00}, uint64(0x1100))
	f.Add([]byte{0x3e, 0x41, 0xff, 0x94, 0x24, 0x10, 0x01, 0x00, 0x00}, uint64(0x1100))
	e := &elfFile{machine: elf.EM_X86_64, loads: []load{{vaddr: 0x1000, filesz: 0x1000, memsz: 0x1000, exec: true}, {off: 0x1000, vaddr: 0x5000, filesz: 0x100, memsz: 0x200}}}
	f.Fuzz(func(t *testing.T, code []byte, ret uint64) {
		if n := callLen(e, code, ret); n < 0 || n > len(code) {
			t.Fatalf("callLen(% x) = %d", code, n)
		}
	})
}
