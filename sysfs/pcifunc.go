package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PCIFunction is the PCI function an RDMA device or a netdev sits on, as
// /sys/bus/pci/devices/ADDR shows it: what it is, which driver holds it, and
// which resets the kernel can apply to it.
//
// It is read by hand, not through procfs's PciDevices: that reads every PCI
// function of the host and fails as a whole on one unreadable attribute, and
// it carries neither the driver nor the reset attributes.
type PCIFunction struct {
	Addr     string // "0000:3b:00.0": the function itself (a VF's own address, not its PF's)
	Driver   string // the bound driver's name ("mlx5_core", "e1000e"); "" when unbound
	VendorID uint16 // the vendor attribute (0x15b3 Mellanox, 0x8086 Intel)
	DeviceID uint16 // the device attribute
	// ResetMethods are the function's reset methods in the order the
	// kernel tries them ("flr", "pm", "bus", ...), from reset_method
	// (Linux 5.15 and later). The kernel hides reset_method when the
	// function has no reset method at all; it is nil then, and on older
	// kernels, where Resettable alone says whether a reset exists.
	ResetMethods []string
	// HasResetMethod reports that the kernel has the reset_method attribute
	// for this function (so ResetMethods is the whole list).
	HasResetMethod bool
	// Resettable reports that the function has a reset attribute: writing
	// 1 to it makes the kernel reset the function with the first method in
	// ResetMethods that works.
	Resettable bool
}

// OffersReset reports whether the kernel offers the reset method m ("flr",
// "pm", "bus", "cxl_bus", "acpi", "device_specific") for the function.
func (f PCIFunction) OffersReset(m string) bool { return slices.Contains(f.ResetMethods, m) }

// ReadPCIFunction reads the PCI function behind RDMA device dev from the
// sysfs tree at sysRoot (normally /sys): for a sub-function, the function it
// was made on; for a VF, the VF itself. A device on no PCI function (rxe,
// siw) gets an error matching ErrNotPCI.
func ReadPCIFunction(sysRoot, dev string) (PCIFunction, error) {
	f, err := readPCIFunctionOf(sysRoot, filepath.Join(sysRoot, "class", "infiniband", dev, "device"))
	if err != nil {
		return PCIFunction{}, fmt.Errorf("sysfs: read PCI function of %s: %w", dev, err)
	}
	return f, nil
}

// ReadNetdevPCIFunction reads the PCI function behind network interface
// netdev (/sys/class/net/NETDEV/device), the function a software RDMA
// device (rxe) on that netdev depends on. A netdev on no PCI function
// (loopback, veth, a virtio device on another bus) gets an error matching
// ErrNotPCI.
func ReadNetdevPCIFunction(sysRoot, netdev string) (PCIFunction, error) {
	f, err := readPCIFunctionOf(sysRoot, filepath.Join(sysRoot, "class", "net", netdev, "device"))
	if err != nil {
		return PCIFunction{}, fmt.Errorf("sysfs: read PCI function of netdev %s: %w", netdev, err)
	}
	return f, nil
}

// readPCIFunctionAt reads the PCI function at address addr
// ("0000:3b:00.0"), which works while no RDMA device or netdev sits on it
// (after an unbind). An address that is not on the PCI bus gets an error
// matching fs.ErrNotExist.
func readPCIFunctionAt(sysRoot, addr string) (PCIFunction, error) {
	if _, ok := parsePCIAddr(addr); !ok {
		return PCIFunction{}, fmt.Errorf("sysfs: read PCI function %q: not a PCI address (want DDDD:BB:SS.F)", addr)
	}
	f, err := readPCIFunction(filepath.Join(sysRoot, "bus", "pci", "devices", addr), addr)
	if err != nil {
		return PCIFunction{}, fmt.Errorf("sysfs: read PCI function %s: %w", addr, err)
	}
	return f, nil
}

// PCINetdevs lists the network interfaces on the PCI function at addr
// (/sys/bus/pci/devices/ADDR/net), sorted; none while no driver is bound.
func PCINetdevs(sysRoot, addr string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "bus", "pci", "devices", addr, "net"))
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: list netdevs of PCI function %s: %w", addr, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// readPCIFunctionOf reads the PCI function a device link (a class device's
// "device" link) leads to.
func readPCIFunctionOf(sysRoot, devLink string) (PCIFunction, error) {
	subsystem, err := os.Readlink(filepath.Join(devLink, "subsystem"))
	if errors.Is(err, fs.ErrNotExist) {
		return PCIFunction{}, ErrNotPCI
	}
	if err != nil {
		return PCIFunction{}, err
	}
	pcidev := devLink
	switch filepath.Base(subsystem) {
	case "pci":
	case "auxiliary":
		// A sub-function or an auxiliary RDMA device (irdma): the PCI
		// function is the auxiliary device's parent.
		resolved, err := filepath.EvalSymlinks(devLink)
		if err != nil {
			return PCIFunction{}, err
		}
		parent := filepath.Base(filepath.Dir(resolved))
		if _, ok := parsePCIAddr(parent); !ok {
			return PCIFunction{}, fmt.Errorf("%w (an auxiliary device below %s)", ErrNotPCI, parent)
		}
		pcidev = filepath.Join(sysRoot, "bus", "pci", "devices", parent)
	default:
		return PCIFunction{}, fmt.Errorf("%w (its device is on bus %s)", ErrNotPCI, filepath.Base(subsystem))
	}
	resolved, err := filepath.EvalSymlinks(pcidev)
	if err != nil {
		return PCIFunction{}, err
	}
	addr := filepath.Base(resolved)
	if _, ok := parsePCIAddr(addr); !ok {
		return PCIFunction{}, fmt.Errorf("cannot parse PCI address %q", addr)
	}
	return readPCIFunction(pcidev, addr)
}

// readPCIFunction reads the attributes of the PCI function directory dir.
func readPCIFunction(dir, addr string) (PCIFunction, error) {
	f := PCIFunction{Addr: addr}
	var err error
	if f.VendorID, err = readHex16(filepath.Join(dir, "vendor")); err != nil {
		return PCIFunction{}, err
	}
	if f.DeviceID, err = readHex16(filepath.Join(dir, "device")); err != nil {
		return PCIFunction{}, err
	}
	switch target, err := os.Readlink(filepath.Join(dir, "driver")); {
	case err == nil:
		f.Driver = filepath.Base(target)
	case !errors.Is(err, fs.ErrNotExist):
		return PCIFunction{}, err
	}
	switch b, err := os.ReadFile(filepath.Join(dir, "reset_method")); {
	case err == nil:
		f.HasResetMethod = true
		f.ResetMethods = strings.Fields(string(b))
	case !errors.Is(err, fs.ErrNotExist):
		return PCIFunction{}, err
	}
	switch _, err := os.Lstat(filepath.Join(dir, "reset")); {
	case err == nil:
		f.Resettable = true
	case !errors.Is(err, fs.ErrNotExist):
		return PCIFunction{}, err
	}
	return f, nil
}

// readHex16 reads a sysfs attribute holding a 16-bit id as "0x15b3".
func readHex16(path string) (uint16, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 16)
	if err != nil || !strings.HasPrefix(s, "0x") {
		return 0, fmt.Errorf("read %s: %q is not a 16-bit hex id", path, s)
	}
	return uint16(v), nil
}
