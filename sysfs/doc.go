// Package sysfs reads facts about RDMA devices that netlink does not carry
// from the sysfs tree (normally /sys):
//
//   - the device itself, /sys/class/infiniband/DEV, through
//     github.com/prometheus/procfs (board id, firmware, HCA type, node GUID,
//     ports with state, physical state, rate and link layer), plus what
//     procfs does not read: every counter and hw counter by file name, and
//     each port's netdev (gid_attrs/ndevs/0, else the parent device's net/
//     entry for the port) (ReadDevice). One attribute or
//     counter that cannot be read or parsed never fails the device: procfs
//     fails the whole device on one, so then the device is read attribute
//     by attribute and what fails is listed in Device.Skipped with its error;
//
//   - the uverbs character devices (/sys/class/infiniband_verbs) and the
//     RDMA device each opens (ReadUverbs), and the rdma_cm one
//     (ReadRDMACMDev);
//
//   - where a device sits on PCI (/sys/class/infiniband/DEV/device, with
//     SR-IOV virtual functions and sub-functions), read the way rdma-core's
//     rdma_rename reads it (ReadPCILocation);
//
//   - the PCI function behind an RDMA device or a netdev: its address,
//     bound driver, vendor and device ids, and the resets the kernel offers
//     for it (reset_method on Linux 5.15 and later, reset), and the netdevs
//     on a function (ReadPCIFunction, ReadNetdevPCIFunction, PCINetdevs).
//
// The limits only the verbs provider reports (max_qp, ...) are read from
// the uverbs device ReadUverbs finds, by package uverbs.
//
// The sysfs root is a parameter so tests read fixtures.
//
// It only reads, and needs no privileges. A device with no PCI function
// behind it (rxe, siw) gets an error matching ErrNotPCI.
package sysfs
