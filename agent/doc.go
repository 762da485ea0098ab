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
// dumps its device's QPs on a netlink socket of its own, so a slow dump of
// one device holds back neither the probe events nor the other devices.
// With the probes attached a device is dumped once and then every
// RunOptions.Reconcile (on hardware each dumped QP is a firmware query),
// sooner when probe events were lost; without probes, and for iWARP
// devices (whose providers move QPs to RTS where the probes cannot see it),
// every Interval; between dumps a scanner reads its device's resource
// summary every Interval. A device with QPs that rdma_cm created for
// kernel ULPs has its rdma_cm IDs and SRQs dumped with its QPs, to name
// those ULPs (rdmanl.ULPIndex). Each device's facts (provider, max_qp from a
// verbs query, the provider table's word on LAST_WQE_REACHED) are learned
// once, when its scanner starts (LearnDevice). Device changes wake the
// lister at once: the probes' register, unregister and rename events, and
// RDMA netlink's monitor group (6.12 and later). At most once a minute the
// lister also looks at the host's processes for zombie contexts
// (ZombieContexts: deleted uverbs nodes held open, the verbs contexts of
// every device dumped only when there are some), which belong to no device.
// Reports and metrics resolve the QP owners through /proc when they are
// made, so an owner is named where it is now. A State holds the history (one
// leakwatch.Watcher) behind a mutex. When Run's context ends it stops
// every goroutine and waits for it.
//
// With RunOptions.Rename, every device the lister sees appear (at the
// start, and after a reset or re-registration brings it back under its
// kernel name) gets its persistent name through package rename, logged.
//
// # Remediation policy
//
// RunOptions.Policy is off (PolicyObserve) by default. With PolicyReset,
// runPolicy looks every Interval at each device's evidence: QPs in use (the
// resource summary) against max_qp (configured, else learned), and its
// stale QPs (QPs with a finding of Policy.StaleRules, each once, from the
// evaluation the metrics use). When both thresholds have held for
// Policy.For, the device is reset through Deps.Reset (reset.Run, with the
// policy's method, grace and timeout and the agent's rename policies, its
// removal in RunOptions.ResetHelper), unless it was reset less than
// Policy.Cooldown ago (by node GUID), Policy.MaxPerHour resets were made in
// the last hour, or its reset has not returned. Each decision is logged
// with its evidence when it changes (a reset every time) and counted;
// Policy.DryRun logs the resets it would make, on their own cadence.
//
// # One-shot checks
//
// CheckOnce observes the host for a --watch with the probes (when they
// load) and netlink scans every --interval, each with a look for zombie
// contexts, then evaluates the rules over what it saw. Check, what
// `rdmatool qp-leaks` calls, asks a running agent first (Ask) and runs
// CheckOnce only when no agent is there (ErrNoAgent); an agent that refuses
// the question is an error.
//
// # Socket
//
// The agent serves HTTP/1.1 on a unix socket (DefaultSocket,
// /run/rdmatool/agent.sock), made 0600 in a 0755 directory and removed on
// exit; a stale socket is replaced, a live agent's is not. GET
// /v1/qp-leaks?dev=D&min_age=5s&rule=R&max_qp=D=N&no_probes=1&limit=N returns
// the CheckReport qp-leaks prints (a summary of every finding, and at most
// limit of them QP by QP), with "source":"agent" and the agent's start
// in "observed_since"; GET /v1/status returns a Status. Errors are
// {"error":"..."} with 400 (bad query) or 404 (unknown device or path).
// A qp-leaks answer's status and headers go out before the rules are
// evaluated, so a client's wait for the answer to begin measures an agent
// that does not answer, not a long evaluation; a device removed in
// between makes the body {"error":"..."} under status 200, which Ask
// reports as the agent's error. The findings of an answer are encoded one
// at a time as they are written, so an answer about 60k QPs (40 MB of
// JSON) is never held whole.
//
// # Metrics
//
// With RunOptions.MetricsAddress set the agent also serves Prometheus
// metrics at /metrics over TCP (NewCollector, client_golang): QPs by
// device, type and state, the largest owners per device, resources in use
// (netlink's summary), current findings by rule and severity (an
// evaluation at most five seconds old), probe events and lost events,
// scans, scan errors and durations, max_qp (configured, else as the device
// reported it) and the share in use, the policy in force, its decisions
// and the resets it started, and the names applied to devices; every device
// series is labelled with the device name and its node GUID. A scrape
// reads the State only: it never waits on netlink or the probes.
//
// # Configuration
//
// LoadConfig reads the agent's YAML file (DefaultConfig) through package
// opfile (a regular file of at most 1 MiB, never a pipe or a device) and
// decodes it strictly into Config, whose yaml tags are the file's keys and
// whose field types check the values; Config.Validate checks the policy as
// a whole. The first problem is a *ConfigError naming the file, the line
// and the key. Config.Apply lays the file under the command line's flags. On SIGHUP Run calls
// RunOptions.Reload (ReloadFrom in the CLI): max_qp, the reconcile
// interval and the policy change at once, a bad file or a change only a restart can make
// is refused and logged.
//
// # systemd
//
// Under systemd (Type=notify) Run sends READY=1 once it serves the socket,
// WATCHDOG=1 at half of WatchdogSec for as long as the State answers, and
// STOPPING=1 when its context ends (github.com/coreos/go-systemd).
//
// # Privileges
//
// Netlink scans need no privileges; the probes need CAP_BPF and
// CAP_PERFMON (see package bpf), and without them the agent runs on netlink
// only and says why. Owners are resolved through /proc (package owner);
// zombie contexts of other users' processes are seen only with root or
// CAP_SYS_PTRACE (the rule says how many processes it could not read).
// The policy's resets need what reset.Run needs (CAP_NET_ADMIN; for the
// PCI methods CAP_SYS_ADMIN and a writable /sys).
// While ib_core is not loaded (no NETLINK_RDMA, nothing to probe) the agent
// serves the socket and tries again every RunOptions.Retry.
// packaging/systemd has the unit.
package agent
