package symbolize

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"sync"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64 // [start, end) in the process
	pgoff      uint64 // the file offset mapped at start
	exec       bool   // the x permission
	inode      uint64 // 0 for memory with no file
	dev        uint32 // the file's device, as the kernel's dev_t (major<<20 | minor)
	path       string // "" for plain anonymous memory
}

// hasFile says whether the mapping maps a file that can be opened: an inode
// and an absolute path. A memfd ("/memfd:name (deleted)") counts: it is
// opened through map_files.
func (m mapping) hasFile() bool {
	return m.inode != 0 && len(m.path) > 0 && m.path[0] == '/'
}

// mapsLineMax bounds a maps line: the fixed fields (at most 100 bytes) and a
// path of PATH_MAX with " (deleted)".
const mapsLineMax = 4096 + 128

var mapsBufs = sync.Pool{New: func() any { b := make([]byte, mapsLineMax); return &b }}

// findMapping reads a maps file and returns the mapping that holds addr.
// lines is how many mappings were read: 0 for a process that has none left
// (it exited and is a zombie). A line that does not parse is skipped.
func findMapping(r io.Reader, addr uint64) (m mapping, found bool, lines int, err error) {
	bp := mapsBufs.Get().(*[]byte)
	defer mapsBufs.Put(bp)
	sc := bufio.NewScanner(r)
	sc.Buffer(*bp, mapsLineMax)
	for sc.Scan() {
		line := sc.Bytes()
		start, end, ok := parseRange(line)
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
		m, ok = parseMapping(line)
		return m, ok, lines, nil
	}
	return mapping{}, false, lines, sc.Err()
}

// parseRange parses a maps line's "start-end" field.
func parseRange(line []byte) (start, end uint64, ok bool) {
	dash := bytes.IndexByte(line, '-')
	if dash < 0 {
		return 0, 0, false
	}
	sp := bytes.IndexByte(line[dash:], ' ')
	if sp < 0 {
		return 0, 0, false
	}
	start, ok1 := parseHex(line[:dash])
	end, ok2 := parseHex(line[dash+1 : dash+sp])
	return start, end, ok1 && ok2 && start < end
}

// parseMapping parses a whole maps line, as fs/proc/task_mmu.c writes it:
//
//	start-end perms offset major:minor inode [path]
//
// where the path, which may hold spaces, starts after the blanks that pad
// the fixed fields.
func parseMapping(line []byte) (mapping, bool) {
	var m mapping
	var ok bool
	if m.start, m.end, ok = parseRange(line); !ok {
		return mapping{}, false
	}
	rest := line[bytes.IndexByte(line, ' ')+1:]
	perms, rest, _ := bytes.Cut(rest, []byte{' '})
	off, rest, _ := bytes.Cut(rest, []byte{' '})
	dev, rest, _ := bytes.Cut(rest, []byte{' '})
	ino, rest, _ := bytes.Cut(rest, []byte{' '})
	major, minor, found := bytes.Cut(dev, []byte{':'})
	if len(perms) != 4 || !found {
		return mapping{}, false
	}
	maj, ok1 := parseHex(major)
	mnr, ok2 := parseHex(minor)
	if !ok1 || !ok2 || maj >= 1<<12 || mnr >= 1<<20 {
		return mapping{}, false
	}
	m.dev = uint32(maj<<20 | mnr)
	m.exec = perms[2] == 'x'
	if m.pgoff, ok = parseHex(off); !ok {
		return mapping{}, false
	}
	inode, err := strconv.ParseUint(string(ino), 10, 64)
	if err != nil {
		return mapping{}, false
	}
	m.inode = inode
	m.path = string(bytes.TrimLeft(rest, " "))
	return m, true
}

// parseHex parses 1 to 16 hex digits without allocating.
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}
