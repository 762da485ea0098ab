//go:build linux && (amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMapPermission(t *testing.T) {
	t.Parallel()
	memlock := fmt.Errorf("RLIMIT_MEMLOCK is 65536 bytes and could not be raised: %w", unix.EPERM)
	tests := []struct {
		name        string
		err         error
		memlock     error
		want        string
		noPrivilege bool
	}{
		{"EPERM", fmt.Errorf("map create: %w", unix.EPERM), nil,
			"no privilege to trace: map create: operation not permitted", true},
		{"os.ErrPermission", fs.ErrPermission, nil, "no privilege to trace: permission denied", true},
		{"EPERM with memlock left low", fmt.Errorf("map create: %w", unix.EPERM), memlock,
			"no privilege to trace: map create: operation not permitted " +
				"(RLIMIT_MEMLOCK is 65536 bytes and could not be raised: operation not permitted)", true},
		{"other errors stay", fmt.Errorf("map create: %w", unix.EINVAL), memlock, "map create: invalid argument", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mapPermission(tt.err, tt.memlock)
			if got.Error() != tt.want || !errors.Is(got, tt.err) || errors.Is(got, ErrNoPrivilege) != tt.noPrivilege {
				t.Errorf("mapPermission = %q (ErrNoPrivilege %t), want %q (%t) wrapping the cause",
					got, errors.Is(got, ErrNoPrivilege), tt.want, tt.noPrivilege)
			}
		})
	}
}

// TestRaiseMemlock lowers this process's soft limit and has raiseMemlock
// lift it: to infinity where the hard limit is infinite or the process has
// CAP_SYS_RESOURCE, and otherwise not at all, with an error that gives the
// limit. Not parallel: the limit belongs to the whole process.
func TestRaiseMemlock(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &old, nil); err != nil {
			t.Errorf("restore RLIMIT_MEMLOCK: %v", err)
		}
	})
	low := unix.Rlimit{Cur: 64 << 10, Max: old.Max}
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &low, nil); err != nil {
		t.Fatal(err)
	}
	err := raiseMemlock(slog.New(slog.DiscardHandler))
	var got unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &got); err != nil {
		t.Fatal(err)
	}
	switch {
	case err == nil && got.Cur == unix.RLIM_INFINITY && got.Max == unix.RLIM_INFINITY:
		t.Logf("raised to infinity (hard limit was %d)", old.Max)
	case err != nil && got == low && errors.Is(err, unix.EPERM) &&
		err.Error() == "RLIMIT_MEMLOCK is 65536 bytes and could not be raised: operation not permitted":
		t.Logf("not raised: %v", err)
	default:
		t.Errorf("raiseMemlock from %+v = %v, limit now %+v; want nil and infinity, or EPERM and the limit unchanged", low, err, got)
	}
}
