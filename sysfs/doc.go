// Package sysfs reads the facts about RDMA devices that netlink does not
// carry, from /sys/class/infiniband and the PCI devices behind them (driver,
// PCI address, firmware, port counters), through github.com/prometheus/procfs.
// The sysfs root is a parameter so tests read fixtures.
//
// It only reads; it needs no privileges.
package sysfs
