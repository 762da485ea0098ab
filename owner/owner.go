package owner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Resolver resolves the owners of RDMA resources through /proc. The kernel
// records the creating thread's id; it is absent (0) when that thread has
// exited or lives in another PID namespace, which alone is no proof of a leak.
//
// Lookups are cached for the life of the Resolver: a listing of 60k QPs held
// by a few processes reads each process once. Make a new Resolver per scan.
// It is not safe for concurrent use.
type Resolver struct {
	fs    procfs.FS
	root  string
	cache map[uint32]cached
}

type cached struct {
	proc Process
	ok   bool
}

// NewResolver reads processes under procRoot (normally /proc).
func NewResolver(procRoot string) (*Resolver, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("owner: open %s: %w", procRoot, err)
	}
	return &Resolver{fs: fs, root: procRoot, cache: map[uint32]cached{}}, nil
}

// Process is what /proc says about a resource owner.
type Process struct {
	TID  uint32 // the id the kernel recorded (a thread or a process)
	PID  uint32 // the thread group (process) it belongs to
	Comm string // the thread's command name
	// Cgroup is the thread's cgroup: the cgroup v2 path from
	// /proc/TID/cgroup (as seen from this process's cgroup namespace), or
	// on a host with cgroup v1 only, the name=systemd hierarchy's path
	// (else the first hierarchy's). "" when unreadable.
	Cgroup string
	// ContainerID is the 64-hex container id Cgroup names (docker,
	// containerd, cri-o and podman scopes, kubepods paths); "" when none.
	ContainerID string
}

// Lookup resolves a thread or process id as the kernel records it for a
// resource. ok is false for 0 (none recorded) and when it has exited.
// A nil Resolver (no /proc) resolves nothing.
func (p *Resolver) Lookup(tid uint32) (proc Process, ok bool) {
	if p == nil || tid == 0 {
		return Process{}, false
	}
	if c, hit := p.cache[tid]; hit {
		return c.proc, c.ok
	}
	proc, ok = p.lookup(tid)
	p.cache[tid] = cached{proc, ok}
	return proc, ok
}

func (p *Resolver) lookup(tid uint32) (proc Process, ok bool) {
	pr, err := p.fs.Proc(int(tid))
	if err != nil {
		return Process{}, false
	}
	comm, err := pr.Comm()
	if err != nil {
		return Process{}, false
	}
	proc = Process{TID: tid, PID: tid, Comm: comm}
	if st, err := pr.NewStatus(); err == nil && st.TGID > 0 {
		proc.PID = uint32(st.TGID)
	}
	if b, err := os.ReadFile(filepath.Join(p.root, strconv.FormatUint(uint64(tid), 10), "cgroup")); err == nil {
		proc.Cgroup = cgroupPath(b)
		proc.ContainerID = containerID(proc.Cgroup)
	}
	return proc, true
}

// cgroupPath picks the cgroup path from the contents of /proc/PID/cgroup:
// lines of hierarchy-ID:controllers:path, where cgroup v2 is "0::path".
// Malformed lines are skipped.
func cgroupPath(b []byte) string {
	var systemd, first string
	for line := range bytes.Lines(b) {
		id, rest, ok := strings.Cut(strings.TrimRight(string(line), "\n"), ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(path, "/") {
			continue
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			return path
		case controllers == "name=systemd" && systemd == "":
			systemd = path
		case first == "":
			first = path
		}
	}
	if systemd != "" {
		return systemd
	}
	return first
}

// containerScopes are the prefixes of the cgroup names runtimes give a
// container, before its id (and ".scope" after it, with the systemd
// driver): docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope,
// libpod-ID.scope; with the cgroupfs driver the name is the bare id
// (/docker/ID, /kubepods/burstable/podUID/ID).
var containerScopes = []string{"docker-", "cri-containerd-", "crio-", "libpod-", ""}

// containerID returns the container id a cgroup path names: the innermost
// path element that is a runtime's scope for a 64-hex id (conmon scopes,
// crio-conmon-ID, are not containers). "" when there is none.
func containerID(cgroup string) string {
	elems := strings.Split(cgroup, "/")
	for i := len(elems) - 1; i >= 0; i-- {
		name := strings.TrimSuffix(elems[i], ".scope")
		for _, prefix := range containerScopes {
			if id, ok := strings.CutPrefix(name, prefix); ok && isContainerID(id) {
				return id
			}
		}
	}
	return ""
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ShortContainerID is a container id as docker, podman and crictl print
// it: its first 12 characters (the whole of a shorter one).
func ShortContainerID(id string) string { return id[:min(12, len(id))] }
