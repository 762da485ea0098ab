package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
	"github.com/rdmatool/rdmatool/usage"
)

// devDetailsReport is what `dev show -d` prints; with -j, one object: the
// zombie contexts and the unreadable processes belong to no one device.
type devDetailsReport struct {
	Devices []devDetail `json:"devices"`
	// ZombieContexts are the processes holding the deleted uverbs node of
	// an unregistered device with no verbs context on any device.
	ZombieContexts []zombieRow `json:"zombie_contexts"`
	// HoldersUnreadable are the processes whose open files could not be
	// read (no privilege): holders and zombie contexts may be missing.
	HoldersUnreadable []uint32 `json:"holders_unreadable"`
}

// devDetail is one device: the netlink row of `dev show`, what sysfs says,
// and who holds it.
type devDetail struct {
	devRow
	BoardID string `json:"board_id"` // "" when the driver has none (rxe, siw)
	HCAType string `json:"hca_type"`
	// PCI is the PCI function behind the device; null for none (rxe, siw).
	PCI       *pciRow      `json:"pci"`
	Uverbs    string       `json:"uverbs"`     // "uverbs0"; "" when none
	UverbsDev string       `json:"uverbs_dev"` // its device number, "231:192"
	PortInfo  []devPortRow `json:"port_info"`
	Holders   []holderRow  `json:"holders"`
	// SysfsSkipped are the sysfs attributes and counters that could not be
	// read or parsed, left out of the rest.
	SysfsSkipped []skippedRow `json:"sysfs_skipped"`
}

type pciRow struct {
	Addr         string   `json:"addr"` // the function's own address (a VF's, not its PF's)
	Driver       string   `json:"driver"`
	VendorID     string   `json:"vendor_id"` // "0x15b3", as sysfs prints it
	DeviceID     string   `json:"device_id"`
	IsVF         bool     `json:"is_vf"`
	IsSF         bool     `json:"is_sf"`
	ResetMethods []string `json:"reset_methods"` // the kernel's order; [] when none or before 5.15
	Resettable   bool     `json:"resettable"`    // the function has a reset attribute
}

type devPortRow struct {
	Port      uint32  `json:"port"`
	State     string  `json:"state"`          // netlink's words, from sysfs's number
	PhysState string  `json:"physical_state"` // likewise: "LINK_UP"
	RateGbps  float64 `json:"rate_gbps"`
	LinkLayer string  `json:"link_layer"`
	Netdev    string  `json:"netdev"` // from sysfs, else netlink; "" when none
	// Counters and HWCounters are the port's counters/ and hw_counters/
	// files by name ({} when none).
	Counters   map[string]uint64 `json:"counters"`
	HWCounters map[string]uint64 `json:"hw_counters"`
}

type holderRow struct {
	PID         uint32    `json:"pid"`
	Comm        string    `json:"comm"`
	Cgroup      string    `json:"cgroup"`
	ContainerID string    `json:"container_id"`
	QPs         int       `json:"qps"`
	CMIDs       int       `json:"cm_ids"`
	Contexts    int       `json:"contexts"`
	Files       []fileRow `json:"files"` // [] when its fd table was not readable
}

type fileRow struct {
	FD   int    `json:"fd"`
	Path string `json:"path"`
}

type zombieRow struct {
	PID         uint32    `json:"pid"`
	Comm        string    `json:"comm"`
	Cgroup      string    `json:"cgroup"`
	ContainerID string    `json:"container_id"`
	Files       []fileRow `json:"files"` // the deleted uverbs nodes it holds
}

