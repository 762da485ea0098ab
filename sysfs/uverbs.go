package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Uverbs is one uverbs character device (/dev/infiniband/uverbsN), through
// which user space opens an RDMA device, as
// /sys/class/infiniband_verbs/uverbsN describes it. Every RDMA device that
// user space can use has one, software devices (rxe, siw) included.
type Uverbs struct {
	Name   string // "uverbs0"
	Device string // the RDMA device it opens (ibdev)
	// Dev is its character device number as the dev attribute prints it,
	// "231:192" (owner.ParseDevNum reads it).
	Dev string
}

// ReadUverbs reads every uverbs character device from
// /sys/class/infiniband_verbs under sysRoot (normally /sys), sorted by
// name. None (ib_uverbs not loaded) is an empty list. One that vanishes
// while it is read (its device unregistered) is left out.
func ReadUverbs(sysRoot string) ([]Uverbs, error) {
	dir := filepath.Join(sysRoot, "class", "infiniband_verbs")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []Uverbs{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: list uverbs devices: %w", err)
	}
	out := []Uverbs{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "uverbs") { // abi_version
			continue
		}
		u := Uverbs{Name: e.Name()}
		if u.Device, err = readAttr(filepath.Join(dir, e.Name(), "ibdev")); err == nil {
			u.Dev, err = readAttr(filepath.Join(dir, e.Name(), "dev"))
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sysfs: read %s: %w", e.Name(), err)
		}
		out = append(out, u)
	}
	return out, nil
}

// ReadRDMACMDev reads the character device number of /dev/infiniband/rdma_cm
// (the rdma_ucm misc device) as its dev attribute prints it, "10:260". Without
// rdma_ucm loaded it is an error matching fs.ErrNotExist.
func ReadRDMACMDev(sysRoot string) (string, error) {
	s, err := readAttr(filepath.Join(sysRoot, "class", "misc", "rdma_cm", "dev"))
	if err != nil {
		return "", fmt.Errorf("sysfs: read the rdma_cm device number: %w", err)
	}
	return s, nil
}
