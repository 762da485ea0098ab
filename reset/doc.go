// Package reset triggers RDMA device resets (driver unbind and bind, PCI
// function reset, link delete and add for software devices) with a time
// limit, and waits for the device to come back.
//
// Resets need root. They destroy every QP on the device.
package reset
