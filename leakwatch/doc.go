// Package leakwatch is rdmatool's detection engine: it turns netlink
// snapshots and probe events into per-QP histories and runs the leak rules
// (stale-error-qp, never-connected-qp, srq-destroy-without-last-wqe,
// last-wqe-not-emitted, last-wqe-unhandled, xrc-tgt-orphan, qp-exhaustion)
// over them.
//
// It is pure logic: no system calls, no I/O, and time comes from a clock the
// caller injects, so every rule is tested deterministically.
package leakwatch
