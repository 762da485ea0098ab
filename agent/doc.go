// Package agent is rdmatool's daemon: it scans netlink, follows probe events,
// keeps QP histories for leakwatch, exports Prometheus metrics, answers the
// CLI on a local unix socket, re-applies persistent names after a device
// comes back, and carries out the configured remediation policy.
package agent
