package reset

import (
	"context"
	"fmt"

	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// Holder is a process that will lose its RDMA resources on the device when
// it is reset. JSON field names are API.
type Holder struct {
	PID         uint32 `json:"pid"`
	Comm        string `json:"comm"`
	Cgroup      string `json:"cgroup"`       // "" when unreadable
	ContainerID string `json:"container_id"` // "" when none
	// Files are the device's files the process holds open
	// (/dev/infiniband/uverbs0, and rdma_cm when it has rdma_cm IDs on
	// the device); [] when it only owns resources.
	Files    []string `json:"files"`
	QPs      int      `json:"qps"`      // QPs it owns on the device
	MRs      int      `json:"mrs"`      // MRs it owns on the device
	CMIDs    int      `json:"cm_ids"`   // rdma_cm IDs it owns on the device
	Contexts int      `json:"contexts"` // verbs contexts it has open on the device
}

// uverbsDevNum returns the character device number of dev's uverbs device;
// ok is false when the device has none (ib_uverbs not loaded).
func uverbsDevNum(sysRoot, dev string) (owner.DevNum, bool, error) {
	us, err := sysfs.ReadUverbs(sysRoot)
	if err != nil {
		return owner.DevNum{}, false, err
	}
	for _, u := range us {
		if u.Device == dev {
			n, err := owner.ParseDevNum(u.Dev)
			return n, err == nil, err
		}
	}
	return owner.DevNum{}, false, nil
}

// usage is what a device's holders hold: the processes that have it open
// or own resources on it, and the user QPs and MRs on it.
type usage struct {
	holders    []Holder
	unreadable []uint32 // processes whose fd table could not be read
	qps, mrs   int      // user QPs and MRs on the device
	kernelQPs  int      // QPs kernel modules own (re-created with the device)
}

// scanUsage finds who uses the device: netlink for its resources and their
// owners, /proc for the processes with its files open, merged by
// owner.DeviceHolders.
func scanUsage(ctx context.Context, c *rdmanl.Client, sysRoot, procRoot string, t target) (usage, error) {
	u := usage{holders: []Holder{}}
	dev := t.dev
	res, err := owner.NewResolver(procRoot)
	if err != nil {
		res = nil // a nil Resolver resolves nothing; owner ids are kept as pids
	}
	use := owner.DeviceUse{Device: dev.Name, Uverbs: t.uverbs, HasUverbs: t.hasUverbs}
	for qp, err := range c.QPs(ctx, dev, rdmanl.DumpOptions{NoSRQJoin: true}) {
		if err != nil {
			return u, err
		}
		if qp.Owner.Kernel() {
			u.kernelQPs++
			continue
		}
		u.qps++
		use.QPOwners = append(use.QPOwners, qp.Owner.PID)
	}
	for id, err := range c.CMIDs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			return u, err
		}
		if !id.Owner.Kernel() {
			use.CMIDOwners = append(use.CMIDOwners, id.Owner.PID)
		}
	}
	for cx, err := range c.Contexts(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			return u, err
		}
		use.ContextOwners = append(use.ContextOwners, cx.Owner.PID)
	}
	mrs := map[uint32]int{} // by process
	for mr, err := range c.MRs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			return u, err
		}
		if mr.Owner.Kernel() {
			continue
		}
		u.mrs++
		pid := mr.Owner.PID
		if p, ok := res.Lookup(pid); ok {
			pid = p.PID
		}
		mrs[pid]++
	}
	var rdmaCM owner.DevNum // none: the zero number matches no open file
	if s, err := sysfs.ReadRDMACMDev(sysRoot); err == nil {
		rdmaCM, _ = owner.ParseDevNum(s)
	}
	var uverbs []owner.DevNum
	if t.hasUverbs {
		uverbs = append(uverbs, t.uverbs)
	}
	scan, err := owner.Holders(procRoot, owner.RDMAFiles(uverbs, rdmaCM))
	if err != nil {
		return u, fmt.Errorf("reset: holders of %s: %w", dev.Name, err)
	}
	u.unreadable = scan.Unreadable
	for _, dh := range owner.DeviceHolders(scan, []owner.DeviceUse{use}, rdmaCM, res)[dev.Name] {
		h := Holder{PID: dh.PID, Comm: dh.Comm, Cgroup: dh.Cgroup, ContainerID: dh.ContainerID, Files: []string{},
			QPs: dh.QPs, MRs: mrs[dh.PID], CMIDs: dh.CMIDs, Contexts: dh.Contexts}
		for _, f := range dh.Files {
			h.Files = append(h.Files, f.Path)
		}
		u.holders = append(u.holders, h)
	}
	return u, nil
}

// holdersOf lists the processes with the uverbs device num open (none
// when the device has no uverbs device: ok false). The number is read
// before the reset: once the removal has begun, sysfs no longer lists it.
func holdersOf(procRoot string, num owner.DevNum, ok bool) (owner.HolderScan, error) {
	if !ok {
		return owner.HolderScan{}, nil
	}
	scan, err := owner.Holders(procRoot, func(f owner.OpenFile) bool { return f.Dev == num })
	if err != nil {
		return owner.HolderScan{}, fmt.Errorf("reset: holders of uverbs device %s: %w", num, err)
	}
	return scan, nil
}

// holderOf converts a /proc holder.
func holderOf(oh owner.Holder) Holder {
	h := Holder{PID: oh.PID, Comm: oh.Comm, Cgroup: oh.Cgroup, ContainerID: oh.ContainerID, Files: []string{}}
	for _, f := range oh.Files {
		h.Files = append(h.Files, f.Path)
	}
	return h
}
