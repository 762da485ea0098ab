package agent

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var updateMetricNames = flag.Bool("update", false, "rewrite "+metricNamesFile)

// metricNamesFile lists every metric family the agent's collector exports
// with its label names. The alert rules, their promtool tests and the
// Grafana dashboard are checked against it (packaging/monitoring_test.go);
// TestMetricNamesFile keeps it equal to the code and TestLabMetrics to a
// real scrape on every lab kernel.
const metricNamesFile = "../packaging/prometheus/testdata/agent-metrics.txt"

// descPattern reads a metric's name and label names from Desc.String(),
// the only place client_golang shows them.
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// describedMetrics returns the families the agent's collector describes,
// each with its label names sorted.
func describedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { newCollector(nil).Describe(ch); close(ch) }()
	got := map[string][]string{}
	for d := range ch {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		labels := []string{}
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		got[m[1]] = labels
	}
	return got
}

// readMetricNames reads metricNamesFile: "name label,label" per line.
func readMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(metricNamesFile)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(line, " ")
		names[name] = []string{}
		if labels != "" {
			names[name] = strings.Split(labels, ",")
		}
	}
	return names
}

func TestMetricNamesFile(t *testing.T) {
	described := describedMetrics(t)
	if *updateMetricNames {
		var b strings.Builder
		b.WriteString("# The metric families rdmatool agent exports and their label names.\n" +
			"# Written by `go test ./agent -run TestMetricNamesFile -update`; TestLabMetrics\n" +
			"# checks it against a real scrape on every lab kernel.\n")
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for n := range described {
				if !yield(n) {
					return
				}
			}
		}) {
			fmt.Fprintln(&b, strings.TrimSpace(name+" "+strings.Join(described[name], ",")))
		}
		if err := os.WriteFile(metricNamesFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(described, readMetricNames(t)); diff != "" {
		t.Errorf("%s is out of date (go test ./agent -run TestMetricNamesFile -update) (-code +file):\n%s", metricNamesFile, diff)
	}
}

// checkScrapeAgainstNames reports every rdmatool_ series of a scrape
// whose family or label names metricNamesFile does not list.
func checkScrapeAgainstNames(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	names := readMetricNames(t)
	for name, f := range fams {
		if !strings.HasPrefix(name, "rdmatool_") {
			continue
		}
		want, ok := names[name]
		if !ok {
			t.Errorf("scraped %s, which %s does not list", name, metricNamesFile)
			continue
		}
		for _, m := range f.Metric {
			got := []string{}
			for _, l := range m.Label {
				got = append(got, l.GetName())
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("scraped %s with labels %v, %s lists %v", name, got, metricNamesFile, want)
				break
			}
		}
	}
}
