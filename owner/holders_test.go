package owner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

var devNull = DevNum{1, 3}

// ours returns this process's entry of a scan.
func ours(t *testing.T, scan HolderScan) Holder {
	t.Helper()
	i := slices.IndexFunc(scan.Holders, func(h Holder) bool { return int(h.PID) == os.Getpid() })
	if i < 0 {
		t.Fatalf("this process (%d) is not among the holders", os.Getpid())
	}
	return scan.Holders[i]
}

func TestHoldersFindsOpenDevice(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var asked []OpenFile
	scan, err := Holders("/proc", func(o OpenFile) bool {
		asked = append(asked, o)
		return o.Dev == devNull
	})
	if err != nil {
		t.Fatal(err)
	}
	h := ours(t, scan)
	if !slices.ContainsFunc(h.Files, func(o OpenFile) bool {
		return o.FD == int(f.Fd()) && o.Path == "/dev/null" && !o.Deleted
	}) {
		t.Errorf("fd %d (/dev/null) missing from %+v", f.Fd(), h.Files)
	}
	for _, o := range h.Files {
		if o.Dev != devNull {
			t.Errorf("unwanted file listed: %+v", o)
		}
	}
	if h.TID != h.PID || h.Comm == "" {
		t.Errorf("holder process not resolved: %+v", h.Process)
	}
	// want sees character devices only: never a socket, pipe or file.
	for _, o := range asked {
		var st unix.Stat_t
		if err := unix.Stat(o.Path, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFCHR {
			t.Errorf("want was asked about a non-device: %+v", o)
		}
	}
	if !slices.IsSortedFunc(scan.Holders, func(a, b Holder) int { return int(a.PID) - int(b.PID) }) {
		t.Error("holders not sorted by pid")
	}
}

// TestHoldersDeletedNode is the state a process is left in when its uverbs
// device is unregistered under it: the fd stays, its node is gone.
func TestHoldersDeletedNode(t *testing.T) {
	needRoot(t)
	node := filepath.Join(t.TempDir(), "uverbs9")
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	scan, err := Holders("/proc", func(o OpenFile) bool { return o.Path == node })
	if err != nil {
		t.Fatal(err)
	}
	want := []OpenFile{{FD: int(f.Fd()), Path: node, Dev: devNull, Deleted: true}}
	if got := ours(t, scan).Files; !slices.Equal(got, want) {
		t.Errorf("files = %+v, want %+v", got, want)
	}
}

// TestHoldersUnprivileged scans as nobody: root's processes cannot be
// inspected and must be reported as such, not silently left out.
func TestHoldersUnprivileged(t *testing.T) {
	if os.Getenv("OWNER_HOLDERS_CHILD") == "1" {
		scan, err := Holders("/proc", func(OpenFile) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		json.NewEncoder(os.Stdout).Encode(scan.Unreadable)
		return
	}
	needRoot(t)
	// The test binary lies in a directory only root may enter: run a copy
	// nobody can execute.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "owner-holders-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "owner.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHoldersUnprivileged$")
	cmd.Env = append(os.Environ(), "OWNER_HOLDERS_CHILD=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var unreadable []uint32
	if err := json.Unmarshal(firstLine(out), &unreadable); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	// This test process runs as root: nobody cannot read its fds.
	if !slices.Contains(unreadable, uint32(os.Getpid())) {
		t.Errorf("root-owned pid %d not reported unreadable; got %v", os.Getpid(), unreadable)
	}
}

func firstLine(b []byte) []byte {
	for i, c := range b {
		if c == '\n' {
			return b[:i]
		}
	}
	return b
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root; this test needs it")
		}
		t.Skip("needs root")
	}
}

func TestParseDevNum(t *testing.T) {
	for in, want := range map[string]DevNum{"231:192\n": {231, 192}, "10:58": {10, 58}, "\t1:3\n": {1, 3}} {
		if got, err := ParseDevNum(in); err != nil || got != want {
			t.Errorf("ParseDevNum(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "231", "231:", ":1", "a:b", "1:2:3", "-1:2", "4294967296:1"} {
		if _, err := ParseDevNum(in); err == nil {
			t.Errorf("ParseDevNum(%q) accepted", in)
		}
	}
	if s := (DevNum{231, 192}).String(); s != "231:192" {
		t.Errorf("String = %q", s)
	}
}
