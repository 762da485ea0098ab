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

	procsysfs "github.com/prometheus/procfs/sysfs"
)

// Device is what /sys/class/infiniband/DEV says about one RDMA device.
// Attributes a driver does not offer are "" (rxe and siw have no board_id
// or hca_type, and an empty fw_ver).
type Device struct {
	Name            string
	NodeGUID        string // as sysfs prints it: "0000:00ff:fe00:0101"
	FirmwareVersion string
	BoardID         string
	HCAType         string
	Ports           []Port // by port number
	// Skipped lists the attributes and counters that could not be read or
	// parsed, each with why: they are left out, the rest of the device is
	// read.
	Skipped []Skipped
}

// Port is what /sys/class/infiniband/DEV/ports/N says about one port.
type Port struct {
	Port        uint32
	State       string // "ACTIVE", from "4: ACTIVE"
	StateID     uint32
	PhysState   string // "LinkUp", from "5: LinkUp"
	PhysStateID uint32
	// RateBytesPerSecond is the rate attribute ("2.5 Gb/sec (1X SDR)") in
	// bytes a second, as procfs converts it.
	RateBytesPerSecond uint64
	LinkLayer          string // "InfiniBand" or "Ethernet"
	// Netdev is the network device of the port: the one its GID 0 is on
	// (gid_attrs/ndevs/0: RoCE and iWARP, rxe and siw included), else the
	// parent device's net/ entry for this port (IPoIB on an InfiniBand
	// port). "" when it has none, or when sysfs does not say: siw's GID 0
	// reads EINVAL on 6.1 (RDMA netlink's port has the netdev there).
	Netdev string
	// Counters are the files of counters/ and counters_ext/ (the PMA
	// counters), HWCounters those of hw_counters/ (the driver's own), by
	// file name, with the values the kernel prints: port_rcv_data and
	// port_xmit_data count 4-octet words, as the IB spec defines them.
	// Empty when the port has none (siw has neither).
	Counters   map[string]uint64
	HWCounters map[string]uint64
}

// Skipped is one attribute or counter that was left out.
type Skipped struct {
	Path string // below the device's directory: "ports/1/hw_counters/sent_pkts"
	Err  error
}

