package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/vmtest"
	"golang.org/x/sys/unix"
)

// The fault suite: what goes wrong on real hosts, done to rdmatool in the
// lab guest. Each test fails when the behaviour it names regresses.

// tracingPrograms counts the BPF programs loaded in the guest that trace
// kernel functions (fentry/fexit and kprobes): nothing else in the guest
// loads any, so they are rdmatool's.
func tracingPrograms(t *testing.T) int {
	t.Helper()
	n := 0
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n
		}
		if err != nil {
			t.Fatalf("list BPF programs: %v", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := p.Info(); err == nil && (info.Type == ebpf.Tracing || info.Type == ebpf.Kprobe) {
			n++
		}
		p.Close()
	}
}

// spawnAgent starts `rdmatool agent` on sock with a 1s interval, its
// stderr in logs, without waiting for it.
func spawnAgent(t *testing.T, sock string, logs *strings.Builder) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "agent", "--socket", sock, "--interval", "1s", "--metrics-address", "127.0.0.1:0")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// waitUntil polls cond every 50 ms for up to timeout.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// An agent killed with SIGKILL leaves no BPF program behind (nothing is
// pinned: the kernel drops them with the process), and the next agent
// replaces its stale socket and answers.
func TestLabAgentKilled(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	before := tracingPrograms(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	var logs strings.Builder
	cmd := spawnAgent(t, sock, &logs)
	if !waitUntil(60*time.Second, func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Probes == "on"
	}) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("agent not ready: %s", logs.String())
	}
	attached := tracingPrograms(t)
	if attached <= before {
		t.Fatalf("%d tracing programs with the agent running, %d before", attached, before)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !waitUntil(10*time.Second, func() bool { return tracingPrograms(t) == before }) {
		t.Errorf("%d tracing programs after SIGKILL, %d before the agent", tracingPrograms(t), before)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the killed agent's socket: %v", err)
	}
	stop := startAgent(t, sock, "--interval", "1s")
	if _, err := askStatus(t.Context(), sock); err != nil {
		t.Errorf("the new agent on the stale socket: %v", err)
	}
	stop()
	t.Logf("tracing programs: %d before, %d with the agent, %d after SIGKILL", before, attached, tracingPrograms(t))
}

// QP churn during dumps and during the agent's life: listings have no
// duplicate rows, the agent reports nothing false, and once the churn ends
// its history holds no QP that is gone.
func TestLabChurn(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s")
	churn := vmtest.StartWorkload(t, "--dev", "rxe0", "--churn-seconds", "12", "--quiet")
	dumps := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); dumps++ {
		out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", "qp", "-j").Output()
		if err != nil {
			t.Fatalf("res qp during churn: %v", err)
		}
		var qps []struct {
			IfIndex uint32 `json:"ifindex"`
			LQPN    uint32 `json:"lqpn"`
		}
		if err := json.Unmarshal(out, &qps); err != nil {
			t.Fatalf("res qp -j during churn: %v: %q", err, out)
		}
		seen := map[[2]uint32]bool{}
		for _, q := range qps {
			k := [2]uint32{q.IfIndex, q.LQPN}
			if seen[k] {
				t.Errorf("QP %d of device %d listed twice in one dump", q.LQPN, q.IfIndex)
			}
			seen[k] = true
		}
	}
	churn.Wait(120 * time.Second)
	// Once the churn is over, the agent tracks what netlink lists, after
	// at most a couple of scans.
	listed := func() int {
		out, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", "qp", "-j").Output()
		if err != nil {
			t.Fatal(err)
		}
		var qps []json.RawMessage
		if err := json.Unmarshal(out, &qps); err != nil {
			t.Fatal(err)
		}
		return len(qps)
	}
	var st agentapi.Status
	if !waitUntil(10*time.Second, func() bool {
		var err error
		st, err = askStatus(t.Context(), sock)
		return err == nil && st.QPs == listed()
	}) {
		t.Errorf("after the churn the agent tracks %d live QPs, netlink lists %d", st.QPs, listed())
	}
	rep, code, stderr := runQPLeaks(t, "--agent-socket", sock, "--min-age", "2s")
	if code != 0 || len(rep.Findings) != 0 || stderr != "" {
		t.Errorf("qp-leaks after the churn: exit %d, findings %v, stderr %q", code, leaks(rep), stderr)
	}
	t.Logf("%d dumps during the churn; the agent saw %d scans, %d lost events", dumps, st.Scans, st.LostEvents)
	stop()
}

