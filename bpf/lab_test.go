//go:build linux && (amd64 || arm64)

package bpf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/vmtest"
	"golang.org/x/sys/unix"
)

// Lab tests: they run inside the vmtest guest on every kernel of the matrix
// (make test-lab) and skip elsewhere. Most drive `rdmatool trace -j` as a
// user would; the rest use the package API.

// traceLine is one line of `rdmatool trace -j`: an event, or the summary.
type traceLine struct {
	EventJSON
	// A qp_create's creation site (cmd/rdmatool's userSiteJSON and
	// kernelSiteJSON).
	Site        string   `json:"site"`
	SiteFile    string   `json:"site_file"`
	SiteBuildID string   `json:"site_build_id"`
	SiteOffset  *uint64  `json:"site_offset"`
	SiteVia     string   `json:"site_via"`
	Stack       []string `json:"stack"`
	// The summary's counts.
	Events        uint64 `json:"events"`
	Lost          uint64 `json:"lost"`
	StacksRefused uint64 `json:"stacks_refused"`
	at            time.Time
	raw           string
}

func (l traceLine) String() string { return l.raw }

// parseTraceLine decodes one line of output; a line that is not JSON gets
// the kind "unparsed".
func parseTraceLine(line string) traceLine {
	l := traceLine{raw: line}
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		l.Kind = "unparsed"
	}
	l.at, _ = time.Parse(time.RFC3339Nano, l.Time)
	return l
}

// traceRun is a running `rdmatool trace -j`.
type traceRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []traceLine
	stderr strings.Builder
	done   chan struct{}
}

// startTrace runs `rdmatool trace -j ARGS...` and waits until it says its
// probes are attached. It is killed when the test ends, if still running.
func startTrace(t *testing.T, args ...string) *traceRun {
	t.Helper()
	r := &traceRun{done: make(chan struct{})}
	r.cmd = exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"trace", "-j"}, args...)...)
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attached := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := parseTraceLine(sc.Text())
			r.mu.Lock()
			r.lines = append(r.lines, l)
			r.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			r.mu.Lock()
			r.stderr.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "rdmatool trace: attached") {
				once.Do(func() { close(attached) })
			}
		}
	}()
	go func() {
		wg.Wait()
		r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	select {
	case <-attached:
	case <-r.done:
		t.Fatalf("rdmatool trace ended before attaching: %s", r.errText())
	case <-time.After(2 * time.Minute):
		t.Fatalf("rdmatool trace did not attach within 2m: %s", r.errText())
	}
	return r
}

// waitFor waits until the trace has printed a line that match accepts.
func (r *traceRun) waitFor(t *testing.T, what string, match func(traceLine) bool) {
	t.Helper()
	r.waitCount(t, what, 1, match)
}

// waitCount waits until the trace has printed n lines that match accepts.
func (r *traceRun) waitCount(t *testing.T, what string, n int, match func(traceLine) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if seenCount(r, match) >= n {
			return
		}
		select {
		case <-r.done:
			t.Fatalf("rdmatool trace ended before printing %s: %s", what, r.errText())
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.mu.Lock()
	last := r.lines[max(0, len(r.lines)-8):]
	printed := len(r.lines)
	r.mu.Unlock()
	t.Fatalf("rdmatool trace printed %d lines of %s within 1m, want %d (%d lines in all, the last %d:\n%s)\nits stderr: %s",
		seenCount(r, match), what, n, printed, len(last), joinLines(last), r.errText())
}

// seenCount counts the lines of r that match accepts.
func seenCount(r *traceRun, match func(traceLine) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if match(l) {
			n++
		}
	}
	return n
}

func joinLines(ls []traceLine) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.raw + "\n")
	}
	return b.String()
}

func (r *traceRun) errText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// stop interrupts the trace (SIGINT), expects exit status 130 and a summary
// without lost events, and returns the events.
func (r *traceRun) stop(t *testing.T) []traceLine {
	t.Helper()
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		t.Fatalf("rdmatool trace did not end within 1m of SIGINT: %s", r.errText())
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("rdmatool trace exit status %d after SIGINT, want 130; stderr: %s", code, r.errText())
	}
	return r.events(t)
}

// summary is the trace's last line, its summary, once it has ended.
func (r *traceRun) summary() traceLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return traceLine{}
	}
	return r.lines[len(r.lines)-1]
}

// events checks the last line, the summary, and returns the lines before it.
func (r *traceRun) events(t *testing.T) []traceLine {
	t.Helper()
	r.mu.Lock()
	lines := slices.Clone(r.lines)
	r.mu.Unlock()
	if len(lines) == 0 || lines[len(lines)-1].Kind != "summary" {
		t.Fatalf("rdmatool trace -j did not end with a summary line; stderr: %s", r.errText())
	}
	sum, evs := lines[len(lines)-1], lines[:len(lines)-1]
	if sum.Lost != 0 {
		t.Errorf("summary: %s, want nothing lost", sum.raw)
	}
	if sum.Events != uint64(len(evs)) {
		t.Errorf("summary counts %d events, %d printed", sum.Events, len(evs))
	}
	for _, l := range evs {
		if l.Kind == "unparsed" || l.at.IsZero() {
			t.Errorf("bad line: %s", l.raw)
		}
	}
	return evs
}

