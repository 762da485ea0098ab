package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/rdmatool/rdmatool/vmtest"
)

// The device TestLabMetricsHostileHost deletes and registers again: soft
// RoCE on a dummy netdev of its own (a fixed MAC, so the same node GUID
// each time), so that rxe0 stays for the other tests.
const (
	regNet = "regnet0"
	regDev = "rxe7"
)

// TestLabMetricsHostileHost scrapes a real agent while a host does what
// broke its scrapes: an unprivileged user runs a QP owner whose process
// name (and executable's file) is not UTF-8, and a device with counted
// create failures, QP errors and MRs is deleted and added again under its
// name. After each, /metrics answers 200, every family of the agent's
// first scrape is there, each label set once, every label value UTF-8,
// promlint finds nothing, and the device's counters went on from where
// they were.
func TestLabMetricsHostileHost(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "link", "add", "name", regNet, "address", "02:00:00:00:07:01", "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "del", regNet).Run() })
	run("ip", "link", "set", regNet, "up")
	run("rdma", "link", "add", regDev, "type", "rxe", "netdev", regNet)
	t.Cleanup(func() { exec.Command("rdma", "link", "delete", regDev).Run() })

	const addr = "127.0.0.1:19097"
	url := "http://" + addr + "/metrics"
	logs, exited, stop, _ := labAgent(t, "--socket", filepath.Join(t.TempDir(), "agent.sock"), "--interval", "1s", "--metrics-address", addr)
	guid := sysfsGUID(t, regDev) // the same after it is added again: its netdev's MAC
	dev := func(kv ...string) map[string]string {
		m := map[string]string{"device": regDev, "node_guid": guid}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	var fams map[string]*dto.MetricFamily
	waitLab(t, time.Minute, exited, logs, "the agent serving metrics with its probes, rxe7 scanned", func() bool {
		fams, _, _ = scrapeErr(url)
		up, _ := value(fams, "rdmatool_probes_up", map[string]string{})
		scans, _ := value(fams, "rdmatool_scans_total", dev())
		return up == 1 && scans > 0
	})
	base := map[string]bool{}
	for name := range fams {
		base[name] = true
	}
	whole := func(when string) map[string]*dto.MetricFamily {
		t.Helper()
		fams, body, err := scrapeErr(url) // status 200 and parsed, or the error
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for name := range base {
			if fams[name] == nil {
				t.Errorf("%s: %s, in the first scrape, is missing", when, name)
			}
		}
		for name, f := range fams {
			seen := map[string]bool{}
			for _, m := range f.Metric {
				var labels []string
				for _, l := range m.Label {
					labels = append(labels, l.GetName()+"="+l.GetValue())
					if !utf8.ValidString(l.GetValue()) {
						t.Errorf("%s: %s{%s=%q} is not UTF-8", when, name, l.GetName(), l.GetValue())
					}
					if l.GetName() == "device" && l.GetValue() == "" {
						t.Errorf("%s: %s has a series of device \"\"", when, name)
					}
				}
				key := strings.Join(labels, ",")
				if seen[key] {
					t.Errorf("%s: %s{%s} twice", when, name, key)
				}
				seen[key] = true
			}
		}
		if n, _ := value(fams, "promhttp_metric_handler_errors_total", map[string]string{"cause": "gathering"}); n != 0 {
			t.Errorf("%s: promhttp_metric_handler_errors_total{cause=\"gathering\"} = %v; agent log:\n%s", when, n, logs.String())
		}
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: promlint: %s: %s", when, p.Metric, p.Text)
		}
		return fams
	}

	// An unprivileged user's QP owner named with bytes that are not UTF-8.
	const hostile = "q\xffp\xfe\x80work"
	w := vmtest.StartWorkloadNamed(t, 65534, 65534, hostile, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	owner := map[string]string{"device": "rxe0", "node_guid": sysfsGUID(t, "rxe0"), "pid": fmt.Sprint(w.PID()), "comm": "q\ufffdp\ufffd\ufffdwork", "ulp": ""}
	waitLab(t, 30*time.Second, exited, logs, "the hostile owner's QPs and findings in /metrics", func() bool {
		fams, _, _ = scrapeErr(url)
		n, _ := value(fams, "rdmatool_owner_qps", owner)
		f, _ := value(fams, "rdmatool_findings", map[string]string{"device": "rxe0", "node_guid": owner["node_guid"], "rule": "stale-error-qp", "severity": "warning"})
		return n >= 2 && f >= 2
	})
	whole("with the hostile owner")
	w.Release(30 * time.Second)

	// rxe7 counts create failures, QP errors and MRs...
	counted := func() (failures, errs, mrDumps float64) { return countedIn(fams) }
	use := func(when string, oversized int) {
		t.Helper()
		bad := vmtest.StartWorkload(t, "--dev", regDev, "--oversized", fmt.Sprint(oversized))
		bad.Wait(time.Minute)
		errQPs := vmtest.StartWorkload(t, "--dev", regDev, "--qps", "2", "--to", "ERR")
		errQPs.Wait(time.Minute)
		mrs := vmtest.StartWorkload(t, "--dev", regDev, "--reg-mrs", "3", "--hold", "stdin")
		mrs.WaitFor("ready", 30*time.Second)
		f0, e0, m0 := counted()
		waitLab(t, 30*time.Second, exited, logs, when+": rxe7's failures, errors and an MR dump counted", func() bool {
			fams, _, _ = scrapeErr(url)
			f, e, m := counted()
			return f >= f0+float64(oversized) && e >= e0+2 && m > m0
		})
		mrs.Release(30 * time.Second)
	}
	use("first registration", 3)
	before := whole("rxe7 in use")
	f1, e1, m1 := countedIn(before)

	// ... then goes (the agent lists the host without it) and comes back.
	run("rdma", "link", "delete", regDev)
	waitLab(t, 30*time.Second, exited, logs, "rxe7 gone from /metrics", func() bool {
		fams, _, _ = scrapeErr(url)
		_, ok := value(fams, "rdmatool_scans_total", dev())
		return fams != nil && !ok
	})
	whole("rxe7 deleted")
	run("rdma", "link", "add", regDev, "type", "rxe", "netdev", regNet)
	waitLab(t, 30*time.Second, exited, logs, "rxe7 back in /metrics", func() bool {
		fams, _, _ = scrapeErr(url)
		n, _ := value(fams, "rdmatool_scans_total", dev())
		return n > 0
	})
	back := whole("rxe7 added again")
	if f, e, m := countedIn(back); f < f1 || e < e1 || m < m1 {
		t.Errorf("rxe7's counters went back when it came back: failures %v -> %v, QP errors %v -> %v, MR dumps %v -> %v", f1, f, e1, e, m1, m)
	}
	use("registered again", 2)
	after := whole("rxe7 in use again")
	if f, e, _ := countedIn(after); f < f1+2 || e < e1+2 {
		t.Errorf("rxe7's counters after it came back: failures %v (was %v, 2 more), QP errors %v (was %v, 2 more)", f, f1, e, e1)
	}
	t.Logf("rxe7: failures %v, QP errors %v, MR dumps %v before the delete; %s", f1, e1, m1, strings.Join(seriesOf(after, regDev), " "))
	stop()
}

// sysfsGUID is the device's node GUID as sysfs has it.
func sysfsGUID(t *testing.T, dev string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/infiniband/" + dev + "/node_guid")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// countedIn is rxe7's EINVAL create failures (every site), QP errors by
// modify and MR dumps in a scrape.
func countedIn(fams map[string]*dto.MetricFamily) (failures, errs, mrDumps float64) {
	for _, m := range fams["rdmatool_qp_create_failures_total"].GetMetric() {
		if l := labelsOf(m); l["device"] == regDev && l["errno"] == "EINVAL" {
			failures += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["rdmatool_qp_errors_total"].GetMetric() {
		if l := labelsOf(m); l["device"] == regDev && l["cause"] == "modify" {
			errs += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["rdmatool_mr_dumps_total"].GetMetric() {
		if labelsOf(m)["device"] == regDev {
			mrDumps += m.GetCounter().GetValue()
		}
	}
	return failures, errs, mrDumps
}

// labelsOf is a series' labels.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// seriesOf is the families that have a series of device dev, for the log.
func seriesOf(fams map[string]*dto.MetricFamily, dev string) []string {
	var out []string
	for name, f := range fams {
		for _, m := range f.Metric {
			if labelsOf(m)["device"] == dev {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
