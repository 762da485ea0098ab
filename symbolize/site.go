package symbolize

import (
	"errors"
	"path"
	"strconv"
)

// Site is where an address lies: in user space, a place in a mapped file; in
// the kernel, a function of vmlinux or of a module. It holds no address of
// its own, so one call site in every process running the same file is the
// same Site (Path aside, when containers name their copies differently), and
// Site is comparable: it can key a map that interns sites.
//
// A Site returned with an error holds what was found before the error: a
// Path and Offset without a BuildID when the file could not be read, nothing
// when the address is in no mapping.
type Site struct {
	// Kernel is true for a kernel site (Kernel.Site, Kernel.Frame); Path,
	// BuildID and Offset are then empty.
	Kernel bool
	// Path is the mapped file as /proc/PID/maps names it: the path inside
	// the process's mount namespace, with " (deleted)" when the file was
	// removed after it was mapped. For an address in a mapping with no file
	// it is what maps shows there ("[heap]", "[anon:name]", "" for plain
	// anonymous memory).
	Path string
	// BuildID is the file's GNU build ID (its NT_GNU_BUILD_ID note) in
	// lower-case hex, as readelf -n prints it; "" when the file has none.
	BuildID string
	// Offset is the address's offset in the file (what addr2line -e Path
	// takes, after adding the offset's PT_LOAD vaddr) for a user site.
	Offset uint64
	// Symbol is the function that holds the address: from .symtab, else
	// .dynsym, for a user site (at most MaxSymbol bytes of it, then "…");
	// from /proc/kallsyms for a kernel one. ""
	// when no function symbol covers it (a stripped file, a static
	// function of a shared library without .symtab).
	Symbol string
	// SymbolOffset is the address's offset from the start of Symbol.
	SymbolOffset uint64
	// Module is the kernel module that holds a kernel site ("nvmet_rdma"),
	// as kallsyms names it in brackets ("bpf" for BPF programs); "" for
	// vmlinux and for user sites.
	Module string
}

// String is a short form of the site: "qpwork!leak_qps+0x4c" (the file's
// base name, the function and the offset in it), or for a file without a
// symbol there "ibv_rc_pingpong+0x1a2c (build id 3f0e…)" (the base name,
// the file offset and the whole build ID), or for a kernel site
// "nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]" (no brackets for
// vmlinux). A site that names no file or function is "?" or what maps shows
// there ("[heap]"). The names are not escaped: text output passes String
// through quote.Text.
func (s Site) String() string {
	return string(s.appendTo(make([]byte, 0, 64)))
}

func (s Site) appendTo(b []byte) []byte {
	switch {
	case s.Kernel:
		if s.Symbol == "" {
			return append(b, '?')
		}
		b = appendSymbol(b, s.Symbol, s.SymbolOffset)
		if s.Module != "" {
			b = append(b, " ["...)
			b = append(b, s.Module...)
			b = append(b, ']')
		}
		return b
	case s.Path == "":
		return append(b, '?')
	case s.Path[0] != '/': // [heap], [anon:name], a memfd's name
		return append(b, s.Path...)
	}
	b = append(b, path.Base(s.Path)...)
	if s.Symbol != "" {
		b = append(b, '!')
		return appendSymbol(b, s.Symbol, s.SymbolOffset)
	}
	b = append(b, "+0x"...)
	b = strconv.AppendUint(b, s.Offset, 16)
	if s.BuildID != "" {
		b = append(b, " (build id "...)
		b = append(b, s.BuildID...)
		b = append(b, ')')
	}
	return b
}

func appendSymbol(b []byte, sym string, off uint64) []byte {
	b = append(b, sym...)
	b = append(b, "+0x"...)
	return strconv.AppendUint(b, off, 16)
}

// Errors that say why an address has no site, or only part of one. The
// errors returned wrap them (errors.Is), with the pid, the address and the
// file named.
var (
	// ErrNoProcess: the process has exited (its /proc entry is gone, or it
	// is a zombie with no mappings left).
	ErrNoProcess = errors.New("no such process")
	// ErrNoMapping: no mapping of the process holds the address.
	ErrNoMapping = errors.New("address in no mapping")
	// ErrNoFile: the mapping that holds the address has no file: anonymous
	// memory (JIT code among it), the heap, the stack, the vDSO.
	ErrNoFile = errors.New("mapping has no file")
	// ErrFileReplaced: the mapped file was deleted, or its path names
	// another file now (an upgrade replaced it), and the mapped one could
	// not be opened through /proc/PID/map_files.
	ErrFileReplaced = errors.New("mapped file deleted or replaced")
	// ErrRestricted: /proc/kallsyms shows every address as zero, as it does
	// for a reader without CAP_SYSLOG or under kernel.kptr_restrict=2.
	ErrRestricted = errors.New("kernel addresses hidden (kallsyms reads zero)")
	// ErrNoSymbol: no kernel function holds the address, even after
	// reading kallsyms again when the loaded modules changed.
	ErrNoSymbol = errors.New("no kernel symbol holds the address")
)
