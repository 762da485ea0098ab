// Package reset resets an RDMA device in bounded time and brings it back
// under its name.
//
// Run inspects the device (netlink, sysfs), chooses a method, lists what
// the reset destroys (user QPs and MRs, the processes holding the device's
// uverbs file, by process, with cgroup and container), and only with
// Options.Yes acts:
//
//   - relink: software devices (rxe, siw): DELLINK, then NEWLINK of the
//     same type on the same netdev under the same name.
//   - unbind, pci-reset: the PCI function behind the device (for rxe and
//     siw, behind its netdev) is unbound from its driver through sysfs,
//     for pci-reset reset (sysfs reset, FLR only where the function offers
//     it, through reset_method), and bound again; a software device's
//     netdev gets its name, IP addresses and up state back and the device
//     is added again.
//   - devlink-reload: the driver of the device (of its netdev, for rxe and
//     siw) re-initialises through devlink (DEVLINK_CMD_RELOAD,
//     driver_reinit, github.com/mdlayher/genetlink); offered where the
//     device has a devlink instance, and a driver without reload is
//     refused by the kernel before anything is removed
//     (ErrReloadNotSupported). A software device's netdev gets its name,
//     MAC, addresses and up state back and the device is added again.
//   - netdev-bounce: the ports' netdevs go down and up (route netlink,
//     github.com/jsimonetti/rtnetlink); the device and its QPs stay.
//
// auto picks the first the device offers of relink, devlink-reload,
// pci-reset and unbind; netdev-bounce only when asked for.
//
// Afterwards it waits for the device (by name, or by node GUID for a PCI
// device), checks the node GUID and that the ports are ACTIVE (or says
// why not), and gives it its name again: a name the rename policies give
// it is re-applied through rename, any other restored as it was.
//
// # Bounded time
//
// rxe and siw cannot disassociate their users: the kernel's removal waits
// uninterruptibly until every process has closed the device. Run carries
// out the removal in a helper process in a session of its own
// (Options.Helper runs RunHelper) and returns after Options.Timeout with
// Result "waiting", the processes it still waits for, the device's state
// and how to finish (end the holders: the helper completes the reset) or
// abandon (kill the helper). Options.Grace first waits for holders to close
// on their own, polling /proc (no event reports another process closing a
// file on every path a device can be opened by).
//
// Run logs one audit record per reset ("reset": who, device, method,
// holders, duration, result) on Options.Log; the Report is the same record
// in full. With Options.Observe (the CLI wires the eBPF probes) the report
// lists the kernel's device events; without, when netlink stopped and
// started listing the device.
//
// # Privileges
//
// Inspecting needs none (other users' holders need CAP_SYS_PTRACE to be
// seen: Report.Unreadable lists those missed). Resetting needs
// CAP_NET_ADMIN (RDMA, route and devlink netlink), and CAP_SYS_ADMIN for
// the PCI methods; Run checks before it changes anything.
package reset
