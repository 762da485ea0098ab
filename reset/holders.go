package reset

import (
	"context"
	"fmt"

	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/usage"
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

// scanUsage finds who uses the device (usage.Scan, with its MRs) for
// rep, and takes the number of its uverbs device for the holders a reset
// waits for. A dump that left out entries it could not decode is logged,
// and what it decoded counted.
func scanUsage(ctx context.Context, c *rdmanl.Client, o Options, t *target, rep *Report) error {
	u, err := usage.Scan(ctx, c, []rdmanl.Device{t.dev}, usage.Options{SysRoot: o.sysRoot(), ProcRoot: o.procRoot(), MRs: true})
	if err != nil {
		return err
	}
	for _, s := range u.Skipped {
		o.log().Warn("skipped malformed entries", "device", s.Device, "count", s.Err.Skipped, "err", s.Err.First)
	}
	d := u.Devices[0]
	t.uverbs, t.hasUverbs = d.UverbsNum, d.HasUverbs
	rep.QPs, rep.MRs, rep.KernelQPs = d.QPs, d.MRs, d.KernelQPs
	for _, dh := range d.Holders {
		h := Holder{PID: dh.PID, Comm: dh.Comm, Cgroup: dh.Cgroup, ContainerID: dh.ContainerID, Files: []string{},
			QPs: dh.QPs, MRs: dh.MRs, CMIDs: dh.CMIDs, Contexts: dh.Contexts}
		for _, f := range dh.Files {
			h.Files = append(h.Files, f.Path)
		}
		rep.Holders = append(rep.Holders, h)
	}
	rep.Unreadable = append(rep.Unreadable, u.Unreadable...)
	return nil
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
