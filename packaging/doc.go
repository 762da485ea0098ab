// Package packaging holds no Go code: its tests check the files an
// operator installs against what the agent really exports and what
// Kubernetes accepts. They read prometheus/testdata/agent-metrics.txt
// (written and checked by the agent's tests, there against a lab scrape)
// and check every metric and label that the alert rules, their promtool
// tests and the Grafana dashboard use; they run promtool on the dashboard's
// queries, and decode the Kubernetes manifests strictly with the API's
// own types.
package packaging
