// Package leakwatch is rdmatool's detection engine: it turns netlink scans
// (Scan, one or more devices at a time) and observations of the QP
// lifecycle (Event, which the caller converts from whatever watched the
// kernel: package watch from the eBPF probes) into per-QP histories, and
// runs the leak rules (stale-error-qp, never-connected-qp,
// srq-destroy-without-last-wqe, last-wqe-not-emitted, last-wqe-unhandled,
// xrc-tgt-orphan, qp-exhaustion, srq-drain-stalled, qp-create-failing,
// qp-error-storm, mr-leak, zombie-uverbs-context) over them. A create the
// provider refused (Event.Result) is kept per device (the newest 1,024, and
// counts by errno and site: CreateFailures) for qp-create-failing; a QP's
// entry into Error is counted by cause (QPErrors) and, when it is a failure
// the consumer did not make (an async error, or the provider's), kept per
// device for qp-error-storm (the newest 1,024; a modify to Error, as every
// teardown makes, is counted and not kept). Both lists are rings whose
// append costs the same when full (Lists gives their lengths). A scan
// may also carry what a look at the host's processes found (Zombies):
// processes holding the deleted uverbs node of an unregistered device with
// no verbs context on any device, which zombie-uverbs-context reports. A
// device's MR dumps (MRDump, counted MR by MR as the caller streams them,
// then ScanMRs) give each owner's MRs and bytes over time (a bounded series
// of samples, with the owner's live QPs at each) and its oldest MRs; with
// the QP creates the probes saw, kept per owner, they are what mr-leak
// reports and MRTally counts. Drains (ib_drain_qp, ib_drain_rq) are events
// too: srq-drain-stalled reports an SRQ QP's drain that waits, or waited,
// past the query's MinAge. A scan may name the ULP of kernel QPs netlink
// reports as rdma_cm's (DeviceScan.ULPs); findings carry it. A scan, or a
// dump of the rdma_cm IDs between scans (Peers), may name a QP's rdma_cm
// peer (DeviceScan.Peers), which the QP keeps and its findings carry;
// qp-error-storm names its failed QPs' peers, and the R_Keys the owner's
// last MR dump listed. Evaluate runs the rules a Query selects, with its
// MinAge, and reports the findings with their summary (groups by device,
// rule and owner; counts by site and by peer). CountFindings counts what an
// evaluation of every rule would, by device, rule and severity: the
// watcher keeps the counts QP by QP, and a count evaluates again only the
// QPs that changed since the last one, or whose findings time alone may
// have changed (an age reaching MinAge, a retention running out). Tally
// keeps its last count until a history changes.
//
// An Event of a QP create may carry its creation site (Site: the
// application's call of the verbs library, or the kernel stack), named by
// the caller at event time. A history keeps it interned with its owner's
// names: the QPs one process made at one site share one copy, so a site
// costs a tracked QP no memory; its rdma_cm peer is 16 bytes of its own
// (about 200 bytes of heap a QP at 60,000 QPs, with or without sites or
// peers).
//
// A watcher hands out what it knows as records (Save; or SaveSnapshot, a
// compact copy made now whose records are made and put later, so that a
// caller holding a lock around the watcher holds it for the copy only)
// that another one takes back (Restore), so that a restarted agent goes
// on from its
// history: the new watcher finds the devices in its first listing (Listed,
// by node GUID) and, in each device's first scan, the QPs that are still
// the same QPs (their number, type, owner thread and module, SRQ and PD);
// the others are new, or gone. The MR samples and QP creates mr-leak
// reads, and the QPs' peers, are not among the records: they start again
// with the new watcher.
//
// It is pure logic: no system calls, no I/O, and time comes from a clock the
// caller injects, so every rule is tested deterministically. It imports no
// eBPF library; only rdmanl's value types (QP states and types, devices).
package leakwatch
