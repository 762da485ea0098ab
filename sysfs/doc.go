// Package sysfs reads facts about RDMA devices that netlink does not carry
// from the sysfs tree (normally /sys):
//
//   - where a device sits on PCI (/sys/class/infiniband/DEV/device, with
//     SR-IOV virtual functions and sub-functions), read the way rdma-core's
//     rdma_rename reads it (ReadPCILocation);
//   - the PCI function behind an RDMA device or a netdev: its address,
//     bound driver, vendor and device ids, and the resets the kernel offers
//     for it (reset_method on Linux 5.15 and later, reset), and the netdevs
//     on a function (ReadPCIFunction, ReadNetdevPCIFunction,
//     ReadPCIFunctionAt, PCINetdevs).
//
// The sysfs root is a parameter so tests read fixtures.
//
// It only reads and needs no privileges. A device with no PCI function
// behind it (rxe, siw) gets an error matching ErrNotPCI.
package sysfs
