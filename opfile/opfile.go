package opfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular matches Read's refusal of a path that names something
// other than a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge matches Read's refusal of a file larger than its cap.
var ErrTooLarge = errors.New("file too large")

// Error is a file Read refuses: Path as given, and Err why, without the
// package's prefix ("not a regular file (a named pipe)", "larger than
// 1048576 bytes"), matching ErrNotRegular or ErrTooLarge.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return "opfile: " + e.Path + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// reason is an Error's cause: its text, and the sentinel it matches.
type reason struct {
	text     string
	sentinel error
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.sentinel }

// Read returns the content of the regular file at path (or of the regular
// file a symbolic link there points to), at most maxSize bytes. Anything
// else at path, or a larger file, is an *Error, refused without reading
// from it; a named pipe never blocks the call. Open and read failures are
// the os package's *fs.PathError.
func Read(path string, maxSize int64) ([]byte, error) {
	// Stat first, so that a device is not even opened. Then open without
	// blocking, so that a named pipe put in the file's place meanwhile
	// does not block the open (a regular file reads as without
	// O_NONBLOCK), and check what was opened. O_NOCTTY: a terminal put
	// there does not become the caller's.
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	if fi.Size() > maxSize {
		return nil, tooLarge(path, maxSize)
	}
	// The file may grow after the stat: read one byte past the cap.
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxSize {
		return nil, tooLarge(path, maxSize)
	}
	return b, nil
}

// notRegular is Read's refusal of a file of mode m.
func notRegular(path string, m fs.FileMode) error {
	kind := "mode " + m.String()
	switch m.Type() {
	case fs.ModeDir:
		kind = "a directory"
	case fs.ModeNamedPipe:
		kind = "a named pipe"
	case fs.ModeSocket:
		kind = "a socket"
	case fs.ModeDevice:
		kind = "a block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		kind = "a character device"
	}
	return &Error{Path: path, Err: &reason{fmt.Sprintf("%s (%s)", ErrNotRegular, kind), ErrNotRegular}}
}

// tooLarge is Read's refusal of a file of more than limit bytes.
func tooLarge(path string, limit int64) error {
	return &Error{Path: path, Err: &reason{fmt.Sprintf("larger than %d bytes", limit), ErrTooLarge}}
}

// What the kernel takes as a path (include/uapi/linux/limits.h).
const (
	pathMax = 4095 // PATH_MAX less the NUL
	nameMax = 255  // NAME_MAX: one component of a path
)

// CheckPath refuses, before anything opens it, a path the kernel would
// refuse: an empty one, one with a NUL byte, longer than PATH_MAX, or with
// a component longer than NAME_MAX. The error says why, without the path
// or the package: the caller names what the path is for.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("want a path")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("a path has no NUL byte")
	case len(p) > pathMax:
		return fmt.Errorf("longer than a path can be (%d bytes)", pathMax)
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > nameMax {
			return fmt.Errorf("a name in it is longer than a file name can be (%d bytes)", nameMax)
		}
	}
	return nil
}
