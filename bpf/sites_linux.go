//go:build linux && (amd64 || arm64)

package bpf

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"golang.org/x/sys/unix"
)

// hostLibDirs are where the host's own verbs libraries are looked for at
// Open, so that a process started later gets a site from its first create
// when it maps one of them.
var hostLibDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/local/lib",
}

// maxScanned bounds the processes remembered as scanned; the set is emptied
// when full (a process scanned again finds its libraries attached).
const maxScanned = 4096

// libKey identifies a library file as uprobes do: by the inode the mapping
// holds (maps shows the underlying file's device and inode, also for a file
// of an overlayfs container image), so each file gets its uprobes once
// however many processes, containers and paths reach it.
type libKey struct {
	major, minor uint32
	ino          uint64
}

// sites attaches the creation-site uprobes to library files.
type sites struct {
	log        *slog.Logger
	procRoot   string
	entry, ret *ebpf.Program

	mu      sync.Mutex
	closed  bool
	files   map[libKey]bool // attached (true) or failed (false)
	scanned map[uint32]bool // processes whose maps were read
	links   []link.Link
	paths   []string
	err     error
}

// openSites loads the uprobe programs. It never fails: without them,
// Sites().Err says why.
func openSites(log *slog.Logger, l *loader, procRoot string) *sites {
	s := &sites{log: log, procRoot: procRoot, files: map[libKey]bool{}, scanned: map[uint32]bool{}}
	progs, err := l.load("uprobe_lib_entry", "uretprobe_lib_return")
	if err != nil {
		s.fail(fmt.Errorf("bpf: load uprobes: %w", err))
		return s
	}
	s.entry, s.ret = progs["uprobe_lib_entry"], progs["uretprobe_lib_return"]
	return s
}

// fail records why some sites are missing: logged at Warn the first time,
// at Debug after.
func (s *sites) fail(err error) {
	if s.err == nil {
		s.err = err
		s.log.Warn("creation sites missing", "err", err)
		return
	}
	s.log.Debug("creation sites missing", "err", err)
}

// attachHost attaches the host's own verbs libraries (hostLibDirs, under
// the root of pid 1 and under /), then those every process maps.
func (s *sites) attachHost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entry == nil {
		return
	}
	for _, root := range []string{filepath.Join(s.procRoot, "1", "root"), "/"} {
		for _, dir := range hostLibDirs {
			for _, pattern := range []string{"libibverbs.so*", "librdmacm.so*"} {
				matches, _ := filepath.Glob(filepath.Join(root, dir, pattern)) // only a bad pattern fails
				// The longest name first: the file itself, which its
				// symbolic links (libibverbs.so.1) are found to be.
				slices.SortFunc(matches, func(a, b string) int { return len(b) - len(a) })
				for _, m := range matches {
					s.attachPath(m, filepath.Join(dir, filepath.Base(m)))
				}
			}
		}
	}
	entries, err := os.ReadDir(s.procRoot)
	if err != nil {
		s.fail(fmt.Errorf("bpf: list processes: %w", err))
		return
	}
	for _, e := range entries {
		if pid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			_, _ = s.scanLocked(uint32(pid)) // a process that exited meanwhile has nothing to attach
		}
	}
}

// attachPath attaches a library found by path on the host (a symbolic
// link to it is the same file).
func (s *sites) attachPath(path, shown string) {
	var st unix.Stat_t
	lib := verbsLibrary(filepath.Base(path))
	if lib == "" || unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	if _, err := s.attachFile(libKey{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}, lib, path, shown); err != nil {
		s.fail(err)
	}
}

// scan attaches the verbs libraries process pid maps, unless it was
// scanned before and again is false.
func (s *sites) scan(pid uint32, again bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, os.ErrClosed
	}
	if s.entry == nil || !again && s.scanned[pid] {
		return 0, nil
	}
	return s.scanLocked(pid)
}