// Without ib_core's BTF the probes cannot load: qp-leaks and the agent run
// on netlink only, say why once, and list the rules they skipped.
func TestLabNoModuleBTF(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	const btf = "/sys/kernel/btf/ib_core"
	if err := unix.Mount("/dev/null", btf, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("hide %s: %v", btf, err)
	}
	t.Cleanup(func() { unix.Unmount(btf, 0) })
	rep, code, stderr := runQPLeaks(t, "--no-agent", "--watch", "1s")
	if code == 2 || rep.Probes != "off" || !strings.Contains(rep.ProbesError, "BTF") {
		t.Errorf("qp-leaks without ib_core's BTF: exit %d, probes %s (%s)", code, rep.Probes, rep.ProbesError)
	}
	for _, sk := range rep.SkippedRules {
		if sk.Rule != "qp-exhaustion" && !strings.Contains(sk.Reason, "needs the eBPF probes: bpf: open probes: no BTF: module ib_core") {
			t.Errorf("%s skipped because %q, want the missing BTF", sk.Rule, sk.Reason)
		}
	}
	if len(rep.SkippedRules) < 3 {
		t.Errorf("skipped rules %v, want the three that need the probes", rep.SkippedRules)
	}
	if n := strings.Count(stderr, "probes unavailable"); n != 1 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("qp-leaks said why %d times, in:\n%s", n, stderr)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	var logs strings.Builder
	cmd := spawnAgent(t, sock, &logs)
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if n := strings.Count(logs.String(), "probes unavailable"); n != 1 {
			t.Errorf("the agent said %d times that the probes are unavailable:\n%s", n, logs.String())
		}
	}()
	if !waitUntil(30*time.Second, func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Scans > 2 && st.Probes == "off" && strings.Contains(st.ProbesError, "BTF")
	}) {
		t.Errorf("agent without ib_core's BTF: %s", logs.String())
	}
}

