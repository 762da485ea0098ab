package usage

import (
	"context"
	"errors"
	"io/fs"
	"iter"

	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// ContextSource is what the zombie look reads over RDMA netlink: the
// host's devices and their verbs contexts.
type ContextSource interface {
	Devices(ctx context.Context) ([]rdmanl.Device, error)
	Contexts(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.Context, error]
}

// Netlink is what Scan reads over RDMA netlink; *rdmanl.Client is one.
type Netlink interface {
	ContextSource
	QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error]
	CMIDs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error]
	MRs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.MR, error]
}

// Options say where a Scan reads and what more it looks for.
type Options struct {
	SysRoot  string // normally /sys
	ProcRoot string // normally /proc
	// MRs dumps each device's MRs too, to count the user MRs on it and
	// each holder's.
	MRs bool
	// Zombies looks for zombie contexts too. They need the verbs contexts
	// of every device the host has: Host lists them as the caller listed
	// them (the scanned devices among them), and nil has Scan list them.
	// The devices not scanned have their contexts dumped, and Host is
	// listed, only when some process holds a deleted uverbs node.
	Zombies bool
	Host    []rdmanl.Device
}

// Report is what a scan found.
type Report struct {
	// Devices are the scanned devices, in the order they were given.
	Devices []Device
	// Zombies are the zombie contexts (Options.Zombies, or Zombies),
	// sorted by PID; [] when none or not looked for.
	Zombies []owner.ZombieContext
	// Unreadable lists the processes whose open files could not be read
	// (no privilege), sorted: holders and zombie contexts may be missing.
	Unreadable []uint32
	// Skipped are the dumps that left out entries they could not decode;
	// what they decoded is counted.
	Skipped []Skip
}

// Skip is a dump of Device that left out entries it could not decode.
type Skip struct {
	Device string
	Err    *rdmanl.PartialError
}

// Device is who uses one RDMA device.
type Device struct {
	Name string
	// Uverbs is its uverbs character device as sysfs describes it; Name
	// "" when it has none (ib_uverbs not loaded). UverbsNum is its number.
	Uverbs    sysfs.Uverbs
	UverbsNum owner.DevNum
	HasUverbs bool
	QPs       int // user QPs on the device
	KernelQPs int // QPs kernel modules own (re-created with the device)
	MRs       int // user MRs on the device (Options.MRs)
	// Holders are the processes that have the device's uverbs node open
	// or own resources on it (owner.DeviceHolders), sorted by PID.
	Holders []Holder
}

// Holder is a process holding a device.
type Holder struct {
	owner.DeviceHolder
	MRs int // MRs it owns on the device (Options.MRs)
}

