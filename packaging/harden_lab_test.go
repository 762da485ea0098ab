package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmatool/rdmatool/vmtest"
	"golang.org/x/sys/unix"
)

// hardenEnv carries a hardening to the test binary started as a wrapper:
// it applies it to itself, then executes the agent (TestMain).
const hardenEnv = "RDMATOOL_TEST_HARDEN"

// hardening is what the unit's sandbox does, applied without systemd (the
// lab guest runs busybox init): the bounding set of CapabilityBoundingSet,
// NoNewPrivileges, SystemCallFilter as a seccomp filter answering EPERM
// (SystemCallErrorNumber), and a mount namespace in which every mount is
// read-only but the writable directories (ProtectSystem=strict and more:
// /proc, /sys and /dev are read-only too, as ProtectKernelTunables and
// ProtectControlGroups make most of them).
type hardening struct {
	Caps     []int    // capability numbers kept
	Syscalls []int    // x86_64 system call numbers allowed
	Writable []string // RuntimeDirectory, ReadWritePaths
	// UID, when not 0, is the user the agent runs as (DynamicUser=), with
	// Caps as ambient capabilities (AmbientCapabilities=); the writable
	// directories are its own.
	UID int
}

// dynamicUID stands for the uid DynamicUser= allocates (61184-65519).
const dynamicUID = 61184

func TestMain(m *testing.M) {
	if spec := os.Getenv(hardenEnv); spec != "" {
		err := hardenAndExec(spec, os.Args[1:])
		fmt.Fprintln(os.Stderr, "harden:", err)
		os.Exit(111)
	}
	os.Exit(m.Run())
}

// hardenAndExec applies the hardening to this thread and executes argv on
// it; it returns only on failure.
func hardenAndExec(spec string, argv []string) error {
	var h hardening
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		return err
	}
	// Mounts, capabilities, no_new_privs and seccomp belong to the thread
	// that execs.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, d := range h.Writable {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, d, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mounts)), "\n") {
		f := strings.Fields(line)
		point, opts := f[4], f[5]
		if slices.Contains(h.Writable, point) {
			continue
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "nosuid":
				flags |= unix.MS_NOSUID
			case "nodev":
				flags |= unix.MS_NODEV
			case "noexec":
				flags |= unix.MS_NOEXEC
			case "noatime":
				flags |= unix.MS_NOATIME
			case "nodiratime":
				flags |= unix.MS_NODIRATIME
			case "relatime":
				flags |= unix.MS_RELATIME
			}
		}
		if err := unix.Mount("", point, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", point, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if !slices.Contains(h.Caps, c) {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d: %w", c, err)
			}
		}
	}
	// As root, with the bounding set dropped: then the user, if any.
	if h.UID != 0 {
		if err := becomeUser(h); err != nil {
			return err
		}
	}
	// A classic BPF filter: other architectures and every call not in
	// the list get EPERM.
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	deny := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	prog := []unix.SockFilter{
		{Code: ldAbs, K: 4}, // seccomp_data.arch
		{Code: jeq, Jt: 1, K: unix.AUDIT_ARCH_X86_64},
		{Code: ret, K: deny},
		{Code: ldAbs, K: 0}, // seccomp_data.nr
	}
	for _, nr := range h.Syscalls {
		prog = append(prog, unix.SockFilter{Code: jeq, Jf: 1, K: uint32(nr)}, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: deny})
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, hardenEnv+"=") })
	return unix.Exec(argv[0], argv, env)
}

