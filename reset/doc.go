// Package reset is where RDMA device resets belong. It has no code yet:
// rdmatool cannot reset a device, and no command offers to.
package reset
