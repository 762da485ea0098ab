// Package agent is rdmatool's daemon: it scans netlink, follows probe events,
// keeps QP histories for leakwatch, exports Prometheus metrics, answers the
// CLI on a local unix socket, re-applies persistent names after a device
// comes back, and carries out the configured remediation policy.
//
// # One-shot checks and the agent
//
// CheckOnce observes the host for a --watch with periodic scans and the
// probes, then evaluates the rules. Run is the long-running loop: one
// leakwatch.Watcher fed by scans every RunOptions.Interval and by every
// probe event, queried through a State that serializes the loop and the
// socket handler. Check, what `rdmatool qp-leaks` calls, asks a running
// agent first (Ask) and falls back to CheckOnce when none answers.
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
// only and says why. Owners are resolved through /proc. While ib_core is not
// loaded (no NETLINK_RDMA, nothing to probe) the agent serves the socket and
// tries again every RunOptions.Retry. packaging/systemd has the unit.
package agent