// becomeUser switches to h.UID (group too, no supplementary groups),
// owning the writable directories, and keeps h.Caps as permitted,
// inheritable and ambient capabilities, which the exec then makes
// effective: what systemd does for DynamicUser= with AmbientCapabilities=.
func becomeUser(h hardening) error {
	for _, d := range h.Writable {
		if err := os.Chown(d, h.UID, h.UID); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keepcaps: %w", err)
	}
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := unix.Setresgid(h.UID, h.UID, h.UID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := unix.Setresuid(h.UID, h.UID, h.UID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	var mask uint64
	for _, c := range h.Caps {
		mask |= 1 << c
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(mask), Permitted: uint32(mask), Inheritable: uint32(mask)},
		{Effective: uint32(mask >> 32), Permitted: uint32(mask >> 32), Inheritable: uint32(mask >> 32)},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	for _, c := range h.Caps {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("ambient capability %d: %w", c, err)
		}
	}
	return nil
}

// unitHardening reads the unit's capabilities, the syscall list made from
// its SystemCallFilter and its writable paths.
func unitHardening(t *testing.T) hardening {
	t.Helper()
	var h hardening
	names := map[string]int{"CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_BPF": unix.CAP_BPF,
		"CAP_PERFMON": unix.CAP_PERFMON, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE,
		"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
		"CAP_SYS_RESOURCE":    unix.CAP_SYS_RESOURCE}
	for _, c := range strings.Fields(unitKey(t, "CapabilityBoundingSet")) {
		n, ok := names[c]
		if !ok {
			t.Fatalf("capability %s: add it to unitHardening", c)
		}
		h.Caps = append(h.Caps, n)
	}
	b, err := os.ReadFile(syscallsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
			n, _ := strconv.Atoi(f[0])
			h.Syscalls = append(h.Syscalls, n)
		}
	}
	h.Writable = []string{"/run/" + unitKey(t, "RuntimeDirectory")}
	if unitKey(t, "DynamicUser") == "yes" {
		if amb := unitKey(t, "AmbientCapabilities"); amb != unitKey(t, "CapabilityBoundingSet") {
			t.Fatalf("AmbientCapabilities=%s, CapabilityBoundingSet=%s: the wrapper gives the agent the bounding set as ambient capabilities", amb, unitKey(t, "CapabilityBoundingSet"))
		}
		h.UID = dynamicUID
	}
	return h
}

// hardenedAgent is the agent running under a hardening.
type hardenedAgent struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   strings.Builder
	exited chan struct{}
}

func (a *hardenedAgent) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logs.Write(p)
}

func (a *hardenedAgent) log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logs.String()
}

// startHardened runs the unit's ExecStart under h.
func startHardened(t *testing.T, h hardening, extra ...string) *hardenedAgent {
	t.Helper()
	exec0 := strings.Fields(unitKey(t, "ExecStart"))
	if exec0[0] != "/usr/sbin/rdmatool" {
		t.Fatalf("ExecStart runs %s", exec0[0])
	}
	spec, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{vmtest.Bin(t, "rdmatool")}, exec0[1:]...)
	a := &hardenedAgent{exited: make(chan struct{})}
	a.cmd = exec.Command(os.Args[0], append(args, extra...)...)
	a.cmd.Env = append(os.Environ(), hardenEnv+"="+string(spec))
	a.cmd.Stdout, a.cmd.Stderr = a, a
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.exited })
	return a
}

// waitFor polls cond every 200ms until it holds; it fails after timeout or
// when the agent exits.
func (a *hardenedAgent) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-a.exited:
			t.Fatalf("agent exited while waiting for %s: %s", what, a.log())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s; agent log:\n%s", what, timeout, a.log())
		}
	}
}

// stop sends SIGTERM and wants exit status 0 within 30s.
func (a *hardenedAgent) stop(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not stop on SIGTERM: %s", a.log())
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("agent exited %d: %s", code, a.log())
	}
}

var modePattern = regexp.MustCompile(`probes attached.* mode=(\w+)`)

