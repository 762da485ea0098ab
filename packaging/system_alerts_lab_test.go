package packaging

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/vmtest"
)

// labScrapeFile holds scrapes of the real agent under a reset policy, made
// by TestSystemAlertScrape in the system guest (-update rewrites it there);
// TestAlertsOnLabScrape builds the promtool tests of
// prometheus/rdmatool-alerts.lab.test.yaml from it.
const labScrapeFile = "prometheus/testdata/lab-policy-scrapes.txt"

// labScrapeKernel is the kernel whose scrapes are checked in.
const labScrapeKernel = "6.12"

// scrapeFamilies are what the lab scrapes keep: the policy's counters the
// alerts read, and its mode.
var scrapeFamilies = []string{"rdmatool_policy_decisions_total", "rdmatool_policy_info", "rdmatool_resets_total"}

// policyConfig is the agent.yaml of TestSystemAlertScrape: rxe0 is reset
// when 10 QPs in ERR (and the GSI QP) of a max_qp of 40 hold for 2s, at
// most twice an hour and once in 2s (the cooldown may not be shorter than
// for).
const policyConfig = `interval: 2s
max_qp:
  rxe0: 40
policy:
  mode: reset
  qp_use: 0.2
  stale_qps: 5
  for: 2s
  cooldown: 2s
  max_per_hour: 2
  method: %s
  grace: 0s
  timeout: 60s
`

// keptScrape is one scrape the recorder kept: the families of
// scrapeFamilies, in the exposition format, lines sorted.
type keptScrape struct {
	at   time.Duration
	text string
}

// scrapeRecorder scrapes the agent every 500ms and keeps the scrapes whose
// kept families changed, until the agent stops answering.
type scrapeRecorder struct {
	start time.Time
	mu    sync.Mutex
	kept  []keptScrape
	ended time.Duration
	done  chan struct{}
}

