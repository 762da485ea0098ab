// Package sysfs reads the facts about RDMA devices that netlink does not
// carry, from /sys/class/infiniband and the PCI devices behind them (driver,
// PCI address, firmware, port counters), through github.com/prometheus/procfs.
// The sysfs root is a parameter so tests read fixtures.
//
// Procs resolves the owners of RDMA resources through /proc (the proc root
// is a parameter too): thread to process, command name, cgroup
// (/proc/TID/cgroup, v2 or v1) and the container id the cgroup path names.
//
// It only reads; it needs no privileges.
package sysfs
