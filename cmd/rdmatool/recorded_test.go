package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
)

// -update rewrites testdata/recorded/*: what the commands print for the
// recorded kernels.
var update = flag.Bool("update", false, "rewrite testdata/recorded from the current code")

// recordings is where rdmanl keeps the netlink replies it recorded from the
// lab kernels (rdmanl/testdata/README.md says what the guests held).
var recordings = filepath.Join("..", "..", "rdmanl", "testdata")

// recordedT0 is the clock of every recorded run: ages and observation
// times read 0, so the output is the same on every run.
var recordedT0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// runRecorded runs rdmatool with args against one lab kernel's recorded
// netlink replies, with no /proc, /sys or probes and the clock stopped at
// recordedT0.
func runRecorded(t *testing.T, kernel string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	g := &globals{kernel: &kernelDeps{
		dial: func() (*rdmanl.Client, error) { return rdmanltest.Replay(t, recordings, kernel), nil },
		now:  func() time.Time { return recordedT0 },
		proc: recordedProc(t, kernel),
		sys:  t.TempDir(),
	}}
	var out, errOut strings.Builder
	code = runRoot(newRootCmdWith(g), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// recordedOwners are the processes a fake /proc holds for a recording,
// by offset from the first pid the recording's qpwork runs had: a process,
// one of its threads, a process in a docker container, one in a user
// session, one in a Kubernetes pod.
var recordedOwners = []struct {
	tgidOffset   int
	comm, cgroup string
}{
	{0, "qpwork", "/system.slice/qpwork.service"},
	{0, "qpwork-conn", "/system.slice/qpwork.service"},
	{2, "srvd", "/system.slice/docker-3f2a1c9d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a19.scope"},
	{3, "rping", "/user.slice/user-1000.slice/session-4.scope"},
	{4, "trainer", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0c1d2e3f.slice/cri-containerd-a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90.scope"},
}

// recordedFirstPID is the first pid of the qpwork runs each kernel's
// recording holds.
var recordedFirstPID = map[string]int{"6.1": 160, "6.12": 214, "7.x": 164}

// recordedProc writes a /proc with the owners of a recording's resources.
func recordedProc(t *testing.T, kernel string) string {
	t.Helper()
	root := t.TempDir()
	first := recordedFirstPID[kernel]
	for i, o := range recordedOwners {
		dir := filepath.Join(root, strconv.Itoa(first+i))
		files := map[string]string{
			"comm":   o.comm + "\n",
			"status": fmt.Sprintf("Name:\t%s\nTgid:\t%d\nPid:\t%d\n", o.comm, first+o.tgidOffset, first+i),
			"cgroup": "0::" + o.cgroup + "\n",
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// serveRecorded runs the agent's socket API over a history made of one
// scan of the kernel's recorded QPs, taken at recordedT0 and asked 90s
// later.
func serveRecorded(t *testing.T, kernel string) string {
	t.Helper()
	ctx := t.Context()
	c := rdmanltest.Replay(t, recordings, kernel)
	devs, err := c.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scan := leakwatch.Scan{Started: recordedT0, Time: recordedT0}
	owners := map[uint32]leakwatch.Owner{}
	first := recordedFirstPID[kernel]
	for i, o := range recordedOwners {
		owners[uint32(first+i)] = leakwatch.Owner{PID: uint32(first + i), TGID: uint32(first + o.tgidOffset), Comm: o.comm, Cgroup: o.cgroup}
	}
	for _, d := range devs {
		ds := leakwatch.DeviceScan{Device: d, Owners: owners}
		for qp, err := range c.QPs(ctx, d, rdmanl.DumpOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			ds.QPs = append(ds.QPs, qp)
		}
		scan.Devices = append(scan.Devices, ds)
	}
	now := recordedT0
	st := watch.NewState(leakwatch.Config{ProbesReason: "no BTF"}, func() time.Time { return now })
	st.Scan(scan)
	now = recordedT0.Add(90 * time.Second)
	return serveAPI(t, st)
}

// TestRecordedOutputs holds what the listings, qp-leaks (observing locally
// and answered by the agent) print for the QPs, SRQs, CQs, MRs, PDs, verbs
// contexts and rdma_cm IDs recorded on each lab kernel to the bytes in
// testdata/recorded: a change that is meant to change no behaviour must
// leave them as they are (go test -run TestRecordedOutputs -update rewrites
// them when a change of output is meant).
func TestRecordedOutputs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"dev.json", []string{"dev", "-j"}, 0},
		{"dev.txt", []string{"dev"}, 0},
		{"link.json", []string{"link", "-j"}, 0},
		{"link.txt", []string{"link", "-d"}, 0},
		{"res.json", []string{"res", "-j"}, 0},
		{"res.txt", []string{"res"}, 0},
		{"res-qp.json", []string{"res", "qp", "-j"}, 0},
		{"res-qp-pretty.json", []string{"res", "qp", "-j", "-p"}, 0},
		{"res-qp.txt", []string{"res", "qp", "-d"}, 0},
		{"res-qp-filtered.json", []string{"res", "qp", "-j", "state", "ERR,INIT", "lqpn", "1-30"}, 0},
		{"res-srq.json", []string{"res", "srq", "-j"}, 0},
		{"res-srq.txt", []string{"res", "srq", "-d"}, 0},
		{"res-cq.json", []string{"res", "cq", "-j"}, 0},
		{"res-mr.json", []string{"res", "mr", "-j"}, 0},
		{"res-mr.txt", []string{"res", "mr", "-d"}, 0},
		{"res-pd.json", []string{"res", "pd", "-j"}, 0},
		{"res-ctx.json", []string{"res", "ctx", "-j"}, 0},
		{"res-cm_id.json", []string{"res", "cm_id", "-j"}, 0},
		{"res-cm_id.txt", []string{"res", "cm_id", "-d"}, 0},
		{"qp-leaks-local.json", []string{"qp-leaks", "-j", "--no-agent", "--watch", "1s", "--interval", "1s", "--min-age", "0s"}, 1},
		{"qp-leaks-local.txt", []string{"qp-leaks", "--no-agent", "--watch", "1s", "--interval", "1s", "--min-age", "0s", "--limit", "5"}, 1},
		{"qp-leaks-local-limit.json", []string{"qp-leaks", "-j", "-p", "--no-agent", "--watch", "1s", "--interval", "1s", "--min-age", "0s", "--limit", "3", "--dev", "rxe0"}, 1},
	}
	for _, kernel := range rdmanltest.Kernels {
		t.Run(kernel, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					code, stdout, stderr := runRecorded(t, kernel, tc.args...)
					if code != tc.code || stderr != "" {
						t.Fatalf("rdmatool %s: exit %d, want %d; stderr %q", strings.Join(tc.args, " "), code, tc.code, stderr)
					}
					// How many scans a watch makes depends on whether its
					// last tick comes before its end.
					checkRecorded(t, kernel, tc.name, scansCount.ReplaceAllString(stdout, "${1}N"))
				})
			}
			// The agent's answer, as qp-leaks prints it.
			for _, tc := range []struct {
				name string
				args []string
			}{
				{"qp-leaks-agent.json", []string{"qp-leaks", "-j"}},
				{"qp-leaks-agent-pretty.json", []string{"qp-leaks", "-j", "-p", "--limit", "4", "--min-age", "1m"}},
				{"qp-leaks-agent.txt", []string{"qp-leaks", "--limit", "6"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					sock := serveRecorded(t, kernel)
					code, stdout, stderr := runRecorded(t, kernel, append(tc.args, "--agent-socket", sock)...)
					if code != 1 || stderr != "" {
						t.Fatalf("rdmatool %s: exit %d, want 1; stderr %q", strings.Join(tc.args, " "), code, stderr)
					}
					checkRecorded(t, kernel, tc.name, stdout)
				})
			}
		})
	}
}

// scansCount is the JSON report's count of netlink scans.
var scansCount = regexp.MustCompile(`("scans": ?)[0-9]+`)

// checkRecorded compares out with testdata/recorded/KERNEL/NAME, which
// -update rewrites.
func checkRecorded(t *testing.T, kernel, name, out string) {
	t.Helper()
	path := filepath.Join("testdata", "recorded", kernel, name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), out); diff != "" {
		t.Errorf("%s changed (-want +got):\n%s", path, diff)
	}
}
