package packaging

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeK8s decodes a manifest into the Kubernetes API type strictly: an
// unknown or misspelt field, a wrong type or a duplicate key fails.
func decodeK8s(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// kustomization is what the tests read of a kustomization.yaml.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// The kustomization lists existing manifests, each decoding strictly.
func TestKustomization(t *testing.T) {
	var k kustomization
	decodeK8s(t, "kustomization.yaml", &k)
	if k.Kind != "Kustomization" || k.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		t.Errorf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	want := []string{"daemonset.yaml", "namespace.yaml", "service.yaml"}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want %v", got, want)
	}
	var ns corev1.Namespace
	decodeK8s(t, "namespace.yaml", &ns)
	if ns.Name != k.Namespace {
		t.Errorf("namespace %q, kustomization puts everything in %q", ns.Name, k.Namespace)
	}
	// The DaemonSet's image is the one make image builds, rdmatool:VERSION
	// (packaging/cmd/image), by kustomize's images: entry.
	var ds appsv1.DaemonSet
	decodeK8s(t, "daemonset.yaml", &ds)
	for _, c := range ds.Spec.Template.Spec.Containers {
		if len(k.Images) != 1 || c.Image != k.Images[0].Name || k.Images[0].NewName != "rdmatool" {
			t.Errorf("container %s: image %q, kustomization images %+v: want rdmatool, named rdmatool", c.Name, c.Image, k.Images)
		}
	}
}

// unitCapabilities reads the systemd unit's CapabilityBoundingSet without
// the CAP_ prefix, as Kubernetes names capabilities.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("systemd/rdmatool-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.TrimPrefix(c, "CAP_"))
			}
			slices.Sort(caps)
			return caps
		}
	}
	t.Fatal("the unit has no CapabilityBoundingSet")
	return nil
}

// The DaemonSet runs the agent as the unit does: the unit's capabilities
// and no more, not privileged, read-only but for the socket dir, the verbs
// devices mounted, in the host's PID and network namespaces, with every
// mount backed by a volume, on every node whatever its taints, without a
// service-account token, ready once it serves metrics on the node's IP in
// brackets (IPv6 nodes), and the Service finds its metrics port.
func TestDaemonSet(t *testing.T) {
	var ds appsv1.DaemonSet
	decodeK8s(t, "daemonset.yaml", &ds)
	var svc corev1.Service
	decodeK8s(t, "service.yaml", &svc)
	spec := ds.Spec.Template.Spec
	if ds.Kind != "DaemonSet" || svc.Kind != "Service" {
		t.Fatalf("kinds %q and %q", ds.Kind, svc.Kind)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the agent's pods", k, v)
		}
	}
	if !spec.HostPID || !spec.HostNetwork {
		t.Errorf("hostPID %v hostNetwork %v, want both", spec.HostPID, spec.HostNetwork)
	}
	if len(spec.NodeSelector) == 0 {
		t.Error("no nodeSelector for RDMA nodes")
	}
	if want := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}; !slices.Equal(spec.Tolerations, want) {
		t.Errorf("tolerations %+v, want %+v (every taint)", spec.Tolerations, want)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("want automountServiceAccountToken: false (the agent talks to no API server)")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext with capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("want privileged: false, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("drops %v, want ALL", sc.Capabilities.Drop)
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	if want := unitCapabilities(t); !slices.Equal(add, want) {
		t.Errorf("adds capabilities %v, the systemd unit has %v", add, want)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	writable := []string{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s has no volume", m.Name)
		}
		if !m.ReadOnly {
			writable = append(writable, m.MountPath)
		}
	}
	// The unit's RuntimeDirectory and StateDirectory.
	if want := []string{"/run/" + unitKey(t, "RuntimeDirectory"), "/var/lib/" + unitKey(t, "StateDirectory")}; !slices.Equal(writable, want) {
		t.Errorf("writable mounts %v, want only the socket dir and the state dir %v", writable, want)
	}
	// The unit's DeviceAllow: the verbs devices, from the host's /dev.
	if !strings.Contains(unitKey(t, "DeviceAllow"), "char-infiniband_verbs") {
		t.Errorf("the unit's DeviceAllow=%s does not allow the verbs devices", unitKey(t, "DeviceAllow"))
	}
	devMounted := false
	for _, m := range c.VolumeMounts {
		if v := volumes[m.Name]; m.MountPath == "/dev/infiniband" && v.HostPath != nil && v.HostPath.Path == "/dev/infiniband" {
			devMounted = true
		}
	}
	if !devMounted {
		t.Error("the host's /dev/infiniband is not mounted at /dev/infiniband (the verbs query for max_qp)")
	}
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--socket=/run/rdmatool/") || !strings.Contains(args, "--metrics-address=[$(NODE_IP)]:10095") {
		t.Errorf("args %q", args)
	}
	port := ""
	for _, p := range c.Ports {
		if p.ContainerPort == 10095 {
			port = p.Name
		}
	}
	if port == "" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != port {
		t.Errorf("the Service's target port does not name the agent's metrics port %q", port)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/metrics" || p.HTTPGet.Port.String() != port {
			t.Errorf("no %s probe on /metrics at port %q", name, port)
		}
	}
}
