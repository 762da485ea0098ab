package usage

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

var (
	rxe = rdmanl.Device{Index: 0, Name: "rxe0"}
	siw = rdmanl.Device{Index: 1, Name: "siw0"}
)

// Stand-ins for device numbers: a fixture cannot hold a device node, so
// its fd links point (through links of the right names) at the host's own
// character devices, and sysfs gives their numbers to uverbs and rdma_cm.
var (
	uverbsRXE = owner.DevNum{Major: 1, Minor: 7} // /dev/full plays /dev/infiniband/uverbs0 (rxe0)
	uverbsSIW = owner.DevNum{Major: 1, Minor: 8} // /dev/random plays /dev/infiniband/uverbs1 (siw0)
	rdmaCM    = owner.DevNum{Major: 1, Minor: 5} // /dev/zero plays /dev/infiniband/rdma_cm
	deleted   = owner.DevNum{Major: 1, Minor: 3} // /dev/null plays uverbs9 of an unregistered device
)

// host is a fixture: sysfs with rxe0's uverbs0, siw0's uverbs1 and
// rdma_cm, and a proc tree whose processes (comms) hold the fds of fds,
// named below a fake /dev/infiniband ("uverbs9 (deleted)" is the node of
// an unregistered device); threads adds thread ids of processes.
type host struct {
	sysRoot, procRoot, devDir string
}

func newHost(t *testing.T, comms map[int]string, fds map[int]map[int]string, threads map[int]int) host {
	t.Helper()
	root := t.TempDir()
	h := host{sysRoot: filepath.Join(root, "sys"), procRoot: filepath.Join(root, "proc"), devDir: filepath.Join(root, "dev", "infiniband")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, s string) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(path), 0o755))
		must(os.WriteFile(path, []byte(s+"\n"), 0o644))
	}
	must(os.MkdirAll(h.devDir, 0o755))
	for name, real := range map[string]string{"uverbs0": "/dev/full", "uverbs1": "/dev/random", "rdma_cm": "/dev/zero", "uverbs9 (deleted)": "/dev/null"} {
		must(os.Symlink(real, filepath.Join(h.devDir, name)))
	}
	verbs := filepath.Join(h.sysRoot, "class", "infiniband_verbs")
	write(filepath.Join(verbs, "uverbs0", "ibdev"), "rxe0")
	write(filepath.Join(verbs, "uverbs0", "dev"), uverbsRXE.String())
	write(filepath.Join(verbs, "uverbs1", "ibdev"), "siw0")
	write(filepath.Join(verbs, "uverbs1", "dev"), uverbsSIW.String())
	write(filepath.Join(h.sysRoot, "class", "misc", "rdma_cm", "dev"), rdmaCM.String())
	task := func(tid, pid int, comm string) {
		dir := filepath.Join(h.procRoot, strconv.Itoa(tid))
		must(os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		write(filepath.Join(dir, "comm"), comm)
		write(filepath.Join(dir, "status"), "Name:\t"+comm+"\nTgid:\t"+strconv.Itoa(pid)+"\nPid:\t"+strconv.Itoa(tid))
		write(filepath.Join(dir, "cgroup"), "0::/system.slice/"+comm+".service")
	}
	for pid, comm := range comms {
		task(pid, pid, comm)
		for fd, node := range fds[pid] {
			must(os.Symlink(filepath.Join(h.devDir, node), filepath.Join(h.procRoot, strconv.Itoa(pid), "fd", strconv.Itoa(fd))))
		}
	}
	for tid, pid := range threads {
		task(tid, pid, comms[pid]+"-worker")
	}
	return h
}

func (h host) file(fd int, node string, dev owner.DevNum) owner.OpenFile {
	return owner.OpenFile{FD: fd, Path: filepath.Join(h.devDir, node), Dev: dev}
}

func process(pid int, comm string) owner.Process {
	return owner.Process{TID: uint32(pid), PID: uint32(pid), Comm: comm, Cgroup: "/system.slice/" + comm + ".service"}
}

