package symbolize

import (
	"container/list"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sync/singleflight"

	"github.com/rdmatool/rdmatool/internal/procmaps"
	"github.com/rdmatool/rdmatool/internal/quote"
)

// maxFiles is how many parsed ELF files a User keeps, the least recently
// used going first. The sites the probes ask for are the callers of the
// verbs libraries: the RDMA applications and middleware (libfabric, UCX,
// NCCL) of the host, a few distinct builds even across many containers,
// which 32 holds with room. A file costs 24 bytes and its name per function
// symbol (a large C++ application of 100,000 functions, about 5 MB), so
// the bound also holds memory to tens of MB for ordinary binaries.
const maxFiles = 32

// maxSitesPerFile bounds the sites cached per file: QPs are created from a
// handful of call sites, and an address stream that is not that (a caller
// symbolizing every frame of deep stacks) stops being cached past it.
const maxSitesPerFile = 1024

// maxIdents bounds the index from file identity to parsed file; it is
// emptied when full (every process of one image has the same identity, so
// it holds one entry per distinct file mapped).
const maxIdents = 1024

// maxRecentPIDs and maxRecentPerPID bound the mappings remembered per
// process (recentMapping): the processes creating QPs on a host, and the
// files their QPs are created from (the application, a middleware library).
// The table is emptied when full; a process's oldest mapping goes first.
const (
	maxRecentPIDs   = 4096
	maxRecentPerPID = 16
)

// User symbolizes addresses of user processes: it finds the address's
// mapping in /proc/PID/maps, opens the mapped file as the process sees it
// and reads the file's build ID, segments and function symbols. Each file
// is parsed once (see maxFiles) and each site resolved once per file. A
// call on a cached site stats the mapped file through map_files (nothing,
// when CallSite is given the mapping it found before), and reads maps only
// for a mapping not seen before (or through /proc/PID/root).
//
// A User is safe for concurrent use.
type User struct {
	procRoot string
	// mapFiles opens files through /proc/PID/map_files first; tests turn it
	// off to exercise /proc/PID/root.
	mapFiles bool

	parsing singleflight.Group

	mu     sync.Mutex
	lru    *list.List                 // *elfFile, most recently used first
	files  map[string]*list.Element   // by elfFile.key
	idents map[fileIdent]string       // a file's identity to its elfFile.key
	recent map[uint32][]recentMapping // by pid: mappings found through map_files
}

// recentMapping is a mapping whose file was found through map_files, and
// that file's identity.
type recentMapping struct {
	m  mapping
	id fileIdent
}

// fileIdent is what stat says of a file: it tells a file that changed or
// was replaced (a new inode, size or mtime) from the one parsed.
type fileIdent struct {
	dev, ino     uint64
	size, mtimeN int64
}

// NewUser returns a User reading processes under procRoot (normally /proc).
func NewUser(procRoot string) *User {
	return &User{
		procRoot: procRoot,
		mapFiles: true,
		lru:      list.New(),
		files:    map[string]*list.Element{},
		idents:   map[fileIdent]string{},
		recent:   map[uint32][]recentMapping{},
	}
}

// Site returns the site of addr, an instruction address in process pid (a
// thread id works as well): the mapped file, its build ID, the address's
// file offset and the function symbol holding it.
//
// On an error the Site holds what was found (see Site), and the error wraps
// ErrNoProcess, ErrNoMapping, ErrNoFile or ErrFileReplaced, or the error of
// opening or reading the file (os.ErrPermission, os.ErrNotExist). A file
// that is not ELF is an error; an ELF file without symbols is not (the Site
// has no Symbol).
func (u *User) Site(pid uint32, addr uint64) (Site, error) {
	return u.site(pid, addr, false, procmaps.Ident{})
}

