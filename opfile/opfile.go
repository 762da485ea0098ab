package opfile

import (
	"context"
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
	f, err := Open(path, maxSize, true)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ReadContext is Read that gives up when ctx ends first, returning
// ctx.Err() without waiting for the read: a file on a hung file system
// (NFS, FUSE) blocks its read in the kernel, where no signal reaches it,
// and the caller must still be able to stop. The abandoned read finishes,
// or not, in a goroutine of its own.
func ReadContext(ctx context.Context, path string, maxSize int64) ([]byte, error) {
	return Await(ctx, func() ([]byte, error) { return Read(path, maxSize) })
}

// Await runs f in a goroutine of its own and returns its result, or
// ctx.Err() as soon as ctx ends, leaving f to finish unobserved: how a
// caller that reads an operator's file in pieces (Open) stays stoppable.
func Await[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // f never blocks on its result
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// File is a regular file Open opened, to be read in pieces: a read past
// the cap is an *Error matching ErrTooLarge.
type File struct {
	f       *os.File
	path    string
	maxSize int64
	left    int64 // what the cap lets the reader read still
}

// Open opens the regular file at path for a caller that reads it in
// pieces (a stream decoder), refusing what Read refuses, in the same
// words, before anything is read: anything but a regular file, a file
// larger than maxSize. A file that grows past maxSize while it is read
// fails the read that would pass the cap. With followLinks false, a
// symbolic link at path is refused too (ErrNotRegular, "a symbolic
// link") rather than followed: for a file the caller keeps itself, where
// a link is none of its making. The directories on the way are followed
// either way. The caller closes the File.
func Open(path string, maxSize int64, followLinks bool) (*File, error) {
	// Stat first, so that a device is not even opened. Then open without
	// blocking, so that a named pipe put in the file's place meanwhile
	// does not block the open (a regular file reads as without
	// O_NONBLOCK), and check what was opened. O_NOCTTY: a terminal put
	// there does not become the caller's. O_NOFOLLOW: a link put there
	// meanwhile fails the open (ELOOP).
	stat, flags := os.Stat, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY
	if !followLinks {
		stat, flags = os.Lstat, flags|unix.O_NOFOLLOW
	}
	if fi, err := stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi.Mode())
	}
	if err == nil && fi.Size() > maxSize {
		err = tooLarge(path, maxSize)
	}
	if err != nil {
		f.Close() //nolint:errcheck // read only
		return nil, err
	}
	return &File{f: f, path: path, maxSize: maxSize, left: maxSize}, nil
}

// Read reads the file as (*os.File).Read does, up to the cap: the file
// may have grown after Open checked its size, and a read that would pass
// the cap fails with an *Error matching ErrTooLarge.
func (f *File) Read(p []byte) (int, error) {
	if f.left <= 0 {
		var one [1]byte // the end, or more than the cap?
		if n, err := f.f.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, tooLarge(f.path, f.maxSize)
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.f.Read(p)
	f.left -= int64(n)
	return n, err
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

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
	case fs.ModeSymlink:
		kind = "a symbolic link"
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
