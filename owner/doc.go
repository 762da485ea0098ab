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
// DeviceHolders merges such a scan (made with the RDMAFiles filter) with
// what the caller read elsewhere, given as plain values (DeviceUse: each
// device's uverbs device number from sysfs, the owners of its QPs, rdma_cm
// IDs and verbs contexts from netlink) into the processes holding each RDMA
// device, with their QP, CM ID and context counts; an rdma_cm fd, which is
// tied to no device, counts for the devices its owner has resources on.
// ZombieContexts lists the processes that keep the deleted uverbs node of
// an unregistered device with no verbs context on any current device.
//
// It only reads, and the proc root is a parameter so tests read fixtures.
// It needs no privileges for processes in the caller's PID namespace;
// threads of another namespace are not visible and resolve to nothing.
package owner