type skippedRow struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// readDevDetails reads what `dev show -d` prints about devs, some of
// host's devices: sysfs under sysRoot, and who uses them and the zombie
// contexts (usage.Scan) under sysRoot and procRoot and over netlink. A
// dump that left out entries it could not decode is warned about on log.
func readDevDetails(ctx context.Context, c *rdmanl.Client, devs, host []rdmanl.Device, sysRoot, procRoot string, log interface{ Warn(string, ...any) }) (devDetailsReport, error) {
	rep := devDetailsReport{Devices: []devDetail{}, ZombieContexts: []zombieRow{}, HoldersUnreadable: []uint32{}}
	use, err := usage.Scan(ctx, c, devs, usage.Options{SysRoot: sysRoot, ProcRoot: procRoot, Zombies: true, Host: host})
	if err != nil {
		return rep, err
	}
	for _, s := range use.Skipped {
		log.Warn("skipped malformed entries", "device", s.Device, "count", s.Err.Skipped, "err", s.Err.First)
	}
	for i, d := range devs {
		u := use.Devices[i]
		sd, err := sysfs.ReadDevice(sysRoot, d.Name)
		if err != nil {
			return rep, err
		}
		det := devDetail{devRow: devRowOf(d), BoardID: sd.BoardID, HCAType: sd.HCAType,
			Uverbs: u.Uverbs.Name, UverbsDev: u.Uverbs.Dev,
			PortInfo: []devPortRow{}, Holders: []holderRow{}, SysfsSkipped: []skippedRow{}}
		if det.PCI, err = pciOf(sysRoot, d.Name); err != nil {
			return rep, err
		}
		// sysfs has no netdev for siw's port on 6.1 (its
		// gid_attrs/ndevs/0 reads EINVAL): netlink's port has it.
		nlPorts, err := c.Ports(ctx, d)
		if err != nil {
			return rep, err
		}
		for _, p := range sd.Ports {
			if i := slices.IndexFunc(nlPorts, func(np rdmanl.Port) bool { return np.Index == p.Port }); p.Netdev == "" && i >= 0 {
				p.Netdev = nlPorts[i].NetdevName
			}
			det.PortInfo = append(det.PortInfo, devPortRow{
				Port: p.Port, State: rdmanl.PortState(p.StateID).String(), PhysState: rdmanl.PhysState(p.PhysStateID).String(),
				RateGbps: float64(p.RateBytesPerSecond) / 125e6, LinkLayer: p.LinkLayer, Netdev: p.Netdev,
				Counters: p.Counters, HWCounters: p.HWCounters,
			})
		}
		for _, s := range sd.Skipped {
			det.SysfsSkipped = append(det.SysfsSkipped, skippedRow{Path: s.Path, Error: s.Err.Error()})
		}
		for _, h := range u.Holders {
			det.Holders = append(det.Holders, holderRow{PID: h.PID, Comm: h.Comm, Cgroup: h.Cgroup, ContainerID: h.ContainerID,
				QPs: h.QPs, CMIDs: h.CMIDs, Contexts: h.Contexts, Files: fileRows(h.Files)})
		}
		rep.Devices = append(rep.Devices, det)
	}
	for _, z := range use.Zombies {
		rep.ZombieContexts = append(rep.ZombieContexts, zombieRow{PID: z.PID, Comm: z.Comm, Cgroup: z.Cgroup, ContainerID: z.ContainerID, Files: fileRows(z.Files)})
	}
	rep.HoldersUnreadable = append(rep.HoldersUnreadable, use.Unreadable...)
	return rep, nil
}

// pciOf reads the PCI function behind dev; nil when it has none.
func pciOf(sysRoot, dev string) (*pciRow, error) {
	loc, err := sysfs.ReadPCILocation(sysRoot, dev)
	if errors.Is(err, sysfs.ErrNotPCI) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := sysfs.ReadPCIFunction(sysRoot, dev)
	if err != nil {
		return nil, err
	}
	r := &pciRow{Addr: f.Addr, Driver: f.Driver, VendorID: fmt.Sprintf("0x%04x", f.VendorID), DeviceID: fmt.Sprintf("0x%04x", f.DeviceID),
		IsVF: loc.IsVF, IsSF: loc.IsSF, ResetMethods: []string{}, Resettable: f.Resettable}
	r.ResetMethods = append(r.ResetMethods, f.ResetMethods...)
	return r, nil
}

func fileRows(files []owner.OpenFile) []fileRow {
	rows := make([]fileRow, 0, len(files))
	for _, f := range files {
		rows = append(rows, fileRow{FD: f.FD, Path: f.Path})
	}
	return rows
}

