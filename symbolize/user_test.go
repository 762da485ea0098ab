package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUserSitesAgainstObjdump runs qpwork built as a PIE, as a fixed-address
// executable and stripped, and holds the sites of create_qp's return
// addresses (a direct call and a call through a pointer) and of leak_qps to
// what objdump -d and readelf -n say of the file: the call instruction's
// function, offset in it and file offset, and the build ID. Files are
// opened through map_files and, in a second User, through /proc/PID/root.
// Each User serves all three files: the stripped copy has the PIE's build
// ID and must not get its symbols.
func TestUserSitesAgainstObjdump(t *testing.T) {
	dir := t.TempDir()
	pie := buildQPWork(t, dir, "qpwork-pie", "-fPIE", "-pie")
	nopie := buildQPWork(t, dir, "qpwork-nopie", "-fno-pie", "-no-pie")
	strip := stripped(t, pie, "qpwork-stripped")
	viaMapFiles, viaRoot := NewUser("/proc"), NewUser("/proc")
	viaRoot.mapFiles = false

	tests := []struct {
		name     string
		bin      string
		symbols  string // the file objdump reads functions from
		stripped bool
	}{
		{"PIE", pie, pie, false},
		{"non-PIE", nopie, nopie, false},
		{"stripped PIE", strip, pie, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			funcs := objdump(t, tt.symbols)
			id := readelfBuildID(t, tt.bin)
			q, ok := startQPWork(t, tt.bin)
			if !ok {
				t.Fatal("qpwork did not start")
			}
			bias := q.leakQP - funcs["leak_qps"].addr // 0 unless PIE
			// want is the site of the link-time address addr in function fn.
			want := func(fn string, addr uint64) (Site, string) {
				f := funcs[fn]
				s := Site{Path: tt.bin, BuildID: id, Offset: f.fileOff + addr - f.addr}
				if tt.stripped {
					return s, fmt.Sprintf("%s+%#x (build id %s)", filepath.Base(tt.bin), s.Offset, id)
				}
				s.Symbol, s.SymbolOffset = fn, addr-f.addr
				return s, fmt.Sprintf("%s!%s+%#x", filepath.Base(tt.bin), fn, s.SymbolOffset)
			}
			direct := callBefore(t, funcs["leak_qps"], q.ret-bias)
			indirect := callBefore(t, funcs["leak_qps_ex"], q.retEx-bias)
			t.Logf("calls: %#x %s; %#x %s", direct.addr, direct.text, indirect.addr, indirect.text)
			for _, u := range []*User{viaMapFiles, viaRoot} {
				lookups := []struct {
					what     string
					got      func() (Site, error)
					fn       string
					wantAddr uint64
				}{
					{"CallSite create_qp()", func() (Site, error) { return u.CallSite(q.pid, q.ret, procmaps.Ident{}) }, "leak_qps", direct.addr},
					{"CallSite create_qp_ex()", func() (Site, error) { return u.CallSite(q.pid, q.retEx, procmaps.Ident{}) }, "leak_qps_ex", indirect.addr},
					{"Site leak_qps", func() (Site, error) { return u.Site(q.pid, q.leakQP) }, "leak_qps", funcs["leak_qps"].addr},
					{"Site return address", func() (Site, error) { return u.Site(q.pid, q.ret) }, "leak_qps", q.ret - bias},
				}
				for _, l := range lookups {
					for range 2 { // parsed, then cached
						got, err := l.got()
						if err != nil {
							t.Fatalf("map_files %v: %s: %v", u.mapFiles, l.what, err)
						}
						wantSite, wantString := want(l.fn, l.wantAddr)
						if diff := cmp.Diff(wantSite, got); diff != "" {
							t.Errorf("map_files %v: %s (-want +got):\n%s", u.mapFiles, l.what, diff)
						}
						if got.String() != wantString {
							t.Errorf("map_files %v: %s: String() = %q, want %q", u.mapFiles, l.what, got.String(), wantString)
						}
					}
				}
			}
		})
	}
}

