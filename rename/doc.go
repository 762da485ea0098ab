// Package rename gives RDMA devices persistent names derived from their node
// GUID (rdma-core's NAME_GUID scheme), from an operator's map file, or from
// the PCI address (NAME_PCI), and applies them through rdmanl, checking the
// kernel's answer and never leaving a device under a temporary name.
//
// Choosing names is separate from applying them: Prepare checks the
// options and reads the map file without a kernel call, then Job.Run lists
// the devices, asks the policies for names, plans the renames (pure logic,
// see Step) and applies the plan through a Renamer, which *rdmanl.Client is
// and tests fake. Run does both. The package does not watch for devices:
// udev runs rdmatool-udev-rename (the flow of "rdmatool rename udev --
// KERNEL_NAME" in a small program) for each new one (packaging/udev), and
// CheckUdevDevice makes sure the name it got is the
// event's device; the agent, when asked (--rename), runs the policies for
// each device it sees appear, for hosts and containers without udev.
//
// # Policies
//
// Policies are tried in the configured order until one names the device;
// each one that cannot says why, and a device no policy names keeps its
// name ("skipped").
//
//   - map: the name the map file gives the device's node GUID.
//   - guid: rdma_rename's NAME_GUID, byte for byte: the protocol the kernel
//     reports ("ib", "roce", "iw", "opa", "usnic"; "rdma" when it reports
//     none), "x", and the node GUID as 16 lower-case hex digits:
//     rocex525400c0fe123455. A zero node GUID is skipped.
//   - pci: rdma_rename's NAME_PCI: ibp59s0f1, rocep193s0f0v0S99 (see
//     pciPolicyName). Devices with no PCI function (rxe, siw) are skipped.
//   - keep: the current name (rdma_rename's NAME_KERNEL).
//
// Names must be valid device names (see ValidateName). A name user space
// assigned is kept unless Options.Force, as rdma-core's rdma_rename (v53 and
// later) keeps it: from 6.11 the kernel reports NAME_ASSIGN_TYPE user for
// devices named when they were made (rxe and siw through "rdma link add
// NAME", mlx5 sub-devices); renaming a device does not change the mark.
//
// # Map file
//
// The map file (DefaultMapFile, /etc/rdmatool/names.conf) has one device per
// line: a node GUID, whitespace, and a name.
//
//	# fabric A, rack 12
//	0002:c903:00a1:b2c3  fab0-hca0
//	0x0002c90300a1b2c4   fab0-hca1   # ibstat's form
//	0002c90300a1b2c5     fab1-hca0
//
// The GUID is written as sysfs and iproute2 print it, as ibstat prints it
// (0x and 16 digits) or as 16 bare hex digits, in either case. '#' starts a
// comment at the start of a line or after whitespace; blank lines are
// ignored. A GUID or a name may appear once; a zero GUID, a malformed GUID,
// an invalid name or a line of other than two fields is an error that names
// the file and line (*MapError lists them all). A UTF-8 byte order mark at
// the start of the file is skipped. The file is read through package
// opfile: it must be a regular file (or a symbolic link to one) of at most
// 1 MiB; a named pipe, device or directory is refused without reading it,
// and a read that hangs is given up when Prepare's context ends.
// A missing default file is no error: the map policy then names nothing.
//
// # Renaming
//
// A device whose new name another device holds waits for that device to
// move away, so chains work in one pass; a cycle (a swap) moves its first
// device to a temporary name "rdmatool-tmp<index>" first. A name held by a
// device that keeps it, or wanted by two devices, is an error (*ClashError)
// that names the other device. Renames that wait for each other form a
// group: when one fails, the group's earlier renames are undone in reverse
// order, even after the context ends, so no device is left under a
// temporary name. A device deleted during its rename (a racing DELLINK:
// the kernel answers EINVAL, rdmanl makes it rdmanl.ErrNoDevice) fails
// with an error matching rdmanl.ErrNoDevice, and its group is undone; a
// device of the group found gone while undoing is named as deleted, not as
// stranded. The map file is only read.
//
// # Privileges
//
// Listing devices needs none. Renaming needs CAP_NET_ADMIN; errors then
// match os.ErrPermission. The pci policy reads sysfs.
package rename
