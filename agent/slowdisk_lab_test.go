package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/vmtest"
	"golang.org/x/sys/unix"
)

// The file system freeze ioctls of include/uapi/linux/fs.h, which
// x/sys/unix does not define.
const (
	fiFreeze = 0xc0045877 // FIFREEZE: _IOWR('X', 119, int)
	fiThaw   = 0xc0045878 // FITHAW: _IOWR('X', 120, int)
)

// freezableDisk mounts a file system that can be frozen: ext2 (through
// ext4) on a RAM disk, both modules the lab ships unloaded. Freezing it
// stalls every write to it, the opens that create a file first: what a
// hung NFS server or a dying disk does to /var/lib. It returns the mount
// point and thaw, which t.Cleanup also calls, before the file system is
// unmounted and the RAM disk removed.
func freezableDisk(t *testing.T) (dir string, freeze, thaw func()) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("modprobe", "ext4")
	run("modprobe", "brd", "rd_nr=1", "rd_size=16384") // one disk of 16 MiB
	t.Cleanup(func() { exec.Command("rmmod", "brd").Run() })
	run("busybox", "mke2fs", "-F", "/dev/ram0")
	dir = filepath.Join(t.TempDir(), "var-lib")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	run("mount", "-t", "ext2", "/dev/ram0", dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	frozen := false
	freeze = func() {
		t.Helper()
		if err := unix.IoctlSetInt(int(d.Fd()), fiFreeze, 0); err != nil {
			t.Fatalf("FIFREEZE %s: %v", dir, err)
		}
		frozen = true
	}
	thaw = func() {
		if frozen {
			if err := unix.IoctlSetInt(int(d.Fd()), fiThaw, 0); err != nil {
				t.Errorf("FITHAW %s: %v", dir, err)
			}
			frozen = false
		}
	}
	return dir, freeze, thaw
}

// threadStates reads the state letters (R, S, D, Z...) of a process's
// threads, by thread id; none once it was reaped.
func threadStates(pid int) map[int]string {
	states := map[int]string{}
	tasks, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) S ...: the comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 {
			tid, _ := strconv.Atoi(task.Name())
			states[tid] = string(b[i+2])
		}
	}
	return states
}

// getWithin GETs url within a second and returns how long it took.
func getWithin(t *testing.T, url string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	began := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s while the state file's disk is frozen: %v", url, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s while the state file's disk is frozen: %s, %v", url, resp.Status, err)
	}
	return time.Since(began)
}

