package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rdmatool/rdmatool/vmtest"
)

// nodeIP is the system guest's "node IP" for the DaemonSet's NODE_IP
// (status.hostIP): dummy0's address.
const nodeIP = vmtest.RXEAddr

// podmanArgs translates the DaemonSet's pod into `podman run` arguments, as
// a kubelet would run it on a node: the host's PID and network namespaces,
// the container's security context (capabilities, read-only root, no
// privilege escalation, its user; RuntimeDefault is podman's default
// seccomp profile), the hostPath volumes where they are mounted, the
// environment (status.hostIP is nodeIP), the memory limit, and the
// command and args with $(VAR) expanded. Anything the translation does not
// know fails t, so a change to the manifest changes the test too.
func podmanArgs(t *testing.T, ds appsv1.DaemonSet, image string, extra ...string) []string {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("the DaemonSet has %d containers and %d init containers; the translation knows one", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	args := []string{"run", "-d", "--name", "rdmatool-agent"}
	if pod.HostPID {
		args = append(args, "--pid=host")
	}
	if pod.HostNetwork {
		args = append(args, "--network=host")
	}
	if pod.HostIPC || pod.ShareProcessNamespace != nil || pod.SecurityContext != nil && !isZero(*pod.SecurityContext) {
		t.Fatalf("pod settings the translation does not know: hostIPC %v, shareProcessNamespace %v, securityContext %+v",
			pod.HostIPC, pod.ShareProcessNamespace, pod.SecurityContext)
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the container has no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		args = append(args, "--privileged")
	}
	if sc.RunAsUser != nil {
		args = append(args, "--user="+strconv.FormatInt(*sc.RunAsUser, 10))
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt=no-new-privileges")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		// Kubernetes mounts no tmpfs of its own on a read-only root.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop="+strings.ToLower(string(d)))
		}
		for _, a := range sc.Capabilities.Add {
			args = append(args, "--cap-add="+string(a))
		}
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("seccomp profile %s: the translation knows RuntimeDefault", sc.SeccompProfile.Type)
	}
	if sc.RunAsGroup != nil || sc.RunAsNonRoot != nil || sc.SELinuxOptions != nil || sc.ProcMount != nil || sc.AppArmorProfile != nil {
		t.Fatalf("security settings the translation does not know: %+v", sc)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok || v.HostPath == nil || m.SubPath != "" {
			t.Fatalf("volume mount %+v: the translation knows whole hostPath volumes", m)
		}
		if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(v.HostPath.Path, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		opt := v.HostPath.Path + ":" + m.MountPath
		if m.ReadOnly {
			opt += ":ro"
		}
		args = append(args, "--volume="+opt)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP":
			env[e.Name] = nodeIP
		default:
			t.Fatalf("env %s: the translation knows values and status.hostIP", e.Name)
		}
		args = append(args, "--env="+e.Name+"="+env[e.Name])
	}
	if mem, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		args = append(args, "--memory="+strconv.FormatInt(mem.Value(), 10))
	}
	expand := func(s string) string {
		return regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(s, func(v string) string {
			if val, ok := env[v[2:len(v)-1]]; ok {
				return val
			}
			return v
		})
	}
	if len(c.Command) == 0 {
		t.Fatal("the container names no command")
	}
	entry, _ := json.Marshal([]string{expand(c.Command[0])})
	args = append(args, "--entrypoint="+string(entry))
	args = append(args, extra...)
	args = append(args, image)
	for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
		args = append(args, expand(a))
	}
	return args
}

func isZero(sc corev1.PodSecurityContext) bool {
	b, _ := json.Marshal(sc)
	return string(b) == "{}"
}