// byTime orders events as they happened: modify and destroy are written
// when the call returns but carry the time it began (see Events).
func byTime(evs []traceLine) []traceLine {
	out := slices.Clone(evs)
	slices.SortStableFunc(out, func(a, b traceLine) int { return a.at.Compare(b.at) })
	return out
}

// srqnOf finds the number netlink gives the SRQ a process made on dev.
func srqnOf(t *testing.T, dev vmtest.Device, pid int) uint32 {
	t.Helper()
	for _, s := range vmtest.RdmaJSON(t, "res", "show", "srq", "dev", string(dev)) {
		if p, _ := s["pid"].(float64); int(p) == pid {
			n, _ := s["srqn"].(float64)
			return uint32(n)
		}
	}
	t.Fatalf("no SRQ of pid %d on %s in rdma res show srq", pid, dev)
	return 0
}

// connectArgs connects pairs the way each provider allows: by hand on RoCE,
// through rdma_cm on iWARP, where only the CM can take a QP to RTS.
func connectArgs(d vmtest.Device) []string {
	if d == vmtest.SIW {
		return []string{"--connect", "cm", "--addr", d.Addr()}
	}
	return []string{"--connect", "verbs"}
}

var stateOrder = map[string]int{"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3, "ERR": 6}

// TestLabTraceSRQLifecycle: a workload creates an RC pair on an SRQ, moves
// it to RTS and then ERR, and tears it down the IB spec 10.3.1 way. The
// trace shows, per QP and in order: the create (type, SRQ and its number,
// PID, comm), each state change, LAST_WQE_REACHED where the provider sends
// it and not where it does not, and the destroy.
func TestLabTraceSRQLifecycle(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(fmt.Sprintf("%s on %s", d, vmtest.Kernel()), func(t *testing.T) {
			// Both attach modes trace one run of the workload side by
			// side: each tracer has probes and a ring buffer of its own.
			modes := []string{"fentry", "kprobes"}
			tracers := map[string]*traceRun{
				"fentry":  startTrace(t, "--dev", string(d)),
				"kprobes": startTrace(t, "--dev", string(d), "--kprobes"),
			}
			w := vmtest.StartWorkload(t, append([]string{"--dev", string(d), "--pairs", "--qps", "1", "--srq", "--to", "ERR",
				"--teardown", "spec", "--last-wqe-timeout-ms", "500", "--hold", "stdin"}, connectArgs(d)...)...)
			ready := w.WaitFor("ready", time.Minute)
			srqn := srqnOf(t, d, ready.PID)
			qps := w.QPs()
			w.Release(time.Minute)
			evs := map[string][]traceLine{}
			for _, mode := range modes {
				evs[mode] = tracers[mode].stop(t)
			}
			if len(qps) != 2 {
				t.Fatalf("workload made %d QPs, want 2", len(qps))
			}
			for _, mode := range modes {
				t.Run(mode, func(t *testing.T) {
					for _, qp := range qps {
						checkSRQLifecycle(t, d, ready.PID, srqn, qp.QPN, evs[mode])
					}
				})
			}
		})
	}
}

func checkSRQLifecycle(t *testing.T, d vmtest.Device, pid int, srqn, qpn uint32, all []traceLine) {
	t.Helper()
	var evs []traceLine
	for _, e := range byTime(all) {
		if e.QPN == qpn && e.Device == string(d) && e.QPType != "" {
			evs = append(evs, e)
		}
	}
	if len(evs) < 3 {
		t.Fatalf("QP %d: %d events, want create, modifies and destroy: %v", qpn, len(evs), evs)
	}
	for _, e := range evs {
		if e.QPType != "RC" || !e.SRQ || e.SRQN != srqn || e.KernOwner != "" {
			t.Errorf("QP %d: want an RC user QP on SRQ %d: %s", qpn, srqn, e)
		}
		switch e.Kind {
		case "qp_create", "qp_modify", "qp_destroy":
			// siw's kernel CM may change states itself: only the
			// workload's own calls carry its PID.
			if e.Result != 0 || e.Kind != "qp_modify" && (e.PID != uint32(pid) || e.Comm != "qpwork") {
				t.Errorf("QP %d: want result 0 by qpwork (pid %d): %s", qpn, pid, e)
			}
		}
	}
	first, last := evs[0], evs[len(evs)-1]
	if first.Kind != "qp_create" || first.Probe != "ib_create_qp_user" {
		t.Errorf("QP %d: first event %s, want qp_create by ib_create_qp_user", qpn, first)
	}
	if last.Kind != "qp_destroy" || last.Probe != "ib_destroy_qp_user" {
		t.Errorf("QP %d: last event %s, want qp_destroy by ib_destroy_qp_user", qpn, last)
	}
	var states []string
	lastWQE, errAt := 0, -1
	for i, e := range evs[1 : len(evs)-1] {
		switch {
		case e.Kind == "qp_modify" && e.NewState != "":
			if e.PID != uint32(pid) || e.Comm != "qpwork" {
				t.Errorf("QP %d: state change not by qpwork: %s", qpn, e)
			}
			states = append(states, e.NewState)
			if e.NewState == "ERR" {
				errAt = i
			}
		case e.Kind == "qp_modify":
		case e.Kind == "qp_event" && e.EventCode == 16 && e.Event == "QP_LAST_WQE_REACHED":
			lastWQE++
			if errAt < 0 {
				t.Errorf("QP %d: LAST_WQE_REACHED before ERR: %v", qpn, evs)
			}
		default:
			t.Errorf("QP %d: unexpected event between create and destroy: %s", qpn, e)
		}
	}
	if d == vmtest.RXE {
		if want := []string{"INIT", "RTR", "RTS", "ERR"}; !slices.Equal(states, want) {
			t.Errorf("QP %d: states %v, want %v", qpn, states, want)
		}
	} else {
		// librdmacm on iWARP: INIT (again on the passive side, with RTR),
		// the CM takes the QP to RTS inside siw, the workload to ERR.
		for i := 1; i < len(states); i++ {
			if stateOrder[states[i]] < stateOrder[states[i-1]] {
				t.Errorf("QP %d: states %v go backwards", qpn, states)
			}
		}
		if len(states) < 2 || states[0] != "INIT" || states[len(states)-1] != "ERR" {
			t.Errorf("QP %d: states %v, want INIT first and ERR last", qpn, states)
		}
	}
	if want := vmtest.EmitsLastWQE(t, d); (lastWQE > 0) != want {
		t.Errorf("QP %d on kernel %s: %d LAST_WQE_REACHED between ERR and destroy, want them %v: %v", qpn, vmtest.Kernel(), lastWQE, want, evs)
	}
}

