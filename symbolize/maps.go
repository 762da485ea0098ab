package symbolize

import (
	"bufio"
	"io"
	"sync"

	"github.com/rdmatool/rdmatool/internal/procmaps"
)

// mapping is one line of /proc/PID/maps.
type mapping = procmaps.Mapping

var mapsBufs = sync.Pool{New: func() any { b := make([]byte, procmaps.LineMax); return &b }}

// findMapping reads a maps file and returns the mapping that holds addr.
// lines is how many mappings were read: 0 for a process that has none left
// (it exited and is a zombie). A line that does not parse is skipped.
func findMapping(r io.Reader, addr uint64) (m mapping, found bool, lines int, err error) {
	bp := mapsBufs.Get().(*[]byte)
	defer mapsBufs.Put(bp)
	sc := bufio.NewScanner(r)
	sc.Buffer(*bp, procmaps.LineMax)
	for sc.Scan() {
		line := sc.Bytes()
		start, end, ok := procmaps.ParseRange(line)
		if !ok {
			continue
		}
		lines++
		if addr < start {
			break // maps is sorted by address
		}
		if addr >= end {
			continue
		}
		m, ok = procmaps.Parse(line)
		return m, ok, lines, nil
	}
	return mapping{}, false, lines, sc.Err()
}
