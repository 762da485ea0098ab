package procmaps

import (
	"bytes"
	"strconv"
)

// LineMax bounds a line: the fixed fields (at most 100 bytes) and a path
// of PATH_MAX with " (deleted)".
const LineMax = 4096 + 128

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End   uint64 // [Start, End) in the process
	Offset       uint64 // the file offset mapped at Start
	Exec         bool   // the x permission
	Major, Minor uint32 // the file's device
	Inode        uint64 // 0 for memory with no file
	Path         string // "" for plain anonymous memory, "[heap]" and such for the kernel's
}

// Ident is what tells a mapping from another: its start, the file offset
// mapped there (bytes), and the file's inode and device (the kernel's
// dev_t). bpf_find_vma in the uprobe on a library call reads it with each
// QP create (bpf.Event.ViaMapping), and symbolize trusts a mapping it found
// before when the probe's Ident is that mapping's. The zero Ident says
// nothing.
type Ident struct {
	Start, Offset, Ino uint64
	Dev                uint32
}

// Ident is m's Ident.
func (m Mapping) Ident() Ident {
	return Ident{Start: m.Start, Offset: m.Offset, Ino: m.Inode, Dev: m.Dev()}
}

// Dev is the file's device as the kernel's dev_t: major<<20 | minor.
func (m Mapping) Dev() uint32 { return m.Major<<20 | m.Minor }

// HasFile says whether the mapping maps a file that can be opened: an
// inode and an absolute path. A memfd ("/memfd:name (deleted)") counts:
// it is opened through map_files.
func (m Mapping) HasFile() bool {
	return m.Inode != 0 && len(m.Path) > 0 && m.Path[0] == '/'
}

// MapFilesName is the mapping's entry in /proc/PID/map_files: its range
// in hex without padding (maps pads addresses to 8 digits, map_files does
// not).
func (m Mapping) MapFilesName() string {
	return strconv.FormatUint(m.Start, 16) + "-" + strconv.FormatUint(m.End, 16)
}

// ParseRange parses a line's "start-end" field: enough to skip a line
// that does not hold an address without parsing the rest.
func ParseRange(line []byte) (start, end uint64, ok bool) {
	dash := bytes.IndexByte(line, '-')
	if dash < 0 {
		return 0, 0, false
	}
	sp := bytes.IndexByte(line[dash:], ' ')
	if sp < 0 {
		return 0, 0, false
	}
	start, ok1 := ParseHex(line[:dash])
	end, ok2 := ParseHex(line[dash+1 : dash+sp])
	return start, end, ok1 && ok2 && start < end
}

// Parse parses a whole line. The path, which may hold spaces, starts after
// the blanks that pad the fixed fields. A line that is not the kernel's
// format (a field missing or malformed, a device number out of dev_t's
// range) is not ok.
func Parse(line []byte) (Mapping, bool) {
	var m Mapping
	var ok bool
	if m.Start, m.End, ok = ParseRange(line); !ok {
		return Mapping{}, false
	}
	rest := line[bytes.IndexByte(line, ' ')+1:]
	perms, rest, _ := bytes.Cut(rest, []byte{' '})
	off, rest, _ := bytes.Cut(rest, []byte{' '})
	dev, rest, _ := bytes.Cut(rest, []byte{' '})
	ino, rest, _ := bytes.Cut(rest, []byte{' '})
	major, minor, found := bytes.Cut(dev, []byte{':'})
	if len(perms) != 4 || !found {
		return Mapping{}, false
	}
	maj, ok1 := ParseHex(major)
	mnr, ok2 := ParseHex(minor)
	if !ok1 || !ok2 || maj >= 1<<12 || mnr >= 1<<20 {
		return Mapping{}, false
	}
	m.Major, m.Minor = uint32(maj), uint32(mnr)
	m.Exec = perms[2] == 'x'
	if m.Offset, ok = ParseHex(off); !ok {
		return Mapping{}, false
	}
	inode, err := strconv.ParseUint(string(ino), 10, 64)
	if err != nil {
		return Mapping{}, false
	}
	m.Inode = inode
	m.Path = string(bytes.TrimLeft(rest, " "))
	return m, true
}

// ParseHex parses 1 to 16 hex digits without allocating, as /proc prints
// them (maps' fields, and kallsyms' addresses too).
func ParseHex(b []byte) (uint64, bool) {
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
