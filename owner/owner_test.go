package owner

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	id1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	id2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// fakeProc writes /proc/TID/{comm,status,cgroup} for each thread under a
// temporary root; a nil cgroup leaves the file out.
func fakeProc(t *testing.T, threads map[int]struct {
	comm   string
	tgid   int
	cgroup *string
}) string {
	t.Helper()
	root := t.TempDir()
	for tid, th := range threads {
		dir := filepath.Join(root, strconv.Itoa(tid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{
			"comm":   th.comm + "\n",
			"status": "Name:\t" + th.comm + "\nTgid:\t" + strconv.Itoa(th.tgid) + "\nPid:\t" + strconv.Itoa(tid) + "\n",
		}
		if th.cgroup != nil {
			files["cgroup"] = *th.cgroup
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func ptr(s string) *string { return &s }

func TestLookupCgroup(t *testing.T) {
	t.Parallel()
	threads := map[int]struct {
		comm   string
		tgid   int
		cgroup *string
	}{
		100: {"app", 100, ptr("0::/system.slice/app.service\n")},
		101: {"worker", 100, ptr("0::/system.slice/app.service\n")}, // a thread of 100
		200: {"dockerd-child", 200, ptr("0::/system.slice/docker-" + id1 + ".scope\n")},
		300: {"noproc", 300, nil}, // no cgroup file (an old kernel, or it raced with exit)
	}
	root := fakeProc(t, threads)
	procs, err := NewResolver(root)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tid    uint32
		want   Process
		wantOK bool
	}{
		{100, Process{TID: 100, PID: 100, Comm: "app", Cgroup: "/system.slice/app.service"}, true},
		{101, Process{TID: 101, PID: 100, Comm: "worker", Cgroup: "/system.slice/app.service"}, true},
		{200, Process{TID: 200, PID: 200, Comm: "dockerd-child", Cgroup: "/system.slice/docker-" + id1 + ".scope", ContainerID: id1}, true},
		{300, Process{TID: 300, PID: 300, Comm: "noproc"}, true},
		{400, Process{}, false}, // exited
		{0, Process{}, false},
	}
	for _, tt := range tests {
		got, ok := procs.Lookup(tt.tid)
		if ok != tt.wantOK {
			t.Errorf("Lookup(%d) ok = %v, want %v", tt.tid, ok, tt.wantOK)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Lookup(%d) (-want +got):\n%s", tt.tid, diff)
		}
	}
	// Lookups are cached for the life of the Resolver: a process that moves
	// is seen where it was until the next scan's Resolver.
	if err := os.WriteFile(filepath.Join(root, "100", "cgroup"), []byte("0::/moved\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := procs.Lookup(100); got.Cgroup != "/system.slice/app.service" {
		t.Errorf("cached lookup read %q", got.Cgroup)
	}
	fresh, _ := NewResolver(root)
	if got, _ := fresh.Lookup(100); got.Cgroup != "/moved" {
		t.Errorf("new Resolver read %q, want /moved", got.Cgroup)
	}
}

func TestCgroupPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, want string
	}{
		{"cgroup v2", "0::/system.slice/foo.service\n", "/system.slice/foo.service"},
		{"v2 root", "0::/\n", "/"},
		{"v2 without a final newline", "0::/user.slice/user-1000.slice/session-3.scope", "/user.slice/user-1000.slice/session-3.scope"},
		{"hybrid: v1 controllers and the unified hierarchy", "12:memory:/docker/" + id1 + "\n1:name=systemd:/docker/" + id1 + "\n0::/docker/" + id1 + "\n", "/docker/" + id1},
		{"v1 only: name=systemd wins", "11:cpu,cpuacct:/kubepods/besteffort/pod1/" + id2 + "\n10:memory:/kubepods/besteffort/pod1/" + id2 + "\n1:name=systemd:/kubepods/besteffort/pod1/" + id2 + "\n", "/kubepods/besteffort/pod1/" + id2},
		{"v1 only without systemd: the first hierarchy", "4:pids:/lxc/c1\n3:memory:/lxc/c1-mem\n", "/lxc/c1"},
		{"a path with colons", "0::/system.slice/a:b.service\n", "/system.slice/a:b.service"},
		{"garbage", "garbage\n::\nx::/nope\n1:cpu\n\n0::relative\n", ""},
		{"garbage around a v2 line", "\x00\x01\nnot:a line\n0::/ok.slice\nmore junk\n", "/ok.slice"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cgroupPath([]byte(tt.file)); got != tt.want {
				t.Errorf("cgroupPath(%q) = %q, want %q", tt.file, got, tt.want)
			}
		})
	}
}

func TestContainerID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cgroup, want string
	}{
		{"/system.slice/docker-" + id1 + ".scope", id1},
		{"/docker/" + id1, id1},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f.slice/cri-containerd-" + id1 + ".scope", id1},
		{"/kubepods/burstable/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/" + id2, id2},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice/crio-" + id2 + ".scope", id2},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice/crio-conmon-" + id2 + ".scope", ""},
		{"/machine.slice/libpod-" + id1 + ".scope/container", id1},
		{"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id2 + ".scope", id2},
		{"/machine.slice/libpod-conmon-" + id1 + ".scope", ""},
		{"/system.slice/docker-" + id1[:63] + ".scope", ""},                      // too short
		{"/system.slice/docker-" + id1[:63] + "g.scope", ""},                     // not hex
		{"/system.slice/docker-" + "0123456789ABCDEF" + id1[16:] + ".scope", ""}, // runtimes write lower case
		{"/system.slice/foo.service", ""},
		{"/", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := containerID(tt.cgroup); got != tt.want {
			t.Errorf("containerID(%q) = %q, want %q", tt.cgroup, got, tt.want)
		}
	}
}

// A nil Resolver (no /proc to read) resolves nothing instead of failing.
func TestNilResolver(t *testing.T) {
	var r *Resolver
	if p, ok := r.Lookup(1); ok {
		t.Errorf("nil Resolver resolved %+v", p)
	}
}

// FuzzCgroupPath: any /proc/PID/cgroup content gives a path (or "") and a
// container id that is 64 hex digits or "".
func FuzzCgroupPath(f *testing.F) {
	f.Add([]byte("0::/system.slice/docker-" + id1 + ".scope\n"))
	f.Add([]byte("12:pids:/kubepods/burstable/pod1/" + id2 + "\n1:name=systemd:/user.slice\n"))
	f.Add([]byte("0::/\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := cgroupPath(b)
		if p != "" && p[0] != '/' {
			t.Errorf("cgroupPath = %q", p)
		}
		if id := containerID(p); id != "" && !isContainerID(id) {
			t.Errorf("containerID(%q) = %q", p, id)
		}
	})
}

func TestShortContainerID(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "abc": "abc",
		"4f2b1c0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b": "4f2b1c0a9e8d",
	} {
		if got := ShortContainerID(in); got != want {
			t.Errorf("ShortContainerID(%q) = %q, want %q", in, got, want)
		}
	}
}
