package symbolize

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// elfFile is what symbolizing needs of one ELF file, parsed once: its build
// ID, its PT_LOAD segments and its function symbols.
type elfFile struct {
	key     string // the cache key (fileKey)
	buildID string
	machine elf.Machine
	loads   []load
	syms    []funcSym // sorted by value, one per value
	names   string    // funcSym names, end to end
	// sites caches resolved sites by request; guarded by User.mu.
	sites map[siteReq]Site
	// notELF is why a file that debug/elf could not read is not ELF; the
	// rest is then empty.
	notELF error
}

// siteReq is a resolved request: a file offset, and whether it was a return
// address (CallSite) or an exact one (Site).
type siteReq struct {
	off  uint64
	call bool
}

// load is a PT_LOAD segment: file bytes [off, off+filesz) are at
// [vaddr, vaddr+filesz) of the file's link-time address space.
type load struct {
	off, vaddr, filesz, memsz uint64
	exec                      bool
}

// funcSym is a function symbol; its name is names[name : name+nameLen].
type funcSym struct {
	value, size   uint64
	name, nameLen uint32
}

// maxNoteBytes bounds what is read of one note segment or section: a build
// ID note is 36 bytes, and other notes (ABI tag, GNU properties, package
// metadata) are small.
const maxNoteBytes = 1 << 16

// ntGNUBuildID is NT_GNU_BUILD_ID (elf.h), the note type of "GNU" notes
// holding the build ID.
const ntGNUBuildID = 3

// sttGNUIFunc is STT_GNU_IFUNC (elf.h): an indirect function, whose code
// is a resolver; libc's memcpy and friends are ones.
const sttGNUIFunc elf.SymType = 10

// buildID returns the hex GNU build ID of f: from a PT_NOTE segment, else a
// SHT_NOTE section (an object with no program headers); "" when none.
func buildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if id := noteBuildID(p.Open(), f.ByteOrder, p.Align); id != "" {
			return id
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		if id := noteBuildID(s.Open(), f.ByteOrder, s.Addralign); id != "" {
			return id
		}
	}
	return ""
}

// noteBuildID reads the notes of one segment or section and returns the
// build ID of the first "GNU" NT_GNU_BUILD_ID note. A note is namesz, descsz
// and type words, the name, then the descriptor, each of the last two
// padded to the segment's alignment from the note's start (4, or 8 for the
// 64-bit property notes), as glibc's ELF_NOTE_NEXT_OFFSET counts.
func noteBuildID(r io.Reader, bo binary.ByteOrder, align uint64) string {
	b, err := io.ReadAll(io.LimitReader(r, maxNoteBytes))
	if err != nil && len(b) == 0 {
		return ""
	}
	pad := uint64(4)
	if align == 8 {
		pad = 8
	}
	roundUp := func(n uint64) uint64 { return (n + pad - 1) &^ (pad - 1) }
	for uint64(len(b)) >= 12 {
		namesz, descsz, typ := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		descStart := roundUp(12 + namesz) // the words fit in uint64 without overflow
		if descStart+descsz > uint64(len(b)) {
			return ""
		}
		name, desc := b[12:12+namesz], b[descStart:descStart+descsz]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && descsz > 0 {
			return hex.EncodeToString(desc)
		}
		next := roundUp(descStart + descsz)
		if next > uint64(len(b)) {
			return ""
		}
		b = b[next:]
	}
	return ""
}

// fileKey is the cache key of an ELF file: its build ID with the sizes of
// its symbol tables and its PT_LOAD segments (a stripped copy keeps the
// build ID of the file it was stripped from and must not share its
// symbols; a copy rewritten by patchelf keeps it too, with its segments
// moved), or when it has no build ID the identity of the file, which
// noBuildID gives.
func fileKey(f *elf.File, id, noBuildID string) string {
	if id == "" {
		return "file:" + noBuildID
	}
	b := append([]byte("build-id:"), id...)
	for _, name := range []string{".symtab", ".dynsym"} {
		var size uint64
		if s := f.Section(name); s != nil {
			size = s.Size
		}
		b = strconv.AppendUint(append(b, ':'), size, 10)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b = strconv.AppendUint(append(b, ':'), p.Off, 16)
			b = strconv.AppendUint(append(b, '@'), p.Vaddr, 16)
			b = strconv.AppendUint(append(b, '+'), p.Filesz, 16)
		}
	}
	return string(b)
}

// parseELF reads what symbolizing needs of f: its PT_LOAD segments and the
// function symbols of .symtab, else of .dynsym.
func parseELF(f *elf.File, key, id string) *elfFile {
	e := &elfFile{key: key, buildID: id, machine: f.Machine, sites: map[siteReq]Site{}}
	for _, p := range f.Progs {
		// A segment whose ends pass 2^64 is a damaged file's: none of its
		// addresses could be mapped, and offsets in it would wrap.
		if p.Type == elf.PT_LOAD && p.Filesz > 0 && p.Off+p.Filesz > p.Off && p.Vaddr+max(p.Filesz, p.Memsz) > p.Vaddr {
			e.loads = append(e.loads, load{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz, exec: p.Flags&elf.PF_X != 0})
		}
	}
	// A table that does not parse counts as none: the build ID and the
	// offsets are still right.
	syms, err := f.Symbols()
	funcs := funcSymbols(syms)
	if err != nil || len(funcs) == 0 {
		syms, err = f.DynamicSymbols()
		funcs = funcSymbols(syms)
	}
	if err == nil {
		e.setSymbols(funcs)
	}
	return e
}

