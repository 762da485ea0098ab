// Package rename gives RDMA devices persistent names derived from their node
// GUID (rdma-core's NAME_GUID scheme), from an operator's map file, or from
// the PCI address, and applies them through rdmanl, checking the kernel's
// answer and never leaving a device under a temporary name.
//
// Renaming needs CAP_NET_ADMIN.
package rename