// Scan finds who uses devs (see the package documentation). An error
// reading sysfs, /proc or netlink ends it, except a partial dump
// (Report.Skipped).
func Scan(ctx context.Context, nl Netlink, devs []rdmanl.Device, o Options) (Report, error) {
	r := Report{Devices: make([]Device, 0, len(devs)), Zombies: []owner.ZombieContext{}, Unreadable: []uint32{}}
	uverbs, err := sysfs.ReadUverbs(o.SysRoot)
	if err != nil {
		return r, err
	}
	var rdmaCM owner.DevNum // 0:0, no device, without rdma_ucm
	if s, err := sysfs.ReadRDMACMDev(o.SysRoot); err == nil {
		if rdmaCM, err = owner.ParseDevNum(s); err != nil {
			return r, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return r, err
	}
	nums := make([]owner.DevNum, 0, len(devs))
	for _, dev := range devs {
		d := Device{Name: dev.Name, Holders: []Holder{}}
		for _, u := range uverbs {
			if u.Device == dev.Name {
				if d.UverbsNum, err = owner.ParseDevNum(u.Dev); err != nil {
					return r, err
				}
				d.Uverbs, d.HasUverbs = u, true
				nums = append(nums, d.UverbsNum)
				break
			}
		}
		r.Devices = append(r.Devices, d)
	}
	hs, err := owner.Holders(o.ProcRoot, owner.RDMAFiles(nums, rdmaCM))
	if err != nil {
		return r, err
	}
	r.Unreadable = append(r.Unreadable, hs.Unreadable...)
	procs, _ := owner.NewResolver(o.ProcRoot) // Holders read it: it exists

	uses := make([]owner.DeviceUse, len(devs))
	mrOwners := make([][]uint32, len(devs)) // by device, the owner ids of its user MRs
	var contextOwners []uint32              // of every device dumped
	for i, dev := range devs {
		d := &r.Devices[i]
		u := &uses[i]
		*u = owner.DeviceUse{Device: dev.Name, Uverbs: d.UverbsNum, HasUverbs: d.HasUverbs}
		err := dump(nl.QPs(ctx, dev, rdmanl.DumpOptions{NoSRQJoin: true}), dev, &r, func(qp rdmanl.QP) {
			if qp.Owner.Kernel() {
				d.KernelQPs++
				return
			}
			d.QPs++
			u.QPOwners = append(u.QPOwners, qp.Owner.PID)
		})
		if err != nil {
			return r, err
		}
		err = dump(nl.CMIDs(ctx, dev, rdmanl.DumpOptions{}), dev, &r, func(id rdmanl.CMID) {
			if !id.Owner.Kernel() {
				u.CMIDOwners = append(u.CMIDOwners, id.Owner.PID)
			}
		})
		if err != nil {
			return r, err
		}
		err = dump(nl.Contexts(ctx, dev, rdmanl.DumpOptions{}), dev, &r, func(c rdmanl.Context) {
			u.ContextOwners = append(u.ContextOwners, c.Owner.PID)
		})
		if err != nil {
			return r, err
		}
		contextOwners = append(contextOwners, u.ContextOwners...)
		if o.MRs {
			err = dump(nl.MRs(ctx, dev, rdmanl.DumpOptions{}), dev, &r, func(mr rdmanl.MR) {
				if !mr.Owner.Kernel() {
					d.MRs++
					mrOwners[i] = append(mrOwners[i], mr.Owner.PID)
				}
			})
			if err != nil {
				return r, err
			}
		}
	}
	holders := owner.DeviceHolders(hs, uses, rdmaCM, procs)
	for i := range r.Devices {
		d := &r.Devices[i]
		mrs := map[uint32]int{} // by process
		for _, pid := range mrOwners[i] {
			if p, ok := procs.Lookup(pid); ok {
				pid = p.PID
			}
			mrs[pid]++
		}
		for _, h := range holders[d.Name] {
			d.Holders = append(d.Holders, Holder{DeviceHolder: h, MRs: mrs[h.PID]})
		}
	}
	if o.Zombies {
		if r.Zombies, err = zombies(ctx, nl, o.Host, devs, contextOwners, hs, procs, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// Zombies looks at the processes under procRoot for zombie contexts alone:
// the Report has no Devices. host is as Options.Host.
func Zombies(ctx context.Context, nl ContextSource, host []rdmanl.Device, procRoot string) (Report, error) {
	r := Report{Devices: []Device{}, Zombies: []owner.ZombieContext{}, Unreadable: []uint32{}}
	hs, err := owner.Holders(procRoot, owner.ZombieFiles)
	if err != nil {
		return r, err
	}
	r.Unreadable = append(r.Unreadable, hs.Unreadable...)
	procs, _ := owner.NewResolver(procRoot) // nil: owner ids taken as processes
	if r.Zombies, err = zombies(ctx, nl, host, nil, nil, hs, procs, &r); err != nil {
		return r, err
	}
	return r, nil
}

// zombies finds the zombie contexts in hs, a Holders scan whose filter
// keeps deleted uverbs nodes (owner.RDMAFiles, owner.ZombieFiles). The
// contexts of scanned, whose owners are contextOwners, were dumped; those
// of the other devices of host (listed when nil) are dumped here, and only
// when some process holds a deleted uverbs node.
func zombies(ctx context.Context, nl ContextSource, host, scanned []rdmanl.Device, contextOwners []uint32,
	hs owner.HolderScan, procs *owner.Resolver, r *Report) ([]owner.ZombieContext, error) {
	if len(owner.ZombieContexts(hs, nil, nil)) == 0 {
		return []owner.ZombieContext{}, nil // no deleted uverbs node open: no dump needed
	}
	if host == nil {
		var err error
		if host, err = nl.Devices(ctx); err != nil {
			return nil, err
		}
	}
	done := map[uint32]bool{}
	for _, dev := range scanned {
		done[dev.Index] = true
	}
	for _, dev := range host {
		if done[dev.Index] {
			continue
		}
		err := dump(nl.Contexts(ctx, dev, rdmanl.DumpOptions{}), dev, r, func(c rdmanl.Context) {
			contextOwners = append(contextOwners, c.Owner.PID)
		})
		// A device gone since the listing has no contexts; the entries
		// its dump yielded before it went still count.
		if err != nil && !errors.Is(err, rdmanl.ErrNoDevice) {
			return nil, err
		}
	}
	return owner.ZombieContexts(hs, contextOwners, procs), nil
}

// dump hands each entry of one of dev's dumps to keep. A partial dump is
// noted in r.Skipped; any other error is returned.
func dump[T any](seq iter.Seq2[T, error], dev rdmanl.Device, r *Report, keep func(T)) error {
	for v, err := range seq {
		var pe *rdmanl.PartialError
		switch {
		case err == nil:
			keep(v)
		case errors.As(err, &pe):
			r.Skipped = append(r.Skipped, Skip{Device: dev.Name, Err: pe})
		default:
			return err
		}
	}
	return nil
}