// run runs a command in the guest, failing t if it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// TestLabTraceDeviceLifecycle adds an rxe device on a fresh netdev while
// tracing: its registration, the GSI QP ib_core makes for it (a kernel QP,
// owner "ib_core"), port events, a rename, the unregistration and the GSI
// QP's destroy, all under the device's current name.
func TestLabTraceDeviceLifecycle(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	for _, mode := range []string{"fentry", "kprobes"} {
		t.Run(mode+" on "+vmtest.Kernel(), func(t *testing.T) {
			var args []string
			if mode == "kprobes" {
				args = append(args, "--kprobes")
			}
			tr := startTrace(t, args...)
			t.Cleanup(func() {
				exec.Command("rdma", "link", "delete", "trcrxe2").Run()
				exec.Command("rdma", "link", "delete", "trcrxe").Run()
				exec.Command("ip", "link", "del", "trc0").Run()
			})
			run(t, "ip", "link", "add", "name", "trc0", "address", "02:00:00:00:0b:01", "type", "dummy")
			run(t, "ip", "link", "set", "trc0", "up")
			run(t, "rdma", "link", "add", "trcrxe", "type", "rxe", "netdev", "trc0")
			run(t, "ip", "link", "set", "trc0", "down")
			run(t, "ip", "link", "set", "trc0", "up")
			run(t, "rdma", "dev", "set", "trcrxe", "name", "trcrxe2")
			run(t, "rdma", "link", "delete", "trcrxe2")
			run(t, "ip", "link", "del", "trc0")
			evs := tr.stop(t)

			var reg *traceLine
			for i, e := range evs {
				if e.Kind == "device_register" && e.Device == "trcrxe" {
					reg = &evs[i]
				}
			}
			if reg == nil {
				t.Fatalf("no device_register of trcrxe: %v", evs)
			}
			if reg.Result != 0 || reg.Comm != "rdma" || reg.Probe != "ib_register_device" {
				t.Errorf("register: %s", reg)
			}
			var mine []traceLine
			for _, e := range byTime(evs) {
				if e.DevIndex == reg.DevIndex && (e.Device == "trcrxe" || e.Device == "trcrxe2") {
					mine = append(mine, e)
				}
			}
			find := func(what string, match func(traceLine) bool) traceLine {
				t.Helper()
				for _, e := range mine {
					if match(e) {
						return e
					}
				}
				t.Errorf("no %s among the device's events: %v", what, mine)
				return traceLine{}
			}
			gsi := find("GSI QP create", func(e traceLine) bool { return e.Kind == "qp_create" && e.QPType == "GSI" })
			if gsi.QPN != 1 || gsi.KernOwner != "ib_core" || gsi.Probe != "ib_create_qp_kernel" || gsi.Result != 0 || gsi.Device != "trcrxe" {
				t.Errorf("GSI QP create: %s; want QP 1 of trcrxe owned by ib_core", gsi)
			}
			var states []string
			for _, e := range mine {
				if e.Kind == "qp_modify" && e.QPN == 1 && e.NewState != "" {
					states = append(states, e.NewState)
					if e.KernOwner != "ib_core" {
						t.Errorf("GSI modify without its owner: %s", e)
					}
				}
			}
			if len(states) < 3 || !slices.Equal(states[:3], []string{"INIT", "RTR", "RTS"}) {
				t.Errorf("GSI QP states %v, want INIT RTR RTS first", states)
			}
			portErr := find("PORT_ERR", func(e traceLine) bool { return e.Kind == "device_event" && e.Event == "PORT_ERR" })
			if portErr.Port != 1 || portErr.EventCode != 10 || portErr.Probe != "ib_dispatch_event" {
				t.Errorf("PORT_ERR: %s", portErr)
			}
			find("PORT_ACTIVE after PORT_ERR", func(e traceLine) bool {
				return e.Kind == "device_event" && e.Event == "PORT_ACTIVE" && e.Port == 1 && e.at.After(portErr.at)
			})
			ren := find("rename", func(e traceLine) bool { return e.Kind == "device_rename" })
			if ren.Device != "trcrxe" || ren.NewName != "trcrxe2" || ren.Result != 0 || ren.Comm != "rdma" {
				t.Errorf("rename: %s; want trcrxe to trcrxe2", ren)
			}
			unreg := find("unregister", func(e traceLine) bool { return e.Kind == "device_unregister" })
			if unreg.Device != "trcrxe2" || unreg.Probe != "__ib_unregister_device" {
				t.Errorf("unregister: %s; want it under the new name", unreg)
			}
			destroy := find("GSI QP destroy", func(e traceLine) bool { return e.Kind == "qp_destroy" && e.QPN == 1 })
			if destroy.Device != "trcrxe2" || destroy.KernOwner != "ib_core" || destroy.Result != 0 || destroy.at.Before(unreg.at) {
				t.Errorf("GSI QP destroy: %s; want it after the unregistration, under the new name", destroy)
			}
			if n := len(slices.DeleteFunc(slices.Clone(mine), func(e traceLine) bool { return e.Kind != "device_unregister" })); n != 1 {
				t.Errorf("%d unregister events, want 1", n)
			}
		})
	}
}

