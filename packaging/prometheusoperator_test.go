package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// prometheusRuleFile is the Prometheus Operator's PrometheusRule, generated
// from prometheus/rdmatool-alerts.yaml: one source of truth.
const prometheusRuleFile = "kubernetes/monitoring/prometheusrule.yaml"

// prometheusRule makes the PrometheusRule from the alert rules file,
// decoded strictly into the operator's rule groups.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("prometheus/rdmatool-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("prometheus/rdmatool-alerts.yaml as a PrometheusRule's spec: %v", err)
	}
	type metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	rule := struct {
		APIVersion string                          `json:"apiVersion"`
		Kind       string                          `json:"kind"`
		Metadata   metadata                        `json:"metadata"`
		Spec       monitoringv1.PrometheusRuleSpec `json:"spec"`
	}{"monitoring.coreos.com/v1", "PrometheusRule",
		metadata{"rdmatool", map[string]string{"app.kubernetes.io/name": "rdmatool-agent"}}, spec}
	out, err := yaml.Marshal(rule)
	if err != nil {
		t.Fatal(err)
	}
	header := "# Generated from packaging/prometheus/rdmatool-alerts.yaml by\n" +
		"# go test ./packaging -update (prometheusoperator_test.go): edit that file.\n"
	return append([]byte(header), out...)
}

// The PrometheusRule is the alert rules file's rules, byte for byte as
// generated, and decodes strictly into the operator's type.
func TestPrometheusRule(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is not generated from prometheus/rdmatool-alerts.yaml (go test ./packaging -update) (-want +got):\n%s",
			prometheusRuleFile, diff)
	}
	var pr monitoringv1.PrometheusRule
	decodeK8s(t, "monitoring/prometheusrule.yaml", &pr)
	var rf ruleFile
	decodeStrict(t, "prometheus/rdmatool-alerts.yaml", &rf)
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) != len(rf.Groups) {
		t.Fatalf("%s %s with %d groups", pr.APIVersion, pr.Kind, len(pr.Spec.Groups))
	}
	for i, g := range rf.Groups {
		var alerts []string
		for _, r := range pr.Spec.Groups[i].Rules {
			alerts = append(alerts, r.Alert)
		}
		var want []string
		for _, r := range g.Rules {
			want = append(want, r.Alert)
		}
		if !slices.Equal(alerts, want) {
			t.Errorf("group %s: alerts %v, the rules file has %v", g.Name, alerts, want)
		}
	}
}

// The ServiceMonitor scrapes the Service's metrics port, and the job it
// gives the series (the Service's name) is one the alert rules match.
func TestServiceMonitor(t *testing.T) {
	var k kustomization
	decodeK8s(t, "monitoring/kustomization.yaml", &k)
	if want := []string{"prometheusrule.yaml", "servicemonitor.yaml"}; !slices.Equal(slices.Sorted(slices.Values(k.Resources)), want) {
		t.Errorf("monitoring/kustomization.yaml resources %v, want %v", k.Resources, want)
	}
	var sm monitoringv1.ServiceMonitor
	decodeK8s(t, "monitoring/servicemonitor.yaml", &sm)
	var svc corev1.Service
	decodeK8s(t, "service.yaml", &svc)
	if sm.Kind != "ServiceMonitor" || sm.Namespace != svc.Namespace || k.Namespace != svc.Namespace {
		t.Errorf("%s %s in %q (kustomization %q), the Service is in %q", sm.APIVersion, sm.Kind, sm.Namespace, k.Namespace, svc.Namespace)
	}
	for key, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[key] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the Service's labels do not have", key, v)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name ||
		sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("endpoints %+v, want /metrics on the Service's port %q", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	if sm.Spec.JobLabel != "" {
		t.Errorf("jobLabel %q: the job is the Service's name", sm.Spec.JobLabel)
	}
	b, err := os.ReadFile(filepath.Join("prometheus", "rdmatool-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := regexp.MustCompile(`job=~"([^"]+)"`).FindAllStringSubmatch(string(b), -1)
	if len(jobs) == 0 {
		t.Fatal("the alert rules match no job")
	}
	for _, j := range jobs {
		if !regexp.MustCompile("^(?:" + j[1] + ")$").MatchString(svc.Name) {
			t.Errorf("the alert rules' job=~%q does not match the ServiceMonitor's job %q", j[1], svc.Name)
		}
	}
}
