package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmatool/rdmatool/internal/procmaps"
)

// Kernel symbolizes kernel addresses through /proc/kallsyms, read once and
// again when the loaded modules change (Refresh). Module text is bounded by
// the module's range in /proc/modules, so an address in a module loaded
// after the read is not named after the function before it.
//
// BPF programs and trampolines come and go without a module changing (an
// fentry attached to a function moves its trampoline), and a read of
// kallsyms while they do can miss one: an address no symbol holds makes
// Kernel read kallsyms again, at most once every missReadEvery, and once
// every missRetry for the same address.
//
// A Kernel is safe for concurrent use.
type Kernel struct {
	procRoot string
	now      func() time.Time

	mu  sync.Mutex // held while reading the files again, and for the below
	tab atomic.Pointer[kallsyms]
	// lastMissRead is when kallsyms was last read for an address not in
	// it; missed holds the addresses a read for them did not name, and
	// when.
	lastMissRead time.Time
	missed       map[uint64]time.Time
}

const (
	// missReadEvery bounds how often an unnamed address reads kallsyms
	// again (a read costs 70 ms of a CPU with 120k symbols).
	missReadEvery = time.Second
	// missRetry is how long an address a read did not name stays unnamed
	// before another read may be tried for it (the memory of a BPF
	// program freed is taken by another in time).
	missRetry = time.Minute
	// maxMissed bounds missed; past it, it starts over.
	maxMissed = 4096
)

// ksym is one kallsyms symbol; its name is names[name : name+nameLen].
// Symbols that are not text are kept (without a name) as the end of the
// text before them.
type ksym struct {
	addr    uint64
	name    uint32
	nameLen uint16
	module  uint16 // index in kallsyms.modules; 0 is vmlinux
	text    bool
	rank    uint8 // ksymRank
}

// kallsyms is one reading of /proc/kallsyms and /proc/modules.
type kallsyms struct {
	syms    []ksym // sorted by address, one per address
	names   string
	modules []string // modules[0] is "" (vmlinux)
	// ends[i] is the end of modules[i]'s memory from /proc/modules (its
	// text base plus its size), 0 when unknown.
	ends []uint64
	// loaded is /proc/modules' name, size and address of each module, to
	// tell when modules were loaded or unloaded since.
	loaded string
}

// maxKsymName bounds a kallsyms name (KSYM_NAME_LEN is 512).
const maxKsymName = 1 << 16

// NewKernel reads /proc/kallsyms and /proc/modules under procRoot
// (normally /proc). It returns an error wrapping ErrRestricted when
// kallsyms shows every address as zero: without CAP_SYSLOG under
// kernel.kptr_restrict=1, or under kptr_restrict=2.
func NewKernel(procRoot string) (*Kernel, error) {
	k := &Kernel{procRoot: procRoot, now: time.Now}
	loaded, err := readModules(filepath.Join(procRoot, "modules"))
	if err != nil {
		return nil, err
	}
	t, err := k.read(loaded)
	if err != nil {
		return nil, err
	}
	k.tab.Store(t)
	return k, nil
}

// Site returns the kernel function that holds addr, an instruction
// address (a probe's own address, the first frame of a stack), and addr's
// offset in it. An address no function holds gets a Site with only Kernel
// set and an error wrapping ErrNoSymbol; before saying so, Site reads
// kallsyms again if the loaded modules changed (Refresh) or, as Kernel
// says, for an address not yet tried.
func (k *Kernel) Site(addr uint64) (Site, error) {
	return k.lookup(addr, false)
}

// Frame returns the kernel function that made the call returning to ret, a
// return address from a kernel stack (every frame of bpf_get_stackid's but
// the first): the function is the one holding ret-1, which is the right one
// even when the call was its last instruction, and the offset is ret's, as
// the kernel's own stack traces print it (%pB). Errors are Site's.
func (k *Kernel) Frame(ret uint64) (Site, error) {
	return k.lookup(ret, true)
}