// funcSymbols keeps the defined function symbols of syms.
func funcSymbols(syms []elf.Symbol) []elf.Symbol {
	out := syms[:0:0]
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if (t == elf.STT_FUNC || t == sttGNUIFunc) && s.Section != elf.SHN_UNDEF && s.Section != elf.SHN_ABS && s.Value != 0 && s.Name != "" {
			out = append(out, s)
		}
	}
	return out
}

// setSymbols sorts syms by value and keeps one per value: the one a reader
// would name (symbolBefore), with the largest size among them.
func (e *elfFile) setSymbols(syms []elf.Symbol) {
	slices.SortStableFunc(syms, func(a, b elf.Symbol) int {
		if c := cmp.Compare(a.Value, b.Value); c != 0 {
			return c
		}
		return symbolRank(a) - symbolRank(b)
	})
	var names strings.Builder
	e.syms = make([]funcSym, 0, len(syms))
	for _, s := range syms {
		if n := len(e.syms); n > 0 && e.syms[n-1].value == s.Value {
			e.syms[n-1].size = max(e.syms[n-1].size, s.Size)
			continue
		}
		if names.Len()+len(s.Name) > 1<<32-1 {
			break
		}
		e.syms = append(e.syms, funcSym{value: s.Value, size: s.Size, name: uint32(names.Len()), nameLen: uint32(len(s.Name))})
		names.WriteString(s.Name)
	}
	e.syms = slices.Clip(e.syms)
	e.names = names.String()
}

// symbolRank orders aliases at one address, best first: a sized symbol, a
// name without a leading underscore (getpid before __getpid), a global
// before a weak before a local binding.
func symbolRank(s elf.Symbol) int {
	r := 0
	if s.Size == 0 {
		r += 4
	}
	if strings.HasPrefix(s.Name, "_") {
		r += 2
	}
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL:
	case elf.STB_WEAK:
		r++
	default:
		r += 2
	}
	return r
}

// maxNested bounds how many symbols before the nearest one a lookup tries
// when that one ends before the address: a function that holds a smaller
// one (assembler entry points inside a larger function).
const maxNested = 8

// symbol returns the function symbol holding vaddr and vaddr's offset in
// it: the sized symbol whose [value, value+size) holds it, or when the
// nearest symbol before it has no size, that one.
func (e *elfFile) symbol(vaddr uint64) (string, uint64, bool) {
	i, _ := slices.BinarySearchFunc(e.syms, vaddr, func(s funcSym, v uint64) int {
		if s.value <= v {
			return -1
		}
		return 1
	})
	i-- // the last symbol at or before vaddr
	if i < 0 {
		return "", 0, false
	}
	if e.syms[i].size == 0 {
		return e.name(e.syms[i]), vaddr - e.syms[i].value, true
	}
	for j := i; j >= 0 && j > i-maxNested; j-- {
		if s := e.syms[j]; vaddr-s.value < s.size {
			return e.name(s), vaddr - s.value, true
		}
	}
	return "", 0, false
}

func (e *elfFile) name(s funcSym) string {
	return e.names[s.name : s.name+s.nameLen]
}

// vaddr converts a file offset into the link-time address its PT_LOAD
// segment gives it: the value space of the symbols.
func (e *elfFile) vaddr(off uint64) (load, uint64, bool) {
	for _, l := range e.loads {
		if off >= l.off && off-l.off < l.filesz {
			return l, l.vaddr + (off - l.off), true
		}
	}
	return load{}, 0, false
}

// mapped says whether vaddr is in one of the file's segments, executable
// ones only when exec is set.
func (e *elfFile) mapped(vaddr uint64, exec bool) bool {
	for _, l := range e.loads {
		if vaddr >= l.vaddr && vaddr-l.vaddr < l.memsz && (l.exec || !exec) {
			return true
		}
	}
	return false
}

// MaxSymbol bounds the bytes of a user site's Symbol: a longer name (C++
// templates reach kilobytes) is cut at MaxSymbol bytes and followed by
// "…", as the kernel bounds its own names at KSYM_NAME_LEN (512).
const MaxSymbol = 512

// cutSymbol is name cut to MaxSymbol bytes, at a UTF-8 rune boundary
// where there is one.
func cutSymbol(name string) string {
	if len(name) <= MaxSymbol {
		return name
	}
	n := MaxSymbol
	for n > MaxSymbol-utf8.UTFMax && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n] + "…"
}

// resolve fills a site's symbol for the file offset off (Offset and
// BuildID included). An offset outside every PT_LOAD segment, or one no
// function holds, gets no symbol.
func (e *elfFile) resolve(off uint64) Site {
	s := Site{BuildID: e.buildID, Offset: off}
	if _, va, ok := e.vaddr(off); ok {
		if name, symOff, ok := e.symbol(va); ok {
			s.Symbol = strings.Clone(cutSymbol(name)) // not the whole names table, for a caller that keeps the site
			s.SymbolOffset = symOff
		}
	}
	return s
}
