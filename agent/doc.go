// Package agent is rdmatool's daemon and its one-shot check: it scans RDMA
// netlink, follows the eBPF probe events, keeps the QP histories leakwatch
// evaluates, and answers the CLI on a local unix socket.
//
// # The agent
//
// Run serves the socket and runs, each on a goroutine of its own: the
// probe reader, which applies every event to the history as it arrives; a
// device lister, which lists the devices every RunOptions.Interval and
// starts or stops one scanner per device; and the scanners, each of which
// dumps its device's QPs every Interval on a netlink socket of its own, so a
// slow dump of one device holds back neither the probe events nor the other
// devices. A device with QPs that rdma_cm created for kernel ULPs has its
// rdma_cm IDs and SRQs dumped too, to name those ULPs (rdmanl.ULPIndex). A State holds the history (one leakwatch.Watcher) behind a
// mutex. When Run's context ends it stops every goroutine and waits for it.
//
// # One-shot checks
//
// CheckOnce observes the host for a --watch with the probes (when they
// load) and netlink scans every --interval, then evaluates the rules over
// what it saw. Check, what `rdmatool qp-leaks` calls, asks a running agent
// first (Ask) and runs CheckOnce only when no agent is there (ErrNoAgent);
// an agent that refuses the question is an error.
//
// # Socket
//
// The agent serves HTTP/1.1 on a unix socket (DefaultSocket,
// /run/rdmatool/agent.sock), made 0600 in a 0755 directory and removed on
// exit; a stale socket is replaced, a live agent's is not. GET
// /v1/qp-leaks?dev=D&min_age=5s&rule=R&max_qp=D=N&no_probes=1 returns the
// CheckReport qp-leaks prints, with "source":"agent" and the agent's start
// in "observed_since"; GET /v1/status returns a Status. Errors are
// {"error":"..."} with 400 (bad query) or 404 (unknown device or path).
//
// # Privileges
//
// Netlink scans need no privileges; the probes need CAP_BPF and
// CAP_PERFMON (see package bpf), and without them the agent runs on netlink
// only and says why. Owners are resolved through /proc (package owner).
// While ib_core is not loaded (no NETLINK_RDMA, nothing to probe) the agent
// serves the socket and tries again every RunOptions.Retry.
// packaging/systemd has the unit.
package agent