func (k *Kernel) lookup(addr uint64, ret bool) (Site, error) {
	a := addr
	if ret && a > 0 {
		a--
	}
	t := k.tab.Load()
	s, ok := t.site(a)
	if !ok {
		if changed, err := k.refresh(t, a, true); err == nil && changed {
			s, ok = k.tab.Load().site(a)
		}
	}
	if !ok {
		return Site{Kernel: true}, fmt.Errorf("symbolize: kernel address %#x: %w", addr, ErrNoSymbol)
	}
	if ret && a != addr {
		s.SymbolOffset++
	}
	return s, nil
}

// Refresh reads kallsyms again if /proc/modules lists other modules, or
// other addresses, than when it was last read, and says whether it did.
// Site and Frame do the same on an address they cannot name (and, as
// Kernel says, may read kallsyms for it with the same modules); a caller
// that knows modules changed (or on a period) may call it too: it costs a
// read of /proc/modules when nothing changed. An unloaded module whose
// memory another module took is only seen here.
func (k *Kernel) Refresh() (bool, error) {
	return k.refresh(k.tab.Load(), 0, false)
}

// refresh reads kallsyms again unless t is outdated already (another
// refresh replaced it) or the modules are still those t was read with;
// with miss, an address t does not name, it reads it again with the same
// modules too, unless a read for a miss was less than missReadEvery ago
// or a read for addr did not name it less than missRetry ago.
func (k *Kernel) refresh(t *kallsyms, addr uint64, miss bool) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur := k.tab.Load(); cur != t {
		return true, nil
	}
	loaded, err := readModules(filepath.Join(k.procRoot, "modules"))
	if err != nil {
		return false, err
	}
	now := k.now()
	if loaded.sig == t.loaded {
		if !miss || now.Sub(k.lastMissRead) < missReadEvery {
			return false, nil
		}
		if at, ok := k.missed[addr]; ok && now.Sub(at) < missRetry {
			return false, nil
		}
	}
	nt, err := k.read(loaded)
	if err != nil {
		return false, err
	}
	k.tab.Store(nt)
	if miss {
		k.lastMissRead = now
		if _, ok := nt.site(addr); ok {
			delete(k.missed, addr)
		} else {
			if k.missed == nil || len(k.missed) >= maxMissed {
				k.missed = map[uint64]time.Time{}
			}
			k.missed[addr] = now
		}
	}
	return true, nil
}

// read reads kallsyms and bounds its modules with loaded.
func (k *Kernel) read(loaded modules) (*kallsyms, error) {
	name := filepath.Join(k.procRoot, "kallsyms")
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("symbolize: read %s: %w", name, err)
	}
	defer f.Close() //nolint:errcheck // read only
	t, err := parseKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("symbolize: read %s: %w", name, err)
	}
	t.loaded = loaded.sig
	t.ends = make([]uint64, len(t.modules))
	for i, m := range t.modules {
		t.ends[i] = loaded.ends[m]
	}
	return t, nil
}

