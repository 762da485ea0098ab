package bpf

import "errors"

// Errors Open returns, wrapped, when the probes cannot be loaded; callers
// check them with errors.Is and fall back to netlink only. The wrapping
// error names exactly what is missing.
var (
	// ErrNoPrivilege: the process lacks CAP_BPF and CAP_PERFMON (and is not
	// root / CAP_SYS_ADMIN), or the kernel refused a BPF operation.
	ErrNoPrivilege = errors.New("no privilege to trace")
	// ErrNoBTF: the kernel or the ib_core module has no BTF
	// (/sys/kernel/btf/vmlinux, /sys/kernel/btf/ib_core), so CO-RE cannot
	// relocate the programs.
	ErrNoBTF = errors.New("no BTF")
	// ErrNoIBCore: ib_core is not loaded, so there is nothing to trace.
	ErrNoIBCore = errors.New("ib_core is not loaded")
)