// readDevices reads every device in /sys/class/infiniband under sysRoot
// (normally /sys), sorted by name. A device that vanishes while it is read
// is left out; one bad attribute never fails a device (see Device.Skipped).
func readDevices(sysRoot string) ([]Device, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "class", "infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		return []Device{}, nil // no RDMA devices (ib_core not loaded)
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: list RDMA devices: %w", err)
	}
	devs := make([]Device, 0, len(entries))
	for _, e := range entries {
		d, err := ReadDevice(sysRoot, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// ReadDevice reads device name from /sys/class/infiniband under sysRoot.
// A device that does not exist is an error matching fs.ErrNotExist; an
// attribute or counter that cannot be read or parsed is recorded in
// Device.Skipped and left out.
func ReadDevice(sysRoot, name string) (Device, error) {
	dir := filepath.Join(sysRoot, "class", "infiniband", name)
	if _, err := os.Stat(dir); err != nil {
		return Device{}, fmt.Errorf("sysfs: read RDMA device %s: %w", name, err)
	}
	d := Device{Name: name, Ports: []Port{}, Skipped: []Skipped{}}
	if err := fromProcfs(&d, sysRoot); err != nil {
		// procfs (v0.23.0) fails the whole device on one file it cannot
		// read or parse: fw_ver missing, a state, rate or link_layer it
		// cannot parse, a counter with an error other than ENOENT, EACCES,
		// EOPNOTSUPP and EINVAL or a value other than a number or "N/A (no
		// PMA)". Its error names the file only sometimes. This is the
		// node_exporter infiniband collector's complaint: so the device is
		// read again attribute by attribute, and what fails is skipped
		// with its error.
		d = Device{Name: name, Ports: []Port{}, Skipped: []Skipped{}}
		if err := readAttrs(&d, dir); err != nil {
			return Device{}, fmt.Errorf("sysfs: read RDMA device %s: %w", name, err)
		}
	}
	for i := range d.Ports {
		p := &d.Ports[i]
		portDir := filepath.Join(dir, "ports", strconv.FormatUint(uint64(p.Port), 10))
		// Counters are read by file name, not through procfs, whose
		// counter structs know a fixed list of names (about 30 mlx5 hw
		// counters: of rxe's 16 only 3) and drop the rest.
		p.Counters = readCounters(&d, dir, portDir, "counters", "counters_ext")
		p.HWCounters = readCounters(&d, dir, portDir, "hw_counters")
		p.Netdev = portNetdev(dir, portDir, p.Port)
	}
	return d, nil
}

// fromProcfs fills d's attributes and ports from procfs's InfiniBandDevice.
func fromProcfs(d *Device, sysRoot string) error {
	pfs, err := procsysfs.NewFS(sysRoot)
	if err != nil {
		return err
	}
	ib, err := pfs.InfiniBandDevice(d.Name)
	if err != nil {
		return err
	}
	d.NodeGUID, d.FirmwareVersion, d.BoardID, d.HCAType = ib.NodeGUID, ib.FirmwareVersion, ib.BoardID, ib.HCAType
	for _, p := range ib.Ports {
		d.Ports = append(d.Ports, Port{
			Port: uint32(p.Port), State: p.State, StateID: uint32(p.StateID),
			PhysState: p.PhysState, PhysStateID: uint32(p.PhysStateID),
			RateBytesPerSecond: p.Rate, LinkLayer: p.LinkLayer,
		})
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return int(a.Port) - int(b.Port) })
	return nil
}

// readAttrs reads d's attributes and ports one file at a time, recording
// each one that fails in d.Skipped. Only a device whose ports cannot be
// listed is an error.
func readAttrs(d *Device, dir string) error {
	for _, a := range []struct {
		file string
		v    *string
	}{{"node_guid", &d.NodeGUID}, {"fw_ver", &d.FirmwareVersion}, {"board_id", &d.BoardID}, {"hca_type", &d.HCAType}} {
		s, err := readAttr(filepath.Join(dir, a.file))
		switch {
		case err == nil:
			*a.v = s
		case !errors.Is(err, fs.ErrNotExist): // drivers without it have no file
			d.skip(a.file, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			d.skip(filepath.Join("ports", e.Name()), errors.New("not a port number"))
			continue
		}
		p := Port{Port: uint32(n)}
		rel := func(f string) string { return filepath.Join("ports", e.Name(), f) }
		attr := func(f string) (string, bool) {
			s, err := readAttr(filepath.Join(dir, rel(f)))
			if err != nil {
				d.skip(rel(f), err)
				return "", false
			}
			return s, true
		}
		if s, ok := attr("state"); ok {
			if p.StateID, p.State, err = parseStateAttr(s); err != nil {
				d.skip(rel("state"), err)
			}
		}
		if s, ok := attr("phys_state"); ok {
			if p.PhysStateID, p.PhysState, err = parseStateAttr(s); err != nil {
				d.skip(rel("phys_state"), err)
			}
		}
		if s, ok := attr("rate"); ok {
			if p.RateBytesPerSecond, err = parseRateAttr(s); err != nil {
				d.skip(rel("rate"), err)
			}
		}
		if s, ok := attr("link_layer"); ok {
			p.LinkLayer = s
		}
		d.Ports = append(d.Ports, p)
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return int(a.Port) - int(b.Port) })
	return nil
}

func (d *Device) skip(path string, err error) {
	d.Skipped = append(d.Skipped, Skipped{Path: path, Err: err})
}

// parseStateAttr parses a port state attribute: "4: ACTIVE".
func parseStateAttr(s string) (uint32, string, error) {
	id, name, ok := strings.Cut(s, ":")
	v, err := strconv.ParseUint(strings.TrimSpace(id), 10, 32)
	if !ok || err != nil {
		return 0, "", fmt.Errorf("cannot parse %q as ID: NAME", s)
	}
	return uint32(v), strings.TrimSpace(name), nil
}

// parseRateAttr parses a rate attribute, "2.5 Gb/sec (1X SDR)", into bytes
// a second the way procfs does.
func parseRateAttr(s string) (uint64, error) {
	gbps, _, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(gbps, 32)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("cannot parse %q as a rate", s)
	}
	return uint64(v * 125000000), nil
}

// readCounters reads the counter files of the given directories of a port.
// A missing directory is no counters; an unreadable or unparsable file is
// skipped and recorded.
func readCounters(d *Device, devDir, portDir string, dirs ...string) map[string]uint64 {
	m := map[string]uint64{}
	for _, sub := range dirs {
		entries, err := os.ReadDir(filepath.Join(portDir, sub))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				d.skip(relTo(devDir, filepath.Join(portDir, sub)), err)
			}
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			path := filepath.Join(portDir, sub, e.Name())
			s, err := readAttr(path)
			if err == nil {
				var v uint64
				if v, err = strconv.ParseUint(s, 10, 64); err != nil {
					err = fmt.Errorf("not a counter: %q", s)
				} else {
					m[e.Name()] = v
					continue
				}
			}
			d.skip(relTo(devDir, path), err)
		}
	}
	return m
}

// portNetdev finds the network device of a port: its GID 0's, else the one
// of the parent device's net/ entries whose dev_port is this port (the
// kernel numbers dev_port from 0).
func portNetdev(devDir, portDir string, port uint32) string {
	if s, err := readAttr(filepath.Join(portDir, "gid_attrs", "ndevs", "0")); err == nil && s != "" {
		return s
	}
	netDir := filepath.Join(devDir, "device", "net")
	entries, err := os.ReadDir(netDir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		devPort := uint64(0)
		if s, err := readAttr(filepath.Join(netDir, e.Name(), "dev_port")); err == nil {
			if devPort, err = strconv.ParseUint(s, 10, 32); err != nil {
				continue
			}
		}
		if devPort+1 == uint64(port) {
			return e.Name()
		}
	}
	return ""
}

// readAttr reads a sysfs attribute without its surrounding space.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func relTo(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil {
		return r
	}
	return path
}
