package symbolize

import (
	"fmt"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"os"
	"strings"
	"testing"
)

// BenchmarkUserCallSite times a call site of a live qpwork: cached (the
// agent's case for every QP after the first from one site; without
// map_files, maps is read each time), and uncached
// in a new User (the first QP from a file: parsing it), for qpwork and for
// an address in libc (a 2 MB library with some 3,000 dynamic symbols).
func BenchmarkUserCallSite(b *testing.B) {
	q, ok := startQPWork(b, buildQPWork(b, b.TempDir(), "qpwork"))
	if !ok {
		b.Fatal("qpwork did not start")
	}
	libc := libcText(b, q.pid)
	for _, mapFiles := range []bool{true, false} {
		name := "cached"
		if !mapFiles {
			name = "cached without map_files" // maps read each time
		}
		b.Run(name, func(b *testing.B) {
			u := NewUser("/proc")
			u.mapFiles = mapFiles
			if _, err := u.CallSite(q.pid, q.ret, procmaps.Ident{}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := u.CallSite(q.pid, q.ret, procmaps.Ident{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, c := range []struct {
		name string
		addr uint64
	}{{"uncached qpwork", q.ret}, {"uncached libc", libc}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := NewUser("/proc").CallSite(q.pid, c.addr, procmaps.Ident{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// libcText returns an address in the text of the libc that pid maps.
func libcText(b *testing.B, pid uint32) uint64 {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) == 6 && f[1] == "r-xp" && strings.Contains(f[5], "/libc.so") {
			return hexU(b, strings.Split(f[0], "-")[0]) + 0x1234
		}
	}
	b.Skip("no libc text mapped")
	return 0
}

// BenchmarkKernel times reading this host's kallsyms and a frame's lookup.
func BenchmarkKernel(b *testing.B) {
	k, err := NewKernel("/proc")
	if err != nil {
		b.Skip(err)
	}
	s := k.tab.Load().syms
	addr := s[len(s)/2].addr + 0x10
	b.Run("NewKernel", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewKernel("/proc"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Frame", func(b *testing.B) {
		for b.Loop() {
			if _, err := k.Frame(addr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
