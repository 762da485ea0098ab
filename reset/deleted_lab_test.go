package reset_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/rdmatool/rdmatool/vmtest"
)

// TestLabResetDeviceDeleted: another process deletes the device in the
// middle of a reset, after Run inspected it and before the helper removes
// it (the helper's command line deletes it first, with rdmatool link
// delete). The reset ends at once with an error matching
// rdmanl.ErrNoDevice that says so, reports the device gone, not "not
// removed", and adds nothing back: the device stays deleted, its netdev as
// it was.
func TestLabResetDeviceDeleted(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	c := client(t)
	const netdev = "rstdel0"
	if out, err := exec.Command("sh", "-c", "ip link add name "+netdev+" address 02:00:00:00:0b:01 type dummy && ip link set "+netdev+" up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", netdev).Run() })
	g := addRXE(t, c, "labrst0", netdev, "0000:00ff:fe00:0b01")
	bin := vmtest.Bin(t, "rdmatool")
	const timeout = 30 * time.Second
	start := time.Now()
	rep, err := reset.Run(t.Context(), c, reset.Options{
		Device: "labrst0", Method: reset.MethodRelink, Timeout: timeout, Yes: true,
		Helper: []string{"sh", "-c", `"$0" link delete labrst0 && exec "$0" "$@"`, bin, "reset-helper"},
		Rename: rename.Options{Policies: []rename.Policy{rename.PolicyKeep}},
		LogDir: t.TempDir(),
	})
	took := time.Since(start)
	t.Logf("kernel %s: reset with the device deleted under it: %v after %v; state %q", vmtest.Kernel(), err, took.Round(time.Millisecond), rep.State)
	want := "reset: labrst0: deleted by another process before the reset removed it: no such RDMA device"
	if err == nil || err.Error() != want || !errors.Is(err, rdmanl.ErrNoDevice) {
		t.Errorf("error %v, want %q matching rdmanl.ErrNoDevice", err, want)
	}
	if rep.Result != reset.ResultFailed || !strings.Contains(rep.State, "another process deleted it") || rep.After != nil {
		t.Errorf("report: result %q, state %q, after %+v; want failed, the device gone, nothing back", rep.Result, rep.State, rep.After)
	}
	if took >= timeout/2 {
		t.Errorf("the reset took %v: it waited for a device that was gone (timeout %v)", took, timeout)
	}
	// Nothing brought back, now or once the helper has ended.
	if log, err := os.ReadFile(rep.HelperLog); err != nil || strings.Contains(string(log), "adding it again") {
		t.Errorf("helper log %q (%v): the helper must not add the device back", log, err)
	}
	if d, ok := byGUID(t, c, g); ok {
		t.Errorf("the deleted device is back as %s", d.Name)
	}
	if out, err := exec.Command("ip", "-o", "link", "show", netdev, "up").Output(); err != nil || !strings.Contains(string(out), netdev) {
		t.Errorf("netdev %s after the reset: %q, %v; want it there and up", netdev, out, err)
	}
}
