// Package bpf traces the queue pair lifecycle on ib_core with eBPF: QP
// create, modify and destroy, async QP events (LAST_WQE_REACHED among them),
// device events and drains. Programs are C compiled by bpf2go
// (github.com/cilium/ebpf) with CO-RE, so one object runs on every kernel of
// the lab matrix; the generated objects are committed.
//
// # Privileges
//
// Loading needs CAP_BPF and CAP_PERFMON (or root) and kernel BTF. Without
// them Open returns an error that says which is missing, and callers fall
// back to netlink only.
package bpf
