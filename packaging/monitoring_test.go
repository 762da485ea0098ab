package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"instance", "job"}

// agentMetrics reads prometheus/testdata/agent-metrics.txt: each family
// with its label names, and Prometheus's own "up".
func agentMetrics(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("prometheus/testdata/agent-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	// up is Prometheus' own; the handler's error counter is client_golang's,
	// which the agent serves beside its own (agent.TestMetricsHostileHost).
	m := map[string][]string{"up": {}, "promhttp_metric_handler_errors_total": {"cause"}}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(line, " ")
		m[name] = []string{}
		if labels != "" {
			m[name] = strings.Split(labels, ",")
		}
	}
	if len(m) < 10 {
		t.Fatalf("agent-metrics.txt lists %d families", len(m))
	}
	return m
}

var (
	// selectorPattern finds a metric name and its optional {matchers}.
	selectorPattern = regexp.MustCompile(`\b((?:rdmatool_[a-z_]+)|promhttp_metric_handler_errors_total|up)\b(\{[^}]*\})?`)
	matcherPattern  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingPattern = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	legendPattern   = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	rangePattern    = regexp.MustCompile(`\$__rate_interval|\$__interval|\$__range`)
)

// checkQuery reports metrics the agent does not export and label names
// that none of the query's metrics has; it returns the labels available.
func checkQuery(t *testing.T, metrics map[string][]string, where, expr string) []string {
	t.Helper()
	labels := slices.Clone(scrapeLabels)
	found := false
	for _, m := range selectorPattern.FindAllStringSubmatch(expr, -1) {
		have, ok := metrics[m[1]]
		if !ok {
			t.Errorf("%s: %s is not a metric the agent exports (agent-metrics.txt): %s", where, m[1], expr)
			continue
		}
		found = true
		for _, l := range matcherPattern.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(have, l[1]) && !slices.Contains(scrapeLabels, l[1]) {
				t.Errorf("%s: %s has no label %q: %s", where, m[1], l[1], expr)
			}
		}
		labels = append(labels, have...)
	}
	if !found {
		t.Errorf("%s: query uses no agent metric: %s", where, expr)
	}
	for _, g := range groupingPattern.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
				t.Errorf("%s: groups by %q, which none of its metrics has: %s", where, l, expr)
			}
		}
	}
	return labels
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// runbookURL is where the alerts' runbook_url annotations point: a
// section of docs/runbook.md, by the anchor GitHub gives its heading.
const runbookURL = "https://github.com/rdmatool/rdmatool/blob/main/docs/runbook.md#"

// runbookSections reads docs/runbook.md's sections: "## Name" headings and
// their text.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, part := range strings.Split(string(b), "\n## ")[1:] {
		name, text, _ := strings.Cut(part, "\n")
		sections[name] = text
	}
	return sections
}

// Every alert uses metrics and labels the agent exports, says what to do
// in a runbook annotation, and points with runbook_url at its section of
// docs/runbook.md, which says what it means, what to check and what to do;
// the runbook has a section for no other alert.
func TestAlertRules(t *testing.T) {
	metrics := agentMetrics(t)
	sections := runbookSections(t)
	var rf ruleFile
	decodeStrict(t, "prometheus/rdmatool-alerts.yaml", &rf)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			checkQuery(t, metrics, r.Alert, r.Expr)
			for _, a := range []string{"summary", "description", "runbook", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s has no %s annotation", r.Alert, a)
				}
			}
			if want := runbookURL + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			section, ok := sections[r.Alert]
			if !ok {
				t.Errorf("docs/runbook.md has no section ## %s", r.Alert)
			}
			for _, part := range []string{"**What it means.**", "**What to check.**", "**What to do.**"} {
				if ok && !strings.Contains(section, part) {
					t.Errorf("docs/runbook.md ## %s does not say %s", r.Alert, part)
				}
			}
			delete(sections, r.Alert)
			if !slices.Contains([]string{"info", "warning", "critical"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
		}
	}
	if n < 8 {
		t.Errorf("%d alert rules, want the 8 or more of packaging/README.md", n)
	}
	for name := range sections {
		t.Errorf("docs/runbook.md has a section for %s, which is no alert", name)
	}
}

// The promtool tests feed series with exactly the agent's label names (and
// the scrape's instance and job), so they test what a scrape holds.
func TestAlertRuleTestSeries(t *testing.T) {
	metrics := agentMetrics(t)
	var tf struct {
		Tests []struct {
			Name        string `yaml:"name"`
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	b, err := os.ReadFile("prometheus/rdmatool-alerts.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`^([a-z_]+)\{(.*)\}$`)
	n := 0
	for _, tc := range tf.Tests {
		for _, s := range tc.InputSeries {
			n++
			m := series.FindStringSubmatch(s.Series)
			if m == nil {
				t.Errorf("%s: series %q: want name{labels}", tc.Name, s.Series)
				continue
			}
			want, ok := metrics[m[1]]
			if !ok {
				t.Errorf("%s: %s is not a metric the agent exports", tc.Name, m[1])
				continue
			}
			want = append(slices.Clone(want), scrapeLabels...)
			var got []string
			for _, l := range matcherPattern.FindAllStringSubmatch(m[2], -1) {
				got = append(got, l[1])
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s has labels %v, the agent exports %v (plus instance, job)", tc.Name, s.Series, got, want)
			}
		}
	}
	if n == 0 {
		t.Error("no input series")
	}
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// Every dashboard query uses the agent's metrics and labels, its legends
// name labels the query keeps, and promtool parses it.
func TestDashboard(t *testing.T) {
	metrics := agentMetrics(t)
	b, err := os.ReadFile("grafana/rdmatool-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatal("dashboard without uid or title")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			n++
			labels := checkQuery(t, metrics, "panel "+p.Title, q.Expr)
			if g := groupingPattern.FindStringSubmatch(q.Expr); g != nil && strings.HasPrefix(strings.TrimSpace(strings.SplitN(q.Expr, "(", 2)[0]), "sum") {
				labels = strings.Split(strings.ReplaceAll(g[1], " ", ""), ",")
			}
			for _, l := range legendPattern.FindAllStringSubmatch(q.LegendFormat, -1) {
				if !slices.Contains(labels, l[1]) {
					t.Errorf("panel %q: legend names %q, which %s does not keep", p.Title, l[1], q.Expr)
				}
			}
			// Grafana's variables become what Prometheus would see.
			expr := rangePattern.ReplaceAllString(q.Expr, "5m")
			expr = strings.ReplaceAll(expr, "$instance", ".*")
			fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %q\n", n, expr)
		}
	}
	promtool := requirePromtool(t)
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

// requirePromtool finds promtool (Debian's prometheus package, installed by
// vmtest/install-deps.sh); make test sets RDMATOOL_REQUIRE_PROMTOOL so a
// missing one fails there instead of skipping.
func requirePromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("RDMATOOL_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool not found (apt-get install prometheus)")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	return p
}
