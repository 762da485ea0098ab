package rename

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests: they run inside the vmtest guest on every kernel of the matrix
// (make test-lab) and skip elsewhere. They make their own devices on dummy
// netdevs with fixed MAC addresses, so the node GUIDs are known, and leave
// the lab's rxe0 and siw0 alone.

const (
	packagedRule = "../packaging/udev/70-rdmatool-naming.rules"
	ruleFile     = "/etc/udev/rules.d/70-rdmatool-naming.rules"
	rdmaCoreRule = "/etc/udev/rules.d/60-rdma-persistent-naming.rules" // overrides rdma-core's
	rdmaRename   = "/usr/lib/udev/rdma_rename"
)

// labNIC is a dummy netdev with a fixed MAC address; rxe and siw derive
// the node GUID from it (EUI-64: 02:00:00:00:0a:01 gives
// 0000:00ff:fe00:0a01).
type labNIC struct {
	netdev string
	mac    string
	guid   rdmanl.GUID
}

func nic(n int) labNIC {
	return labNIC{
		netdev: fmt.Sprintf("labnet%d", n),
		mac:    fmt.Sprintf("02:00:00:00:0a:%02x", n),
		guid:   rdmanl.GUID(0x000000fffe000a00 + uint64(n)),
	}
}

func labClient(t *testing.T) *rdmanl.Client {
	t.Helper()
	c, err := rdmanl.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addNetdev makes the NIC's dummy netdev; it is deleted when the test ends.
func addNetdev(t *testing.T, n labNIC) {
	t.Helper()
	run(t, "ip", "link", "add", "name", n.netdev, "address", n.mac, "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "del", n.netdev).Run() })
	run(t, "ip", "link", "set", n.netdev, "up")
}

// byGUID returns the device with a node GUID, whatever it is called now.
// It works in cleanups too, where t.Context() has ended.
func byGUID(t *testing.T, c *rdmanl.Client, g rdmanl.GUID) (rdmanl.Device, bool) {
	t.Helper()
	devs, err := c.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d rdmanl.Device) bool { return d.NodeGUID == g })
	if i < 0 {
		return rdmanl.Device{}, false
	}
	return devs[i], true
}

// addLink adds an RDMA device on the NIC; it is deleted when the test ends,
// under whatever name it has then.
func addLink(t *testing.T, c *rdmanl.Client, n labNIC, name, linkType string) {
	t.Helper()
	if err := c.LinkAdd(t.Context(), name, linkType, n.netdev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteLink(t, c, n) })
}

func deleteLink(t *testing.T, c *rdmanl.Client, n labNIC) {
	t.Helper()
	if d, ok := byGUID(t, c, n.guid); ok {
		if err := c.LinkDelete(context.Background(), d); err != nil {
			t.Errorf("delete %s: %v", d.Name, err)
		}
	}
}

// waitForName waits for udev to finish and the device with the NIC's GUID
// to be called want, and returns it. If it is not, the failure quotes what
// udevd logged since mark about rules and rdmatool, so the one line that
// says why is next to the failure.
func (u *udevd) waitForName(t *testing.T, c *rdmanl.Client, mark int, n labNIC, want string) rdmanl.Device {
	t.Helper()
	run(t, "udevadm", "settle", "--timeout=60")
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		d, ok := byGUID(t, c, n.guid)
		if ok && d.Name == want {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("device with node GUID %s is %q (present %v) 10s after udev settled, want %s; udevd since the device was added:\n%s",
				n.guid, d.Name, ok, want, u.logSince(mark, "rdmatool", "rdma_rename", "RELOAD", "rules"))
		}
		<-tick.C
	}
}

// checkLabDevices fails t if the lab's own devices lost their names.
func checkLabDevices(t *testing.T, c *rdmanl.Client) {
	t.Helper()
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		if _, err := c.Device(context.Background(), string(d)); err != nil {
			t.Errorf("the lab's %s is gone: %v", d, err)
		}
	}
	devs, _ := c.Devices(context.Background())
	for _, d := range devs {
		if strings.HasPrefix(d.Name, "rdmatool-tmp") {
			t.Errorf("device %d is left under the temporary name %s", d.Index, d.Name)
		}
	}
}

// writeFile writes a file the test removes again when it ends.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}

