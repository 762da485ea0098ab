package packaging

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// unitExposure is the unit's `systemd-analyze security` rating. It was 2.7
// before the agent could open the verbs devices (DevicePolicy=closed and
// DeviceAllow= instead of PrivateDevices=yes) and read other users'
// /proc/PID/fd (CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH); PrivateMounts=,
// ProtectProc= and a user of its own (DynamicUser=) won that back
// (packaging/README.md).
const unitExposure = 2.7

// The unit is rated as packaging/README.md says, by systemd-analyze
// security on the file alone (--offline, systemd 250 and later).
func TestUnitSecurity(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze")
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager",
		"systemd/rdmatool-agent.service").CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for rdmatool-agent\.service: (\d+\.\d)`).FindSubmatch(out)
	if m == nil {
		t.Skipf("systemd-analyze security --offline: %v\n%s", err, out)
	}
	got, _ := strconv.ParseFloat(string(m[1]), 64)
	if got != unitExposure {
		t.Errorf("systemd-analyze security rates the unit %.1f, packaging/README.md says %.1f\n%s", got, unitExposure, out)
	}
}
