// Package usage finds who uses RDMA devices: the processes that hold each
// device and what they own on it, and the zombie contexts, in one scan
// that reads each fact once.
//
// Scan reads, for the devices it is given, their uverbs character devices
// and the rdma_cm device from sysfs (package sysfs), the processes holding
// those files open from /proc (owner.Holders), and over RDMA netlink
// (package rdmanl) the owners of each device's QPs, rdma_cm IDs and verbs
// contexts, and with Options.MRs of its MRs: one dump of each per device.
// owner.DeviceHolders merges the two into each device's holders, with
// their QP, CM ID and context counts. With Options.Zombies the same /proc
// scan and context dumps serve the zombie contexts (owner.ZombieContexts):
// processes holding the deleted uverbs node of an unregistered device with
// no verbs context on any current device; the contexts of the devices not
// scanned are dumped only when some process holds such a node. Zombies is
// that look alone.
//
// # Partial dumps
//
// A dump that left out entries it could not decode (an *rdmanl.PartialError)
// is not an error: what decoded is counted, and Report.Skipped says which
// dump left out how many, for the caller to warn about. Any other netlink
// error ends the scan, a device that went away during it too (an error
// matching rdmanl.ErrNoDevice), except in the zombie look, where a device
// gone since it was listed has no contexts.
//
// # Privileges
//
// Netlink dumps and sysfs need none. Other users' processes are read only
// with root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE: Report.Unreadable lists those that could
// not be, whose holdings may be missing.
package usage