// TestLabTraceDuration: --duration ends the trace with status 0 and the
// summary on stderr (text) or as the last line (-j).
func TestLabTraceDuration(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "trace", "--duration", "1s")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rdmatool trace --duration 1s: %v; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "rdmatool trace: attached ") || !strings.Contains(stderr.String(), " events, 0 lost (") {
		t.Errorf("stderr %q: want the attach line and the summary", stderr.String())
	}
	r := &traceRun{done: make(chan struct{})}
	r.cmd = exec.Command(vmtest.Bin(t, "rdmatool"), "trace", "-j", "--duration", "1s")
	out, err := r.cmd.Output()
	if err != nil {
		t.Fatalf("rdmatool trace -j --duration 1s: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		r.lines = append(r.lines, parseTraceLine(line))
	}
	r.events(t)
}

// TestLabTraceNoPrivilege: without capabilities, one line says what is
// missing, and the exit status is 2.
func TestLabTraceNoPrivilege(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "trace")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("rdmatool trace as nobody: %v, want exit status 2: %s", err, out)
	}
	want := "rdmatool: bpf: open probes: no privilege to trace: missing CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) " +
		"(run as root, or grant CAP_BPF and CAP_PERFMON)\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

// moduleRefs reads how many references hold ib_core.
func moduleRefs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/sys/module/ib_core/refcnt")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLabOpen checks the API: which probes attach how on this kernel, that
// fentry pins ib_core while attached and kprobes do not, that Events
// delivers a churn completely and ends on Close, and that Close detaches.
func TestLabOpen(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, kprobes := range []bool{false, true} {
		t.Run(fmt.Sprintf("kprobes=%v on %s", kprobes, vmtest.Kernel()), func(t *testing.T) {
			before := moduleRefs(t)
			tr, err := Open(log, Options{Kprobes: kprobes})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			wantMode := ModeKprobe
			if !kprobes && vmtest.Fact(t, "fentry attaches to ib_core") {
				wantMode = ModeFentry
			}
			if tr.Mode() != wantMode {
				t.Errorf("Mode = %s, want %s: %+v", tr.Mode(), wantMode, tr.Probes())
			}
			hasQPHandler := vmtest.Fact(t, "ib_core has __ib_qp_event_handler")
			for _, p := range tr.Probes() {
				want := wantMode
				switch {
				case p.Function == "__ib_qp_event_handler" && !hasQPHandler:
					want = ModeNone
				case p.Function == "ib_uverbs_qp_event_handler" && hasQPHandler:
					want = ModeNone // covered by __ib_qp_event_handler
				}
				if p.Mode != want {
					t.Errorf("probe %s: mode %s (%s), want %s", p.Function, p.Mode, p.Note, want)
				}
				t.Logf("probe %s: %s %s", p.Function, p.Mode, p.Note)
			}
			// fentry programs hold a reference on ib_core (a trampoline in
			// the module's text); kprobes do not.
			during := moduleRefs(t)
			if pinned := during > before; pinned != (wantMode == ModeFentry) {
				t.Errorf("ib_core references %d with probes attached, %d before: pinned %v, want %v",
					during, before, pinned, wantMode == ModeFentry)
			}

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				creates, modifies, destroys int
				// curStates counts the modifies by the provider's state
				// when they began and the state asked for ("RESET>INIT").
				curStates map[string]int
				err       error
			}
			done := make(chan result, 1)
			var pid int
			var pidMu sync.Mutex
			go func() {
				r := result{curStates: map[string]int{}}
				for ev, err := range tr.Events(ctx) {
					if err != nil {
						r.err = err
						break
					}
					pidMu.Lock()
					mine := pid != 0 && ev.PID == uint32(pid)
					pidMu.Unlock()
					if !mine {
						continue
					}
					switch ev.Kind {
					case KindQPCreate:
						r.creates++
					case KindQPModify:
						r.modifies++
						cur := "none"
						if ev.HasCurState {
							cur = ev.CurState.String()
						}
						r.curStates[cur+">"+ev.NewState.String()]++
					case KindQPDestroy:
						r.destroys++
					}
				}
				done <- r
			}()
			// The kernel counts program runs and time only while
			// statistics are enabled.
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				t.Fatal(err)
			}
			defer stats.Close()
			w := vmtest.StartWorkload(t, "--dev", "rxe0", "--churn", "200")
			pidMu.Lock()
			pid = w.PID()
			pidMu.Unlock()
			w.Wait(2 * time.Minute)
			cancel() // the records are in the ring: Events drains it, then ends
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Events did not end after its context did")
			}
			if r.err != nil || r.creates != 200 || r.modifies != 800 || r.destroys != 200 {
				t.Errorf("churn of 200 cycles: %d creates, %d modifies, %d destroys, err %v; want 200, 800, 200",
					r.creates, r.modifies, r.destroys, r.err)
			}
			// rxe tells ib_modify_qp_is_ok where each QP is: every modify
			// of the churn says its state before (nothing in Error).
			wantCur := map[string]int{"RESET>INIT": 200, "INIT>RTR": 200, "RTR>RTS": 200, "RTS>ERR": 200}
			if diff := cmp.Diff(wantCur, r.curStates); diff != "" {
				t.Errorf("churn's modifies by the provider's state before and the state asked for (-want +got):\n%s", diff)
			}
			if st, err := tr.Stats(); err != nil || st.Total() != 0 {
				t.Errorf("Stats = %+v, %v; want nothing lost", st, err)
			}
			wantProg := map[bool]string{false: "fexit_modify_qp", true: "kretprobe_modify_qp"}[wantMode == ModeKprobe]
			ps, err := tr.ProgramStats()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range ps {
				if p.Program == wantProg {
					found = true
					// Other processes may modify QPs too, never fewer.
					if p.Runs < 800 || p.RunTime <= 0 {
						t.Errorf("ProgramStats %s: %d runs in %v, want at least the churn's 800 and some time", p.Program, p.Runs, p.RunTime)
					}
				}
			}
			if !found {
				t.Errorf("ProgramStats %+v: no %s", ps, wantProg)
			}

			// Close ends a running Events.
			ended := make(chan struct{})
			go func() {
				for range tr.Events(t.Context()) {
				}
				close(ended)
			}()
			if err := tr.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			select {
			case <-ended:
			case <-time.After(time.Minute):
				t.Fatal("Events did not end on Close")
			}
			if after := moduleRefs(t); after != before {
				t.Errorf("ib_core references %d after Close, %d before", after, before)
			}
		})
	}
}

