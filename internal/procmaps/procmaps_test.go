package procmaps

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMapping(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Mapping
		ok   bool
	}{
		{"path with spaces, deleted", "7f0000000000-7f0000001000 r-xp 00001000 08:01 42   /opt/my app/lib.so (deleted)",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Offset: 0x1000, Exec: true, Inode: 42, Major: 8, Minor: 1, Path: "/opt/my app/lib.so (deleted)"}, true},
		{"a device of major 259, minor 0x10003", "7f0000000000-7f0000001000 r-xp 00000000 103:10003 42 /usr/lib/x.so",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Exec: true, Inode: 42, Major: 259, Minor: 0x10003, Path: "/usr/lib/x.so"}, true},
		{"major past 12 bits", "7f0000000000-7f0000001000 r-xp 00000000 1000:01 42 /x", Mapping{}, false},
		{"minor past 20 bits", "7f0000000000-7f0000001000 r-xp 00000000 08:100000 42 /x", Mapping{}, false},
		{"bad device", "7f0000000000-7f0000001000 r-xp 00000000 08:0g 42 /x", Mapping{}, false},
		{"memfd", "7f0000000000-7f0000001000 r-xp 00000000 00:01 7 /memfd:jit (deleted)",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Exec: true, Inode: 7, Minor: 1, Path: "/memfd:jit (deleted)"}, true},
		{"named anonymous", "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:qp buffers]",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Path: "[anon:qp buffers]"}, true},
		{"no path, no padding", "00400000-00401000 r--p 00000000 00:00 0",
			Mapping{Start: 0x400000, End: 0x401000}, true},
		{"empty range", "00401000-00401000 r--p 00000000 00:00 0", Mapping{}, false},
		{"start past end", "00402000-00401000 r--p 00000000 00:00 0", Mapping{}, false},
		{"bad offset", "00400000-00401000 r--p 0000x000 00:00 0", Mapping{}, false},
		{"bad inode", "00400000-00401000 r--p 00000000 00:00 -1", Mapping{}, false},
		{"short perms", "00400000-00401000 r-- 00000000 00:00 0", Mapping{}, false},
		{"17 hex digits", "10000000000000000-20000000000000000 r--p 00000000 00:00 0", Mapping{}, false},
		{"nothing", "", Mapping{}, false},
		{"libibverbs, padded", "7f3c1a2b4000-7f3c1a2c7000 r-xp 00007000 fe:01 1311042                    /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0",
			Mapping{Start: 0x7f3c1a2b4000, End: 0x7f3c1a2c7000, Offset: 0x7000, Exec: true, Major: 0xfe, Minor: 1, Inode: 1311042, Path: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"}, true},
		{"a library with spaces, deleted", "7f00-7f10 r-xp 00000000 00:2a 77 /opt/my app/librdmacm.so.1 (deleted)",
			Mapping{Start: 0x7f00, End: 0x7f10, Exec: true, Minor: 0x2a, Inode: 77, Path: "/opt/my app/librdmacm.so.1 (deleted)"}, true},
		{"an inode that is not a number", "7f00-7f10 r-xp 00000000 fe:01 x77 /x", Mapping{}, false},
		{"anonymous with the trailing space", "7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ", Mapping{Start: 0x7ffd1000, End: 0x7ffd2000}, true},
		{"short", "7ffd1000-7ffd2000 rw-p", Mapping{}, false},
		{"a device without its colon", "7f00-7f10 r-xp 00000000 fe01 77 /x", Mapping{}, false},
		{"no range", "7f00 r-xp 00000000 fe:01 77 /x", Mapping{}, false},
		{"not an address range", "\r- 0 0 0:0 0", Mapping{}, false},
		{"fields apart by tabs", "7f00-7f10\tr-xp 00000000 fe:01 77 /x", Mapping{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse([]byte(tt.line))
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse holds Parse to its contract on any line: no panic, and a
// mapping parsed is a range of the line, its path the line's end.
func FuzzParse(f *testing.F) {
	f.Add([]byte("7f3c1a2b4000-7f3c1a2c7000 r-xp 00007000 fe:01 1311042                    /usr/lib/libibverbs.so.1"))
	f.Add([]byte("7f00-7f10 r-xp 00000000 00:2a 77 /opt/my app/librdmacm.so.1 (deleted)"))
	f.Add([]byte("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 "))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, ok := Parse(line)
		if !ok {
			return
		}
		if m.Start >= m.End || !bytes.HasSuffix(line, []byte(m.Path)) || m.Dev()>>20 != m.Major || m.Dev()&(1<<20-1) != m.Minor {
			t.Errorf("Parse(%q) = %+v: not from the line", line, m)
		}
		start, end, ok := ParseRange(line)
		if !ok || start != m.Start || end != m.End {
			t.Errorf("ParseRange(%q) = %#x, %#x, %v; Parse found %+v", line, start, end, ok, m)
		}
	})
}

func TestMapFilesName(t *testing.T) {
	for _, tt := range []struct {
		m    Mapping
		want string
	}{
		{Mapping{Start: 0x400000, End: 0x401000}, "400000-401000"},
		{Mapping{Start: 0x7f3c1a2b4000, End: 0x7f3c1a2c7000}, "7f3c1a2b4000-7f3c1a2c7000"},
	} {
		if got := tt.m.MapFilesName(); got != tt.want {
			t.Errorf("MapFilesName of %+v = %q, want %q (map_files does not pad)", tt.m, got, tt.want)
		}
	}
}

// Parse allocates nothing but the path (symbolize parses a line for each
// address it has not seen, bpf every line of a process that maps a verbs
// library).
func TestParseAllocs(t *testing.T) {
	line := []byte("7ffd1000-7ffd2000 rw-p 00000000 fe:01 12345 ")
	if n := testing.AllocsPerRun(100, func() { Parse(line) }); n != 0 {
		t.Errorf("Parse of a line without a path: %v allocations, want none", n)
	}
}