// udevd is systemd-udevd from Debian's udev package, running as a child of
// the test.
type udevd struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

func (u *udevd) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.log.Write(p)
}

// mark returns the log's length, for logSince.
func (u *udevd) mark() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.log.Len()
}

// logLines returns the lines of udevd's debug log that mention any of words.
func (u *udevd) logLines(words ...string) string { return u.logSince(0, words...) }

// logSince is logLines for the log written after mark.
func (u *udevd) logSince(mark int, words ...string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, l := range strings.Split(u.log.String()[mark:], "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// copyBin copies the lab's rdmatool to dst in the guest's memory: run from
// the 9p share, every start reads the 9 MB binary through 9p again, which
// under TCG takes seconds and is not what a host with rdmatool on disk sees.
func copyBin(t *testing.T, dst string) string {
	t.Helper()
	return copyProgram(t, "rdmatool", dst)
}

// copyProgram copies one of the lab's binaries (vmtest.Bin) to dst.
func copyProgram(t *testing.T, name, dst string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(vmtest.Bin(t, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// udevProgram is where the packaged rule runs rdmatool-udev-rename from.
const udevProgram = "/lib/udev/rdmatool-udev-rename"

// startUdevd installs rdmatool as /usr/sbin/rdmatool and
// rdmatool-udev-rename where the packaged rule runs it, and the map file, and runs systemd-udevd until the test
// ends. udevd does no coldplug, so devices that exist already (rxe0, siw0)
// see no event.
func startUdevd(t *testing.T, names string) *udevd {
	t.Helper()
	udevadm, err := exec.LookPath("udevadm")
	if err != nil {
		t.Fatalf("the lab guest has no udevadm (Debian's udev package): rebuild the lab userspace "+
			"(rm -rf ~/.cache/rdmatool-lab/userspace ~/.cache/rdmatool-lab/kernels/*/image.json; make lab): %v", err)
	}
	copyBin(t, "/usr/sbin/rdmatool")
	t.Cleanup(func() { os.Remove("/usr/sbin/rdmatool") })
	copyProgram(t, "rdmatool-udev-rename", udevProgram)
	t.Cleanup(func() { os.Remove(udevProgram) })
	writeFile(t, DefaultMapFile, names)

	u := &udevd{done: make(chan struct{})}
	// udevadm is systemd-udevd when its argv[0] says so.
	u.cmd = &exec.Cmd{Path: udevadm, Args: []string{"systemd-udevd", "--debug"}, Stdout: u, Stderr: u}
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.cmd.Wait(); close(u.done) }()
	t.Cleanup(func() {
		u.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-u.done:
		case <-time.After(10 * time.Second):
			u.cmd.Process.Kill()
			<-u.done
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("udevd log, its last 40 lines about rdmatool and rules:\n%s", lastLines(u.logLines("rdmatool", "rdma_rename", "RELOAD", "rules"), 40))
		}
	})
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for exec.Command("udevadm", "control", "--ping", "--timeout=5").Run() != nil {
		select {
		case <-u.done:
			t.Fatalf("systemd-udevd exited: %s", u.logLines(""))
		case <-deadline:
			t.Fatal("systemd-udevd does not answer udevadm control --ping")
		case <-tick.C:
		}
	}
	return u
}

// installRule installs a udev rule file and makes udevd read it.
func installRule(t *testing.T, path, content string) {
	t.Helper()
	writeFile(t, path, content)
	run(t, "udevadm", "control", "--reload")
}

// forceRule returns the packaged rule with --force added, as the udev
// README shows for software devices.
func forceRule(t *testing.T, packaged string) string {
	t.Helper()
	const run = udevProgram + " -- '%k'"
	if !strings.Contains(packaged, run) {
		t.Fatalf("%s does not run %q", packagedRule, run)
	}
	return strings.Replace(packaged, run, udevProgram+" --force -- '%k'", 1)
}

// TestLabUdevRule runs the packaged rule in a real systemd-udevd: a new
// device gets its name from the map or from its node GUID, and the same
// name again when it comes back with a new index.
//
// From 6.11 the kernel marks the names of devices made by "rdma link add
// NAME" as user-assigned, and the packaged rule leaves them, as rdma-core's
// rdma_rename (v53 and later) does. With --force added, as the README
// shows for software devices, the rule renames them on every kernel.
func TestLabUdevRule(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	mapped, rxe, siw := nic(1), nic(2), nic(3)
	u := startUdevd(t, fmt.Sprintf("# lab\n%s lab-mapped\n", mapped.guid))
	defer checkLabDevices(t, c)
	raw, err := os.ReadFile(packagedRule)
	if err != nil {
		t.Fatal(err)
	}
	packaged := string(raw)
	forced := forceRule(t, packaged)

	devs := []struct {
		name     string
		nic      labNIC
		linkType string
		kernel   string // the name rdma link add gives it
		want     string
	}{
		{"map", mapped, "rxe", "labrxe1", "lab-mapped"},
		{"guid rxe", rxe, "rxe", "labrxe2", "rocex000000fffe000a02"},
		{"guid siw", siw, "siw", "labsiw3", "iwx000000fffe000a03"},
	}
	for _, rule := range []struct {
		name, content string
		force         bool
	}{
		{"packaged rule", packaged, false},
		{"rule with --force", forced, true},
	} {
		t.Run(rule.name, func(t *testing.T) {
			installRule(t, ruleFile, rule.content)
			for _, tt := range devs {
				t.Run(tt.name, func(t *testing.T) {
					mark := u.mark()
					addNetdev(t, tt.nic)
					start := time.Now()
					addLink(t, c, tt.nic, tt.kernel, tt.linkType)
					run(t, "udevadm", "settle", "--timeout=60")
					want := tt.want
					if d, _ := byGUID(t, c, tt.nic.guid); d.HasNameAssign && d.NameAssignType == rdmanl.NameAssignUser && !rule.force {
						want = tt.kernel // user-assigned at rdma link add (6.11+)
					}
					first := u.waitForName(t, c, mark, tt.nic, want)
					t.Logf("%s is %s %v after rdma link add returned (udev settled); name_assign_type %s (reported: %v)",
						tt.kernel, want, time.Since(start).Round(time.Millisecond), first.NameAssignType, first.HasNameAssign)

					deleteLink(t, c, tt.nic)
					run(t, "udevadm", "settle", "--timeout=60")
					addLink(t, c, tt.nic, tt.kernel, tt.linkType)
					again := u.waitForName(t, c, mark, tt.nic, want)
					if again.Index == first.Index {
						t.Errorf("the re-added device has the same index %d; the test wants a new device", again.Index)
					}
					if log := u.logSince(mark, "rdmatool"); strings.Contains(log, "failed with exit code") {
						t.Errorf("rdmatool failed under udev:\n%s", log)
					}
				})
			}
		})
	}

	// udev evaluates every rule, running PROGRAMs as it goes, before it runs
	// any RUN: rdma-core's rule acts first, whatever the file names. Made to
	// rename by GUID, it wins; masked as the README says, ours acts.
	// (Bookworm's rdma_rename, rdma-core 44, renames user-assigned names too.)
	t.Run("rdma-core's rule acts first", func(t *testing.T) {
		installRule(t, ruleFile, forced)
		addNetdev(t, mapped)
		override := `ACTION=="add", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_GUID"` + "\n"
		installRule(t, rdmaCoreRule, override)
		mark := u.mark()
		addLink(t, c, mapped, "labrxe1", "rxe")
		run(t, "udevadm", "settle", "--timeout=60")
		if strings.Contains(u.logSince(mark, "rdma_rename"), "NAME_FALLBACK") {
			// udevd ran the stock rule for this event, not the override
			// just written and reloaded (the reload raced the event: seen
			// once on 7.x): add the device again under the override.
			t.Logf("udevd ran the stock rdma-core rule, not the override: adding labrxe1 again")
			deleteLink(t, c, mapped)
			installRule(t, rdmaCoreRule, override)
			mark = u.mark()
			addLink(t, c, mapped, "labrxe1", "rxe")
		}
		u.waitForName(t, c, mark, mapped, "rocex000000fffe000a01")
		if log := u.logSince(mark, "labrxe1"); !strings.Contains(log, "no such RDMA device") {
			t.Errorf("%s labrxe1 did not report that the device was renamed under it:\n%s", udevProgram, log)
		}
		deleteLink(t, c, mapped)

		os.Remove(rdmaCoreRule)
		if err := os.Symlink("/dev/null", rdmaCoreRule); err != nil {
			t.Fatal(err)
		}
		run(t, "udevadm", "control", "--reload")
		mark = u.mark()
		addLink(t, c, mapped, "labrxe1", "rxe")
		u.waitForName(t, c, mark, mapped, "lab-mapped")
	})
}

// TestLabGUIDNamesMatchRDMARename checks the guid policy against
// rdma-core's own rdma_rename NAME_GUID on the same devices.
func TestLabGUIDNamesMatchRDMARename(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	defer checkLabDevices(t, c)
	for _, tt := range []struct {
		nic      labNIC
		linkType string
		want     string
	}{
		{nic(4), "rxe", "rocex000000fffe000a04"},
		{nic(5), "siw", "iwx000000fffe000a05"},
	} {
		t.Run(tt.linkType, func(t *testing.T) {
			const kernelName = "labguid0"
			addNetdev(t, tt.nic)
			addLink(t, c, tt.nic, kernelName, tt.linkType)
			ours := dryRun(t, kernelName, "--policy", "guid")
			if len(ours.Renames) != 1 || ours.Renames[0].To != tt.want {
				t.Fatalf("rdmatool rename --dry-run: %+v, want %s", ours.Renames, tt.want)
			}
			out := run(t, rdmaRename, kernelName, "NAME_GUID")
			theirs := strings.TrimSpace(out)
			d, _ := byGUID(t, c, tt.nic.guid)
			if theirs != ours.Renames[0].To || d.Name != theirs {
				t.Errorf("rdma_rename NAME_GUID printed %q and named the device %q; rdmatool computes %q", theirs, d.Name, ours.Renames[0].To)
			}
			if err := c.Rename(t.Context(), d, kernelName); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// labReport is the part of rdmatool rename -j the lab tests read.
type labReport struct {
	Renames []struct {
		From, To, Status string
		Applied          bool
	} `json:"renames"`
	Steps []Step `json:"steps"`
}

// dryRun runs rdmatool rename --dry-run -j on one device.
func dryRun(t *testing.T, dev string, args ...string) labReport {
	t.Helper()
	out, stderr, code := rdmatool(t, vmtest.Bin(t, "rdmatool"), append([]string{"rename", dev, "--dry-run", "-j"}, args...)...)
	if code != 0 {
		t.Fatalf("rdmatool rename %s --dry-run: exit %d: %s", dev, code, stderr)
	}
	var rep labReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("rdmatool rename -j: %v: %s", err, out)
	}
	return rep
}

// rdmatool runs the lab's rdmatool and returns stdout, stderr and the exit
// status.
func rdmatool(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runAs(t, nil, bin, args...)
}

func runAs(t *testing.T, cred *syscall.Credential, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestLabRenameCLI runs rdmatool rename against the kernel: a swap, a
// user-assigned name, a clash, a bad map file, udev mode and missing
// privileges.
func TestLabRenameCLI(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	defer checkLabDevices(t, c)
	binDir, err := os.MkdirTemp("", "rdmatool-bin") // not t.TempDir: nobody runs it too
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := copyBin(t, filepath.Join(binDir, "rdmatool"))
	a, b := nic(6), nic(7)
	addNetdev(t, a)
	addNetdev(t, b)
	addLink(t, c, a, "labswapa", "rxe")
	addLink(t, c, b, "labswapb", "rxe")
	dir := t.TempDir()
	mapFile := func(content string) string {
		p := filepath.Join(dir, fmt.Sprintf("names%d.conf", time.Now().UnixNano()))
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	names := func() (string, string) {
		da, _ := byGUID(t, c, a.guid)
		db, _ := byGUID(t, c, b.guid)
		return da.Name, db.Name
	}

	t.Run("swap", func(t *testing.T) {
		m := mapFile(fmt.Sprintf("%s labswapb\n%s labswapa\n", a.guid, b.guid))
		// --force: rdma link add names are user-assigned from 6.11.
		out, stderr, code := rdmatool(t, bin, "rename", "--all", "--policy", "map", "--map", m, "--force", "-j")
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
		var rep labReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		renamed := 0
		for _, r := range rep.Renames {
			if r.Applied {
				renamed++
			}
		}
		if renamed != 2 || !slices.ContainsFunc(rep.Steps, func(s Step) bool { return s.Temporary }) {
			t.Errorf("want 2 renames through a temporary name: %s", out)
		}
		if na, nb := names(); na != "labswapb" || nb != "labswapa" {
			t.Errorf("after the swap: %s and %s, want labswapb and labswapa", na, nb)
		}
	})

	t.Run("user-assigned name", func(t *testing.T) {
		d, _ := byGUID(t, c, a.guid)
		m := mapFile(fmt.Sprintf("%s labuser\n", a.guid))
		out, stderr, code := rdmatool(t, bin, "rename", d.Name, "--policy", "map", "--map", m)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
		// From 6.11 the kernel reports the name rdma link add gave as
		// user-assigned, and a rename keeps the mark.
		if d.HasNameAssign {
			if want := d.Name + " skipped ("; !strings.HasPrefix(out, want) || !strings.Contains(out, "--force") {
				t.Errorf("output %q, want %q... --force", out, want)
			}
			out, stderr, code = rdmatool(t, bin, "rename", d.Name, "--policy", "map", "--map", m, "--force")
			if code != 0 {
				t.Fatalf("--force: exit %d: %s%s", code, out, stderr)
			}
		}
		if want := d.Name + " -> labuser (map " + m + ":1)\n"; out != want {
			t.Errorf("output %q, want %q", out, want)
		}
	})

	t.Run("clash with a device that keeps its name", func(t *testing.T) {
		before, _ := byGUID(t, c, b.guid)
		m := mapFile(fmt.Sprintf("%s rxe0\n", b.guid))
		_, stderr, code := rdmatool(t, bin, "rename", before.Name, "--policy", "map", "--map", m, "--force")
		want := fmt.Sprintf("rdmatool: rename: %s to rxe0: name held by rxe0, which keeps it\n", before.Name)
		if code != 2 || stderr != want {
			t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr, want)
		}
		if after, _ := byGUID(t, c, b.guid); after.Name != before.Name {
			t.Errorf("the device is now %s, want %s", after.Name, before.Name)
		}
	})

	t.Run("invalid map", func(t *testing.T) {
		m := mapFile(fmt.Sprintf("# x\n%s lab/bad\n", b.guid))
		_, stderr, code := rdmatool(t, bin, "rename", "--all", "--map", m)
		want := fmt.Sprintf("rdmatool: rename: %s:2: invalid name \"lab/bad\": contains '/'\n", m)
		if code != 2 || stderr != want {
			t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr, want)
		}
	})

	t.Run("udev mode", func(t *testing.T) {
		d, _ := byGUID(t, c, b.guid)
		empty := mapFile("")
		out, stderr, code := rdmatool(t, bin, "rename", "udev", d.Name, "--policy", "map", "--map", empty)
		if code != 0 || out != "" || stderr != "" {
			t.Errorf("nothing to do: exit %d, stdout %q, stderr %q; want 0 and silence", code, out, stderr)
		}
		out, stderr, code = rdmatool(t, bin, "rename", "udev", "labnosuch0")
		if code != 2 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "rdmanl: find device labnosuch0: no such RDMA device") {
			t.Errorf("missing device: exit %d, stdout %q, stderr %q; want 2 and one line", code, out, stderr)
		}
	})

	t.Run("without CAP_NET_ADMIN", func(t *testing.T) {
		d, _ := byGUID(t, c, b.guid)
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		for _, args := range [][]string{
			{"rename", d.Name, "--policy", "guid", "--force"},
			{"rename", "udev", d.Name, "--policy", "guid", "--force"},
		} {
			_, stderr, code := runAs(t, nobody, bin, args...)
			want := fmt.Sprintf("rdmatool: rename: %s to rocex000000fffe000a07: operation not permitted (run as root or grant CAP_NET_ADMIN)\n", d.Name)
			if code != 2 || stderr != want {
				t.Errorf("%v as nobody: exit %d, stderr %q; want 2, %q", args, code, stderr, want)
			}
		}
	})
}

// TestLabRenameTiming measures one udev-triggered rename, process start to
// exit, of rdmatool-udev-rename (what the packaged rule runs), rdmatool
// rename udev and rdma_rename NAME_GUID, each on a fresh device. rdmatool
// gets --force, as bookworm's rdma_rename (rdma-core 44) does not check
// for user-assigned names.
func TestLabRenameTiming(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	defer checkLabDevices(t, c)
	n := nic(8)
	addNetdev(t, n)
	const rounds = 10
	const kernelName = "labtime0"
	want := "rocex000000fffe000a08"
	bin := copyBin(t, filepath.Join(t.TempDir(), "rdmatool"))
	udev := copyProgram(t, "rdmatool-udev-rename", filepath.Join(t.TempDir(), "rdmatool-udev-rename"))
	tools := []struct {
		name    string
		cmd     []string
		renames bool // false: a baseline that starts and exits
	}{
		{"rdmatool-udev-rename", []string{udev, "--policy", "guid", "--force", "--", kernelName}, true},
		{"rdmatool rename udev", []string{bin, "rename", "udev", kernelName, "--policy", "guid", "--force"}, true},
		{"rdma_rename NAME_GUID", []string{rdmaRename, kernelName, "NAME_GUID"}, true},
		{"rdmatool version (Go start-up)", []string{bin, "version"}, false},
		{"true (process start-up)", []string{"true"}, false},
	}
	times := make([][]time.Duration, len(tools))
	for range rounds {
		for i, tool := range tools {
			if tool.renames {
				if err := c.LinkAdd(t.Context(), kernelName, "rxe", n.netdev); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			out, err := exec.Command(tool.cmd[0], tool.cmd[1:]...).CombinedOutput()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("%s: %v: %s", tool.name, err, out)
			}
			times[i] = append(times[i], took)
			if !tool.renames {
				continue
			}
			d, _ := byGUID(t, c, n.guid)
			if d.Name != want {
				t.Fatalf("%s: device is %q, want %s", tool.name, d.Name, want)
			}
			if err := c.LinkDelete(t.Context(), d); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, tool := range tools {
		ts := times[i]
		slices.Sort(ts)
		t.Logf("kernel %s: %s: median %v, min %v, max %v over %d runs",
			vmtest.Kernel(), tool.name, ts[len(ts)/2].Round(10*time.Microsecond), ts[0].Round(10*time.Microsecond), ts[len(ts)-1].Round(10*time.Microsecond), len(ts))
	}
}

// TestLabNamesLikeFlags renames devices whose names start with '-' or hold
// a space. The kernel takes both: rdma link add refuses only an empty name
// or one with '%' (nldev_newlink), a rename only an empty one
// (nldev_set_doit, ib_device_rename); only rdmatool's own choices must pass
// ValidateName, which allows a leading '-' and refuses whitespace. After
// "--" rdmatool reads them as device names.
func TestLabNamesLikeFlags(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	defer checkLabDevices(t, c)
	bin := copyBin(t, filepath.Join(t.TempDir(), "rdmatool"))
	n := nic(9)
	addNetdev(t, n)
	if err := c.LinkAdd(t.Context(), "-labdash", "rxe", n.netdev); err != nil {
		t.Fatalf("rdma link add -labdash: the kernel refused a name that starts with '-': %v", err)
	}
	t.Cleanup(func() { deleteLink(t, c, n) })
	guidName := "rocex000000fffe000a09"
	m := filepath.Join(t.TempDir(), "names.conf")
	if err := os.WriteFile(m, []byte(fmt.Sprintf("%s -labdash2\n", n.guid)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		rename     string // the kernel's name before, set with rdmanl when not the current one
		args       []string
		wantStdout string
		wantName   string
	}{
		{"to a name with a leading dash", "-labdash", []string{"--policy", "map", "--map", m, "--force", "--", "-labdash"},
			"-labdash -> -labdash2 (map " + m + ":1)\n", "-labdash2"},
		{"dry run from it", "", []string{"--policy", "guid", "--force", "--dry-run", "--", "-labdash2"},
			"-labdash2 -> " + guidName + " (guid " + n.guid.String() + "; dry run)\n", "-labdash2"},
		{"from it", "", []string{"--policy", "guid", "--force", "--", "-labdash2"},
			"-labdash2 -> " + guidName + " (guid " + n.guid.String() + ")\n", guidName},
		{"from a name with a leading dash and a space", "-lab space", []string{"--policy", "guid", "--force", "--", "-lab space"},
			"-lab space -> " + guidName + " (guid " + n.guid.String() + ")\n", guidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := byGUID(t, c, n.guid)
			if tt.rename != "" && d.Name != tt.rename {
				if err := c.Rename(t.Context(), d, tt.rename); err != nil {
					t.Fatalf("rename %s to %q: the kernel refused it: %v", d.Name, tt.rename, err)
				}
			}
			out, stderr, code := rdmatool(t, bin, append([]string{"rename"}, tt.args...)...)
			if code != 0 || out != tt.wantStdout || stderr != "" {
				t.Errorf("rdmatool rename %q: exit %d, stdout %q, stderr %q; want 0, %q", tt.args, code, out, stderr, tt.wantStdout)
			}
			if d, _ := byGUID(t, c, n.guid); d.Name != tt.wantName {
				t.Errorf("the device is %q, want %q", d.Name, tt.wantName)
			}
		})
	}
}

// TestLabUdevRuleNamesLikeFlags runs the packaged rule in systemd-udevd for
// devices made with names that start with '-' or hold a space: udev passes
// them to rdmatool whole, as device names. A name with a ' in it reaches
// rdmatool without the quote, as another device's name; rdmatool sees
// that DEVPATH names another device and leaves both alone.
func TestLabUdevRuleNamesLikeFlags(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	u := startUdevd(t, "")
	defer checkLabDevices(t, c)
	raw, err := os.ReadFile(packagedRule)
	if err != nil {
		t.Fatal(err)
	}
	packaged := string(raw)
	n := nic(10)
	const guidName = "rocex000000fffe000a0a"
	addNetdev(t, n)
	for _, rule := range []struct {
		name, content string
		force         bool
	}{
		{"packaged rule", packaged, false},
		{"rule with --force", forceRule(t, packaged), true},
	} {
		t.Run(rule.name, func(t *testing.T) {
			installRule(t, ruleFile, rule.content)
			for _, kernelName := range []string{"-labdash", "-lab space", "--force"} {
				t.Run(kernelName, func(t *testing.T) {
					mark := u.mark()
					addLink(t, c, n, kernelName, "rxe")
					run(t, "udevadm", "settle", "--timeout=60")
					want := guidName
					if d, _ := byGUID(t, c, n.guid); d.HasNameAssign && d.NameAssignType == rdmanl.NameAssignUser && !rule.force {
						want = kernelName // user-assigned at rdma link add (6.11+)
					}
					u.waitForName(t, c, mark, n, want)
					if log := u.logSince(mark, "rdmatool"); strings.Contains(log, "failed with exit code") {
						t.Errorf("rdmatool failed under udev:\n%s", log)
					}
					deleteLink(t, c, n)
					run(t, "udevadm", "settle", "--timeout=60")
				})
			}
		})
	}

	t.Run("a name with a quote", func(t *testing.T) {
		installRule(t, ruleFile, forceRule(t, packaged))
		other := nic(11)
		addNetdev(t, other)
		addLink(t, c, other, "labq", "rxe")
		run(t, "udevadm", "settle", "--timeout=60")
		d, _ := byGUID(t, c, other.guid)
		if err := c.Rename(t.Context(), d, "labq"); err != nil { // the rule renamed it
			t.Fatal(err)
		}
		mark := u.mark()
		addLink(t, c, n, "lab'q", "rxe")
		run(t, "udevadm", "settle", "--timeout=60")
		if d, _ := byGUID(t, c, other.guid); d.Name != "labq" {
			t.Errorf("the device labq is now %q: rdmatool renamed the wrong device", d.Name)
		}
		if d, _ := byGUID(t, c, n.guid); d.Name != "lab'q" {
			t.Errorf("the device lab'q is now %q", d.Name)
		}
		// udevd logs what its RUN program wrote on stderr as it reads it,
		// which may be after settle returned (6.1, two guests side by side).
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(u.logSince(mark, "rdmatool"), "the udev event is for device") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if log := u.logSince(mark, "rdmatool"); !strings.Contains(log, "the udev event is for device") {
			t.Errorf("rdmatool did not refuse the name udev passed for lab'q (10s after udevadm settle):\n%s", log)
		}
	})
}
