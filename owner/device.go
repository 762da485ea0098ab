package owner

import (
	"path/filepath"
	"slices"
	"strings"
)

// DeviceUse is what the caller knows about one RDMA device's users: the
// number of its uverbs character device (from sysfs) and the owners the
// kernel recorded for its resources (from RDMA netlink). It is the plain
// input of DeviceHolders, which keeps this package to /proc.
type DeviceUse struct {
	Device    string
	Uverbs    DevNum // its uverbs character device; see HasUverbs
	HasUverbs bool
	// QPOwners, CMIDOwners and ContextOwners hold the owner id the kernel
	// recorded (a thread id; 0 for a kernel owner or one not visible) of
	// each user QP, rdma_cm ID and verbs context of the device: one entry
	// per resource.
	QPOwners, CMIDOwners, ContextOwners []uint32
}

// DeviceHolder is a process that holds an RDMA device: it has the device's
// uverbs character device open, or owns QPs, rdma_cm IDs or verbs contexts
// on it (an rdma_cm user holds the device through /dev/infiniband/rdma_cm,
// which is tied to no device: its IDs and QPs say which).
type DeviceHolder struct {
	Process      // PID is the process; TID is the same
	QPs      int // QPs it owns on the device
	CMIDs    int // rdma_cm IDs it owns on the device
	Contexts int // verbs contexts it has open on the device
	// Files are its open files of the device: the device's uverbs node
	// and, when it has resources on the device, rdma_cm. Empty when the
	// holder owns resources but its fd table was not readable or the fd
	// went to another process.
	Files []OpenFile
}

// DeviceHolders says which processes hold each device: scan is a Holders
// scan made with RDMAFiles, rdmaCM the number of /dev/infiniband/rdma_cm,
// and r resolves the thread ids in uses to processes (a nil r leaves them
// as they are, as if each were a process). The result maps every device of
// uses to its holders, sorted by PID ([] when none). Owner ids that resolve
// to no process (kernel owners, exited threads) hold nothing; a deleted
// uverbs node holds no current device (see ZombieContexts).
func DeviceHolders(scan HolderScan, uses []DeviceUse, rdmaCM DevNum, r *Resolver) map[string][]DeviceHolder {
	procs := map[uint32]Process{}
	for _, h := range scan.Holders {
		procs[h.PID] = h.Process
	}
	// process resolves an owner id to its process; ok is false for none.
	process := func(tid uint32) (Process, bool) {
		if tid == 0 {
			return Process{}, false
		}
		if r == nil {
			if p, ok := procs[tid]; ok {
				return p, true
			}
			return Process{TID: tid, PID: tid}, true
		}
		p, ok := r.Lookup(tid)
		if !ok {
			return Process{}, false
		}
		if hp, ok := procs[p.PID]; ok {
			return hp, true // the process's own comm, not its thread's
		}
		p.TID = p.PID
		if tp, ok := r.Lookup(p.PID); ok {
			p.Comm = tp.Comm
		}
		return p, true
	}
	out := make(map[string][]DeviceHolder, len(uses))
	for _, u := range uses {
		byPID := map[uint32]*DeviceHolder{}
		holder := func(p Process) *DeviceHolder {
			h := byPID[p.PID]
			if h == nil {
				h = &DeviceHolder{Process: p, Files: []OpenFile{}}
				byPID[p.PID] = h
			}
			return h
		}
		for _, c := range []struct {
			owners []uint32
			count  func(*DeviceHolder)
		}{
			{u.QPOwners, func(h *DeviceHolder) { h.QPs++ }},
			{u.CMIDOwners, func(h *DeviceHolder) { h.CMIDs++ }},
			{u.ContextOwners, func(h *DeviceHolder) { h.Contexts++ }},
		} {
			for _, tid := range c.owners {
				if p, ok := process(tid); ok {
					c.count(holder(p))
				}
			}
		}
		for _, sh := range scan.Holders {
			_, usesDev := byPID[sh.PID]
			for _, f := range sh.Files {
				switch {
				case f.Deleted:
				case u.HasUverbs && f.Dev == u.Uverbs:
					h := holder(sh.Process)
					h.Files = append(h.Files, f)
				case f.Dev == rdmaCM && usesDev:
					h := holder(sh.Process)
					h.Files = append(h.Files, f)
				}
			}
		}
		hs := make([]DeviceHolder, 0, len(byPID))
		for _, h := range byPID {
			hs = append(hs, *h)
		}
		slices.SortFunc(hs, func(a, b DeviceHolder) int { return int(a.PID) - int(b.PID) })
		out[u.Device] = hs
	}
	return out
}

// ZombieContext is a process with a uverbs file open whose device node was
// deleted (its device was unregistered: reset, driver unbind, hot unplug)
// and no verbs context on any current device. After a driver that supports
// disassociate drops the device, its contexts are gone and the process
// keeps a dead fd: an application that never reopened the device.
type ZombieContext struct {
	Process
	Files []OpenFile // the deleted uverbs files
}

// ZombieContexts finds the zombie contexts in a Holders scan made with
// RDMAFiles; contextOwners are the owner ids of the verbs contexts of every
// current device (netlink), which r resolves to processes (nil r: as if
// each were a process). Sorted by PID.
func ZombieContexts(scan HolderScan, contextOwners []uint32, r *Resolver) []ZombieContext {
	live := map[uint32]bool{}
	for _, tid := range contextOwners {
		live[tid] = true
		if p, ok := r.Lookup(tid); ok {
			live[p.PID] = true
		}
	}
	zs := []ZombieContext{}
	for _, h := range scan.Holders {
		if live[h.PID] {
			continue
		}
		var dead []OpenFile
		for _, f := range h.Files {
			if ZombieFiles(f) {
				dead = append(dead, f)
			}
		}
		if len(dead) > 0 {
			zs = append(zs, ZombieContext{Process: h.Process, Files: dead})
		}
	}
	return zs
}

// RDMAFiles returns the Holders filter DeviceHolders and ZombieContexts
// read: the open character devices numbered in uverbs or rdmaCM, and every
// deleted uverbs node (whatever its number: a device registered since may
// have been given it).
func RDMAFiles(uverbs []DevNum, rdmaCM DevNum) func(OpenFile) bool {
	return func(f OpenFile) bool {
		if f.Deleted {
			return ZombieFiles(f)
		}
		return f.Dev == rdmaCM || slices.Contains(uverbs, f.Dev)
	}
}

// ZombieFiles is the Holders filter of ZombieContexts alone: deleted
// uverbs nodes.
func ZombieFiles(f OpenFile) bool { return f.Deleted && isUverbsNode(f.Path) }

// isUverbsNode reports whether path names a uverbs node,
// /dev/infiniband/uverbsN or the same name wherever a container mounted it.
func isUverbsNode(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "uverbs")
}
