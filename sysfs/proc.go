package sysfs

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// Procs resolves the owners of RDMA resources through /proc. The kernel
// records the creating thread's id; it is absent (0) when that thread has
// exited or lives in another PID namespace, which alone is no proof of a leak.
//
// Lookups are cached for the life of the Procs: a listing of 60k QPs held
// by a few processes reads each process once. Make a new Procs per scan.
type Procs struct {
	fs    procfs.FS
	cache map[int]cached
}

type cached struct {
	proc Process
	ok   bool
}

// NewProcs reads processes under procRoot (normally /proc).
func NewProcs(procRoot string) (*Procs, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("sysfs: open %s: %w", procRoot, err)
	}
	return &Procs{fs: fs, cache: map[int]cached{}}, nil
}

// Process is what /proc says about a resource owner.
type Process struct {
	TID  int    // the id the kernel recorded (a thread or a process)
	PID  int    // the thread group (process) it belongs to
	Comm string // the thread's command name
}

// Lookup resolves a thread or process id. ok is false when it has exited.
func (p *Procs) Lookup(tid int) (proc Process, ok bool) {
	if tid <= 0 {
		return Process{}, false
	}
	if c, hit := p.cache[tid]; hit {
		return c.proc, c.ok
	}
	proc, ok = p.lookup(tid)
	p.cache[tid] = cached{proc, ok}
	return proc, ok
}

func (p *Procs) lookup(tid int) (proc Process, ok bool) {
	pr, err := p.fs.Proc(tid)
	if err != nil {
		return Process{}, false
	}
	comm, err := pr.Comm()
	if err != nil {
		return Process{}, false
	}
	proc = Process{TID: tid, PID: tid, Comm: comm}
	if st, err := pr.NewStatus(); err == nil && st.TGID > 0 {
		proc.PID = st.TGID
	}
	return proc, true
}