// TestLabRecord records ring buffer records for the decoder's golden files
// and fuzz seeds when run with -update (see testdata/README.md): the SRQ
// lifecycle on rxe0 and siw0, and a device added, renamed and removed.
func TestLabRecord(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	if !*update {
		t.Skip("records only with -update")
	}
	for _, d := range []vmtest.Device{vmtest.RXE, vmtest.SIW, "dev"} {
		t.Run(string(d), func(t *testing.T) {
			tr, err := Open(slog.New(slog.DiscardHandler), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if d == "dev" {
				t.Cleanup(func() { exec.Command("ip", "link", "del", "trc0").Run() })
				run(t, "ip", "link", "add", "name", "trc0", "address", "02:00:00:00:0b:01", "type", "dummy")
				run(t, "ip", "link", "set", "trc0", "up")
				run(t, "rdma", "link", "add", "trcrxe", "type", "rxe", "netdev", "trc0")
				run(t, "ip", "link", "set", "trc0", "down")
				run(t, "rdma", "dev", "set", "trcrxe", "name", "trcrxe2")
				run(t, "rdma", "link", "delete", "trcrxe2")
			} else {
				vmtest.StartWorkload(t, append([]string{"--dev", string(d), "--pairs", "--qps", "1", "--srq", "--to", "ERR",
					"--teardown", "spec", "--last-wqe-timeout-ms", "300"}, connectArgs(d)...)...).Wait(time.Minute)
			}
			var raw []byte
			tr.reader.SetDeadline(time.Now())
			var rec ringbuf.Record
			for {
				err := tr.reader.ReadInto(&rec)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				raw = append(raw, rec.RawSample...)
			}
			if len(raw) == 0 {
				t.Fatal("nothing recorded")
			}
			name := fmt.Sprintf("records_%s_%s.bin", vmtest.Kernel(), strings.TrimSuffix(string(d), "0"))
			if err := os.WriteFile(filepath.Join("testdata", name), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkCallSite holds a qp_create's user site to bin (vmtest.Binary.CheckCall).
func checkCallSite(t *testing.T, bin *vmtest.Binary, l traceLine, fn, via string) {
	t.Helper()
	if l.SiteOffset == nil {
		t.Errorf("QP %d: no site offset: %s", l.QPN, l)
		return
	}
	bin.CheckCall(t, fmt.Sprintf("QP %d", l.QPN), vmtest.Site{Call: l.Site, Via: l.SiteVia, File: l.SiteFile,
		BuildID: l.SiteBuildID, Offset: *l.SiteOffset}, fn, via)
}

// TestLabTraceSites: `rdmatool trace -j`, in both attach modes side by
// side, while qpwork creates QPs through plain verbs on rxe0 and through
// librdmacm on rxe0 and siw0: every qp_create of qpwork names, as its
// site, the qpwork function that made the library call (create_qps_verbs
// via ibv_create_qp, create_qp_rdmacm via rdma_create_qp, not librdmacm's
// own call of ibv_create_qp), with qpwork's build ID and the call
// instruction's file offset. Then an rxe device is added and deleted: the
// GSI QP ib_core creates for it has a kernel stack from ib_core through
// rdma_rxe, without the probe's BPF frames; a trace with --no-sites says
// its sites are off and shows none.
func TestLabTraceSites(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	q := vmtest.OpenBinary(t, vmtest.Bin(t, "qpwork"))
	modes := []string{"fentry", "kprobes"}
	cases := []struct {
		name    string
		dev     vmtest.Device
		args    []string
		fn, via string
	}{
		{"verbs on rxe0", vmtest.RXE, []string{"--qps", "2"}, "create_qps_verbs", "ibv_create_qp"},
		{"rdma_cm on rxe0", vmtest.RXE, []string{"--pairs", "--qps", "1", "--connect", "cm", "--addr", vmtest.RXEAddr},
			"create_qp_rdmacm", "rdma_create_qp"},
		{"rdma_cm on siw0", vmtest.SIW, []string{"--pairs", "--qps", "1", "--connect", "cm", "--addr", vmtest.SIWAddr},
			"create_qp_rdmacm", "rdma_create_qp"},
	}
	for _, c := range cases {
		t.Run(c.name+" on "+vmtest.Kernel(), func(t *testing.T) {
			tracers := map[string]*traceRun{
				"fentry":  startTrace(t, "--dev", string(c.dev)),
				"kprobes": startTrace(t, "--dev", string(c.dev), "--kprobes"),
			}
			for _, mode := range modes {
				if text := tracers[mode].errText(); !strings.Contains(text, "; sites: uprobes on ") || strings.Contains(text, "missing:") ||
					!strings.Contains(text, "libibverbs.so") || !strings.Contains(text, "librdmacm.so") {
					t.Errorf("%s: attach line %q: want uprobes on libibverbs and librdmacm, none missing", mode, text)
				}
			}
			w := vmtest.StartWorkload(t, append([]string{"--dev", string(c.dev), "--hold", "stdin"}, c.args...)...)
			ready := w.WaitFor("ready", time.Minute)
			qps := w.QPs()
			// The sites are symbolized while qpwork runs: it holds its
			// QPs until both traces have printed every create.
			for _, mode := range modes {
				for _, qp := range qps {
					tracers[mode].waitFor(t, fmt.Sprintf("the create of QP %d (%s)", qp.QPN, mode), func(l traceLine) bool {
						return l.Kind == "qp_create" && l.QPN == qp.QPN && l.PID == uint32(ready.PID)
					})
				}
			}
			w.Release(time.Minute)
			for _, mode := range modes {
				evs := tracers[mode].stop(t)
				refused := tracers[mode].summary().StacksRefused
				t.Run(mode, func(t *testing.T) {
					for _, qp := range qps {
						i := slices.IndexFunc(evs, func(l traceLine) bool {
							return l.Kind == "qp_create" && l.QPN == qp.QPN && l.PID == uint32(ready.PID)
						})
						if i < 0 {
							t.Errorf("no create of QP %d by qpwork (pid %d)", qp.QPN, ready.PID)
							continue
						}
						checkCallSite(t, q, evs[i], c.fn, c.via)
						if len(evs[i].Stack) == 0 && refused > 0 {
							// The stack map's bucket for this stack held
							// another (the kernel's hash has no seed, so
							// both modes' maps collide alike): counted,
							// and the site stands without its calls.
							t.Logf("QP %d: no calls above the site, with %d stacks refused by the stack map", qp.QPN, refused)
							continue
						}
						vmtest.CheckCallsAbove(t, fmt.Sprintf("QP %d", qp.QPN), "qpwork", evs[i].Stack)
					}
				})
			}
			if len(qps) != 2 {
				t.Errorf("qpwork made %d QPs, want 2", len(qps))
			}
		})
	}

	t.Run("kernel QP on "+vmtest.Kernel(), func(t *testing.T) {
		tracers := map[string]*traceRun{"fentry": startTrace(t), "kprobes": startTrace(t, "--kprobes")}
		noSites := startTrace(t, "--no-sites")
		if text := noSites.errText(); !strings.Contains(text, "; sites: off (--no-sites)") || strings.Contains(text, "uprobes on") {
			t.Errorf("--no-sites: attach line %q, want sites off", text)
		}
		t.Cleanup(func() {
			exec.Command("rdma", "link", "delete", "sitesrxe").Run()
			exec.Command("ip", "link", "del", "sites0").Run()
		})
		run(t, "ip", "link", "add", "name", "sites0", "address", "02:00:00:00:0b:02", "type", "dummy")
		run(t, "ip", "link", "set", "sites0", "up")
		run(t, "rdma", "link", "add", "sitesrxe", "type", "rxe", "netdev", "sites0")
		for _, mode := range modes {
			tracers[mode].waitFor(t, "the GSI QP's create", func(l traceLine) bool {
				return l.Kind == "qp_create" && l.Device == "sitesrxe" && l.QPType == "GSI"
			})
		}
		noSites.waitFor(t, "the GSI QP's create", func(l traceLine) bool {
			return l.Kind == "qp_create" && l.Device == "sitesrxe" && l.QPType == "GSI"
		})
		run(t, "rdma", "link", "delete", "sitesrxe")
		run(t, "ip", "link", "del", "sites0")
		for _, l := range noSites.stop(t) {
			if l.Kind == "qp_create" && (l.Stack != nil || l.Site != "") {
				t.Errorf("--no-sites: a create with a site: %s", l)
			}
		}
		for _, mode := range modes {
			evs := tracers[mode].stop(t)
			t.Run(mode, func(t *testing.T) {
				i := slices.IndexFunc(evs, func(l traceLine) bool {
					return l.Kind == "qp_create" && l.Device == "sitesrxe" && l.QPType == "GSI"
				})
				if i < 0 {
					t.Fatal("no create of sitesrxe's GSI QP")
				}
				gsi := evs[i]
				if gsi.KernOwner != "ib_core" || gsi.Probe != "ib_create_qp_kernel" || gsi.Site != "" || gsi.SiteVia != "" {
					t.Errorf("GSI QP create: %s; want a kernel QP of ib_core without a user site", gsi)
				}
				if len(gsi.Stack) == 0 || !strings.HasSuffix(gsi.Stack[0], " [ib_core]") || strings.HasPrefix(gsi.Stack[0], "ib_create_qp_kernel+") {
					t.Fatalf("GSI QP stack %q: want it to start at ib_create_qp_kernel's caller in ib_core", gsi.Stack)
				}
				if !slices.ContainsFunc(gsi.Stack, func(f string) bool { return strings.HasSuffix(f, " [rdma_rxe]") }) {
					t.Errorf("GSI QP stack %q: want a frame of rdma_rxe (rdma link add registers the device)", gsi.Stack)
				}
				if slices.ContainsFunc(gsi.Stack, func(f string) bool { return strings.HasSuffix(f, " [bpf]") || strings.HasPrefix(f, "0x") }) {
					t.Errorf("GSI QP stack %q: want no BPF frames and every frame named", gsi.Stack)
				}
				t.Logf("GSI QP stack (%s): %q", mode, gsi.Stack)
			})
		}
	})
}

// TestLabTraceSitesOwnMountNamespace: qpwork in a mount namespace of its
// own, where its libibverbs is a copy bind-mounted over the host's (as a
// container brings its own): uprobes are on files, so its first create
// has no site; the trace then attaches the copy that process maps
// (through /proc/PID/map_files), and its later creates name qpwork's
// create_qp_churn.
func TestLabTraceSitesOwnMountNamespace(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	q := vmtest.OpenBinary(t, vmtest.Bin(t, "qpwork"))
	lib := hostLibrary(t, "libibverbs.so.1")
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "libibverbs-copy.so")
	if err := os.WriteFile(cp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := startTrace(t, "--dev", "rxe0")
	const cycles = 40
	w := vmtest.StartWorkloadWrapped(t, []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$1" "$2" && shift 2 && exec "$@"`, "sh", cp, lib},
		"--dev", "rxe0", "--churn", fmt.Sprint(cycles), "--churn-rate", "10")
	start := w.WaitFor("churn_start", time.Minute)
	w.Wait(time.Minute)
	// Every create was traced (the destroys follow them), then stop.
	tr.waitCount(t, fmt.Sprintf("%d destroys by qpwork", cycles), cycles, func(l traceLine) bool {
		return l.Kind == "qp_destroy" && l.PID == uint32(start.PID)
	})
	var creates []traceLine
	for _, l := range tr.stop(t) {
		if l.Kind == "qp_create" && l.PID == uint32(start.PID) {
			creates = append(creates, l)
		}
	}
	if len(creates) != cycles {
		t.Fatalf("%d creates by qpwork traced, want %d", len(creates), cycles)
	}
	if creates[0].SiteVia != "" {
		t.Fatalf("the first create has a site, %s: qpwork did not run on its own copy of libibverbs", creates[0])
	}
	first := slices.IndexFunc(creates, func(l traceLine) bool { return l.SiteVia != "" })
	if first < 0 || first > cycles/2 {
		t.Fatalf("creates with a site from the %dth of %d on, want from the first after the trace attached the copy", first+1, cycles)
	}
	t.Logf("own mount namespace on %s: creates 1..%d without a site, then %d with", vmtest.Kernel(), first, cycles-first)
	for _, l := range creates[first:] {
		checkCallSite(t, q, l, "create_qp_churn", "ibv_create_qp")
	}
}

// TestLabResourceChanges checks the count of resources added and removed
// (rdma_restrack_add and rdma_restrack_del returns) under fentry and under
// kprobes: a workload's context, PD, CQ and QPs move it as they come and
// go, as the device's resource summary does, and nothing else in the
// guest moves it while the workload holds them.
func TestLabResourceChanges(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	for _, kprobes := range []bool{false, true} {
		t.Run(fmt.Sprintf("kprobes=%v on %s", kprobes, vmtest.Kernel()), func(t *testing.T) {
			tr, err := Open(slog.New(slog.DiscardHandler), Options{Kprobes: kprobes})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			count := func() uint64 {
				t.Helper()
				n, ok := tr.ResourceChanges()
				if !ok {
					t.Fatalf("no count of resource changes: %+v", tr.Probes())
				}
				return n
			}
			qps := func() float64 {
				t.Helper()
				rows := vmtest.RdmaJSON(t, "res", "show", string(vmtest.RXE))
				if len(rows) != 1 {
					t.Fatalf("rdma res show %s: %v", vmtest.RXE, rows)
				}
				n, _ := rows[0]["qp"].(float64)
				return n
			}
			c0, q0 := count(), qps()
			w := vmtest.StartWorkload(t, "--dev", string(vmtest.RXE), "--qps", "3", "--to", "INIT", "--hold", "stdin")
			w.WaitFor("ready", time.Minute)
			// The count once it stands over a summary read (an earlier
			// test's teardown may still move it): what the agent reads.
			var c1 uint64
			var q1 float64
			for deadline, n := time.Now().Add(30*time.Second), 1; ; n++ {
				a, q, b := count(), qps(), count()
				if a == b {
					c1, q1 = a, q
					t.Logf("the count stood at %d (%d more than before the workload) at summary read %d", c1, c1-c0, n)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the count never stood over a summary read in 30 s (last %d, then %d)", a, b)
				}
			}
			// A context, a PD, a CQ and three QPs at least.
			if c1 < c0+6 || q1 != q0+3 {
				t.Errorf("with 3 QPs held: count %d, was %d (want 6 more at least); summary's QPs %v, were %v", c1, c0, q1, q0)
			}
			// A count that stands over a later summary read: a summary
			// that stands.
			if q, c := qps(), count(); c == c1 && q != q1 {
				t.Errorf("the count stood at %d, the summary's QPs went from %v to %v", c, q1, q)
			}
			w.Release(time.Minute)
			if c2, q2 := count(), qps(); c2 < c1+6 || q2 != q0 {
				t.Errorf("after the workload: count %d, was %d (want 6 more at least); summary's QPs %v, want %v", c2, c1, q2, q0)
			}
		})
	}
}

// TestLabEventsAfterQuiet: a reader whose ring has been empty for a while
// waits to be woken (reader_waits is set) rather than polling, and the next
// record wakes it: three times, after a quiet second, the create of a QP
// reaches Events well within the 5 s an idle reader would otherwise wait
// (the three would all come by chance once in about 125 runs); the flag
// is cleared when Events ends, with no reader left to wake.
func TestLabEventsAfterQuiet(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	tr, err := Open(slog.New(slog.NewTextHandler(os.Stderr, nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type arrival struct {
		ev Event
		at time.Time
	}
	creates := make(chan arrival, 16)
	ended := make(chan error, 1)
	go func() {
		for ev, err := range tr.Events(ctx) {
			if err != nil {
				ended <- err
				return
			}
			if ev.Kind == KindQPCreate && ev.Result == 0 {
				select {
				case creates <- arrival{ev, time.Now()}:
				default:
				}
			}
		}
		ended <- nil
	}()
	waits := func() uint32 {
		var v uint32
		if err := tr.waits.Lookup(uint32(0), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for round := 1; round <= 3; round++ {
		// Quiet: the ring empty for a whole poll and more.
		deadline := time.Now().Add(10 * time.Second)
		for waits() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: reader_waits still 0 after 10 s of no QP calls", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		for len(creates) > 0 {
			<-creates
		}
		w := vmtest.StartWorkload(t, "--dev", string(vmtest.RXE), "--qps", "1", "--to", "INIT")
		select {
		case a := <-creates:
			late := a.at.Sub(a.ev.Time)
			t.Logf("round %d: QP %d created %s, read %v later", round, a.ev.QPN, a.ev.Time.Format(time.StampMicro), late)
			if late > time.Second {
				t.Errorf("round %d: the create after a quiet second reached Events %v after it happened, want under 1 s (a woken reader)", round, late)
			}
		case err := <-ended:
			t.Fatalf("round %d: Events ended: %v", round, err)
		case <-time.After(time.Minute):
			t.Fatalf("round %d: no QP create read within a minute", round)
		}
		w.Wait(time.Minute)
	}
	cancel()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if v := waits(); v != 0 {
		t.Errorf("reader_waits = %d after Events ended, want 0 (no reader to wake)", v)
	}
}