// An unprivileged user gets what needs no privilege and, for the rest,
// one clear line with the privilege to grant; never a panic.
func TestLabUnprivileged(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	// A copy the user can run, outside the shared repository (t.TempDir's
	// parents are 0700).
	dir, err := os.MkdirTemp("", "unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "rdmatool")
	data, err := os.ReadFile(vmtest.Bin(t, "rdmatool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string // the one line on stderr; "" for none
	}{
		{[]string{"dev", "-j"}, 0, ""},
		{[]string{"link", "-j"}, 0, ""},
		{[]string{"res", "qp", "-j"}, 0, ""},
		{[]string{"trace", "--duration", "1s"}, 2, "(run as root, or grant CAP_BPF and CAP_PERFMON)"},
		{[]string{"link", "add", "rxe9", "type", "rxe", "netdev", "dummy0"}, 2, "operation not permitted (run as root or grant CAP_NET_ADMIN)"},
		{[]string{"link", "delete", "rxe0"}, 2, "operation not permitted (run as root or grant CAP_NET_ADMIN)"},
		// The agent itself runs unprivileged (netlink only); a socket where
		// the user cannot write is refused at start.
		{[]string{"agent", "--socket", "/root/rdmatool/agent.sock"}, 2, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			var ee *exec.ExitError
			if err := cmd.Run(); err != nil && !errors.As(err, &ee) {
				t.Fatalf("run as nobody: %v", err)
			}
			code := cmd.ProcessState.ExitCode()
			if code != tt.wantCode || strings.Contains(stderr.String(), "panic") ||
				(tt.wantErr == "" && stderr.String() != "") ||
				(tt.wantErr != "" && (!strings.Contains(stderr.String(), tt.wantErr) || strings.Count(stderr.String(), "\n") != 1)) {
				t.Errorf("as nobody: exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
	// qp-leaks runs on netlink only, and says why.
	cmd := exec.Command(bin, "qp-leaks", "-j", "--no-agent", "--watch", "1s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.Output()
	var rep agentapi.CheckReport
	if err := json.Unmarshal(out, &rep); err != nil || rep.Probes != "off" || !strings.Contains(rep.ProbesError, "CAP_BPF") {
		t.Errorf("qp-leaks as nobody: %v, probes %s (%s)", err, rep.Probes, rep.ProbesError)
	}
}

// The agent's rename policy under devices deleted in the middle of their
// renames: a device added and deleted at once, ten times, while the agent
// names it. The agent lives on, logs each failure as one line saying the
// device is gone, and names the device that stays. Killed with SIGKILL,
// the next agent names the device that came back while none ran.
func TestLabAgentRenameRacesDelete(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	if out, err := exec.Command("sh", "-c", "ip link add name ragent8 address 02:00:00:00:07:08 type dummy && ip link set ragent8 up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", "ragent8").Run() })
	c, err := rdmanl.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // after the cleanups below, which use it

	const guid = rdmanl.GUID(0x000000fffe000708) // EUI-64 of the MAC
	byGUID := func() (rdmanl.Device, bool) {
		devs, err := c.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(devs, func(d rdmanl.Device) bool { return d.NodeGUID == guid })
		if i < 0 {
			return rdmanl.Device{}, false
		}
		return devs[i], true
	}
	del := func() {
		if d, ok := byGUID(); ok {
			if err := c.LinkDelete(context.Background(), d); err != nil && !errors.Is(err, rdmanl.ErrNoDevice) {
				t.Fatalf("delete %s: %v", d.Name, err)
			}
		}
	}
	t.Cleanup(del)
	add := func() {
		if err := c.LinkAdd(context.Background(), "rxe8", "rxe", "ragent8"); err != nil {
			t.Fatalf("add rxe8: %v", err)
		}
	}
	named := func() bool { d, ok := byGUID(); return ok && d.Name == "lab_roce8" }
	names := filepath.Join(t.TempDir(), "names.conf")
	if err := os.WriteFile(names, []byte(guid.String()+" lab_roce8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	args := []string{"agent", "--socket", sock, "--metrics-address", "127.0.0.1:0", "--interval", "30s",
		"--rename", "map", "--names-map", names, "--rename-force"}
	var logs strings.Builder
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"-v"}, args...)...)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	// Its device events come from the probes (and from 6.12 the monitor
	// group): a device added before they attach waits for the listing
	// interval.
	if !waitUntil(60*time.Second, func() bool {
		st, err := askStatus(t.Context(), sock)
		return err == nil && st.Probes == "on"
	}) {
		t.Fatal("the agent does not answer with its probes on")
	}
	for range 10 {
		add()
		del()
	}
	add()
	stayed, _ := byGUID()
	if !waitUntil(10*time.Second, named) {
		d, _ := byGUID()
		t.Errorf("the device that stayed (index %d) is %q 10s after it was added, want lab_roce8", stayed.Index, d.Name)
	}
	if _, err := askStatus(t.Context(), sock); err != nil {
		t.Errorf("the agent after the races: %v", err)
	}
	cmd.Process.Kill()
	<-exited
	if t.Failed() {
		t.Logf("agent log:\n%s", logs.String())
	}
	failed := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "panic") || strings.HasPrefix(l, "goroutine ") {
			t.Errorf("agent log: %s", l)
		}
		if strings.Contains(l, "rename failed") {
			failed++
			if !strings.Contains(l, "no such RDMA device") {
				t.Errorf("a failed rename that does not say the device is gone: %s", l)
			}
		}
	}
	t.Logf("kernel %s: 10 devices deleted while the agent named them: %d renames failed as gone", vmtest.Kernel(), failed)

	// While no agent runs, the device comes back under its kernel name;
	// the next agent names it at its start.
	del()
	add()
	if d, _ := byGUID(); d.Name != "rxe8" {
		t.Fatalf("with no agent, the new device is %s, want rxe8", d.Name)
	}
	stop := startAgent(t, sock, args[5:]...) // after agent --socket S --metrics-address A
	if !waitUntil(30*time.Second, named) {
		d, _ := byGUID()
		t.Errorf("the restarted agent left the device as %s, want lab_roce8", d.Name)
	}
	stop()
}
