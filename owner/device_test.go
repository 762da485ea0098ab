package owner

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Stand-ins for device numbers: a fixture cannot hold a device node, so its
// fd links point (through links of the right names) at the host's own
// character devices, and the test calls them uverbs and rdma_cm.
var (
	uverbsRXE = DevNum{1, 7} // /dev/full plays /dev/infiniband/uverbs0 (rxe0)
	uverbsSIW = DevNum{1, 8} // /dev/random plays /dev/infiniband/uverbs1 (siw0)
	rdmaCMDev = DevNum{1, 5} // /dev/zero plays /dev/infiniband/rdma_cm
)

// fakeRDMAProc builds a proc tree whose processes hold RDMA files: fds maps
// a pid to fd number to node name below a fake /dev/infiniband, where
// "uverbs0" is rxe0's current node, "uverbs1" siw0's, "rdma_cm" the
// rdma_cm node and "uverbs9 (deleted)" the node of an unregistered device
// (as the kernel shows an fd whose node was unlinked). threads adds thread
// ids that resolve to their process.
func fakeRDMAProc(t *testing.T, comms map[int]string, fds map[int]map[int]string, threads map[int]int) string {
	t.Helper()
	root := t.TempDir()
	devDir := filepath.Join(root, "dev", "infiniband")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(devDir, 0o755))
	for name, real := range map[string]string{"uverbs0": "/dev/full", "uverbs1": "/dev/random", "rdma_cm": "/dev/zero", "uverbs9 (deleted)": "/dev/null"} {
		must(os.Symlink(real, filepath.Join(devDir, name)))
	}
	proc := filepath.Join(root, "proc")
	write := func(tid, tgid int, comm string) {
		dir := filepath.Join(proc, strconv.Itoa(tid))
		must(os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		must(os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644))
		must(os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\t"+comm+"\nTgid:\t"+strconv.Itoa(tgid)+"\nPid:\t"+strconv.Itoa(tid)+"\n"), 0o644))
		must(os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/system.slice/"+comm+".service\n"), 0o644))
	}
	for pid, comm := range comms {
		write(pid, pid, comm)
		for fd, node := range fds[pid] {
			must(os.Symlink(filepath.Join(devDir, node), filepath.Join(proc, strconv.Itoa(pid), "fd", strconv.Itoa(fd))))
		}
	}
	for tid, pid := range threads {
		write(tid, pid, comms[pid]+"-worker")
	}
	return proc
}

func TestDeviceHoldersAndZombies(t *testing.T) {
	t.Parallel()
	comms := map[int]string{
		100: "verbsapp", // rxe0 through uverbs, QPs made by a worker thread
		200: "cmapp",    // rxe0 through rdma_cm only (its uverbs fd closed)
		300: "zombie",   // holds the deleted node of an unregistered device
		400: "reopened", // holds the deleted node, and reopened siw0
		500: "idle",     // rdma_cm open, no resources anywhere
	}
	fds := map[int]map[int]string{
		100: {3: "uverbs0"},
		200: {5: "rdma_cm"},
		300: {3: "uverbs9 (deleted)", 4: "rdma_cm"},
		400: {3: "uverbs9 (deleted)", 7: "uverbs1"},
		500: {4: "rdma_cm"},
	}
	proc := fakeRDMAProc(t, comms, fds, map[int]int{101: 100})
	scan, err := Holders(proc, RDMAFiles([]DevNum{uverbsRXE, uverbsSIW}, rdmaCMDev))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(proc)
	if err != nil {
		t.Fatal(err)
	}
	uses := []DeviceUse{
		{Device: "rxe0", Uverbs: uverbsRXE, HasUverbs: true,
			QPOwners:      []uint32{101, 101, 100, 200, 0, 999}, // 0: kernel; 999: exited
			CMIDOwners:    []uint32{200, 200},
			ContextOwners: []uint32{100, 200}},
		{Device: "siw0", Uverbs: uverbsSIW, HasUverbs: true, ContextOwners: []uint32{400}},
		{Device: "mlx5_0"}, // no uverbs device, nothing on it
	}
	cg := func(comm string) string { return "/system.slice/" + comm + ".service" }
	proc100 := Process{TID: 100, PID: 100, Comm: "verbsapp", Cgroup: cg("verbsapp")}
	proc200 := Process{TID: 200, PID: 200, Comm: "cmapp", Cgroup: cg("cmapp")}
	proc400 := Process{TID: 400, PID: 400, Comm: "reopened", Cgroup: cg("reopened")}
	want := map[string][]DeviceHolder{
		"rxe0": {
			{Process: proc100, QPs: 3, Contexts: 1, Files: []OpenFile{{FD: 3, Path: filepath.Join(filepath.Dir(proc), "dev/infiniband/uverbs0"), Dev: uverbsRXE}}},
			{Process: proc200, QPs: 1, CMIDs: 2, Contexts: 1, Files: []OpenFile{{FD: 5, Path: filepath.Join(filepath.Dir(proc), "dev/infiniband/rdma_cm"), Dev: rdmaCMDev}}},
		},
		"siw0": {
			{Process: proc400, Contexts: 1, Files: []OpenFile{{FD: 7, Path: filepath.Join(filepath.Dir(proc), "dev/infiniband/uverbs1"), Dev: uverbsSIW}}},
		},
		"mlx5_0": {},
	}
	got := DeviceHolders(scan, uses, rdmaCMDev, r)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DeviceHolders (-want +got):\n%s", diff)
	}

	var ctxOwners []uint32
	for _, u := range uses {
		ctxOwners = append(ctxOwners, u.ContextOwners...)
	}
	wantZ := []ZombieContext{{
		Process: Process{TID: 300, PID: 300, Comm: "zombie", Cgroup: cg("zombie")},
		Files:   []OpenFile{{FD: 3, Path: filepath.Join(filepath.Dir(proc), "dev/infiniband/uverbs9"), Dev: DevNum{1, 3}, Deleted: true}},
	}}
	if diff := cmp.Diff(wantZ, ZombieContexts(scan, ctxOwners, r)); diff != "" {
		t.Errorf("ZombieContexts (-want +got):\n%s", diff)
	}
	// A context opened by a thread of the zombie's process is the
	// process's own: it reopened the device.
	if z := ZombieContexts(scan, []uint32{301, 400}, fakeResolver(t, map[int]int{301: 300})); len(z) != 0 {
		t.Errorf("ZombieContexts with a context of a thread of 300 = %+v, want none", z)
	}
}

