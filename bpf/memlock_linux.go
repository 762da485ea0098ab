//go:build linux && (amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// raiseMemlock lifts RLIMIT_MEMLOCK to infinity unless it already is, and
// returns why it could not, or nil. Kernels before 5.11 charge BPF maps and
// programs to that limit; later ones charge the memory cgroup and ignore
// it, so a failure (no CAP_SYS_RESOURCE) is logged at Debug and loading
// goes on.
//
// cilium/ebpf's rlimit package is not used: its init() lowers the limit to
// 0 and calls bpf(BPF_MAP_CREATE) to find out how the kernel accounts, in
// every process that links it, so every rdmatool command, `rdmatool
// version` and the udev helper included, would make a bpf() call at
// start-up.
func raiseMemlock(log *slog.Logger) error {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &cur); err != nil {
		log.Debug("memlock limit not raised", "err", err)
		return fmt.Errorf("RLIMIT_MEMLOCK could not be read: %w", err)
	}
	if cur.Cur == unix.RLIM_INFINITY {
		return nil
	}
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &inf, nil); err != nil {
		log.Debug("memlock limit not raised", "limit_bytes", cur.Cur, "err", err)
		return fmt.Errorf("RLIMIT_MEMLOCK is %d bytes and could not be raised: %w", cur.Cur, err)
	}
	return nil
}

// mapPermission adds ErrNoPrivilege to an EPERM from the kernel and, when
// RLIMIT_MEMLOCK could not be raised (memlock is raiseMemlock's error),
// says so: before 5.11 the kernel answers EPERM when that limit is too low.
func mapPermission(err, memlock error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, os.ErrPermission) {
		return err
	}
	if memlock != nil {
		return fmt.Errorf("%w: %w (%v)", ErrNoPrivilege, err, memlock) //nolint:errorlint // the memlock failure is context, not a cause
	}
	return fmt.Errorf("%w: %w", ErrNoPrivilege, err)
}
