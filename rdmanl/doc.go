// Package rdmanl reads and changes RDMA devices through the kernel's RDMA
// netlink interface (NETLINK_RDMA, client RDMA_NL_NLDEV), as iproute2's rdma
// does: devices, ports, resource summaries, resource dumps (QP, CQ, MR, PD,
// context, SRQ, CM ID), device rename and rxe/siw link add and delete.
// ULPIndex names the kernel ULP behind QPs netlink reports as rdma_cm's;
// Peers names the address at the other end of a QP's rdma_cm connection.
// Constants mirror include/uapi/rdma/rdma_netlink.h.
//
// It is built on github.com/mdlayher/netlink; it opens no sockets by hand.
// Dumps stream entry by entry, the next reply received while the caller
// handles the last (the kernel builds replies while the process decodes),
// never further ahead: a dump held between two replies goes on with at
// most two replies the kernel built before, and a device deleted meanwhile
// ends it with ErrNoDevice.
// Attributes and enum values a newer kernel adds
// decode to "unknown" with their raw value, never to an error.
//
// # Privileges
//
// Device, port and resource dumps need no privileges. Rename, link add and
// delete, and MR keys need CAP_NET_ADMIN; errors.Is(err, os.ErrPermission)
// reports when it is missing.
package rdmanl
