package packaging

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/vmtest"
)

// TestSystemUpgrade: with the agent of one commit's package running and a
// workload holding leaked QPs, apt upgrades to the next commit's package
// (make deb-next): apt sees an upgrade, the package restarts the agent
// (postinst's try-restart), and qp-leaks still reports the leaked QPs.
// Their ages should go on from before the upgrade; that needs the agent
// to keep its history in a state file (StateDirectory=), and is skipped
// while the unit has none.
func TestSystemUpgrade(t *testing.T) {
	vmtest.RequireSystem(t, vmtest.RXE, vmtest.SIW)
	debN := labDeb(t, "deb/rdmatool_*.deb")
	debNext := labDeb(t, "deb-next/rdmatool_*.deb")
	vN, vNext := debVersion(t, debN), debVersion(t, debNext)
	if _, err := guestErr("dpkg", "--compare-versions", vN, "lt", vNext); err != nil {
		t.Fatalf("the next commit's version %s does not sort after %s", vNext, vN)
	}
	purgeOnCleanup(t)
	aptInstall(t, debN)
	guest(t, "systemctl", "enable", "--now", agentUnit)
	cursor := journalCursor(t)

	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "3", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	leaked := workloadQPNs(w)
	var before map[uint32]float64
	waitFor(t, 60*time.Second, "qp-leaks reporting the workload's QPs", func() bool {
		before = leakAges(qpLeaks(t, "--dev", "rxe0", "--min-age", "1s"), w.PID())
		return slices.Equal(sortedKeys(before), leaked)
	}, func() string { return fmt.Sprintf("%+v", qpLeaks(t, "--dev", "rxe0", "--min-age", "1s")) })
	measured := time.Now()
	pid := unitProps(t, agentUnit, "MainPID")["MainPID"]

	out := aptInstall(t, debNext)
	if !strings.Contains(out, "1 upgraded") || !strings.Contains(out, fmt.Sprintf("Unpacking rdmatool (%s) over (%s)", vNext, vN)) {
		t.Errorf("apt did not upgrade %s to %s:\n%s", vN, vNext, out)
	}
	if got := strings.TrimSpace(guest(t, "dpkg-query", "-W", "-f=${Version}", "rdmatool")); got != vNext {
		t.Errorf("installed version %s after the upgrade, want %s", got, vNext)
	}
	p := unitProps(t, agentUnit, "MainPID", "ActiveState", "SubState")
	if p["MainPID"] == pid || p["ActiveState"] != "active" || p["SubState"] != "running" {
		t.Fatalf("after the upgrade the agent is %v (was pid %s): want it restarted and running\n%s", p, pid, unitLog(t, agentUnit, cursor))
	}

	var after map[uint32]float64
	waitFor(t, 60*time.Second, "qp-leaks reporting the workload's QPs after the upgrade", func() bool {
		after = leakAges(qpLeaks(t, "--dev", "rxe0", "--min-age", "1s"), w.PID())
		return slices.Equal(sortedKeys(after), leaked)
	}, func() string {
		return fmt.Sprintf("%+v\n%s", qpLeaks(t, "--dev", "rxe0", "--min-age", "1s"), unitLog(t, agentUnit, cursor))
	})
	t.Run("original ages", func(t *testing.T) {
		if !strings.Contains(guest(t, "systemctl", "cat", agentUnit), "StateDirectory=") {
			t.Skip("the agent keeps no state file across restarts (no StateDirectory= in the unit): its ages start again at the upgrade")
		}
		elapsed := time.Since(measured).Seconds()
		for qpn, age := range after {
			if age < before[qpn]+elapsed-1 {
				t.Errorf("QP %d is %.1fs old after the upgrade, was %.1fs %.1fs before it", qpn, age, before[qpn], elapsed)
			}
		}
	})
	w.Release(30 * time.Second)
}

// leakAges are the ages of the stale-error-qp findings of pid, by QPN.
func leakAges(rep agentReport, pid int) map[uint32]float64 {
	ages := map[uint32]float64{}
	for _, f := range rep.Findings {
		if f.Rule == "stale-error-qp" && int(f.PID) == pid {
			ages[f.QPN] = f.AgeSeconds
		}
	}
	return ages
}

func sortedKeys(m map[uint32]float64) []uint32 {
	var keys []uint32
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
