package packaging

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmatool/rdmatool/vmtest"
)

// TestSystemAgent installs the .deb as an operator does and runs the agent
// under the shipped unit, with systemd itself: `apt install`, `systemctl
// enable --now` returns at READY; the agent learns max_qp and the
// LAST_WQE_REACHED behaviour of rxe0 and siw0 (the verbs devices the unit
// allows: DeviceAllow=char-infiniband_verbs) and attaches its fentry
// probes; it names the QPs a workload of user nobody leaks, answers
// qp-leaks with them, and names a process of nobody holding a deleted
// uverbs node (/proc/PID/fd of another user: CAP_SYS_PTRACE under
// ProtectProc=invisible); `systemctl reload` with a broken agent.yaml
// keeps the running configuration; stopped with SIGSTOP, it is killed by
// the watchdog and restarted; `systemctl stop` ends it within seconds;
// purge removes what the package installed. The unit's only change is a
// drop-in that shortens WatchdogSec to 10s. systemd-analyze security
// rates the unit as loaded.
func TestSystemAgent(t *testing.T) {
	vmtest.RequireSystem(t, vmtest.RXE, vmtest.SIW)
	deb := labDeb(t, "deb/rdmatool_*.deb")
	purgeOnCleanup(t)
	out := aptInstall(t, deb)
	if !strings.Contains(out, "Setting up rdmatool ("+debVersion(t, deb)+")") {
		t.Errorf("apt install %s did not set up rdmatool:\n%s", deb, out)
	}
	if p := unitProps(t, agentUnit, "UnitFileState", "ActiveState"); p["UnitFileState"] != "disabled" || p["ActiveState"] != "inactive" {
		t.Errorf("after install the unit is %v, want disabled and inactive (the package starts nothing)", p)
	}
	const dropin = "/etc/systemd/system/rdmatool-agent.service.d"
	if err := os.MkdirAll(dropin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dropin) })
	if err := os.WriteFile(dropin+"/watchdog.conf", []byte("[Service]\nWatchdogSec=10s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	guest(t, "systemctl", "daemon-reload")

	// Type=notify: enable --now returns once the agent said READY=1.
	cursor := journalCursor(t)
	start := time.Now()
	guest(t, "systemctl", "enable", "--now", agentUnit)
	t.Logf("systemctl enable --now returned after %.1fs (READY=1)", time.Since(start).Seconds())
	if p := unitProps(t, agentUnit, "ActiveState", "SubState", "UnitFileState"); p["ActiveState"] != "active" ||
		p["SubState"] != "running" || p["UnitFileState"] != "enabled" {
		t.Fatalf("after enable --now: %v\n%s", p, unitLog(t, agentUnit, cursor))
	}

	// Not root: a user of its own (DynamicUser=) holding exactly the
	// unit's capabilities, effective through AmbientCapabilities=.
	checkAgentCredentials(t)

	// What it learned of each device, under the unit's device allow list.
	type learned struct {
		dev     vmtest.Device
		pattern *regexp.Regexp
	}
	var devs []learned
	for _, d := range []struct {
		dev      vmtest.Device
		provider string
	}{{vmtest.RXE, "rxe"}, {vmtest.SIW, "siw"}} {
		lastWQE := "never"
		if vmtest.EmitsLastWQE(t, d.dev) {
			lastWQE = "delivered"
		}
		devs = append(devs, learned{d.dev, regexp.MustCompile(fmt.Sprintf(
			`msg="device learned" .*device=%s facts="provider \\"%s\\", LAST_WQE_REACHED %s, max_qp (\d+)"`,
			d.dev, d.provider, lastWQE))})
	}
	probes := regexp.MustCompile(`msg="probes attached" mode=(\w+)`)
	waitFor(t, 90*time.Second, "devices learned with their max_qp and probes attached", func() bool {
		log := unitLog(t, agentUnit, cursor)
		for _, d := range devs {
			if !d.pattern.MatchString(log) {
				return false
			}
		}
		return probes.MatchString(log) && metricValue(agentMetricsURL, "rdmatool_probes_up") == 1
	}, func() string { return unitLog(t, agentUnit, cursor) })
	log := unitLog(t, agentUnit, cursor)
	if m := probes.FindStringSubmatch(log); m[1] != "fentry" {
		t.Errorf("probes attached in mode %s under the unit, want fentry", m[1])
	}
	for _, d := range devs {
		got, _ := strconv.Atoi(d.pattern.FindStringSubmatch(log)[1])
		if want := devinfoMaxQP(t, d.dev); got != want {
			t.Errorf("%s: the agent learned max_qp %d, ibv_devinfo says %d", d.dev, got, want)
		}
		if v := metricValue(agentMetricsURL, "rdmatool_device_max_qps", "device", string(d.dev)); v != float64(got) {
			t.Errorf("rdmatool_device_max_qps{device=%q} = %v, want %d", d.dev, v, got)
		}
	}

	// A workload of user nobody leaves QPs in ERR: the agent names it and
	// qp-leaks reports them. And a process of nobody holds siw0's uverbs
	// node, which is then deleted: the agent's next look at the host's
	// processes (at its next start, below) names it as a zombie context.
	w := vmtest.StartWorkloadAs(t, nobody, nobody, "--dev", "rxe0", "--qps", "3", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	leaked := workloadQPNs(w)
	waitFor(t, 60*time.Second, "qp-leaks reporting the workload's QPs", func() bool {
		rep := qpLeaks(t, "--dev", "rxe0", "--min-age", "1s")
		return rep.Source == "agent" && slices.Equal(findingsOf(rep, "stale-error-qp", w.PID()), leaked)
	}, func() string { return fmt.Sprintf("%+v", qpLeaks(t, "--dev", "rxe0", "--min-age", "1s")) })
	if v := metricValue(agentMetricsURL, "rdmatool_owner_qps", "device", "rxe0", "comm", "qpwork", "pid", strconv.Itoa(w.PID())); v != 3 {
		t.Errorf("rdmatool_owner_qps of the workload (pid %d) = %v, want 3", w.PID(), v)
	}
	// Where they were made, named under the unit: the workload's call of
	// libibverbs (a device added here to see a kernel QP's stack would be
	// renamed by udev's rules, rdma-core's and ours: TestLabHardenedAgent
	// checks kernel sites under the unit's capabilities).
	checkSites(t, agentMetricsURL, 3, "", false)
	node, num := uverbsNode(t, vmtest.SIW)
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	holder := startAsNobody(t, []*os.File{f}, "sleep", "600")
	f.Close()
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var major, minor uint32
		fmt.Sscanf(num, "%d:%d", &major, &minor)
		if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
			t.Errorf("make %s again: %v", node, err)
		}
		os.Chmod(node, 0o666)
	})

	// A valid configuration is reloaded at once; a broken one is refused
	// and the running one kept.
	const config = "/etc/rdmatool/agent.yaml"
	pid := unitProps(t, agentUnit, "MainPID")["MainPID"]
	if err := os.WriteFile(config, []byte("max_qp:\n  rxe0: 1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	guest(t, "systemctl", "reload", agentUnit)
	waitFor(t, 30*time.Second, "the reloaded max_qp", func() bool {
		return metricValue(agentMetricsURL, "rdmatool_device_max_qps", "device", "rxe0") == 1234
	}, func() string { return unitLog(t, agentUnit, cursor) })
	if err := os.WriteFile(config, []byte("max_qp:\n  rxe0: [1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadCursor := journalCursor(t)
	guest(t, "systemctl", "reload", agentUnit)
	waitFor(t, 30*time.Second, "the broken configuration refused", func() bool {
		return strings.Contains(unitLog(t, agentUnit, reloadCursor), "configuration reload refused, keeping the running one")
	}, func() string { return unitLog(t, agentUnit, reloadCursor) })
	if v := metricValue(agentMetricsURL, "rdmatool_device_max_qps", "device", "rxe0"); v != 1234 {
		t.Errorf("after the refused reload max_qp of rxe0 is %v, want the running configuration's 1234", v)
	}
	if p := unitProps(t, agentUnit, "MainPID", "ActiveState"); p["MainPID"] != pid || p["ActiveState"] != "active" {
		t.Errorf("after the refused reload: %v, want the same agent (pid %s) active", p, pid)
	}
	// Hostile files in its place (issue 24), each refused by the reload
	// with the agent kept as it was: a named pipe (a plain read hung the
	// agent), a link to /dev/zero (a plain read grew it to 1.5 GB), a file
	// over the 1 MiB cap, a NaN threshold.
	hostileConfig(t, config, pid, cursor)
	if err := os.WriteFile(config, []byte("max_qp:\n  rxe0: 1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// SIGSTOP: the watchdog (10s here) kills it, Restart=on-failure starts
	// it again, and it says READY again.
	stopped := time.Now()
	guest(t, "kill", "-STOP", pid)
	waitFor(t, 90*time.Second, "a restart after the watchdog timeout", func() bool {
		p := unitProps(t, agentUnit, "MainPID", "ActiveState", "SubState", "NRestarts")
		return p["NRestarts"] == "1" && p["MainPID"] != pid && p["MainPID"] != "0" && p["ActiveState"] == "active" && p["SubState"] == "running"
	}, func() string { return unitLog(t, agentUnit, cursor) })
	t.Logf("stopped with SIGSTOP, running again after %.1fs", time.Since(stopped).Seconds())
	if log := unitLog(t, agentUnit, cursor); !strings.Contains(log, "Watchdog timeout") {
		t.Errorf("no watchdog timeout in the unit's log:\n%s", log)
	}

	// The restarted agent looked at the host's processes at once.
	waitFor(t, 60*time.Second, "the zombie context of nobody's process", func() bool {
		rep := qpLeaks(t, "--rule", "zombie-uverbs-context", "--min-age", "1s")
		for _, f := range rep.Findings {
			if f.Rule == "zombie-uverbs-context" && int(f.PID) == holder.Process.Pid && f.Comm == "sleep" {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("%+v\n%s", qpLeaks(t, "--rule", "zombie-uverbs-context", "--min-age", "1s"), unitLog(t, agentUnit, cursor))
	})

	out = guest(t, "systemd-analyze", "security", "--no-pager", agentUnit)
	m := regexp.MustCompile(`Overall exposure level for rdmatool-agent\.service: (\d+\.\d)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security:\n%s", out)
	}
	rating, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("systemd-analyze security rdmatool-agent in the guest: %.1f", rating)
	if rating > unitExposure {
		t.Errorf("systemd-analyze security rates the loaded unit %.1f, worse than the file's %.1f:\n%s", rating, unitExposure, out)
	}

	// A named pipe as the configuration at start: the start fails at once
	// with exit status 2 and the file named, rather than hang in open().
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(config, 0o644); err != nil {
		t.Fatal(err)
	}
	startCursor := journalCursor(t)
	start = time.Now()
	if out, err := guestErr("systemctl", "restart", agentUnit); err == nil {
		t.Errorf("systemctl restart with a named pipe as %s succeeded:\n%s", config, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the refused start took %s", d)
	}
	if log := unitLog(t, agentUnit, startCursor); !strings.Contains(log, "rdmatool: agent: config "+config+": not a regular file (a named pipe)") ||
		!strings.Contains(log, "status=2/INVALIDARGUMENT") {
		t.Errorf("the refused start's log does not name the file and exit 2:\n%s", log)
	}
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("max_qp:\n  rxe0: 1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	guest(t, "systemctl", "reset-failed", agentUnit)
	guest(t, "systemctl", "restart", agentUnit)

	w.Release(30 * time.Second)
	start = time.Now()
	guest(t, "systemctl", "stop", agentUnit)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("systemctl stop took %s", d)
	}
	if p := unitProps(t, agentUnit, "ActiveState", "Result", "ExecMainStatus"); p["ActiveState"] != "inactive" ||
		p["Result"] != "success" || p["ExecMainStatus"] != "0" {
		t.Errorf("after systemctl stop: %v, want inactive, success, exit status 0", p)
	}
	t.Logf("systemctl stop took %.1fs", time.Since(start).Seconds())

	os.RemoveAll(dropin)
	guest(t, "apt-get", "purge", "-y", "rdmatool")
	for _, f := range []string{"/usr/sbin/rdmatool", "/lib/systemd/system/" + agentUnit,
		"/lib/udev/rules.d/70-rdmatool-naming.rules", "/etc/rdmatool", "/usr/share/doc/rdmatool",
		"/etc/systemd/system/multi-user.target.wants/" + agentUnit, "/run/rdmatool",
		"/var/lib/rdmatool", "/var/lib/private/rdmatool"} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("purge left %s", f)
		}
	}
	if out, _ := guestErr("systemctl", "list-unit-files", "--no-legend", agentUnit); strings.TrimSpace(out) != "" {
		t.Errorf("systemd still knows the unit after purge: %s", out)
	}
	if out, err := guestErr("dpkg-query", "-W", "-f=${Status}", "rdmatool"); err == nil && !strings.Contains(out, "not-installed") {
		t.Errorf("dpkg after purge: %s", out)
	}
}

// checkAgentCredentials asserts that the running agent is not root and
// holds the capabilities of the unit's CapabilityBoundingSet, no more and
// no fewer, as effective ones.
func checkAgentCredentials(t *testing.T) {
	t.Helper()
	pid := unitProps(t, agentUnit, "MainPID")["MainPID"]
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("the agent's status: %v", err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(status)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if uid := strings.Fields(fields["Uid"]); len(uid) != 4 || slices.Contains(uid, "0") {
		t.Errorf("the agent runs with uids %q, want a user of its own (DynamicUser=yes), not root", fields["Uid"])
	}
	const want = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON | 1<<unix.CAP_SYS_ADMIN |
		1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH
	for _, k := range []string{"CapEff", "CapBnd", "CapAmb"} {
		got, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil || got != want {
			t.Errorf("the agent's %s = %s, want %016x (the unit's CapabilityBoundingSet)", k, fields[k], uint64(want))
		}
	}
}

// hostileConfig puts hostile files in place of the agent's configuration,
// one at a time, and reloads: each reload is refused with the cause
// logged, and the agent (pid) stays active with its metrics answering.
func hostileConfig(t *testing.T, config, pid, cursor string) {
	t.Helper()
	cases := []struct {
		name, cause string
		put         func() error
	}{
		{"a named pipe", "not a regular file (a named pipe)", func() error { return unix.Mkfifo(config, 0o644) }},
		{"a link to /dev/zero", "not a regular file (a character device)", func() error { return os.Symlink("/dev/zero", config) }},
		{"a file of 2 MiB", "larger than 65536 bytes", func() error {
			return os.WriteFile(config, []byte("#"+strings.Repeat(" ", 2<<20)+"\n"), 0o644)
		}},
		{"a NaN threshold", "exhaustion_threshold", func() error {
			return os.WriteFile(config, []byte("exhaustion_threshold: .nan\n"), 0o644)
		}},
	}
	for _, c := range cases {
		if err := os.Remove(config); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := c.put(); err != nil {
			t.Fatal(err)
		}
		at := journalCursor(t)
		guest(t, "systemctl", "reload", agentUnit)
		waitFor(t, 30*time.Second, "the reload of "+c.name+" refused", func() bool {
			log := unitLog(t, agentUnit, at)
			return strings.Contains(log, "configuration reload refused, keeping the running one") && strings.Contains(log, c.cause)
		}, func() string { return unitLog(t, agentUnit, at) })
		if p := unitProps(t, agentUnit, "MainPID", "ActiveState"); p["MainPID"] != pid || p["ActiveState"] != "active" {
			t.Errorf("after %s as the configuration: %v, want the same agent (pid %s) active\n%s", c.name, p, pid, unitLog(t, agentUnit, cursor))
		}
		if v := metricValue(agentMetricsURL, "rdmatool_device_max_qps", "device", "rxe0"); v != 1234 {
			t.Errorf("after %s as the configuration max_qp of rxe0 is %v, want the running configuration's 1234", c.name, v)
		}
	}
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
}
