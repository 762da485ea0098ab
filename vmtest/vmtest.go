package vmtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmatool/rdmatool/vmtest/internal/lab"
)

// Device is an RDMA device the lab guest always has.
type Device string

// The lab's devices. Their netdevs have fixed MAC addresses, so their node
// GUIDs are the same on every boot.
const (
	RXE Device = "rxe0" // soft RoCE on dummy0, 192.0.2.1/24, MAC 02:00:00:00:01:01
	SIW Device = "siw0" // soft iWARP on dummy1, 198.51.100.1/24, MAC 02:00:00:00:02:01
)

// Addresses of the lab's devices' netdevs, for rdma_cm.
const (
	RXEAddr = "192.0.2.1"
	SIWAddr = "198.51.100.1"
)

// NodeGUID is the node GUID of a lab device as sysfs and iproute2 print it.
func (d Device) NodeGUID() string {
	switch d {
	case RXE:
		return "0000:00ff:fe00:0101"
	case SIW:
		return "0000:00ff:fe00:0201"
	}
	return ""
}

// Addr is the IPv4 address of the device's netdev.
func (d Device) Addr() string {
	if d == SIW {
		return SIWAddr
	}
	return RXEAddr
}

// InGuest reports whether this process runs inside a lab guest.
func InGuest() bool { return os.Getenv("VMTEST_GUEST") == "1" }

// Kernel is the matrix name of the guest's kernel ("6.1", "6.12", "7.x"), or
// "" outside the lab.
func Kernel() string { return os.Getenv("VMTEST_KERNEL") }

// Require skips t outside the lab guest and fails it inside the guest when one
// of devs is missing: the lab always has them, so a missing one is a bug.
func Require(t testing.TB, devs ...Device) {
	t.Helper()
	if !InGuest() {
		if os.Getenv("VMTEST_EXPECT_GUEST") == "1" {
			t.Fatal("lab test ran outside the vmtest guest although the lab run expected it inside")
		}
		t.Skip("lab test: runs inside the vmtest guest (make test-lab, or go test -exec 'vmlab exec -kernel 6.12')")
	}
	for _, d := range devs {
		if _, err := os.Stat(filepath.Join("/sys/class/infiniband", string(d))); err != nil {
			t.Fatalf("lab guest on kernel %s has no %s: %v", Kernel(), d, err)
		}
	}
}

// Bin returns the path of a program the Makefile built for the lab into
// <module root>/.lab/bin (the C workloads, rdmatool), failing t if it is not
// there.
func Bin(t testing.TB, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, ".lab", "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("lab binary %s missing (make lab-bins builds it): %v", name, err)
	}
	return p
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return lab.ModuleRoot(dir)
}

// LabFile returns the one file matching pattern (a filepath.Match pattern
// such as "deb/rdmatool_*.deb") under <module root>/.lab, where the
// Makefile puts what it builds for the lab, failing t unless exactly one
// matches.
func LabFile(t testing.TB, pattern string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	m, err := filepath.Glob(filepath.Join(root, ".lab", pattern))
	if err != nil || len(m) != 1 {
		t.Fatalf("want one .lab/%s (make builds it), found %v (%v)", pattern, m, err)
	}
	return m[0]
}
