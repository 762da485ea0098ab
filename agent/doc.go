// Package agent is rdmatool's daemon: `rdmatool agent`. What it does as an
// operator sees it (what it watches and when, the socket's requests, the
// metrics, the configuration and its reload, the remediation policy,
// systemd) is docs/agent.md, which is also `rdmatool agent --help`; this
// comment says where that is in the code.
//
// Run (RunOptions, watch.Deps) makes the socket (listen) and serves
// agentapi.Handler on it from the history, a watch.State, and starts, each
// on a goroutine of its own that it waits for: the probe reader
// (watch.FollowProbes), the rdma_cm ID dumps its events ask for
// (watch.FollowPeers), the device lister with one scanner per device
// (watch.Scanner, which dumps a device every Interval, or every Reconcile
// while the probes keep the history, reading its resource summary in
// between when the probes counted a resource added or removed
// (watch.State.ResourceChanges), and its MRs when that summary counts
// another number of them, and every Reconcile: watch.MRMark), the
// RDMA netlink monitor, the policy, the metrics server (newCollector) and
// systemd's notifications and watchdog. Before those start it restores the history from the state
// file (stateFile), which it saves every StateInterval and when it stops:
// a save copies the history with its lock held (watch.State.SaveSnapshot)
// and writes it on a goroutine of its own, given up after
// stateSaveTimeout, one at a time, and the save at the stop after
// stateStopTimeout, so that a file system that hangs holds back neither
// the history nor SIGTERM; the file is read through opfile and written by
// writeAtomic; Run stops
// waiting for that read when ctx ends (opfile.Await), as LoadConfig does
// for the configuration file it reads. ReloadFrom reloads it on SIGHUP
// (reloadOnHUP, on a goroutine of its own that Run stops waiting for when
// ctx ends, so that a reload stuck in a read never holds back SIGTERM),
// and Policy is the remediation policy, whose resets run reset.Run. Run
// logs through repeatLimiter, which logs an identical warning once a
// minute; CheckMetricsAddress is the check of the metrics address, the
// flag's and the configuration's, and agentapi.CheckSocketPath the
// socket's.
//
// The observation itself (the history, the scans, the probes' events, the
// one-shot check qp-leaks runs without an agent) is package watch's; the
// socket API's answers and its client are package agentapi's. The package
// decides no leak (package leakwatch does) and speaks no kernel interface
// itself; it only reads the boot's id (/proc/sys/kernel/random/boot_id),
// which tells a state file saved in this boot from an older one, and binds
// its socket through /proc/self/fd, so that the path it stages the socket
// at is no longer than the socket's own.
//
// # Privileges
//
// Netlink scans need none; the probes need what package bpf says, and
// without them the agent runs on netlink only. Owners are read through
// /proc; other users' zombie contexts need CAP_DAC_READ_SEARCH and
// CAP_SYS_PTRACE (root or not). The policy's resets need what reset.Run
// needs (CAP_NET_ADMIN; for the PCI methods CAP_SYS_ADMIN, a writable /sys
// and, for a user other than root, CAP_DAC_OVERRIDE). The state file needs its
// directory writable (the unit's StateDirectory, /var/lib/rdmatool).
// packaging/systemd has the unit that grants them.
package agent
