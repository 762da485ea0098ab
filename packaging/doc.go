// Package packaging holds no product code: its tests check the files an
// operator installs against what the agent really does and what
// Kubernetes accepts.
//
//   - prometheus/testdata/agent-metrics.txt lists the agent's metric
//     families and labels (written and checked by the agent's tests, there
//     against a lab scrape); every metric and label that the alert rules,
//     their promtool tests and the Grafana dashboard use must be in it, and
//     promtool parses every dashboard query.
//   - The Kubernetes manifests decode strictly into the API's own types
//     (the Prometheus Operator's for kubernetes/monitoring) and hold the
//     systemd unit's capabilities and devices; the PrometheusRule is
//     generated from the alert rules, whose runbook_url sections are in
//     docs/runbook.md.
//   - The Debian versions of consecutive commits sort in commit order
//     (deb/debversion.sh), and systemd-analyze security rates the unit
//     as README.md says.
//   - cmd/copyright writes the package's copyright file and cmd/image the
//     OCI image; both are tested in their directories.
//   - systemd/testdata/syscalls-x86_64.txt is the unit's SystemCallFilter
//     expanded by systemd-analyze; TestLabHardenedAgent runs the agent in
//     the lab guest (busybox init, no systemd) under the unit's
//     capabilities, no_new_privs, that list as a seccomp filter and a
//     read-only mount namespace, applied by the test binary re-executed as
//     a wrapper.
//   - The TestSystem* tests run in the lab's system guest (a Debian host
//     with systemd, udev and rdma-core; make test-system): the .deb
//     installed with apt and the agent under the shipped unit, the udev
//     rule beside rdma-core's across a reboot, an upgrade with a leak in
//     progress, the image under podman as the DaemonSet says, and the
//     scrapes prometheus/rdmatool-alerts.lab.test.yaml is built from.
package packaging
