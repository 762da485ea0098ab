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
	libcText := mapping{Start: 0x7f05646f4000, End: 0x7f056484a000, Offset: 0x26000, Exec: true, Inode: 326269, Major: 0xfe, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	tests := []struct {
		name  string
		addr  uint64
		want  mapping
		found bool
	}{
		{"executable's text", 0x5637e0c2b123, mapping{Start: 0x5637e0c2b000, End: 0x5637e0c2c000, Offset: 0x1000, Exec: true, Inode: 9986068, Major: 0xfe, Path: "/usr/local/bin/qpwork"}, true},
		{"libc's text", 0x7f05646f5000, libcText, true},
		{"libc's text's last byte", 0x7f056484a000 - 1, libcText, true},
		{"heap", 0x5638184dd000, mapping{Start: 0x5638184dd000, End: 0x5638184fe000, Path: "[heap]"}, true},
		{"anonymous", 0x7f05646cb010, mapping{Start: 0x7f05646cb000, End: 0x7f05646ce000}, true},
		{"vsyscall", 0xffffffffff600400, mapping{Start: 0xffffffffff600000, End: 0xffffffffff601000, Exec: true, Path: "[vsyscall]"}, true},
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
		if addr < m.Start || addr >= m.End {
			t.Fatalf("mapping %+v does not hold %#x", m, addr)
		}
	})
}