// CallSite returns the site of the call instruction that precedes the
// return address ret in process pid: what a uprobe reads on a function's
// entry ([sp] on x86, the link register on arm64) names its caller, and the
// Site names the call itself, as objdump -d shows it. On arm64 the call is
// the 4 bytes before ret; on x86 the file's bytes before ret are decoded as
// a call (see callLen). Where no call is recognised the Site is that of
// ret-1, which still lies in the calling function.
//
// seen, when not zero, is the mapping that held ret when the call began:
// where it is one of pid's that an earlier call found (the same start,
// offset, device and inode), /proc is not read at all.
//
// Errors are Site's.
func (u *User) CallSite(pid uint32, ret uint64, seen procmaps.Ident) (Site, error) {
	return u.site(pid, ret, true, seen)
}

func (u *User) site(pid uint32, addr uint64, call bool, seen procmaps.Ident) (Site, error) {
	dir := filepath.Join(u.procRoot, strconv.FormatUint(uint64(pid), 10))
	m, name, id, partial, err := u.locate(dir, pid, addr, seen)
	if err != nil {
		return partial, err
	}
	off := partial.Offset
	req := siteReq{off: off, call: call}
	u.mu.Lock()
	e := u.byIdent(id)
	if e != nil {
		s, ok := e.sites[req]
		u.mu.Unlock()
		if ok {
			s.Path = m.Path
			return s, nil
		}
	} else {
		u.mu.Unlock()
	}

	var f *os.File
	if e == nil || call && e.notELF == nil { // to parse it, or to read the call before addr
		if f, err = openFile(name); err != nil {
			return partial, u.fileErr(dir, pid, m, err)
		}
		defer f.Close() //nolint:errcheck // read only
	}
	if e == nil {
		e = u.load(f, id)
	}
	if e.notELF != nil {
		return partial, fmt.Errorf("symbolize: read ELF %s of pid %d: %w", quote.String(m.Path), pid, e.notELF)
	}
	var s Site
	if call {
		s = e.callSite(f, off)
	} else {
		s = e.resolve(off)
	}
	u.mu.Lock()
	if len(e.sites) < maxSitesPerFile {
		e.sites[req] = s
	}
	u.mu.Unlock()
	s.Path = m.Path
	return s, nil
}

// locate finds the mapping that holds addr, and the file it maps: the name
// to open it by and its identity. On an error, partial is what is known.
func (u *User) locate(dir string, pid uint32, addr uint64, seen procmaps.Ident) (m mapping, name string, id fileIdent, partial Site, err error) {
	if m, name, id, ok := u.recentMapping(dir, pid, addr, seen); ok {
		return m, name, id, Site{Path: m.Path, Offset: addr - m.Start + m.Offset}, nil
	}
	if m, err = u.mapping(dir, pid, addr); err != nil {
		return mapping{}, "", fileIdent{}, Site{}, err
	}
	if !m.HasFile() {
		what := m.Path
		if what == "" {
			what = "anonymous memory"
		}
		return m, "", fileIdent{}, Site{Path: m.Path}, fmt.Errorf("symbolize: pid %d address %#x in %s: %w", pid, addr, quote.String(what), ErrNoFile)
	}
	partial = Site{Path: m.Path, Offset: addr - m.Start + m.Offset}
	name, id, viaMapFiles, err := u.stat(dir, pid, m)
	if err != nil {
		return m, "", fileIdent{}, partial, err
	}
	if viaMapFiles {
		u.noteMapping(pid, m, id)
	}
	return m, name, id, partial, nil
}

// mapping returns the mapping of the process in dir that holds addr.
func (u *User) mapping(dir string, pid uint32, addr uint64) (mapping, error) {
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return mapping{}, fmt.Errorf("symbolize: pid %d: %w", pid, ErrNoProcess)
		}
		return mapping{}, fmt.Errorf("symbolize: read maps of pid %d: %w", pid, err)
	}
	defer f.Close() //nolint:errcheck // read only
	m, found, lines, err := findMapping(f, addr)
	switch {
	case errors.Is(err, syscall.ESRCH) || err == nil && lines == 0:
		return mapping{}, fmt.Errorf("symbolize: pid %d: %w", pid, ErrNoProcess)
	case err != nil:
		return mapping{}, fmt.Errorf("symbolize: read maps of pid %d: %w", pid, err)
	case !found:
		return mapping{}, fmt.Errorf("symbolize: pid %d address %#x: %w", pid, addr, ErrNoMapping)
	}
	return m, nil
}

