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

// ErrNotPCI is returned for an RDMA device with no PCI function behind it
// (rxe, siw, platform devices).
var ErrNotPCI = errors.New("no PCI device behind it")

// PCILocation is where a device's PCI function sits, read the way
// rdma_rename's NAME_PCI reads it. For a virtual function (VF) it is the
// physical function's location plus the VF number; for a sub-function (SF)
// the location of the PCI function it sits on plus the SF number.
type PCILocation struct {
	Addr          string // the (physical) function's address, "0000:3b:00.0"
	Domain        uint32
	Bus           uint32
	Slot          uint32
	Func          uint32 // with ARI, slot*8 + function, as rdma_rename counts
	Multifunction bool   // the config header's multi-function bit
	IsVF          bool
	VF            uint32 // virtfn number; 0 when the PF does not list the VF
	IsSF          bool
	SFNum         uint32
}

// ReadPCILocation reads where device dev sits on PCI from the sysfs tree at
// sysRoot (normally /sys). A device on no PCI function (rxe, siw) gets an
// error matching ErrNotPCI.
func ReadPCILocation(sysRoot, dev string) (PCILocation, error) {
	loc, err := readPCILocation(sysRoot, dev)
	if err != nil {
		return PCILocation{}, fmt.Errorf("sysfs: read PCI location of %s: %w", dev, err)
	}
	return loc, nil
}

func readPCILocation(sysRoot, dev string) (PCILocation, error) {
	var loc PCILocation
	devLink := filepath.Join(sysRoot, "class", "infiniband", dev, "device")
	subsystem, err := os.Readlink(filepath.Join(devLink, "subsystem"))
	if errors.Is(err, fs.ErrNotExist) {
		return loc, ErrNotPCI
	}
	if err != nil {
		return loc, err
	}
	pcidev := devLink
	switch filepath.Base(subsystem) {
	case "pci":
	case "auxiliary":
		// A sub-function: an auxiliary device with an sfnum, below the
		// PCI function it was made on.
		n, err := readUint(filepath.Join(devLink, "sfnum"))
		if errors.Is(err, fs.ErrNotExist) {
			return loc, fmt.Errorf("%w (an auxiliary device without sfnum)", ErrNotPCI)
		}
		if err != nil {
			return loc, err
		}
		resolved, err := filepath.EvalSymlinks(devLink)
		if err != nil {
			return loc, err
		}
		loc.IsSF, loc.SFNum = true, n
		pcidev = filepath.Join(sysRoot, "bus", "pci", "devices", filepath.Base(filepath.Dir(resolved)))
	default:
		return loc, fmt.Errorf("%w (its device is on bus %s)", ErrNotPCI, filepath.Base(subsystem))
	}

	physfn := filepath.Join(pcidev, "physfn")
	entries, err := os.ReadDir(physfn)
	switch {
	case err == nil:
		// A VF: it is named after its PF, plus the number of the PF's
		// virtfn<N> link that points to it.
		loc.IsVF = true
		self, err := readFunction(pcidev)
		if err != nil {
			return loc, err
		}
		var vfs []int
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "virtfn"); ok {
				if i, err := strconv.Atoi(n); err == nil && i >= 0 {
					vfs = append(vfs, i)
				}
			}
		}
		slices.Sort(vfs)
		for _, i := range vfs {
			// rdma_rename compares slot and function only, taking the
			// first virtfn in directory order; the whole address is the
			// same answer whenever that one is unambiguous.
			f, err := readFunction(filepath.Join(physfn, "virtfn"+strconv.Itoa(i)))
			if err == nil && f == self {
				loc.VF = uint32(i)
				break
			}
		}
		pcidev = physfn
	case !errors.Is(err, fs.ErrNotExist):
		return loc, err
	}

	f, err := readFunction(pcidev)
	if err != nil {
		return loc, err
	}
	loc.Addr, loc.Domain, loc.Bus, loc.Slot, loc.Func = f.addr, f.domain, f.bus, f.slot, f.fn
	loc.Multifunction = isMultifunction(pcidev)
	return loc, nil
}

// pciFunction is a PCI address as rdma_rename's fill_pci_info reads it.
type pciFunction struct {
	addr                  string
	domain, bus, slot, fn uint32
}

// readFunction reads the address a PCI device link points to. With ARI the
// 5-bit slot and 3-bit function form one 8-bit function number; rdma_rename
// then adds slot*8 to the function and keeps the slot.
func readFunction(link string) (pciFunction, error) {
	target, err := os.Readlink(link)
	if err != nil {
		return pciFunction{}, err
	}
	addr := filepath.Base(target)
	f, ok := parsePCIAddr(addr)
	if !ok {
		return pciFunction{}, fmt.Errorf("cannot parse PCI address %q", addr)
	}
	if ari, err := readUint(filepath.Join(link, "ari_enabled")); err == nil && ari == 1 {
		f.fn += f.slot * 8
	}
	return f, nil
}

// parsePCIAddr parses "0000:3b:00.0": domain, bus and slot in hex, the
// function in decimal.
func parsePCIAddr(addr string) (pciFunction, bool) {
	parts := strings.Split(addr, ":")
	if len(parts) != 3 {
		return pciFunction{}, false
	}
	slot, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return pciFunction{}, false
	}
	var v [4]uint64
	var err error
	for i, p := range []struct {
		s    string
		base int
	}{{parts[0], 16}, {parts[1], 16}, {slot, 16}, {fn, 10}} {
		if v[i], err = strconv.ParseUint(p.s, p.base, 32); err != nil {
			return pciFunction{}, false
		}
	}
	return pciFunction{addr: addr, domain: uint32(v[0]), bus: uint32(v[1]), slot: uint32(v[2]), fn: uint32(v[3])}, true
}

// isMultifunction reads bit 7 of the header type byte (offset 0x0e) of the
// device's config space. Like rdma_rename, it needs the first 64 bytes.
func isMultifunction(pcidev string) bool {
	f, err := os.Open(filepath.Join(pcidev, "config"))
	if err != nil {
		return false
	}
	defer f.Close() //nolint:errcheck // read only
	var hdr [64]byte
	if n, _ := f.Read(hdr[:]); n != len(hdr) {
		return false
	}
	return hdr[0x0e]&0x80 != 0
}

func readUint(path string) (uint32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return uint32(v), nil
}