// fakeNetlink answers dumps from its tables, by device name, and counts
// the requests it is asked ("QPs of rxe0", "devices"). ends ends a dump
// ("contexts of siw0"), after its entries, with an error.
type fakeNetlink struct {
	devs     []rdmanl.Device
	qps      map[string][]rdmanl.QP
	cmIDs    map[string][]rdmanl.CMID
	contexts map[string][]rdmanl.Context
	mrs      map[string][]rdmanl.MR
	ends     map[string]error
	requests map[string]int
}

func (n *fakeNetlink) Devices(context.Context) ([]rdmanl.Device, error) {
	n.requests["devices"]++
	return slices.Clone(n.devs), nil
}

func fakeDump[T any](n *fakeNetlink, what string, dev rdmanl.Device, vs map[string][]T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		key := what + " of " + dev.Name
		n.requests[key]++
		for _, v := range vs[dev.Name] {
			if !yield(v, nil) {
				return
			}
		}
		if err := n.ends[key]; err != nil {
			var zero T
			yield(zero, err)
		}
	}
}

func (n *fakeNetlink) QPs(_ context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error] {
	if !opts.NoSRQJoin {
		n.requests["SRQs of "+dev.Name]++ // the join's own SRQ dump, which nothing here needs
	}
	return fakeDump(n, "QPs", dev, n.qps)
}

func (n *fakeNetlink) CMIDs(_ context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error] {
	return fakeDump(n, "CM IDs", dev, n.cmIDs)
}

func (n *fakeNetlink) Contexts(_ context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.Context, error] {
	return fakeDump(n, "contexts", dev, n.contexts)
}

func (n *fakeNetlink) MRs(_ context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.MR, error] {
	return fakeDump(n, "MRs", dev, n.mrs)
}

// The processes of the usual test host: 100 uses rxe0 through uverbs (QPs
// and MRs made by its thread 101), 200 through rdma_cm only, 300 holds the
// deleted uverbs node of an unregistered device and no context anywhere
// (a zombie), 400 the same but reopened siw0.
var (
	comms = map[int]string{100: "verbsapp", 200: "cmapp", 300: "stuck", 400: "reopened"}
	fds   = map[int]map[int]string{
		100: {3: "uverbs0"},
		200: {5: "rdma_cm"},
		300: {3: "uverbs9 (deleted)"},
		400: {3: "uverbs9 (deleted)", 7: "uverbs1"},
	}
	threads = map[int]int{101: 100}
)

func testNetlink() *fakeNetlink {
	user := func(pid uint32) rdmanl.Owner { return rdmanl.Owner{PID: pid} }
	kern := func(name string) rdmanl.Owner { return rdmanl.Owner{KernName: name} }
	return &fakeNetlink{
		devs: []rdmanl.Device{rxe, siw},
		qps: map[string][]rdmanl.QP{
			"rxe0": {{LQPN: 1, Owner: kern("ib_core")}, {LQPN: 17, Owner: user(101)}, {LQPN: 18, Owner: user(101)}, {LQPN: 19, Owner: user(200)}},
		},
		cmIDs:    map[string][]rdmanl.CMID{"rxe0": {{LQPN: 19, Owner: user(200)}, {Owner: kern("rdma_cm")}}},
		contexts: map[string][]rdmanl.Context{"rxe0": {{CtxN: 0, Owner: user(100)}}, "siw0": {{CtxN: 0, Owner: user(400)}}},
		mrs:      map[string][]rdmanl.MR{"rxe0": {{MRN: 1, Owner: user(101)}, {MRN: 2, Owner: user(100)}, {MRN: 3, Owner: kern("ib_core")}}},
		ends:     map[string]error{},
		requests: map[string]int{},
	}
}