// TestUserLibc resolves an address in libc's getpid, found as a reader of
// /proc/PID/maps and libc's .dynsym would find it, to getpid: a shared
// library's dynamic symbols, where getpid is a weak alias of __getpid.
func TestUserLibc(t *testing.T) {
	q, ok := startQPWork(t, buildQPWork(t, t.TempDir(), "qpwork"))
	if !ok {
		t.Fatal("qpwork did not start")
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", q.pid))
	if err != nil {
		t.Fatal(err)
	}
	var libc string
	var lines [][]string
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) == 6 && strings.HasPrefix(filepath.Base(f[5]), "libc.so") {
			libc = f[5]
			lines = append(lines, f)
		}
	}
	if libc == "" {
		t.Skipf("qpwork maps no libc.so:\n%s", maps)
	}
	lib, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	syms, err := lib.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var getpid elf.Symbol
	for _, s := range syms {
		if s.Name == "getpid" && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			getpid = s
		}
	}
	if getpid.Value == 0 {
		t.Skipf("%s has no getpid in .dynsym", libc)
	}
	const into = 2 // bytes into getpid
	var fileOff uint64
	for _, p := range lib.Progs {
		if p.Type == elf.PT_LOAD && getpid.Value >= p.Vaddr && getpid.Value < p.Vaddr+p.Filesz {
			fileOff = getpid.Value - p.Vaddr + p.Off + into
		}
	}
	var addr uint64
	for _, f := range lines {
		rng := strings.Split(f[0], "-")
		start, end, pgoff := hexU(t, rng[0]), hexU(t, rng[1]), hexU(t, f[2])
		if fileOff >= pgoff && fileOff < pgoff+end-start {
			addr = start + fileOff - pgoff
		}
	}
	if addr == 0 {
		t.Fatalf("no mapping of %s holds file offset %#x:\n%s", libc, fileOff, maps)
	}
	got, err := NewUser("/proc").Site(q.pid, addr)
	if err != nil {
		t.Fatal(err)
	}
	want := Site{Path: libc, BuildID: readelfBuildID(t, libc), Offset: fileOff, Symbol: "getpid", SymbolOffset: into}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Site(getpid+%d) (-want +got):\n%s", into, diff)
	}
}