func recordScrapes(url string) *scrapeRecorder {
	r := &scrapeRecorder{start: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		answered := false
		for {
			_, body, err := scrape(url)
			if err != nil {
				if answered { // the agent is gone
					r.mu.Lock()
					r.ended = time.Since(r.start)
					r.mu.Unlock()
					return
				}
				time.Sleep(500 * time.Millisecond)
				continue
			}
			answered = true
			var lines []string
			for line := range strings.Lines(body) {
				for _, f := range scrapeFamilies {
					if strings.HasPrefix(line, f+"{") || strings.HasPrefix(line, f+" ") {
						lines = append(lines, line)
					}
				}
			}
			slices.Sort(lines)
			text := strings.Join(lines, "")
			r.mu.Lock()
			if len(r.kept) == 0 || r.kept[len(r.kept)-1].text != text {
				r.kept = append(r.kept, keptScrape{at: time.Since(r.start), text: text})
			}
			r.mu.Unlock()
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return r
}

// TestSystemAlertScrape runs the installed agent under systemd with a reset
// policy on rxe0 and scrapes it as Prometheus would while its policy
// resets rxe0 (relink, done), fails a reset (devlink-reload, which rxe
// does not offer) and is held back by the hourly limit; then it stops. The
// series of each of the three events are exported at 0 before it, so an
// alert's increase() sees the first one (TestAlertsOnLabScrape runs the
// alerts over these scrapes). With -update on 6.12 the scrapes are
// written to labScrapeFile.
func TestSystemAlertScrape(t *testing.T) {
	vmtest.RequireSystem(t, vmtest.RXE, vmtest.SIW)
	guid := readGUID(t, "rxe0")
	purgeOnCleanup(t)
	aptInstall(t, labDeb(t, "deb/rdmatool_*.deb"))
	// The resets add rxe0 again: names.conf keeps the lab's names whatever
	// the package's udev rule and the reset's naming would give it.
	names := "# TestSystemAlertScrape\n" + guid + " rxe0\n" + readGUID(t, "siw0") + " siw0\n"
	if err := os.WriteFile("/etc/rdmatool/names.conf", []byte(names), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove("/etc/rdmatool/names.conf")
		if _, err := os.Stat("/sys/class/infiniband/rxe0"); err != nil {
			guestErr("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "dummy0")
		}
	})
	const config = "/etc/rdmatool/agent.yaml"
	if err := os.WriteFile(config, fmt.Appendf(nil, policyConfig, "relink"), 0o644); err != nil {
		t.Fatal(err)
	}
	cursor := journalCursor(t)
	if out, err := guestErr("systemctl", "enable", "--now", agentUnit); err != nil {
		t.Fatalf("systemctl enable --now: %v\n%s\n%s", err, out, unitLog(t, agentUnit, cursor))
	}
	rec := recordScrapes(agentMetricsURL)
	t.Cleanup(func() { guestErr("systemctl", "stop", agentUnit); <-rec.done })
	logs := func() string { return unitLog(t, agentUnit, cursor) }
	value := func(name string, labels ...string) float64 {
		return metricValue(agentMetricsURL, name, append([]string{"device", "rxe0", "node_guid", guid}, labels...)...)
	}
	waitFor(t, 90*time.Second, "the agent's probes", func() bool { return metricValue(agentMetricsURL, "rdmatool_probes_up") == 1 }, logs)

	// A reset: the relink waits for the workload to let go of rxe0.
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "10", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	waitFor(t, 60*time.Second, "a reset decision", func() bool { return value("rdmatool_policy_decisions_total", "decision", "reset") == 1 }, logs)
	w.Release(30 * time.Second)
	waitFor(t, 90*time.Second, "the reset done", func() bool {
		return value("rdmatool_resets_total", "method", "relink", "result", "done") == 1
	}, logs)

	// A failed reset: the policy asks for a method rxe0 does not offer.
	if err := os.WriteFile(config, fmt.Appendf(nil, policyConfig, "devlink-reload"), 0o644); err != nil {
		t.Fatal(err)
	}
	guest(t, "systemctl", "reload", agentUnit)
	waitFor(t, 30*time.Second, "the new method's results at 0", func() bool {
		return value("rdmatool_resets_total", "method", "devlink-reload", "result", "failed") == 0
	}, logs)
	time.Sleep(time.Second) // a scrape with the zeros is kept before the episode
	w = vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "10", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	waitFor(t, 60*time.Second, "the reset failed", func() bool {
		return value("rdmatool_resets_total", "method", "devlink-reload", "result", "failed") == 1
	}, logs)
	// Two resets this hour: the next episode is held back.
	waitFor(t, 60*time.Second, "the hourly limit", func() bool {
		return value("rdmatool_policy_decisions_total", "decision", "hourly_limit") == 1
	}, logs)
	time.Sleep(time.Second)
	w.Release(30 * time.Second)
	guest(t, "systemctl", "stop", agentUnit)
	<-rec.done

	// Each event's series was there at 0 before it was 1.
	kept := rec.kept
	for _, series := range []string{
		fmt.Sprintf(`rdmatool_resets_total{device="rxe0",method="relink",node_guid="%s",result="done"}`, guid),
		fmt.Sprintf(`rdmatool_resets_total{device="rxe0",method="devlink-reload",node_guid="%s",result="failed"}`, guid),
		fmt.Sprintf(`rdmatool_policy_decisions_total{decision="hourly_limit",device="rxe0",node_guid="%s"}`, guid),
	} {
		first := -1
		for i, s := range kept {
			if strings.Contains(s.text, series+" ") {
				first = i
				break
			}
		}
		switch {
		case first < 0:
			t.Errorf("no scrape has %s", series)
		case !strings.Contains(kept[first].text, series+" 0\n"):
			t.Errorf("%s first appears as %q: the first event is no increase()", series, kept[first].text)
		case !strings.Contains(kept[len(kept)-1].text, series+" 1\n"):
			t.Errorf("%s is not 1 in the last scrape:\n%s", series, kept[len(kept)-1].text)
		}
	}
	if !*update {
		return
	}
	if vmtest.Kernel() != labScrapeKernel {
		t.Logf("-update: the scrapes of kernel %s are checked in, not %s's", labScrapeKernel, vmtest.Kernel())
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Scrapes of the rdmatool agent (families %s) under systemd in the lab's\n", strings.Join(scrapeFamilies, ", "))
	fmt.Fprintf(&b, "# system guest on kernel %s, with a reset policy on rxe0: each scrape whose\n", vmtest.Kernel())
	b.WriteString("# values changed, with its time since the agent started. Written by\n")
	b.WriteString("# TestSystemAlertScrape (make test-system SYSTEM_KERNELS=6.12 LAB_RUN=TestSystemAlertScrape\n")
	b.WriteString("# SYSTEM_ARGS=-update); read by TestAlertsOnLabScrape.\n")
	for i, s := range kept {
		fmt.Fprintf(&b, "# scrape %d +%.1fs\n%s", i+1, s.at.Seconds(), s.text)
	}
	fmt.Fprintf(&b, "# stopped +%.1fs\n", rec.ended.Seconds())
	if err := os.WriteFile(labScrapeFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