// stat finds the file m maps as the process sees it and says what it is:
// through /proc/PID/map_files (the mapped file itself, even deleted or in
// another mount namespace; following it needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE), else through /proc/PID/root and m's path (the
// process's root and mount namespace; the file found must have the mapped
// inode).
func (u *User) stat(dir string, pid uint32, m mapping) (name string, id fileIdent, viaMapFiles bool, err error) {
	if u.mapFiles {
		name := mapFilesName(dir, m)
		if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() {
			return name, identOf(fi), true, nil
		}
	}
	p, deleted := strings.CutSuffix(m.Path, " (deleted)")
	if deleted || !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fileIdent{}, false, fmt.Errorf("symbolize: open %s of pid %d: %w", quote.String(m.Path), pid, ErrFileReplaced)
	}
	name = filepath.Join(dir, "root", p)
	fi, err := os.Stat(name)
	if err != nil {
		return "", fileIdent{}, false, u.fileErr(dir, pid, m, err)
	}
	if id = identOf(fi); !fi.Mode().IsRegular() || id.ino != m.Inode {
		return "", fileIdent{}, false, fmt.Errorf("symbolize: open %s of pid %d: %w", quote.String(m.Path), pid, ErrFileReplaced)
	}
	return name, id, false, nil
}

// mapFilesName is m's entry in the process's map_files directory.
func mapFilesName(dir string, m mapping) string {
	return filepath.Join(dir, "map_files", m.MapFilesName())
}

// recentMapping returns a mapping of pid that held an address asked for
// before and holds addr, if its map_files entry still exists and names the
// same file: then maps need not be read, which costs more the more
// mappings the process has. A mapping unmapped, split or replaced since
// has no such entry, or one with another file. Once the process has exited
// the mapping is returned without a name to open: the sites resolved in
// its file before still resolve (the last creates of a process that exits
// right after them). A mapping the probe saw (seen) that is the one found
// before is taken without the stat: the probe read it when the call began.
func (u *User) recentMapping(dir string, pid uint32, addr uint64, seen procmaps.Ident) (mapping, string, fileIdent, bool) {
	if !u.mapFiles {
		return mapping{}, "", fileIdent{}, false
	}
	u.mu.Lock()
	i := slices.IndexFunc(u.recent[pid], func(r recentMapping) bool { return addr >= r.m.Start && addr < r.m.End })
	var r recentMapping
	if i >= 0 {
		r = u.recent[pid][i]
	}
	u.mu.Unlock()
	if i < 0 {
		return mapping{}, "", fileIdent{}, false
	}
	name := mapFilesName(dir, r.m)
	if seen != (procmaps.Ident{}) && seen == r.m.Ident() {
		return r.m, name, r.id, true
	}
	if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() && identOf(fi) == r.id {
		return r.m, name, r.id, true
	}
	if processGone(dir) {
		// The process is gone, its mappings as they were: a site of the
		// file found before is known still (site's cache); no name opens
		// the file for one that is not.
		return r.m, "", r.id, true
	}
	u.mu.Lock()
	u.recent[pid] = slices.DeleteFunc(u.recent[pid], func(o recentMapping) bool { return o == r })
	u.mu.Unlock()
	return mapping{}, "", fileIdent{}, false
}

// processGone says whether the process in dir has exited: its directory
// is gone, or it is a zombie not reaped yet, whose maps is empty.
func processGone(dir string) bool {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, "maps"))
	return errors.Is(err, syscall.ESRCH) || err == nil && len(b) == 0
}

// noteMapping records a mapping of pid whose file was found through
// map_files with identity id, for recentMapping.
func (u *User) noteMapping(pid uint32, m mapping, id fileIdent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.recent[pid]; !ok && len(u.recent) >= maxRecentPIDs {
		clear(u.recent)
	}
	rs := u.recent[pid]
	if len(rs) >= maxRecentPerPID {
		rs = rs[1:]
	}
	u.recent[pid] = append(rs, recentMapping{m, id})
}