// fakeResolver resolves the given thread ids to their processes.
func fakeResolver(t *testing.T, threads map[int]int) *Resolver {
	t.Helper()
	root := t.TempDir()
	for tid, pid := range threads {
		dir := filepath.Join(root, strconv.Itoa(tid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte("t\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "status"), []byte("Tgid:\t"+strconv.Itoa(pid)+"\n"), 0o644)
	}
	r, err := NewResolver(root)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Without a resolver, owner ids are taken as processes, named from the scan
// where it has them.
func TestDeviceHoldersNoResolver(t *testing.T) {
	t.Parallel()
	scan := HolderScan{Holders: []Holder{{Process: Process{TID: 7, PID: 7, Comm: "app"}, Files: []OpenFile{{FD: 3, Path: "/dev/infiniband/uverbs0", Dev: uverbsRXE}}}}}
	got := DeviceHolders(scan, []DeviceUse{{Device: "rxe0", Uverbs: uverbsRXE, HasUverbs: true, QPOwners: []uint32{7, 8}}}, rdmaCMDev, nil)
	want := map[string][]DeviceHolder{"rxe0": {
		{Process: Process{TID: 7, PID: 7, Comm: "app"}, QPs: 1, Files: scan.Holders[0].Files},
		{Process: Process{TID: 8, PID: 8}, QPs: 1, Files: []OpenFile{}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DeviceHolders (-want +got):\n%s", diff)
	}
}
