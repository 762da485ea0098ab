// Package reset resets an RDMA device in bounded time and brings it back
// under its name. What a reset does as an operator sees it (the methods,
// what the device's users see, names, the audit record) is
// docs/reset.md, which is also `rdmatool reset --help`; this comment says
// where that is in the code.
//
// Run inspects the device (netlink, sysfs), chooses a Method (auto: the
// first the device offers of relink, devlink-reload, pci-reset and
// unbind), lists what the reset destroys, and only with Options.Yes acts:
// relink through RDMA netlink (DELLINK, NEWLINK), devlink-reload through
// devlink (DEVLINK_CMD_RELOAD, driver_reinit, github.com/mdlayher/genetlink;
// a driver without reload is refused by the kernel before anything is
// removed: ErrReloadNotSupported), unbind and pci-reset through sysfs, and
// netdev-bounce, like the restoring of a software device's netdev, through
// route netlink (github.com/jsimonetti/rtnetlink). Afterwards it waits for
// the device, checks it, and names it again through package rename.
//
// The removal runs in a helper process in a session of its own
// (Options.Helper runs RunHelper), so that Run returns after
// Options.Timeout with Result "waiting" when rxe or siw wait in the kernel
// for their holders; Options.Grace first polls /proc for them to close the
// device (no event reports another process closing a file on every path a
// device can be opened by). Run logs one audit record per reset on
// Options.Log, and the Report is the same record in full; Options.Observe
// (the CLI wires the eBPF probes) adds the kernel's device events.
//
// # Privileges
//
// Inspecting needs none (other users' holders need CAP_DAC_READ_SEARCH and
// CAP_SYS_PTRACE to be seen: Report.Unreadable lists those missed). Resetting needs
// CAP_NET_ADMIN (RDMA, route and devlink netlink), and CAP_SYS_ADMIN for
// the PCI methods; Run checks before it changes anything.
package reset
