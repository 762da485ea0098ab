// Package agent is rdmatool's daemon and its one-shot check: it scans RDMA
// netlink, follows the eBPF probe events, keeps the QP histories leakwatch
// evaluates, and answers the CLI on a local unix socket. What the daemon
// does as an operator sees it (what it watches and when, the socket's
// requests, the metrics, the configuration and its reload, the
// remediation policy, systemd) is docs/agent.md, which is also
// `rdmatool agent --help`; this comment says where that is in the code.
//
// Run (RunOptions, Deps) serves the socket and starts, each on a goroutine
// of its own that it waits for: the probe reader, the device lister, one
// scanner per device, the policy and the metrics server (NewCollector).
// A State holds the history, one leakwatch.Watcher, behind a mutex, and is
// all a request or a scrape reads. LearnDevice learns a device's facts
// once, when its scanner starts. Check answers `rdmatool qp-leaks`: it asks
// a running agent (Ask; AskStatus reads its status) and runs CheckOnce, a
// watch of its own, only when no agent is there (ErrNoAgent). LoadConfig
// reads the configuration file, ReloadFrom reloads it on SIGHUP, and
// Policy is the remediation policy, whose resets go through Deps.Reset.
//
// The package decides no leak (package leakwatch does) and speaks no kernel
// interface itself: netlink, the probes, sysfs and /proc are packages
// rdmanl, bpf, sysfs, uverbs, owner and usage, which name their uapi
// sources.
//
// # Privileges
//
// Netlink scans need none; the probes need what package bpf says, and
// without them the agent runs on netlink only. Owners are read through
// /proc; other users' zombie contexts need root or CAP_SYS_PTRACE. The
// policy's resets need what reset.Run needs (CAP_NET_ADMIN; for the PCI
// methods CAP_SYS_ADMIN and a writable /sys). packaging/systemd has the
// unit that grants them.
package agent
