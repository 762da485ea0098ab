// Package owner resolves who owns an RDMA resource through /proc, through
// github.com/prometheus/procfs: the thread id the kernel recorded (netlink's
// pid) to its process (thread group), command name, cgroup
// (/proc/TID/cgroup, v2 or v1) and the container id the cgroup path names
// (docker, containerd, cri-o, podman, kubepods).
//
// Holders finds the processes that hold character devices open (the
// /proc/PID/fd walk lsof does), recognised by device number, so a device
// node a container mounted elsewhere is still found, and marked Deleted
// when its node was removed after the open (a uverbs fd whose device was
// unregistered). Which device number is whose is the caller's to say.
//
// It only reads, and the proc root is a parameter so tests read fixtures.
// It needs no privileges for processes in the caller's PID namespace;
// threads of another namespace are not visible and resolve to nothing.
package owner