// metricValue scrapes one series of the agent's metrics (-1: none).
func metricValue(t *testing.T, addr, name string, labels map[string]string) float64 {
	t.Helper()
	fams, _, err := scrapeErr("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := value(fams, name, labels)
	if !ok {
		return -1
	}
	return v
}

// The agent's state file is on a file system that stops answering
// (frozen: every write, and the open that makes the save's new file,
// waits in the kernel). The agent's saves time out and none other
// begins (one writer at most), while the history goes on: a QP created
// then shows in a qp-leaks answer within seconds (the probes' events are
// applied; no QP dump runs), and the socket and /metrics answer within a
// second. SIGTERM stops the agent within its bound for the save (10 s;
// the unit's stop timeout is 90 s): its log says the history was not
// saved, and every thread of it has exited but the one blocked in the
// kernel on the frozen file system, which keeps the process from being
// reaped until the thaw; then it exits 0. Before, the save at the stop
// waited forever for the save before it.
func TestLabSlowStateDisk(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	dir, freeze, thaw := freezableDisk(t)
	state := filepath.Join(dir, "state.json")
	sock := filepath.Join(t.TempDir(), "agent.sock")
	const addr = "127.0.0.1:19094"
	// No QP dump after the first: only probe events add QPs. A save
	// every second, given up after a second.
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "agent", "--socket", sock, "--metrics-address", addr,
		"--interval", "1h", "--reconcile", "1h", "--state-file", state, "--state-interval", "1s", "-v")
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	t.Cleanup(thaw) // first: the agent's last thread returns, the guest's later tests go on
	await := func(timeout time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			select {
			case <-exited:
				t.Fatalf("the agent exited while waiting for %s:\n%s", what, logs.String())
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after %s; agent log:\n%s", what, timeout, logs.String())
			}
		}
	}
	await(2*time.Minute, "answer with the probes attached", func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Probes == "on" && st.Scans > 0
	})
	await(30*time.Second, "first save", func() bool { _, err := os.Stat(state); return err == nil })

	freeze()
	frozen := time.Now()
	for metricValue(t, addr, "rdmatool_state_saves_total", map[string]string{"result": "timeout"}) < 1 ||
		metricValue(t, addr, "rdmatool_state_save_in_flight", nil) != 1 {
		if time.Since(frozen) > 10*time.Second {
			// Go on: what the agent does with its save hanging is the test.
			t.Errorf("no save counted as timed out and in flight 10s after the freeze")
			break
		}
		time.Sleep(100 * time.Millisecond) // the metrics are all there is to wait on
	}
	t.Logf("a save timed out %v after the freeze", time.Since(frozen).Round(time.Millisecond))

	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 60*time.Second)
	ready := time.Now()
	t.Cleanup(func() { w.Release(30 * time.Second) })
	var want []uint32
	for _, q := range w.QPs() {
		want = append(want, q.QPN)
	}
	slices.Sort(want)
	var got []uint32
	await(3*time.Second, "qp-leaks answer with the new QPs", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		rep, err := agentapi.Ask(ctx, sock, leakwatch.Query{Device: "rxe0"}, 0)
		if err != nil {
			t.Fatalf("qp-leaks asked the agent while its state file's disk is frozen: %v", err)
		}
		got = findingQPNs(rep, leakwatch.RuleStaleErrorQP)
		slices.Sort(got)
		return len(want) == 2 && slices.Equal(got, want)
	})
	t.Logf("QPs %v in ERR in a qp-leaks answer %v after the workload was ready", got, time.Since(ready).Round(time.Millisecond))
	for range 3 {
		status := getWithin(t, "http://"+addr+"/metrics")
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		began := time.Now()
		_, err := askStatus(ctx, sock)
		cancel()
		if err != nil {
			t.Fatalf("the socket's status while the state file's disk is frozen: %v", err)
		}
		t.Logf("/metrics answered in %v, /v1/status in %v", status.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}
	if n := strings.Count(logs.String(), `msg="saving the history timed out`); n != 1 {
		t.Errorf("the timeout logged %d times, want once:\n%s", n, logs.String())
	}
	if v := metricValue(t, addr, "rdmatool_state_saves_total", map[string]string{"result": "timeout"}); v != 1 {
		t.Errorf("rdmatool_state_saves_total{result=\"timeout\"} %v while the first save that timed out still hangs, want 1", v)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	for !strings.Contains(logs.String(), "msg=stopped") {
		if time.Since(term) > 15*time.Second {
			t.Fatalf("the agent did not stop within 15s of SIGTERM with its state file's disk frozen:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond) // the log is all there is to wait on
	}
	t.Logf("stopped %v after SIGTERM", time.Since(term).Round(time.Millisecond))
	if !strings.Contains(logs.String(), `level=WARN msg="stopping without saving the history: an earlier save has not ended" source=agent path=`+state+" timeout_seconds=10") {
		t.Errorf("the agent's log does not say the history was not saved:\n%s", logs.String())
	}
	// The process has exited but for what the frozen file system holds in
	// the kernel: its main thread a zombie, any other thread in D.
	var states map[int]string
	gone := func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		states = threadStates(cmd.Process.Pid)
		for tid, s := range states {
			if tid == cmd.Process.Pid && s != "Z" || tid != cmd.Process.Pid && s != "D" {
				return false
			}
		}
		return true
	}
	for !gone() {
		if time.Since(term) > 15*time.Second {
			t.Fatalf("the agent's threads 15s after SIGTERM: %v (want the main one Z, the others D)", states)
		}
		time.Sleep(100 * time.Millisecond) // nothing to wait on but /proc
	}
	t.Logf("%v after SIGTERM the agent's threads are %v", time.Since(term).Round(time.Millisecond), states)
	thaw()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent was not reaped within 30s of the thaw: threads %v", threadStates(cmd.Process.Pid))
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the agent exited %d after SIGTERM, want 0:\n%s", code, logs.String())
	}
}
