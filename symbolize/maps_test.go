package symbolize

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/maps-qpwork is qpwork's /proc/PID/maps on Debian bookworm
// (6.18 kernel), with its path made /usr/local/bin/qpwork.
func TestFindMapping(t *testing.T) {
	maps, err := os.ReadFile("testdata/maps-qpwork")
	if err != nil {
		t.Fatal(err)
	}
	libcText := mapping{start: 0x7f05646f4000, end: 0x7f056484a000, pgoff: 0x26000, exec: true, inode: 326269, dev: 0xfe << 20, path: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	tests := []struct {
		name  string
		addr  uint64
		want  mapping
		found bool
	}{
		{"executable's text", 0x5637e0c2b123, mapping{start: 0x5637e0c2b000, end: 0x5637e0c2c000, pgoff: 0x1000, exec: true, inode: 9986068, dev: 0xfe << 20, path: "/usr/local/bin/qpwork"}, true},
		{"libc's text", 0x7f05646f5000, libcText, true},
		{"libc's text's last byte", 0x7f056484a000 - 1, libcText, true},
		{"heap", 0x5638184dd000, mapping{start: 0x5638184dd000, end: 0x5638184fe000, path: "[heap]"}, true},
		{"anonymous", 0x7f05646cb010, mapping{start: 0x7f05646cb000, end: 0x7f05646ce000}, true},
		{"vsyscall", 0xffffffffff600400, mapping{start: 0xffffffffff600000, end: 0xffffffffff601000, exec: true, path: "[vsyscall]"}, true},
		{"below the first", 0x1000, mapping{}, false},
		{"between two", 0x7f05648b0000, mapping{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, lines, err := findMapping(strings.NewReader(string(maps)), tt.addr)
			if err != nil || found != tt.found || lines == 0 {
				t.Fatalf("findMapping = found %v, %d lines, %v; want found %v", found, lines, err, tt.found)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(mapping{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMapping(t *testing.T) {
	tests := []struct {
		name string
		line string
		want mapping
		ok   bool
	}{
		{"path with spaces, deleted", "7f0000000000-7f0000001000 r-xp 00001000 08:01 42   /opt/my app/lib.so (deleted)",
			mapping{start: 0x7f0000000000, end: 0x7f0000001000, pgoff: 0x1000, exec: true, inode: 42, dev: 8<<20 | 1, path: "/opt/my app/lib.so (deleted)"}, true},
		{"a device of major 259, minor 0x10003", "7f0000000000-7f0000001000 r-xp 00000000 103:10003 42 /usr/lib/x.so",
			mapping{start: 0x7f0000000000, end: 0x7f0000001000, exec: true, inode: 42, dev: 259<<20 | 0x10003, path: "/usr/lib/x.so"}, true},
		{"major past 12 bits", "7f0000000000-7f0000001000 r-xp 00000000 1000:01 42 /x", mapping{}, false},
		{"minor past 20 bits", "7f0000000000-7f0000001000 r-xp 00000000 08:100000 42 /x", mapping{}, false},
		{"bad device", "7f0000000000-7f0000001000 r-xp 00000000 08:0g 42 /x", mapping{}, false},
		{"memfd", "7f0000000000-7f0000001000 r-xp 00000000 00:01 7 /memfd:jit (deleted)",
			mapping{start: 0x7f0000000000, end: 0x7f0000001000, exec: true, inode: 7, dev: 1, path: "/memfd:jit (deleted)"}, true},
		{"named anonymous", "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:qp buffers]",
			mapping{start: 0x7f0000000000, end: 0x7f0000001000, path: "[anon:qp buffers]"}, true},
		{"no path, no padding", "00400000-00401000 r--p 00000000 00:00 0",
			mapping{start: 0x400000, end: 0x401000}, true},
		{"empty range", "00401000-00401000 r--p 00000000 00:00 0", mapping{}, false},
		{"start past end", "00402000-00401000 r--p 00000000 00:00 0", mapping{}, false},
		{"bad offset", "00400000-00401000 r--p 0000x000 00:00 0", mapping{}, false},
		{"bad inode", "00400000-00401000 r--p 00000000 00:00 -1", mapping{}, false},
		{"short perms", "00400000-00401000 r-- 00000000 00:00 0", mapping{}, false},
		{"17 hex digits", "10000000000000000-20000000000000000 r--p 00000000 00:00 0", mapping{}, false},
		{"nothing", "", mapping{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMapping([]byte(tt.line))
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(mapping{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzMaps holds findMapping to its contract on any input: no panic, and a
// found mapping holds the address.
func FuzzMaps(f *testing.F) {
	maps, err := os.ReadFile("testdata/maps-qpwork")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(maps, uint64(0x7f05646f5000))
	f.Add([]byte("00400000-00401000 r-xp 00000000 08:01 42 /bin/x\n"), uint64(0x400010))
	f.Fuzz(func(t *testing.T, maps []byte, addr uint64) {
		m, found, _, err := findMapping(strings.NewReader(string(maps)), addr)
		if err != nil || !found {
			return
		}
		if addr < m.start || addr >= m.end {
			t.Fatalf("mapping %+v does not hold %#x", m, addr)
		}
	})
}
