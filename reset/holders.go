package reset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Holder is a process that will lose its RDMA resources on the device when
// it is reset. JSON field names are API.
type Holder struct {
	PID         uint32 `json:"pid"`
	Comm        string `json:"comm"`
	Cgroup      string `json:"cgroup"`       // "" when unreadable
	ContainerID string `json:"container_id"` // "" when none
	// Files are the device's uverbs character devices the process holds
	// open (/dev/infiniband/uverbs0), [] when it only owns resources
	// (through rdma_cm).
	Files []string `json:"files"`
	QPs   int      `json:"qps"` // QPs it owns on the device
	MRs   int      `json:"mrs"` // MRs it owns on the device
}

// uverbsDevNum returns the character device number of dev's uverbs device
// (/sys/class/infiniband_verbs/uverbsN with ibdev == dev); ok is false when
// the device has none (ib_uverbs not loaded).
func uverbsDevNum(sysRoot, dev string) (owner.DevNum, bool, error) {
	dir := filepath.Join(sysRoot, "class", "infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return owner.DevNum{}, false, nil
	}
	if err != nil {
		return owner.DevNum{}, false, err
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev"))
		if err != nil || strings.TrimSpace(string(b)) != dev {
			continue
		}
		b, err = os.ReadFile(filepath.Join(dir, e.Name(), "dev"))
		if err != nil {
			return owner.DevNum{}, false, err
		}
		n, err := owner.ParseDevNum(string(b))
		return n, err == nil, err
	}
	return owner.DevNum{}, false, nil
}

// usage is what a device's holders hold: the processes with its uverbs
// device open, and the user QPs and MRs per process.
type usage struct {
	holders    []Holder
	unreadable []uint32 // processes whose fd table could not be read
	qps, mrs   int      // user QPs and MRs on the device
	kernelQPs  int      // QPs kernel modules own (re-created with the device)
}

// scanUsage finds who uses dev: netlink for the QPs and MRs and their
// owners, /proc for the processes with its uverbs device open.
func scanUsage(ctx context.Context, c *rdmanl.Client, procRoot string, t target) (usage, error) {
	u := usage{holders: []Holder{}}
	dev := t.dev
	res, err := owner.NewResolver(procRoot)
	if err != nil {
		res = nil // a nil Resolver resolves nothing; pids are still shown
	}
	byPID := map[uint32]*Holder{}
	get := func(tid uint32) *Holder {
		p := owner.Process{TID: tid, PID: tid}
		if pp, ok := res.Lookup(tid); ok {
			p = pp
		}
		h, ok := byPID[p.PID]
		if !ok {
			h = &Holder{PID: p.PID, Comm: p.Comm, Cgroup: p.Cgroup, ContainerID: p.ContainerID, Files: []string{}}
			byPID[p.PID] = h
		}
		return h
	}
	for qp, err := range c.QPs(ctx, dev, rdmanl.DumpOptions{NoSRQJoin: true}) {
		if err != nil {
			return u, err
		}
		if qp.Owner.Kernel() {
			u.kernelQPs++
			continue
		}
		u.qps++
		get(qp.Owner.PID).QPs++
	}
	for mr, err := range c.MRs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			return u, err
		}
		if mr.Owner.Kernel() {
			continue
		}
		u.mrs++
		get(mr.Owner.PID).MRs++
	}
	scan, err := holdersOf(procRoot, t.uverbs, t.hasUverbs)
	if err != nil {
		return u, err
	}
	u.unreadable = scan.Unreadable
	for _, oh := range scan.Holders {
		h := get(oh.PID)
		if h.Comm == "" { // the resolver could not read it; the scan did
			h.Comm, h.Cgroup, h.ContainerID = oh.Comm, oh.Cgroup, oh.ContainerID
		}
		for _, f := range oh.Files {
			h.Files = append(h.Files, f.Path)
		}
	}
	for _, h := range byPID {
		u.holders = append(u.holders, *h)
	}
	slices.SortFunc(u.holders, func(a, b Holder) int { return int(a.PID) - int(b.PID) })
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
