package rename

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/opfile"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// DefaultMapFile is the map policy's file when none is given.
const DefaultMapFile = "/etc/rdmatool/names.conf"

// byteOrderMark is U+FEFF in UTF-8, which some editors write at the start
// of a file.
const byteOrderMark = "\ufeff"

// maxMapSize bounds a map file; a real one is a few lines per HCA.
const maxMapSize = 1 << 20

// Map is an operator's table of device names by node GUID (a names.conf
// file; see the package documentation for its format).
type Map struct {
	File    string     // where it was read from, for reasons and errors
	Entries []MapEntry // in file order; GUIDs and names are unique
}

// MapEntry is one line of a map file.
type MapEntry struct {
	GUID rdmanl.GUID
	Name string
	Line int // 1-based
}

// Lookup returns the entry for a node GUID.
func (m *Map) Lookup(g rdmanl.GUID) (MapEntry, bool) {
	if m == nil {
		return MapEntry{}, false
	}
	for _, e := range m.Entries {
		if e.GUID == g {
			return e, true
		}
	}
	return MapEntry{}, false
}

// LineError is one bad line of a map file.
type LineError struct {
	Line int
	Err  error
}

// MapError lists every bad line of a map file. Its message names the file
// and line of the first: "rename: names.conf:3: invalid name "a/b":
// contains '/'".
type MapError struct {
	File  string
	Lines []LineError // at least one, in file order
}

func (e *MapError) Error() string {
	first := e.Lines[0]
	s := fmt.Sprintf("rename: %s:%d: %v", e.File, first.Line, first.Err)
	if n := len(e.Lines) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more bad lines)", n)
	}
	return s
}

// Unwrap returns the errors of every bad line.
func (e *MapError) Unwrap() []error {
	errs := make([]error, len(e.Lines))
	for i, l := range e.Lines {
		errs[i] = l.Err
	}
	return errs
}

// readFile is how loadMap reads: opfile.ReadContext (a test's blocking
// read otherwise).
var readFile = opfile.ReadContext

// loadMap reads and checks a map file, through opfile.ReadContext: it must
// be a regular file (or a symbolic link to one) of at most 1 MiB; a named
// pipe, a device or a directory is refused without reading from it, so a
// pipe with no writer does not block, and a read that hangs (NFS, FUSE)
// is given up when ctx ends (SIGINT, SIGTERM).
func loadMap(ctx context.Context, path string) (*Map, error) {
	b, err := readFile(ctx, path, maxMapSize)
	if err != nil {
		var oe *opfile.Error
		if errors.As(err, &oe) {
			return nil, fmt.Errorf("rename: read map %s: %w", path, oe.Err)
		}
		return nil, fmt.Errorf("rename: read map: %w", err)
	}
	return parseMap(b, path)
}

// parseMap reads a map file's content; file names it in errors. Every line
// is checked: the error is a *MapError listing each bad one. A UTF-8 byte
// order mark at the start is skipped.
func parseMap(content []byte, file string) (*Map, error) {
	m := &Map{File: file}
	var bad []LineError
	text := strings.TrimPrefix(string(content), byteOrderMark)
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		fields := lineFields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			bad = append(bad, LineError{n, fmt.Errorf("want \"GUID NAME\", found %d fields", len(fields))})
			continue
		}
		g, err := parseGUID(fields[0])
		if err != nil {
			bad = append(bad, LineError{n, err})
			continue
		}
		if g == 0 {
			bad = append(bad, LineError{n, fmt.Errorf("GUID %s is zero: devices without a node GUID cannot be named by it", g)})
			continue
		}
		name := fields[1]
		if err := ValidateName(name); err != nil {
			bad = append(bad, LineError{n, err})
			continue
		}
		if prev, ok := m.Lookup(g); ok {
			bad = append(bad, LineError{n, fmt.Errorf("GUID %s already named %s at line %d", g, quote.String(prev.Name), prev.Line)})
			continue
		}
		if j := indexName(m.Entries, name); j >= 0 {
			prev := m.Entries[j]
			bad = append(bad, LineError{n, fmt.Errorf("name %s already given to %s at line %d", quote.String(name), prev.GUID, prev.Line)})
			continue
		}
		m.Entries = append(m.Entries, MapEntry{GUID: g, Name: name, Line: n})
	}
	if len(bad) > 0 {
		return nil, &MapError{File: file, Lines: bad}
	}
	return m, nil
}

func indexName(entries []MapEntry, name string) int {
	for i, e := range entries {
		if e.Name == name {
			return i
		}
	}
	return -1
}

// lineFields splits a line into its whitespace-separated fields, up to a
// comment: a '#' that starts the line or follows whitespace (any that
// strings.Fields splits at) starts one; a '#' inside a word is part of it.
func lineFields(line string) []string {
	f := strings.Fields(line)
	for i, w := range f {
		if strings.HasPrefix(w, "#") {
			return f[:i]
		}
	}
	return f
}

// parseGUID parses a node GUID in one of the forms tools print it:
// "0002:c903:00a1:b2c3" (sysfs, iproute2), "0x0002c90300a1b2c3" (ibstat,
// ibv_devinfo) or "0002c90300a1b2c3". Hex digits may be upper or lower
// case; every form needs all 16 digits.
func parseGUID(s string) (rdmanl.GUID, error) {
	digits := s
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		digits = s[2:]
	case strings.Contains(s, ":"):
		groups := strings.Split(s, ":")
		ok := len(groups) == 4
		for _, g := range groups {
			ok = ok && len(g) == 4
		}
		if !ok {
			return 0, guidError(s)
		}
		digits = strings.Join(groups, "")
	}
	if len(digits) != 16 || !isHex(digits) {
		return 0, guidError(s)
	}
	v, err := strconv.ParseUint(digits, 16, 64)
	if err != nil {
		return 0, guidError(s)
	}
	return rdmanl.GUID(v), nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func guidError(s string) error {
	return fmt.Errorf("invalid GUID %s: want 0002:c903:00a1:b2c3, 0x0002c90300a1b2c3 or 0002c90300a1b2c3", quote.String(s))
}