// parseKallsyms parses /proc/kallsyms lines:
//
//	ffffffffc0a01000 t nvmet_rdma_queue_connect	[nvmet_rdma]
//
// (address, nm type, name, and a module in brackets after a tab). Lines
// that do not parse are skipped.
func parseKallsyms(r io.Reader) (*kallsyms, error) {
	t := &kallsyms{modules: []string{""}}
	modIndex := map[string]uint16{"": 0}
	var names strings.Builder
	var raw []ksym
	nonzero := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxKsymName+128)
	for sc.Scan() {
		line := sc.Bytes()
		addrF, rest, ok1 := bytes.Cut(line, []byte{' '})
		typ, rest, ok2 := bytes.Cut(rest, []byte{' '})
		addr, ok3 := procmaps.ParseHex(addrF)
		if !ok1 || !ok2 || !ok3 || len(typ) != 1 {
			continue
		}
		name, mod, _ := bytes.Cut(rest, []byte{'\t'})
		if len(name) == 0 || len(name) >= maxKsymName || names.Len()+len(name) > 1<<32-1 {
			continue
		}
		nonzero = nonzero || addr != 0
		s := ksym{addr: addr, text: isText(typ[0], name), rank: 3}
		if s.text {
			s.rank = ksymRank(typ[0])
		}
		if m, ok := bytes.CutPrefix(mod, []byte{'['}); ok {
			m = bytes.TrimSuffix(m, []byte{']'})
			idx, seen := modIndex[string(m)]
			if !seen {
				if len(t.modules) > 1<<16-1 {
					continue
				}
				idx = uint16(len(t.modules))
				t.modules = append(t.modules, string(m))
				modIndex[string(m)] = idx
			}
			s.module = idx
		}
		if s.text {
			s.name, s.nameLen = uint32(names.Len()), uint16(len(name))
			names.Write(name)
		}
		raw = append(raw, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, errors.New("no symbols")
	}
	if !nonzero {
		return nil, ErrRestricted
	}
	slices.SortStableFunc(raw, func(a, b ksym) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return int(a.rank) - int(b.rank)
	})
	t.syms = make([]ksym, 0, len(raw))
	for _, s := range raw {
		n := len(t.syms)
		if n > 0 && (t.syms[n-1].addr == s.addr || !s.text && !t.syms[n-1].text) {
			continue // an alias, or the end of text marked already
		}
		t.syms = append(t.syms, s)
	}
	t.names = strings.Clone(names.String()) // without the builder's spare capacity
	return t, nil
}

// isText says whether a kallsyms entry is a function: types t, T and w, W
// (weak functions), but not the markers where vmlinux's text sections end.
func isText(typ byte, name []byte) bool {
	switch typ {
	case 't', 'T', 'w', 'W':
		return string(name) != "_etext" && string(name) != "_einittext"
	}
	return false
}

// ksymRank orders the functions at one address by type, best first: a
// global function, a local one, a weak one; what is not text ranks 3, after
// them.
func ksymRank(typ byte) uint8 {
	switch typ {
	case 'T':
		return 0
	case 't':
		return 1
	case 'W', 'w':
		return 2
	}
	return 3
}

// site returns the function holding addr.
func (t *kallsyms) site(addr uint64) (Site, bool) {
	i, _ := slices.BinarySearchFunc(t.syms, addr, func(s ksym, a uint64) int {
		if s.addr <= a {
			return -1
		}
		return 1
	})
	i--
	if i < 0 || !t.syms[i].text {
		return Site{}, false
	}
	s := t.syms[i]
	if end := t.ends[s.module]; end != 0 && addr >= end {
		return Site{}, false // in a module loaded since, past this one
	}
	return Site{
		Kernel: true,
		// A copy, so that a caller keeping the site does not keep the
		// whole names table after a refresh.
		Symbol:       strings.Clone(t.names[s.name : s.name+uint32(s.nameLen)]),
		SymbolOffset: addr - s.addr,
		Module:       t.modules[s.module],
	}, true
}

// modules is what /proc/modules says: each module's end (text base plus
// size; none when the addresses read zero), and sig, its names, sizes and
// addresses, which change when a module is loaded or unloaded.
type modules struct {
	ends map[string]uint64
	sig  string
}

// readModules reads /proc/modules; a kernel without module support has
// none, which is no error.
//
//	nvmet_rdma 49152 0 - Live 0xffffffffc0b5e000
func readModules(name string) (modules, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return modules{}, nil
	}
	if err != nil {
		return modules{}, fmt.Errorf("symbolize: read %s: %w", name, err)
	}
	mods := modules{ends: map[string]uint64{}}
	var sig strings.Builder
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		size, err1 := strconv.ParseUint(f[1], 10, 64)
		base, err2 := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if base != 0 && base+size > base {
			mods.ends[f[0]] = base + size
		}
		fmt.Fprintf(&sig, "%s %d %#x\n", f[0], size, base)
	}
	mods.sig = sig.String()
	return mods, nil
}
