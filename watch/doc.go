// Package watch observes the host's RDMA QPs into a history that leakwatch
// evaluates: the one-shot check `rdmatool qp-leaks` runs, and the engine
// the agent's daemon (package agent) runs for as long as it lives.
//
// A State holds the history (one leakwatch.Watcher) and what the watch
// knows of its sources and devices, behind a mutex; it reports as
// agentapi.CheckReport and agentapi.Status, and is the agentapi.Source the
// agent's socket answers from; it saves and restores its history
// (SaveSnapshot, a copy made under the mutex and encoded without it, and
// Restore: leakwatch's records), which the agent keeps in a file. A
// Scanner dumps a device's QPs (with their SRQs, rdma_cm IDs, ULPs and peers)
// over RDMA netlink and names their owners from /proc, and its MRs
// (DumpMRs, counted by owner as they stream; UpdateMRs dumps them only
// when the device's resource summary counts another number of MRs than
// at the last dump, and at least once a period the caller gives:
// MRMark); LookForZombies looks for zombie verbs contexts; FollowProbes applies the eBPF probes'
// events as they come, naming each QP create's site as it is read (Sites,
// through package symbolize, while the creating process still runs), and
// lets the State read the probes' count of resources added and removed
// (ResourceChanges: a summary read after it holds every change it counts);
// FollowPeers dumps a device's rdma_cm IDs when those events say a QP
// whose peer is not known yet connects or fails (DumpPeers), for the QPs
// that live too short a time for a scan to list them.
// LearnDevice learns a device's provider and max_qp
// once (FactsCache). Check answers qp-leaks: from a running agent
// (agentapi.Ask) when one listens, else by observing the host for --watch
// itself. Deps says what it all talks to.
//
// The package decides no leak (package leakwatch does) and speaks no kernel
// interface itself: netlink, the probes, sysfs, the verbs query and /proc
// are packages rdmanl, bpf, sysfs, uverbs, owner and usage, which name
// their uapi sources. The daemon's loop, socket, metrics and policy are
// package agent's.
//
// # Privileges
//
// Netlink scans need none; the probes need what package bpf says, and
// without them a watch runs on netlink only. Owners are read through
// /proc; other users' zombie contexts need root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE. The
// verbs query for max_qp opens /dev/infiniband/uverbsN.
package watch