// TestUserMountNamespace runs qpwork in a mount namespace of its own where
// its path names another file (a bind mount of the fixed-address build over
// the PIE build's path) and wants the sites of the file it runs, not of the
// file at that path on the host, through map_files and through
// /proc/PID/root. It needs root to unshare.
func TestUserMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare -m and mount --bind")
	}
	needTools(t, "unshare", "mount")
	dir := t.TempDir()
	host := buildQPWork(t, dir, "qpwork", "-fPIE", "-pie")
	ours := buildQPWork(t, dir, "qpwork-ns", "-fno-pie", "-no-pie")
	script := fmt.Sprintf("mount --bind %s %s && exec %s", ours, host, host)
	q, ok := startQPWork(t, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	if !ok {
		t.Skip("unshare -m with a bind mount failed here (see the log)")
	}
	funcs := objdump(t, ours)
	call := callBefore(t, funcs["leak_qps"], q.ret)
	want := Site{
		Path:         host, // as the process sees it
		BuildID:      readelfBuildID(t, ours),
		Offset:       funcs["leak_qps"].fileOff + call.addr - funcs["leak_qps"].addr,
		Symbol:       "leak_qps",
		SymbolOffset: call.addr - funcs["leak_qps"].addr,
	}
	if hostID := readelfBuildID(t, host); hostID == want.BuildID {
		t.Fatalf("both builds have build ID %s", hostID)
	}
	for _, mapFiles := range []bool{true, false} {
		u := NewUser("/proc")
		u.mapFiles = mapFiles
		got, err := u.CallSite(q.pid, q.ret, procmaps.Ident{})
		if err != nil {
			t.Fatalf("map_files %v: %v", mapFiles, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("map_files %v: CallSite (-want +got):\n%s", mapFiles, diff)
		}
	}
}

// TestUserPartialSites holds what a fixture /proc gives for each way an
// address has no site, or only part of one.
func TestUserPartialSites(t *testing.T) {
	root := fixtureProc(t, map[string]string{
		"10/maps":                  "",
		"11/root/usr/bin/notelf":   "not an ELF file, though longer than an ELF header's ident",
		"11/root/usr/bin/replaced": "a file put in the mapped one's place",
	})
	ino := func(name string) uint64 {
		fi, err := os.Stat(filepath.Join(root, "11/root", name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	maps := fmt.Sprintf(`00400000-00401000 r-xp 00000000 fd:01 1234                               /usr/bin/gone
00500000-00501000 r-xp 00002000 fd:01 %d                               /usr/bin/notelf
00600000-00601000 r-xp 00000000 fd:01 %d                               /usr/bin/replaced
00700000-00701000 r-xp 00000000 fd:01 1234                               /usr/lib/libgone.so (deleted)
01000000-01021000 rw-p 00000000 00:00 0                                  [heap]
7f0000000000-7f0000001000 rwxp 00000000 00:00 0 
`, ino("usr/bin/notelf"), ino("usr/bin/replaced")+1)
	if err := os.WriteFile(filepath.Join(root, "11/maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		pid     uint32
		addr    uint64
		want    Site
		wantErr error
		wantMsg string // the error's text, or its start
	}{
		{"no process", 9, 0x400000, Site{}, ErrNoProcess, "symbolize: pid 9: no such process"},
		{"zombie", 10, 0x400000, Site{}, ErrNoProcess, ""},
		{"below every mapping", 11, 0x300000, Site{}, ErrNoMapping, "symbolize: pid 11 address 0x300000: address in no mapping"},
		{"at a mapping's end", 11, 0x401000, Site{}, ErrNoMapping, ""},
		{"file gone", 11, 0x400010, Site{Path: "/usr/bin/gone", Offset: 0x10}, os.ErrNotExist,
			`symbolize: open "/usr/bin/gone" of pid 11: no such file or directory`},
		{"not ELF", 11, 0x500010, Site{Path: "/usr/bin/notelf", Offset: 0x2010}, nil, `symbolize: read ELF "/usr/bin/notelf" of pid 11: bad magic number`},
		{"another inode at the path", 11, 0x600010, Site{Path: "/usr/bin/replaced", Offset: 0x10}, ErrFileReplaced, ""},
		{"deleted", 11, 0x700010, Site{Path: "/usr/lib/libgone.so (deleted)", Offset: 0x10}, ErrFileReplaced, ""},
		{"heap", 11, 0x1000010, Site{Path: "[heap]"}, ErrNoFile, `symbolize: pid 11 address 0x1000010 in "[heap]": mapping has no file`},
		{"anonymous", 11, 0x7f0000000010, Site{}, ErrNoFile, `symbolize: pid 11 address 0x7f0000000010 in "anonymous memory": mapping has no file`},
	}
	u := NewUser(root)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, call := range []bool{false, true} {
				lookup := u.Site
				if call {
					lookup = func(pid uint32, ret uint64) (Site, error) { return u.CallSite(pid, ret, procmaps.Ident{}) }
				}
				got, err := lookup(tt.pid, tt.addr)
				if err == nil {
					t.Fatalf("call %v: no error, site %+v", call, got)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("call %v: error %v, want one matching %v", call, err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), tt.wantMsg) {
					t.Errorf("call %v: error %q, want %q", call, err, tt.wantMsg)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("call %v: partial site (-want +got):\n%s", call, diff)
				}
			}
		})
	}
}

// TestUserConcurrent symbolizes from many goroutines with a User that has
// parsed nothing yet: each gets the same site (go test -race checks the
// locking).
func TestUserConcurrent(t *testing.T) {
	q, ok := startQPWork(t, buildQPWork(t, t.TempDir(), "qpwork"))
	if !ok {
		t.Fatal("qpwork did not start")
	}
	u := NewUser("/proc")
	const workers, calls = 8, 20
	sites := make([][]Site, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				ret := q.ret
				if i%2 == 1 {
					ret = q.retEx
				}
				s, err := u.CallSite(q.pid, ret, procmaps.Ident{})
				if err != nil {
					t.Error(err)
					return
				}
				sites[w] = append(sites[w], s)
			}
		})
	}
	wg.Wait()
	for w := range workers {
		if diff := cmp.Diff(sites[0], sites[w]); diff != "" {
			t.Errorf("worker %d (-worker 0 +worker %d):\n%s", w, w, diff)
		}
	}
	if u.lru.Len() != 1 {
		t.Errorf("%d files cached, want 1", u.lru.Len())
	}
}

// TestUserCacheBound holds the cache to maxFiles, dropping the least
// recently used file.
func TestUserCacheBound(t *testing.T) {
	u := NewUser("/proc")
	for i := range maxFiles + 3 {
		u.put(&elfFile{key: strconv.Itoa(i)})
		if i == maxFiles-1 {
			u.get("0") // used: kept
		}
	}
	if u.lru.Len() != maxFiles || len(u.files) != maxFiles {
		t.Fatalf("%d files, %d keys cached, want %d", u.lru.Len(), len(u.files), maxFiles)
	}
	for _, key := range []string{"1", "2", "3"} {
		if u.get(key) != nil {
			t.Errorf("file %s kept, want it dropped", key)
		}
	}
	for _, key := range []string{"0", "4", strconv.Itoa(maxFiles + 2)} {
		if u.get(key) == nil {
			t.Errorf("file %s dropped, want it kept", key)
		}
	}
	if e := u.put(&elfFile{key: "0"}); e == nil || e.key != "0" || u.lru.Len() != maxFiles {
		t.Errorf("put of a cached key: %+v, %d files", e, u.lru.Len())
	}
}

// tinyEntry is tinyProc's map_files entry of pid 20's one mapping.
const tinyEntry = "20/map_files/400000-401000"