// fileErr is the error of a file that could not be opened: the process's
// when it has exited meanwhile.
func (u *User) fileErr(dir string, pid uint32, m mapping, err error) error {
	if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
		return fmt.Errorf("symbolize: pid %d: %w", pid, ErrNoProcess)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the /proc path says less than the mapped one
	}
	return fmt.Errorf("symbolize: open %s of pid %d: %w", quote.String(m.Path), pid, err)
}

// openFile opens a mapped file for reading without blocking on a FIFO put
// in its place.
func openFile(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func identOf(fi os.FileInfo) fileIdent {
	id := fileIdent{size: fi.Size(), mtimeN: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = st.Dev, st.Ino
	}
	return id
}

func (id fileIdent) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", id.dev, id.ino, id.size, id.mtimeN)
}

// load returns the parsed form of the ELF file f, from the cache when a
// file with its key (its build ID, symbol table sizes and segments) was
// parsed before, and records id as that file's identity. Concurrent loads
// of one key parse it once. A file that is not ELF is cached too, by its
// identity, with the error in notELF, so that it is not read again.
func (u *User) load(f *os.File, id fileIdent) *elfFile {
	ef, err := elf.NewFile(f)
	if err != nil {
		e := &elfFile{key: "file:" + id.String(), notELF: err}
		u.mu.Lock()
		defer u.mu.Unlock()
		e = u.put(e)
		u.remember(id, e.key)
		return e
	}
	bid := buildID(ef)
	key := fileKey(ef, bid, id.String())
	u.mu.Lock()
	e := u.get(key)
	u.mu.Unlock()
	if e == nil {
		v, _, _ := u.parsing.Do(key, func() (any, error) {
			e := parseELF(ef, key, bid)
			u.mu.Lock()
			defer u.mu.Unlock()
			return u.put(e), nil
		})
		e = v.(*elfFile)
	}
	u.mu.Lock()
	u.remember(id, key)
	u.mu.Unlock()
	return e
}

// get returns the cached file with key and marks it used; u.mu held.
func (u *User) get(key string) *elfFile {
	el := u.files[key]
	if el == nil {
		return nil
	}
	u.lru.MoveToFront(el)
	return el.Value.(*elfFile)
}

// put caches e, or returns the file cached under its key already, and
// drops the least recently used files beyond maxFiles; u.mu held.
func (u *User) put(e *elfFile) *elfFile {
	if old := u.get(e.key); old != nil {
		return old
	}
	u.files[e.key] = u.lru.PushFront(e)
	for u.lru.Len() > maxFiles {
		last := u.lru.Remove(u.lru.Back()).(*elfFile)
		delete(u.files, last.key)
	}
	return e
}

// byIdent returns the cached file with identity id; u.mu held.
func (u *User) byIdent(id fileIdent) *elfFile {
	key, ok := u.idents[id]
	if !ok {
		return nil
	}
	return u.get(key)
}

// remember records that the file with identity id has key; u.mu held.
func (u *User) remember(id fileIdent, key string) {
	if len(u.idents) >= maxIdents {
		clear(u.idents)
	}
	u.idents[id] = key
}

// callSite resolves the call instruction before the return address at file
// offset off of f (see CallSite).
func (e *elfFile) callSite(f io.ReaderAt, off uint64) Site {
	if l, ret, ok := e.vaddr(off); ok && off > l.off {
		n := min(maxCallLen, off-l.off)
		code := make([]byte, n)
		if _, err := f.ReadAt(code, int64(off-n)); err == nil {
			if cl := callLen(e, code, ret); cl > 0 && uint64(cl) <= n {
				return e.resolve(off - uint64(cl))
			}
		}
	}
	if off == 0 {
		return e.resolve(0)
	}
	return e.resolve(off - 1)
}
