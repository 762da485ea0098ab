package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
	"golang.org/x/sys/unix"
)

// userMessage adds the hint that matches the error's cause, if any;
// ibCore says what the kernel has of ib_core, asked only when the error
// is that it is not loaded.
func userMessage(err error, ibCore func() ibCoreState) string {
	if h := hint(err, ibCore); h != "" {
		return err.Error() + " (" + h + ")"
	}
	return err.Error()
}

// hint says what the user can do about err's cause; "" when nothing
// specific.
func hint(err error, ibCore func() ibCoreState) string {
	var nlErr *rdmanl.Error
	netlinkErr := errors.As(err, &nlErr)
	var askErr *agentapi.AskError
	agentErr := errors.As(err, &askErr)
	switch {
	case agentErr && errors.Is(err, os.ErrPermission):
		return "the agent's socket is root's: run as root, or observe locally with --no-agent"
	case agentErr:
		return "observe locally with --no-agent"
	case errors.Is(err, bpf.ErrNoPrivilege):
		return "run as root, or grant CAP_BPF and CAP_PERFMON"
	case errors.Is(err, bpf.ErrNoIBCore):
		return ibCore().hint()
	case netlinkErr && errors.Is(err, os.ErrPermission):
		return "run as root or grant CAP_NET_ADMIN"
	case netlinkErr && errors.Is(err, syscall.EPROTONOSUPPORT):
		if s := ibCore(); s != ibCoreNone {
			return "this kernel has no RDMA netlink: " + s.hint()
		}
		return ibCoreNone.hint()
	}
	return ""
}

// ibCoreState is what the running kernel has of ib_core, the module RDMA
// netlink and the probes need.
type ibCoreState int

const (
	// ibCoreUnknown: ib_core is not loaded and the kernel's modules are
	// not here to look in (/lib/modules/RELEASE is missing, as in most
	// containers).
	ibCoreUnknown ibCoreState = iota
	// ibCoreModule: ib_core is loaded, built in, or a module of this
	// kernel that modprobe can load.
	ibCoreModule
	// ibCoreNone: the kernel was built without RDMA: its configuration
	// says so, or its modules are here and ib_core is neither one of them
	// nor built in.
	ibCoreNone
)

func (s ibCoreState) hint() string {
	switch s {
	case ibCoreModule:
		return "modprobe ib_core, or load an RDMA driver"
	case ibCoreNone:
		return "this kernel has no RDMA support: ib_core is neither built in nor one of its modules"
	}
	return "ib_core is not loaded, and /lib/modules has no modules of this kernel to load it from: modprobe ib_core on the host, if this is a container"
}

// hostIBCore is ibCoreOf the running kernel, on this host.
func hostIBCore() ibCoreState {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ibCoreUnknown
	}
	return ibCoreOf("/", unix.ByteSliceToString(u.Release[:]))
}

// ibCoreOf says what kernel release has of ib_core, from what root holds:
// /sys/module/ib_core (loaded, or built in); the kernel's configuration
// (/proc/config.gz, or /boot/config-RELEASE), which may say it was built
// without InfiniBand; and in the kernel's modules directory
// (/lib/modules/RELEASE) modules.builtin, modules.dep (every module depmod
// found, in kernel/, updates/ or extra/) or, without it, the module's
// place in the kernel's tree.
func ibCoreOf(root, release string) ibCoreState {
	if _, err := os.Stat(filepath.Join(root, "sys/module/ib_core")); err == nil {
		return ibCoreModule
	}
	if release == "" || strings.ContainsRune(release, '/') {
		return ibCoreUnknown
	}
	if withoutInfiniband(root, release) {
		return ibCoreNone
	}
	dir := filepath.Join(root, "lib/modules", release)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ibCoreUnknown
	}
	if listsIBCore(filepath.Join(dir, "modules.builtin")) || listsIBCore(filepath.Join(dir, "modules.dep")) {
		return ibCoreModule
	}
	if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err == nil {
		return ibCoreNone
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "kernel/drivers/infiniband/core/ib_core.ko*")); len(m) > 0 {
		return ibCoreModule
	}
	return ibCoreNone
}

// withoutInfiniband reports whether the kernel's configuration, where it
// is kept, says "# CONFIG_INFINIBAND is not set".
func withoutInfiniband(root, release string) bool {
	var r io.Reader
	if f, err := os.Open(filepath.Join(root, "proc/config.gz")); err == nil {
		defer f.Close() //nolint:errcheck // read only
		if r, err = gzip.NewReader(f); err != nil {
			return false
		}
	} else if f, err := os.Open(filepath.Join(root, "boot", "config-"+release)); err == nil {
		defer f.Close() //nolint:errcheck // read only
		r = f
	} else {
		return false
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == "# CONFIG_INFINIBAND is not set" {
			return true
		}
	}
	return false
}

// listsIBCore reports whether a depmod list (modules.builtin, modules.dep:
// a module's path first on each line) names ib_core.
func listsIBCore(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close() //nolint:errcheck // read only
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		module, _, _ := strings.Cut(sc.Text(), ":")
		if base := filepath.Base(module); base == "ib_core.ko" || strings.HasPrefix(base, "ib_core.ko.") {
			return true
		}
	}
	return false
}
