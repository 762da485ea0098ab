// Package uverbs speaks the part of ib_uverbs' legacy write() ABI that
// rdmatool needs (include/uapi/rdma/ib_user_verbs.h): it opens a verbs
// context on a uverbs character device (/dev/infiniband/uverbsN) and
// queries the device's limits, which only the verbs provider reports:
// max_qp, max_qp_wr, max_cq, max_mr, max_pd, max_srq, with the node GUID,
// the vendor ids and the port count (QueryDevice). Netlink and sysfs carry
// none of them; package sysfs finds which uverbs device serves which RDMA
// device.
//
// It is written by hand, without cgo: no Go library speaks this ABI, and
// libibverbs through cgo would tie rdmatool's static binary to a C library.
//
// # Privileges
//
// Read and write access to the uverbs device (root, or the group udev's
// rules give it). While QueryDevice runs, the calling process holds a verbs
// context on the device: a driver without disassociate makes the device's
// removal wait for it.
package uverbs
