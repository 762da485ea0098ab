package rdmanl

import (
	"errors"
	"fmt"
	"os"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Sentinel errors. Errors returned by the Client also match the standard
// library's: errors.Is(err, os.ErrPermission) when CAP_NET_ADMIN is missing,
// os.ErrExist when a name is taken, os.ErrNotExist when a device is gone.
var (
	// ErrNoDevice means the named device does not exist.
	ErrNoDevice = errors.New("no such RDMA device")
	// ErrNotSupported means the running kernel lacks the operation or
	// resource type (EOPNOTSUPP, or an unknown command).
	ErrNotSupported = errors.New("not supported by this kernel")
	// ErrDumpInterrupted means the kernel kept flagging a dump as
	// inconsistent (NLM_F_DUMP_INTR) after every retry.
	ErrDumpInterrupted = errors.New("dump interrupted by concurrent changes")
)

// Error is an operation that failed, with the kernel's extended ack text.
type Error struct {
	Op      string // what was attempted, e.g. "dump QPs of rxe0"
	Err     error  // the cause, usually a unix.Errno
	Message string // the kernel's extended ack message, if any
}

func (e *Error) Error() string {
	s := "rdmanl: " + e.Op + ": " + e.Err.Error()
	if e.Message != "" {
		s += " (kernel: " + e.Message + ")"
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is maps errnos onto the package's and the standard library's sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return errors.Is(e.Err, unix.EOPNOTSUPP)
	case ErrNoDevice:
		return errors.Is(e.Err, unix.ENODEV)
	case os.ErrNotExist:
		return errors.Is(e.Err, unix.ENODEV) || errors.Is(e.Err, ErrNoDevice)
	}
	return false
}

// wrap turns a netlink error into an *Error, dropping netlink's own
// "netlink receive:" wording and keeping the kernel's extack text.
func wrap(op string, err error) error {
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		return &Error{Op: op, Err: oe.Err, Message: oe.Message}
	}
	return &Error{Op: op, Err: err}
}

// PartialError ends a dump whose messages held entries that could not be
// decoded (a malformed attribute, or a mandatory one missing). The entries
// that decoded were all yielded; callers may treat this as a warning.
type PartialError struct {
	Op      string
	Skipped int   // entries left out
	First   error // the first decode error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("rdmanl: %s: skipped %d malformed entries: %v", e.Op, e.Skipped, e.First)
}
