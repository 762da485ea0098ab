package vmtest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// InSystem reports whether this process runs inside the system guest: a
// Debian root with systemd as PID 1, booted by `vmlab run -system`.
func InSystem() bool { return os.Getenv("VMTEST_GUEST") == "system" }

// RequireSystem skips t outside the system guest and fails it inside the
// guest when one of devs is missing. Where the run expected the system
// guest (VMTEST_EXPECT_SYSTEM=1, make test-system), running outside fails.
func RequireSystem(t testing.TB, devs ...Device) {
	t.Helper()
	if !InSystem() {
		if os.Getenv("VMTEST_EXPECT_SYSTEM") == "1" {
			t.Fatal("system lab test ran outside the system guest although the run expected it inside")
		}
		t.Skip("system lab test: runs inside the system guest (make test-system)")
	}
	for _, d := range devs {
		if _, err := os.Stat(filepath.Join("/sys/class/infiniband", string(d))); err != nil {
			t.Fatalf("system guest on kernel %s has no %s: %v", Kernel(), d, err)
		}
	}
}

// Boot is how many times the system guest has booted for t: 1 on the
// test's first run, n+1 once it asked for n reboots (Reboot).
func Boot(t testing.TB) int {
	t.Helper()
	n, err := strconv.Atoi(os.Getenv("VMTEST_TEST_BOOT"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Reboot ends t and asks the system guest to reboot from the same disk and
// run t again, with Boot one higher (vmtest/systemtests.sh). A test that
// has failed is not rebooted for: Reboot fails it now. t's cleanups run
// before the reboot, so a test that reboots registers the cleanups of
// what must survive it only on its last boot.
func Reboot(t testing.TB) {
	t.Helper()
	if t.Failed() {
		t.FailNow()
	}
	req := os.Getenv("VMTEST_REBOOT_FILE")
	if !InSystem() || req == "" {
		t.Fatal("vmtest.Reboot: not in the system guest")
	}
	if err := os.WriteFile(req, []byte(t.Name()+"\n"), 0o644); err != nil {
		t.Fatalf("vmtest.Reboot: %v", err)
	}
	t.Skipf("rebooting the system guest (boot %d); the test goes on after it", Boot(t))
}