// scanLocked reads /proc/PID/maps and attaches each verbs library mapped
// there that has no uprobes yet: opened through /proc/PID/map_files (the
// mapped file itself, also when deleted or in another mount namespace),
// else through /proc/PID/root. It returns how many files it attached.
func (s *sites) scanLocked(pid uint32) (int, error) {
	if len(s.scanned) >= maxScanned {
		clear(s.scanned)
	}
	s.scanned[pid] = true
	dir := filepath.Join(s.procRoot, strconv.FormatUint(uint64(pid), 10))
	b, err := os.ReadFile(filepath.Join(dir, "maps"))
	if err != nil {
		return 0, fmt.Errorf("bpf: read maps of pid %d: %w", pid, err)
	}
	if !bytes.Contains(b, []byte("/libibverbs.so")) && !bytes.Contains(b, []byte("/librdmacm.so")) {
		return 0, nil
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, procmaps.LineMax)
	for sc.Scan() {
		m, ok := procmaps.Parse(sc.Bytes())
		if !ok || m.Inode == 0 {
			continue
		}
		lib := verbsLibrary(filepath.Base(strings.TrimSuffix(m.Path, " (deleted)")))
		key := libKey{m.Major, m.Minor, m.Inode}
		if lib == "" || s.files[key] {
			continue
		}
		open := filepath.Join(dir, "map_files", m.MapFilesName())
		var err error
		if _, err = os.Stat(open); err != nil && strings.HasSuffix(m.Path, " (deleted)") {
			err = fmt.Errorf("bpf: open %s of pid %d: %w", m.Path, pid, err)
		} else {
			if err != nil {
				open = filepath.Join(dir, "root", m.Path)
			}
			var attached bool
			if attached, err = s.attachFile(key, lib, open, m.Path); attached {
				n++
			}
		}
		if err == nil {
			continue
		}
		// A process that exited meanwhile took its paths with it: the
		// library is not at fault, and the next process mapping it
		// tries again.
		if _, gone := os.Stat(dir); gone != nil {
			delete(s.files, key)
			return n, fmt.Errorf("bpf: attach libraries of pid %d: %w", pid, gone)
		}
		s.files[key] = false
		s.fail(err)
	}
	return n, nil
}

// attachFile attaches the uprobes of lib's functions to the file at path
// unless the file (key) was tried before, and reports whether it did.
// shown is its name for Sites. A file that fails is not tried again.
func (s *sites) attachFile(key libKey, lib, path, shown string) (bool, error) {
	if _, tried := s.files[key]; tried {
		return false, nil
	}
	s.files[key] = false
	links, err := s.attachFuncs(lib, path)
	if err != nil {
		return false, fmt.Errorf("bpf: attach uprobes to %s: %w", shown, err)
	}
	s.files[key] = true
	s.links = append(s.links, links...)
	s.paths = append(s.paths, shown)
	s.log.Debug("uprobes attached", "library", shown, "uprobes", len(links))
	return true, nil
}

// attachFuncs attaches an entry and a return uprobe to each of lib's
// QP-creating functions in the file at path, each entry with the
// function's id as its cookie. Nothing stays attached on an error.
func (s *sites) attachFuncs(lib, path string) ([]link.Link, error) {
	funcs, err := libFuncOffsets(path, lib)
	if err != nil {
		return nil, err
	}
	if len(funcs) == 0 {
		return nil, errors.New("none of its QP-creating functions in .dynsym")
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	for _, f := range funcs {
		opts := &link.UprobeOptions{Address: f.offset, Cookie: uint64(f.id)}
		entry, err := ex.Uprobe(f.name, s.entry, opts)
		if err != nil {
			closeLinks(links)
			return nil, err
		}
		links = append(links, entry)
		ret, err := ex.Uretprobe(f.name, s.ret, opts)
		if err != nil {
			closeLinks(links)
			return nil, err
		}
		links = append(links, ret)
	}
	return links, nil
}

func closeLinks(links []link.Link) {
	for _, l := range links {
		l.Close()
	}
}

// funcOffset is a library function's entry as a file offset (what uprobes
// take).
type funcOffset struct {
	libFunc
	offset uint64
}

// libFuncOffsets finds lib's QP-creating functions in the ELF file at
// path: every defined function symbol of .dynsym with one of their names,
// each symbol version (ibv_create_qp@IBVERBS_1.0 and @@IBVERBS_1.1 are two
// functions), once per address.
func libFuncOffsets(path, lib string) ([]funcOffset, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	var out []funcOffset
	for _, sym := range syms {
		if elf.ST_TYPE(sym.Info) != elf.STT_FUNC || sym.Section == elf.SHN_UNDEF || sym.Value == 0 {
			continue
		}
		i := slices.IndexFunc(libFuncs, func(lf libFunc) bool { return lf.lib == lib && lf.name == sym.Name })
		if i < 0 {
			continue
		}
		off, ok := fileOffset(f, sym.Value)
		if !ok || slices.ContainsFunc(out, func(fo funcOffset) bool { return fo.offset == off }) {
			continue
		}
		out = append(out, funcOffset{libFuncs[i], off})
	}
	return out, nil
}

// fileOffset turns a link-time address of code into its file offset
// through the executable PT_LOAD segment that holds it.
func fileOffset(f *elf.File, vaddr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// report returns what Sites reports.
func (s *sites) report() Sites {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Sites{Libraries: slices.Clone(s.paths), Err: s.err}
}

// close detaches every uprobe and unloads the programs.
func (s *sites) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	for _, p := range []*ebpf.Program{s.entry, s.ret} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}