// A scan of every device dumps each of their QPs, rdma_cm IDs, contexts
// and (when asked) MRs once, and finds the zombie contexts with the
// contexts it dumped: with the host's devices given, nothing more.
func TestScan(t *testing.T) {
	t.Parallel()
	h := newHost(t, comms, fds, threads)
	nl := testNetlink()
	got, err := Scan(t.Context(), nl, []rdmanl.Device{rxe, siw}, Options{SysRoot: h.sysRoot, ProcRoot: h.procRoot, MRs: true, Zombies: true, Host: []rdmanl.Device{rxe, siw}})
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		Devices: []Device{
			{
				Name: "rxe0", Uverbs: sysfs.Uverbs{Name: "uverbs0", Device: "rxe0", Dev: "1:7"}, UverbsNum: uverbsRXE, HasUverbs: true,
				QPs: 3, KernelQPs: 1, MRs: 2,
				Holders: []Holder{
					{DeviceHolder: owner.DeviceHolder{Process: process(100, "verbsapp"), QPs: 2, Contexts: 1, Files: []owner.OpenFile{h.file(3, "uverbs0", uverbsRXE)}}, MRs: 2},
					{DeviceHolder: owner.DeviceHolder{Process: process(200, "cmapp"), QPs: 1, CMIDs: 1, Files: []owner.OpenFile{h.file(5, "rdma_cm", rdmaCM)}}},
				},
			},
			{
				Name: "siw0", Uverbs: sysfs.Uverbs{Name: "uverbs1", Device: "siw0", Dev: "1:8"}, UverbsNum: uverbsSIW, HasUverbs: true,
				Holders: []Holder{
					{DeviceHolder: owner.DeviceHolder{Process: process(400, "reopened"), Contexts: 1, Files: []owner.OpenFile{h.file(7, "uverbs1", uverbsSIW)}}},
				},
			},
		},
		Zombies:    []owner.ZombieContext{{Process: process(300, "stuck"), Files: []owner.OpenFile{{FD: 3, Path: filepath.Join(h.devDir, "uverbs9"), Dev: deleted, Deleted: true}}}},
		Unreadable: []uint32{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Scan (-want +got):\n%s", diff)
	}
	wantRequests := map[string]int{
		"QPs of rxe0": 1, "CM IDs of rxe0": 1, "contexts of rxe0": 1, "MRs of rxe0": 1,
		"QPs of siw0": 1, "CM IDs of siw0": 1, "contexts of siw0": 1, "MRs of siw0": 1,
	}
	if diff := cmp.Diff(wantRequests, nl.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// A scan of one device dumps no MRs unless asked; for the zombie look it
// lists the host's devices when it was given none, and dumps the contexts
// of those it did not scan, only when some process holds a deleted uverbs
// node.
func TestScanOneDevice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		fds          map[int]map[int]string
		o            Options
		wantZombies  []int
		wantRequests map[string]int
	}{
		{
			name:         "zombies, host listed",
			fds:          fds,
			o:            Options{Zombies: true},
			wantZombies:  []int{300},
			wantRequests: map[string]int{"QPs of rxe0": 1, "CM IDs of rxe0": 1, "contexts of rxe0": 1, "devices": 1, "contexts of siw0": 1},
		},
		{
			name:         "zombies, host given",
			fds:          fds,
			o:            Options{Zombies: true, Host: []rdmanl.Device{rxe, siw}},
			wantZombies:  []int{300},
			wantRequests: map[string]int{"QPs of rxe0": 1, "CM IDs of rxe0": 1, "contexts of rxe0": 1, "contexts of siw0": 1},
		},
		{
			name:         "no deleted node open",
			fds:          map[int]map[int]string{100: fds[100], 200: fds[200]},
			o:            Options{Zombies: true},
			wantRequests: map[string]int{"QPs of rxe0": 1, "CM IDs of rxe0": 1, "contexts of rxe0": 1},
		},
		{
			name:         "no zombie look",
			fds:          fds,
			wantRequests: map[string]int{"QPs of rxe0": 1, "CM IDs of rxe0": 1, "contexts of rxe0": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, comms, tt.fds, threads)
			nl := testNetlink()
			tt.o.SysRoot, tt.o.ProcRoot = h.sysRoot, h.procRoot
			r, err := Scan(t.Context(), nl, []rdmanl.Device{rxe}, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Devices) != 1 || r.Devices[0].Name != "rxe0" || len(r.Devices[0].Holders) != 2 || r.Devices[0].MRs != 0 || r.Devices[0].Holders[0].MRs != 0 {
				t.Errorf("devices %+v; want rxe0 with 2 holders and no MRs counted", r.Devices)
			}
			var zombies []int
			for _, z := range r.Zombies {
				zombies = append(zombies, int(z.PID))
			}
			if diff := cmp.Diff(tt.wantZombies, zombies); diff != "" {
				t.Errorf("zombies (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRequests, nl.requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// A dump that skipped malformed entries counts what decoded and says so in
// Skipped; a device gone during its scan ends the scan, but in the zombie
// look a device gone since the listing only ends its context dump.
func TestScanDumpErrors(t *testing.T) {
	t.Parallel()
	partial := &rdmanl.PartialError{Op: "dump QPs of rxe0", Skipped: 2, First: errors.New("entry without LQPN")}
	gone := func(what string) error { return &rdmanl.Error{Op: what, Err: rdmanl.ErrNoDevice} }
	tests := []struct {
		name        string
		ends        map[string]error
		wantErr     error
		wantQPs     int
		wantSkipped []Skip
		wantZombies []int
	}{
		{"partial QP dump", map[string]error{"QPs of rxe0": partial}, nil, 3, []Skip{{Device: "rxe0", Err: partial}}, []int{300}},
		{"scanned device gone", map[string]error{"CM IDs of rxe0": gone("dump CM IDs of rxe0")}, rdmanl.ErrNoDevice, 0, nil, nil},
		// siw0 went after its dump yielded 400's context, which counts.
		{"other device gone", map[string]error{"contexts of siw0": gone("dump contexts of siw0")}, nil, 3, nil, []int{300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, comms, fds, threads)
			nl := testNetlink()
			nl.ends = tt.ends
			r, err := Scan(t.Context(), nl, []rdmanl.Device{rxe}, Options{SysRoot: h.sysRoot, ProcRoot: h.procRoot, Zombies: true})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Scan: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if r.Devices[0].QPs != tt.wantQPs {
				t.Errorf("user QPs %d, want %d", r.Devices[0].QPs, tt.wantQPs)
			}
			samePartial := cmp.Comparer(func(a, b *rdmanl.PartialError) bool { return a == b })
			if diff := cmp.Diff(tt.wantSkipped, r.Skipped, samePartial); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			var zombies []int
			for _, z := range r.Zombies {
				zombies = append(zombies, int(z.PID))
			}
			if diff := cmp.Diff(tt.wantZombies, zombies); diff != "" {
				t.Errorf("zombies (-want +got):\n%s", diff)
			}
		})
	}
}

// Zombies alone reads no sysfs and dumps only contexts, of the devices
// given or listed, and none when no deleted uverbs node is open.
func TestZombies(t *testing.T) {
	t.Parallel()
	h := newHost(t, comms, fds, threads)
	nl := testNetlink()
	r, err := Zombies(t.Context(), nl, nil, h.procRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != 0 || len(r.Zombies) != 1 || r.Zombies[0].PID != 300 || r.Zombies[0].Comm != "stuck" {
		t.Errorf("Zombies: %+v; want 300 (stuck) alone", r)
	}
	if diff := cmp.Diff(map[string]int{"devices": 1, "contexts of rxe0": 1, "contexts of siw0": 1}, nl.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}

	h = newHost(t, comms, map[int]map[int]string{100: fds[100]}, nil)
	nl = testNetlink()
	if r, err := Zombies(t.Context(), nl, []rdmanl.Device{rxe, siw}, h.procRoot); err != nil || len(r.Zombies) != 0 || r.Zombies == nil {
		t.Errorf("Zombies without a deleted node open: %+v, %v; want [] ", r.Zombies, err)
	}
	if len(nl.requests) != 0 {
		t.Errorf("requests %v; want none", nl.requests)
	}
}