// renderDevDetails writes the text of `dev show -d`: each device's line,
// then indented what sysfs says, its ports (with counters when asked) and
// its holders; then the zombie contexts, and a warning when processes could
// not be read. What sysfs and /proc hold (names, paths) is escaped
// (quote.Text): a process names itself.
func renderDevDetails(w io.Writer, rep devDetailsReport, counters bool) error {
	t := quote.Text
	bw := bufio.NewWriter(w)
	for _, d := range rep.Devices {
		rv := reflect.ValueOf(d.devRow)
		bw.WriteString(textLineFields(rv, textFields(rv.Type()), true))
		bw.WriteByte('\n')
		var facts []string
		for _, kv := range [][2]string{{"board-id", d.BoardID}, {"hca-type", d.HCAType}} {
			if kv[1] != "" {
				facts = append(facts, kv[0]+" "+kv[1])
			}
		}
		if d.Uverbs != "" {
			facts = append(facts, "uverbs "+d.Uverbs+" ("+d.UverbsDev+")")
		} else {
			facts = append(facts, "uverbs none")
		}
		if p := d.PCI; p != nil {
			pci := "pci " + p.Addr
			if p.Driver != "" {
				pci += " driver " + p.Driver
			}
			pci += " id " + strings.TrimPrefix(p.VendorID, "0x") + ":" + strings.TrimPrefix(p.DeviceID, "0x")
			switch {
			case p.IsVF:
				pci += " vf"
			case p.IsSF:
				pci += " sf"
			}
			if len(p.ResetMethods) > 0 {
				pci += " reset-methods " + strings.Join(p.ResetMethods, ",")
			} else if p.Resettable {
				pci += " resettable"
			}
			facts = append(facts, pci)
		} else {
			facts = append(facts, "pci none")
		}
		fmt.Fprintf(bw, "    %s\n", t(strings.Join(facts, " ")))
		for _, p := range d.PortInfo {
			fmt.Fprintf(bw, "    port %d state %s physical-state %s rate %s Gb/s link-layer %s", p.Port, t(p.State), t(p.PhysState),
				strconv.FormatFloat(p.RateGbps, 'f', -1, 64), t(p.LinkLayer))
			if p.Netdev != "" {
				fmt.Fprintf(bw, " netdev %s", t(p.Netdev))
			}
			bw.WriteByte('\n')
			if counters {
				for _, c := range []struct {
					name string
					m    map[string]uint64
				}{{"counters", p.Counters}, {"hw-counters", p.HWCounters}} {
					if len(c.m) == 0 {
						continue
					}
					fmt.Fprintf(bw, "        %s", c.name)
					for _, k := range slices.Sorted(maps.Keys(c.m)) {
						fmt.Fprintf(bw, " %s %d", t(k), c.m[k])
					}
					bw.WriteByte('\n')
				}
			}
		}
		if len(d.Holders) == 0 {
			bw.WriteString("    holders none\n")
		}
		for _, h := range d.Holders {
			fmt.Fprintf(bw, "    holder pid %d comm %s qps %d cm-ids %d contexts %d", h.PID, t(h.Comm), h.QPs, h.CMIDs, h.Contexts)
			if h.Cgroup != "" {
				fmt.Fprintf(bw, " cgroup %s", t(h.Cgroup))
			}
			if h.ContainerID != "" {
				fmt.Fprintf(bw, " container %s", t(owner.ShortContainerID(h.ContainerID)))
			}
			for _, f := range h.Files {
				fmt.Fprintf(bw, " fd %d %s", f.FD, t(f.Path))
			}
			bw.WriteByte('\n')
		}
		for _, s := range d.SysfsSkipped {
			fmt.Fprintf(bw, "    sysfs skipped %s: %s\n", t(s.Path), t(s.Error))
		}
	}
	if len(rep.ZombieContexts) > 0 {
		bw.WriteString("zombie contexts (uverbs files of unregistered devices, no context on any device):\n")
		for _, z := range rep.ZombieContexts {
			fmt.Fprintf(bw, "    pid %d comm %s", z.PID, t(z.Comm))
			for _, f := range z.Files {
				fmt.Fprintf(bw, " fd %d %s (deleted)", f.FD, t(f.Path))
			}
			bw.WriteByte('\n')
		}
	}
	if n := len(rep.HoldersUnreadable); n > 0 {
		fmt.Fprintf(bw, "holders may be missing: the open files of %d processes could not be read (run as root)\n", n)
	}
	return bw.Flush()
}