// tinyProc is a fixture /proc of pid 20, which maps /usr/bin/tiny (device
// fd:01, inode 42) at 0x400000, its map_files entry a copy of tiny.elf:
// its root, and tiny.elf's bytes.
func tinyProc(t *testing.T) (root string, tiny []byte) {
	t.Helper()
	tiny, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		t.Fatal(err)
	}
	return fixtureProc(t, map[string]string{
		"20/maps": "00400000-00401000 r-xp 00000000 fd:01 42 /usr/bin/tiny\n",
		tinyEntry: string(tiny),
	}), tiny
}

// TestUserRecentMapping follows a mapping found through map_files without
// reading maps again, for as long as its map_files entry names the same
// file: here a fixture /proc whose map_files entry is a copy of tiny.elf.
func TestUserRecentMapping(t *testing.T) {
	root, tiny := tinyProc(t)
	u := NewUser(root)
	want := Site{Path: "/usr/bin/tiny", BuildID: tinyBuildID, Offset: 0x149, Symbol: "caller", SymbolOffset: 1}
	check := func(when string) {
		t.Helper()
		got, err := u.CallSite(20, 0x40014e, procmaps.Ident{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", when, diff)
		}
	}
	check("first")
	if err := os.Remove(filepath.Join(root, "20/maps")); err != nil {
		t.Fatal(err)
	}
	check("with maps gone") // from the remembered mapping
	// The process gone: a site resolved before resolves from the cache;
	// another in the same file cannot be read.
	gone := filepath.Join(root, "gone")
	if err := os.Rename(filepath.Join(root, "20"), gone); err != nil {
		t.Fatal(err)
	}
	check("with the process gone")
	if got, err := u.CallSite(20, 0x400150, procmaps.Ident{}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("a new site with the process gone: (%+v, %v), want ErrNoProcess", got, err)
	}
	if err := os.Rename(gone, filepath.Join(root, "20")); err != nil {
		t.Fatal(err)
	}
	// A zombie: its directory is there, its maps empty, map_files too.
	if err := os.Rename(filepath.Join(root, tinyEntry), filepath.Join(root, "entry")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "20/maps"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check("with the process a zombie")
	if err := os.Rename(filepath.Join(root, "entry"), filepath.Join(root, tinyEntry)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "20/maps")); err != nil {
		t.Fatal(err)
	}
	// Another file in the mapping's place: the remembered mapping is
	// dropped, and maps, read again, is gone.
	if err := os.Remove(filepath.Join(root, tinyEntry)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, tinyEntry), append(tiny, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := u.CallSite(20, 0x40014e, procmaps.Ident{}); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("after the file changed: (%+v, %v), want ErrNoProcess", got, err)
	}
	if n := len(u.recent[20]); n != 0 {
		t.Errorf("%d mappings remembered for pid 20, want 0", n)
	}
}

// TestUserSeenMapping: a mapping the probe saw (CallSite's seen) that is
// the one a call found before through map_files is taken as it is, with
// no look in /proc: here the fixture's map_files entry is replaced by
// another file and maps removed, which a call without it notices.
func TestUserSeenMapping(t *testing.T) {
	root, tiny := tinyProc(t)
	seen := procmaps.Ident{Start: 0x400000, Offset: 0, Ino: 42, Dev: 0xfd<<20 | 1}
	want := Site{Path: "/usr/bin/tiny", BuildID: tinyBuildID, Offset: 0x149, Symbol: "caller", SymbolOffset: 1}
	u := NewUser(root)
	if got, err := u.CallSite(20, 0x40014e, seen); err != nil || got != want {
		t.Fatalf("first call: (%+v, %v), want %+v", got, err, want)
	}
	if err := os.Remove(filepath.Join(root, "20/maps")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, tinyEntry), append(tiny, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := u.CallSite(20, 0x40014e, seen); err != nil || got != want {
		t.Errorf("the mapping seen again: (%+v, %v), want %+v from the mapping found before", got, err, want)
	}
	for _, other := range []procmaps.Ident{
		{Start: 0x400000, Offset: 0, Ino: 43, Dev: seen.Dev},
		{Start: 0x400000, Offset: 0, Ino: 42, Dev: 0xfd<<20 | 2},
		{Start: 0x400000, Offset: 0x1000, Ino: 42, Dev: seen.Dev},
		{Start: 0x3ff000, Offset: 0, Ino: 42, Dev: seen.Dev},
	} {
		u := NewUser(root)
		u.noteMapping(20, mapping{Start: 0x400000, End: 0x401000, Exec: true, Inode: 42, Major: 0xfd, Minor: 1, Path: "/usr/bin/tiny"}, fileIdent{})
		if got, err := u.CallSite(20, 0x40014e, other); !errors.Is(err, ErrNoProcess) {
			t.Errorf("another mapping seen (%+v): (%+v, %v), want the look in /proc, which finds no maps", other, got, err)
		}
	}
}