// metric returns the value of an unlabelled or exactly labelled series in
// the agent's /metrics at 127.0.0.1:10095 (the unit's default).
func metric(series string) (float64, bool) {
	resp, err := http.Get("http://127.0.0.1:10095/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// procStatus returns the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestLabHardenedAgent runs the agent as the unit does, with the unit's
// capability bounding set, NoNewPrivileges, SystemCallFilter and a
// read-only file system but for /run/rdmatool, applied by a wrapper (the
// guest has no systemd): its fentry probes attach, a workload's QPs reach
// /metrics through them with their creation sites (the workload's named,
// a kernel QP's as addresses), the socket answers, and it stops cleanly. Then it
// runs once more without CAP_SYS_ADMIN: it must still run on netlink, and
// the test logs what the kernel allowed its probes.
func TestLabHardenedAgent(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	h := unitHardening(t)
	a := startHardened(t, h, "--interval", "1s")
	a.waitFor(t, 90*time.Second, "probes attached and netlink up", func() bool {
		p, _ := metric("rdmatool_probes_up")
		n, _ := metric("rdmatool_netlink_up")
		return p == 1 && n == 1 && modePattern.MatchString(a.log())
	})
	if m := modePattern.FindStringSubmatch(a.log()); m[1] != "fentry" {
		t.Errorf("probes attached in mode %s under the unit's hardening, want fentry:\n%s", m[1], a.log())
	}
	st := procStatus(t, a.cmd.Process.Pid)
	var mask uint64
	for _, c := range h.Caps {
		mask |= 1 << c
	}
	want := fmt.Sprintf("%016x", mask)
	if st["CapBnd"] != want || st["CapEff"] != want || st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
		t.Errorf("agent runs with CapBnd %s CapEff %s NoNewPrivs %s Seccomp %s, want %s %s 1 2",
			st["CapBnd"], st["CapEff"], st["NoNewPrivs"], st["Seccomp"], want, want)
	}
	if uid := strings.Fields(st["Uid"]); h.UID == 0 || len(uid) != 4 || uid[0] != strconv.Itoa(h.UID) || st["CapAmb"] != want {
		t.Errorf("agent runs with uids %s, CapAmb %s; want uid %d (the unit's DynamicUser=) with ambient %s", st["Uid"], st["CapAmb"], h.UID, want)
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(line)
		ro := strings.HasPrefix(f[5], "ro")
		if ro == slices.Contains(h.Writable, f[4]) {
			t.Errorf("agent's mount %s has options %s", f[4], f[5])
		}
	}

	before, _ := metric(`rdmatool_probe_events_total{kind="qp_create"}`)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	a.waitFor(t, 30*time.Second, "the workload's QP creations in /metrics", func() bool {
		n, _ := metric(`rdmatool_probe_events_total{kind="qp_create"}`)
		return n >= before+2
	})
	// The creation sites: user ones named (map_files, CAP_SYS_ADMIN),
	// kernel ones as addresses (no CAP_SYSLOG: kallsyms reads zero).
	removeRXE := addRXE(t, "hardrxe")
	checkSites(t, "http://127.0.0.1:10095/metrics", 2, "hardrxe", false)
	removeRXE()
	if !strings.Contains(a.log(), "kernel stacks shown as addresses") {
		t.Errorf("the agent's log does not say why kernel stacks are addresses:\n%s", a.log())
	}
	w.Release(30 * time.Second)

	client := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.Writable[0]+"/agent.sock")
		}}}
	resp, err := client.Get("http://agent/v1/status")
	if err != nil {
		t.Fatalf("agent socket: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/status on the socket: %s", resp.Status)
	}
	a.stop(t)

	// Without CAP_SYS_ADMIN: which probes the kernel then allows is a fact
	// of the kernel, logged; the agent must still run on netlink.
	h.Caps = slices.DeleteFunc(h.Caps, func(c int) bool { return c == unix.CAP_SYS_ADMIN })
	b := startHardened(t, h, "--interval", "1s")
	outcome := regexp.MustCompile(`probes attached.* mode=\w+|probes unavailable.*`)
	b.waitFor(t, 90*time.Second, "probes attached or given up without CAP_SYS_ADMIN, netlink up", func() bool {
		n, _ := metric("rdmatool_netlink_up")
		return n == 1 && outcome.MatchString(b.log())
	})
	paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	t.Logf("kernel %s without CAP_SYS_ADMIN (perf_event_paranoid %s): %s", vmtest.Kernel(),
		strings.TrimSpace(string(paranoid)), outcome.FindString(b.log()))
	b.stop(t)
}
