package packaging

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/vmtest"
)

// The TestSystem* tests run in the system guest (vmtest.RequireSystem,
// make test-system): a Debian bookworm host with systemd, udev and
// rdma-core, where they install what `make deb` and `make image` built
// as an operator does and drive it with apt, systemctl and udevadm.

// agentUnit is the unit the package installs.
const agentUnit = "rdmatool-agent.service"

// agentMetricsURL is where the unit's agent serves metrics (its default).
const agentMetricsURL = "http://127.0.0.1:10095/metrics"

// nobody is the user and group the tests' non-root workloads run as.
const nobody = 65534

// guest runs a command in the system guest and returns its output (stdout
// and stderr), failing t when it fails.
func guest(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// guestErr runs a command and returns its output and error.
func guestErr(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// labDeb copies the one file under the module's .lab directory matching
// pattern (a .deb make built) to /tmp, where apt's sandbox user reads it,
// and returns the copy's path.
func labDeb(t *testing.T, pattern string) string {
	t.Helper()
	src := vmtest.LabFile(t, pattern)
	dst := filepath.Join("/tmp", filepath.Base(src))
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// debVersion is the Version of a .deb file.
func debVersion(t *testing.T, deb string) string {
	t.Helper()
	return strings.TrimSpace(guest(t, "dpkg-deb", "-f", deb, "Version"))
}

// aptInstall installs .deb files with apt, as an operator does, and
// returns apt's output.
func aptInstall(t *testing.T, debs ...string) string {
	t.Helper()
	args := append([]string{"install", "-y", "--no-install-recommends"}, debs...)
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// purgeOnCleanup purges the package when t ends, whatever it left.
func purgeOnCleanup(t *testing.T) {
	t.Cleanup(func() {
		if st, err := guestErr("dpkg-query", "-W", "-f=${Status}", "rdmatool"); err != nil || strings.Contains(st, "not-installed") {
			return // purged already, or never installed
		}
		if out, err := guestErr("apt-get", "purge", "-y", "rdmatool"); err != nil {
			t.Logf("apt-get purge rdmatool: %v\n%s", err, out)
		}
	})
}

// unitProps reads properties of a unit from systemd.
func unitProps(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out := guest(t, "systemctl", "show", unit, "--property="+strings.Join(props, ","))
	m := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// journalCursor is where the journal ends now: what a test waits for is
// looked for after it.
func journalCursor(t *testing.T) string {
	t.Helper()
	out := guest(t, "journalctl", "--show-cursor", "-n", "0", "--quiet", "--no-pager")
	c, ok := strings.CutPrefix(strings.TrimSpace(out), "-- cursor: ")
	if !ok {
		t.Fatalf("journalctl --show-cursor: %q", out)
	}
	return c
}

// unitLog is what the unit logged after cursor ("": since the boot), one
// message a line.
func unitLog(t *testing.T, unit, cursor string) string {
	t.Helper()
	args := []string{"-u", unit, "-o", "cat", "--no-pager"}
	if cursor != "" {
		args = append(args, "--after-cursor="+cursor)
	} else {
		args = append(args, "-b")
	}
	return guest(t, "journalctl", args...)
}

// waitFor polls cond every 250ms until it holds, failing t with what and
// explain() after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s\n%s", what, timeout, explain())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// scrape reads the metric families at url.
func scrape(url string) (map[string]*dto.MetricFamily, string, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	return fams, string(body), err
}

// sample is the value of the series of family name whose labels include
// want, and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if have[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// metricValue scrapes url and returns one series' value (-1 when the
// scrape fails or the series is missing).
func metricValue(url, name string, labels ...string) float64 {
	fams, _, err := scrape(url)
	if err != nil {
		return -1
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	v, ok := sample(fams, name, want)
	if !ok {
		return -1
	}
	return v
}

// siteQPs returns the rdmatool_creation_site_qps samples of a device at
// url, by site, or nil when the metrics cannot be read.
func siteQPs(url, device string) map[string]float64 {
	fams, _, err := scrape(url)
	if err != nil || fams["rdmatool_creation_site_qps"] == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range fams["rdmatool_creation_site_qps"].Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["device"] == device {
			out[labels["site"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// checkSites asserts what an agent at url counts by creation site after
// qpwork made n QPs on rxe0 through plain verbs and a device was added:
// the workload's site named (qpwork's create_qps_verbs via ibv_create_qp)
// and, unless added is "", the added device's GSI QP by its innermost
// kernel frame: a function of ib_core when kallsyms shows the agent its
// addresses (named), else the address in hex.
func checkSites(t *testing.T, url string, n float64, added string, named bool) {
	t.Helper()
	var user, kernel map[string]float64
	waitFor(t, 30*time.Second, "the QPs counted by creation site", func() bool {
		user = siteQPs(url, "rxe0")
		if added != "" {
			kernel = siteQPs(url, added)
		}
		return (added == "" || len(kernel) > 0) && slices.ContainsFunc(slices.Collect(maps.Keys(user)), func(s string) bool {
			return strings.HasPrefix(s, "qpwork!create_qps_verbs+0x") && strings.HasSuffix(s, " via ibv_create_qp") && user[s] == n
		})
	}, func() string { return fmt.Sprintf("rxe0 %v, %s %v", user, added, kernel) })
	for site := range kernel {
		if named && (!strings.HasSuffix(site, " [ib_core]") || strings.HasPrefix(site, "0x")) {
			t.Errorf("%s's kernel QP counted at site %q, want a function of ib_core", added, site)
		}
		if !named && !regexp.MustCompile(`^0x[0-9a-f]{16}$`).MatchString(site) {
			t.Errorf("%s's kernel QP counted at site %q, want a kernel address in hex", added, site)
		}
	}
}

// addRXE adds an rxe device named name on a dummy netdev of its own; the
// returned func deletes both (also run when the test ends). Not in the
// system guest, whose udev rules rename devices as they come.
func addRXE(t *testing.T, name string) (remove func()) {
	t.Helper()
	netdev := name + "nd"
	remove = func() {
		exec.Command("rdma", "link", "delete", name).Run()
		exec.Command("ip", "link", "del", netdev).Run()
	}
	t.Cleanup(remove)
	for _, args := range [][]string{{"ip", "link", "add", netdev, "type", "dummy"}, {"ip", "link", "set", netdev, "up"},
		{"rdma", "link", "add", name, "type", "rxe", "netdev", netdev}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return remove
}

// agentReport is what qp-leaks -j prints.
type agentReport = agentapi.CheckReport

// qpLeaks runs the installed `rdmatool qp-leaks -j` with args, as an
// operator on the host does (it asks the agent), and decodes its report;
// exit status 0 (nothing) and 1 (findings) are answers, anything else
// fails t.
func qpLeaks(t *testing.T, args ...string) agentReport {
	t.Helper()
	return qpLeaksWith(t, "/usr/sbin/rdmatool", args...)
}

// qpLeaksWith is qpLeaks with the rdmatool binary bin.
func qpLeaksWith(t *testing.T, bin string, args ...string) agentReport {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"qp-leaks", "-j"}, args...)...).Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		t.Fatalf("rdmatool qp-leaks -j %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var rep agentReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("rdmatool qp-leaks -j: %v\n%s", err, out)
	}
	return rep
}

// findingsOf are the findings of rule held by pid.
func findingsOf(rep agentReport, rule string, pid int) []uint32 {
	var qpns []uint32
	for _, f := range rep.Findings {
		if f.Rule == rule && int(f.PID) == pid {
			qpns = append(qpns, f.QPN)
		}
	}
	slices.Sort(qpns)
	return qpns
}

// workloadQPNs are the QPNs a workload reported.
func workloadQPNs(w *vmtest.Workload) []uint32 {
	var qpns []uint32
	for _, ev := range w.QPs() {
		qpns = append(qpns, ev.QPN)
	}
	slices.Sort(qpns)
	return qpns
}

// devinfoMaxQP is the max_qp ibv_devinfo -v reports for dev.
func devinfoMaxQP(t *testing.T, dev vmtest.Device) int {
	t.Helper()
	out := guest(t, "ibv_devinfo", "-v", "-d", string(dev))
	m := regexp.MustCompile(`(?m)^\s*max_qp:\s*(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ibv_devinfo -v -d %s shows no max_qp:\n%s", dev, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// uverbsNode is the /dev/infiniband/uverbsN of dev, and its device number.
func uverbsNode(t *testing.T, dev vmtest.Device) (string, string) {
	t.Helper()
	uverbs, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*")
	for _, u := range uverbs {
		b, err := os.ReadFile(filepath.Join(u, "ibdev"))
		if err == nil && strings.TrimSpace(string(b)) == string(dev) {
			num, err := os.ReadFile(filepath.Join(u, "dev"))
			if err != nil {
				t.Fatal(err)
			}
			return "/dev/infiniband/" + filepath.Base(u), strings.TrimSpace(string(num))
		}
	}
	t.Fatalf("%s has no uverbs device", dev)
	return "", ""
}

// startAsNobody starts name as user nobody with extra as its fd 3 and
// later; it is killed when t ends.
func startAsNobody(t *testing.T, extra []*os.File, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}