// TestSystemImage runs the image `make image` built under podman (crun) in
// the system guest as the DaemonSet's manifest says (podmanArgs): it is
// ready (serves /metrics), attaches its probes, answers `rdmatool
// qp-leaks` on the host through the socket directory it shares, with the
// leak of a workload on rxe0, and exports rxe0 and siw0. Opening
// /dev/infiniband/uverbsN from the container: the manifest mounts the
// directory, but podman's device cgroup, like containerd's and CRI-O's,
// allows a non-privileged container only the devices it was given, so the
// open fails and the agent runs without max_qp; given the devices
// (podman --device, what an RDMA device plugin does in Kubernetes), it
// learns them.
func TestSystemImage(t *testing.T) {
	vmtest.RequireSystem(t, vmtest.RXE, vmtest.SIW)
	archive := vmtest.LabFile(t, "image/rdmatool_*.tar")
	out := guest(t, "podman", "load", "--quiet", "--input", archive)
	m := regexp.MustCompile(`Loaded image: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("podman load: %s", out)
	}
	image := m[1]
	t.Cleanup(func() { guestErr("podman", "rmi", "--force", image) })
	var ds appsv1.DaemonSet
	decodeK8s(t, "daemonset.yaml", &ds)
	metrics := "http://" + nodeIP + ":10095/metrics"

	run := func(t *testing.T, extra ...string) (logs func() string) {
		t.Helper()
		args := podmanArgs(t, ds, image, extra...)
		t.Logf("podman %s", strings.Join(args, " "))
		guest(t, "podman", args...)
		stopped := false
		logs = func() string { out, _ := guestErr("podman", "logs", "rdmatool-agent"); return out }
		t.Cleanup(func() {
			if !stopped {
				guestErr("podman", "rm", "--force", "rdmatool-agent")
			}
		})
		// The readiness probe: /metrics answers.
		waitFor(t, 90*time.Second, "the agent ready, its probes attached", func() bool {
			return metricValue(metrics, "rdmatool_probes_up") == 1
		}, logs)
		t.Cleanup(func() {
			grace := int(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds)
			start := time.Now()
			guest(t, "podman", "stop", "--time", strconv.Itoa(grace), "rdmatool-agent")
			code := strings.TrimSpace(guest(t, "podman", "inspect", "--format", "{{.State.ExitCode}}", "rdmatool-agent"))
			if code != "0" || time.Since(start) > 20*time.Second {
				t.Errorf("podman stop: exit code %s after %s, want 0 within seconds\n%s", code, time.Since(start), logs())
			}
			guestErr("podman", "rm", "--force", "rdmatool-agent")
			stopped = true
		})
		return logs
	}
	learned := func(t *testing.T, logs string, dev vmtest.Device) string {
		t.Helper()
		for line := range strings.Lines(logs) {
			var l struct{ Msg, Device, Facts string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "device learned" && l.Device == string(dev) {
				return l.Facts
			}
		}
		t.Fatalf("the agent logged no device learned for %s:\n%s", dev, logs)
		return ""
	}

	t.Run("as the manifest says", func(t *testing.T) {
		logs := run(t)
		for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
			if v := metricValue(metrics, "rdmatool_scans_total", "device", string(dev)); v < 1 {
				t.Errorf("rdmatool_scans_total{device=%q} = %v", dev, v)
			}
			facts := learned(t, logs(), dev)
			t.Logf("%s in the container: %s", dev, facts)
			if !strings.Contains(facts, "max_qp unknown") || !strings.Contains(facts, "operation not permitted") {
				t.Errorf("%s: the container opened its uverbs device without being given it (%s); the manifest's comments say it cannot", dev, facts)
			}
		}
		w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
		w.WaitFor("ready", 30*time.Second)
		leaked := workloadQPNs(w)
		rdmatool := vmtest.Bin(t, "rdmatool")
		waitFor(t, 60*time.Second, "qp-leaks on the host answered by the container's agent", func() bool {
			rep := qpLeaksWith(t, rdmatool, "--min-age", "1s")
			return rep.Source == "agent" && rep.Probes == "on" && slices.Equal(findingsOf(rep, "stale-error-qp", w.PID()), leaked) &&
				slices.Contains(rep.Devices, "rxe0") && slices.Contains(rep.Devices, "siw0")
		}, func() string { return fmt.Sprintf("%+v\n%s", qpLeaksWith(t, rdmatool, "--min-age", "1s"), logs()) })
		w.Release(30 * time.Second)
	})

	t.Run("given the verbs devices", func(t *testing.T) {
		var extra []string
		nodes, _ := filepath.Glob("/dev/infiniband/uverbs*")
		for _, n := range nodes {
			extra = append(extra, "--device="+n)
		}
		logs := run(t, extra...)
		for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
			facts := learned(t, logs(), dev)
			if want := fmt.Sprintf("max_qp %d", devinfoMaxQP(t, dev)); !strings.HasSuffix(facts, want) {
				t.Errorf("%s given its uverbs device: %s, want %s", dev, facts, want)
			}
		}
	})
}
