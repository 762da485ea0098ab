package agent

import (
	"bufio"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests of kernel ULPs: an NVMe-oF over RDMA target (nvmet_rdma) and
// host (nvme_rdma) in the guest. Since 6.11, ib_drain_qp waits up to 60 s
// for LAST_WQE_REACHED on each SRQ QP; siw never delivers it, so tearing
// down an nvmet_rdma target with use_srq=1 over siw blocks for a minute.

// kernelQPs returns, from netlink, the QPs of dev that rdma_cm created,
// and among them those on an SRQ that nvmet_rdma created: the kernel's
// own account of the target's SRQ QPs, independent of rdmatool's ULP
// attribution.
func kernelQPs(t *testing.T, dev vmtest.Device) (all []rdmanl.QP, targetSRQ []uint32) {
	t.Helper()
	c, err := rdmanl.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Device(t.Context(), string(dev))
	if err != nil {
		t.Fatal(err)
	}
	srqs := map[uint32]bool{}
	for s, err := range c.SRQs(t.Context(), d, rdmanl.DumpOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if s.Owner.KernName == "nvmet_rdma" {
			srqs[s.SRQN] = true
		}
	}
	for q, err := range c.QPs(t.Context(), d, rdmanl.DumpOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if q.Owner.KernName != "rdma_cm" {
			continue
		}
		all = append(all, q)
		if q.OnSRQ && srqs[q.SRQN] {
			targetSRQ = append(targetSRQ, q.LQPN)
		}
	}
	slices.Sort(targetSRQ)
	return all, targetSRQ
}

// checkResQP asserts that `rdmatool res qp` names the ULP of every QP
// rdma_cm made for NVMe-oF: nvmet_rdma for the target's SRQ QPs, and the
// target's or the host's module for the others, next to [rdma_cm].
func checkResQP(t *testing.T, dev vmtest.Device, qps []rdmanl.QP, targetSRQ []uint32) {
	t.Helper()
	var rows []struct {
		LQPN     uint32 `json:"lqpn"`
		KernName string `json:"kern_name"`
		ULP      string `json:"ulp"`
	}
	resJSON(t, &rows, "qp", "link", string(dev))
	ulps := map[string]int{}
	for _, r := range rows {
		if r.KernName != "rdma_cm" {
			continue
		}
		ulps[r.ULP]++
		if slices.Contains(targetSRQ, r.LQPN) && r.ULP != "nvmet_rdma" {
			t.Errorf("res qp: target SRQ QP %d has ulp %q, want nvmet_rdma", r.LQPN, r.ULP)
		}
	}
	// three queues (admin and two I/O) on each side
	if want := map[string]int{"nvmet_rdma": 3, "nvme_rdma": 3}; !mapsEqual(ulps, want) || len(qps) != 6 {
		t.Errorf("res qp: rdma_cm QPs by ulp %v (of %d), want %v", ulps, len(qps), want)
	}
	text, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", "qp", "link", string(dev), "ulp", "nvmet_rdma").Output()
	if n := strings.Count(string(text), "comm [rdma_cm] ulp nvmet_rdma"); err != nil || n != 3 {
		t.Errorf("rdmatool res qp link %s ulp nvmet_rdma (%v): %d lines with the ULP next to [rdma_cm]:\n%s", dev, err, n, text)
	}
}

// checkResMR asserts that `rdmatool res mr` names the ULP of the kernel
// MRs: nvme_rdma registers an MR pool for each queue through its PD, and
// each of those MRs reads ulp nvme_rdma, as every kernel MR reads its
// module; user MRs none.
func checkResMR(t *testing.T, dev vmtest.Device) {
	t.Helper()
	var rows []struct {
		MRN      uint32  `json:"mrn"`
		KernName string  `json:"kern_name"`
		ULP      *string `json:"ulp"`
	}
	resJSON(t, &rows, "mr", "dev", string(dev))
	ulps := map[string]int{}
	for _, r := range rows {
		switch {
		case r.ULP == nil:
			t.Fatalf("res mr -j: MR %d has no ulp field", r.MRN)
		case r.KernName != "" && r.KernName != "ib_core" && *r.ULP != r.KernName, r.KernName == "" && *r.ULP != "":
			t.Errorf("res mr: MR %d of %q has ulp %q", r.MRN, r.KernName, *r.ULP)
		}
		ulps[*r.ULP]++
	}
	if ulps["nvme_rdma"] == 0 {
		t.Errorf("res mr: MRs by ulp %v, want nvme_rdma's (a pool per queue)", ulps)
	}
	text, err := exec.Command(vmtest.Bin(t, "rdmatool"), "res", "mr", "dev", string(dev), "ulp", "nvme_rdma").Output()
	if n := strings.Count(string(text), "comm [nvme_rdma] ulp nvme_rdma"); err != nil || n != ulps["nvme_rdma"] {
		t.Errorf("rdmatool res mr dev %s ulp nvme_rdma (%v): %d lines with the ULP, want %d:\n%s", dev, err, n, ulps["nvme_rdma"], text)
	}
}

// resJSON reads `rdmatool res OBJECT -j ARGS...` into rows.
func resJSON(t *testing.T, rows any, object string, args ...string) {
	t.Helper()
	out, err := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"res", object, "-j"}, args...)...).Output()
	if err != nil {
		t.Fatalf("rdmatool res %s: %v", object, err)
	}
	if err := json.Unmarshal(out, rows); err != nil {
		t.Fatalf("rdmatool res %s -j: %v: %s", object, err, out)
	}
}

func qpnsOf(qps []rdmanl.QP) []uint32 {
	var out []uint32
	for _, q := range qps {
		out = append(out, q.LQPN)
	}
	return out
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// drainTrace is a running `rdmatool trace -j` on one device.
type drainTrace struct {
	mu     sync.Mutex
	drains map[uint32]float64  // QPN to the seconds its ib_drain_qp took
	stacks map[uint32][]string // QPN to its creation's kernel stack
	notify chan struct{}
}

// tracer runs `rdmatool trace -j --kprobes` on a device until the test
// ends, and returns once its probes are attached. Kretprobes see every
// drain return; fexit misses those of drains in progress while another
// program attaches to ib_drain_qp or detaches from it (the CLI watches).
func tracer(t *testing.T, dev vmtest.Device) *drainTrace {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), "trace", "-j", "--kprobes", "--dev", string(dev))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	})
	tr := &drainTrace{drains: map[uint32]float64{}, stacks: map[uint32][]string{}, notify: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev struct {
				Kind     string   `json:"kind"`
				QPN      uint32   `json:"qpn"`
				Probe    string   `json:"probe"`
				Duration float64  `json:"duration_seconds"`
				Stack    []string `json:"stack"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch {
			case ev.Kind == "drain_end" && ev.Probe == "ib_drain_qp":
				tr.mu.Lock()
				tr.drains[ev.QPN] = ev.Duration
				tr.mu.Unlock()
			case ev.Kind == "qp_create" && len(ev.Stack) > 0:
				tr.mu.Lock()
				tr.stacks[ev.QPN] = ev.Stack
				tr.mu.Unlock()
			default:
				continue
			}
			select {
			case tr.notify <- struct{}{}:
			default:
			}
		}
	}()
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.HasPrefix(sc.Text(), "rdmatool trace: ") {
				once = true
				close(attached)
			}
		}
	}()
	select {
	case <-attached:
	case <-time.After(60 * time.Second):
		t.Fatal("rdmatool trace did not attach")
	}
	return tr
}

// checkStacks asserts that the trace saw each of the QPs rdma_cm made for
// NVMe-oF created with a kernel stack through the ULP that made it: a
// frame of nvmet_rdma (the target's QPs, those on its SRQs among them) or
// of nvme_rdma (the host's), as many of one as of the other.
func (tr *drainTrace) checkStacks(t *testing.T, qps []rdmanl.QP, targetSRQ []uint32) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		tr.mu.Lock()
		n := 0
		for _, q := range qps {
			if tr.stacks[q.LQPN] != nil {
				n++
			}
		}
		tr.mu.Unlock()
		if n == len(qps) {
			break
		}
		select {
		case <-tr.notify:
		case <-deadline:
			t.Errorf("the trace saw %d of %d NVMe-oF QPs created with a stack", n, len(qps))
			return
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	byULP := map[string]int{}
	for _, q := range qps {
		st := tr.stacks[q.LQPN]
		ulp := ""
		for _, frame := range st {
			for _, m := range []string{"nvmet_rdma", "nvme_rdma"} {
				if ulp == "" && strings.HasSuffix(frame, " ["+m+"]") {
					ulp = m
				}
			}
		}
		byULP[ulp]++
		if ulp == "" || slices.Contains(targetSRQ, q.LQPN) && ulp != "nvmet_rdma" {
			t.Errorf("QP %d (target SRQ QP %v): creation stack %q, want a frame of nvmet_rdma or nvme_rdma",
				q.LQPN, slices.Contains(targetSRQ, q.LQPN), st)
		}
	}
	if byULP["nvmet_rdma"] != byULP["nvme_rdma"] {
		t.Errorf("QPs created by nvmet_rdma and nvme_rdma: %v, want as many of each", byULP)
	}
}

// wait returns the drains seen once every one of qpns has returned, or
// after timeout with what was seen.
func (tr *drainTrace) wait(qpns []uint32, timeout time.Duration) map[uint32]float64 {
	deadline := time.After(timeout)
	for {
		tr.mu.Lock()
		all := true
		for _, q := range qpns {
			if _, ok := tr.drains[q]; !ok {
				all = false
			}
		}
		out := maps.Clone(tr.drains)
		tr.mu.Unlock()
		if all {
			return out
		}
		select {
		case <-tr.notify:
		case <-deadline:
			return out
		}
	}
}

// agentUntil asks the agent until cond holds of its report, or timeout
// passes, and returns the last report: the agent applies probe events
// within its 100 ms poll of the ring buffer.
func agentUntil(t *testing.T, sock, dev string, timeout time.Duration, cond func(agentapi.CheckReport) bool) agentapi.CheckReport {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rep, _, _ := runQPLeaks(t, "--agent-socket", sock, "--dev", dev, "--min-age", "5s")
		if rep.Source != "agent" {
			t.Fatalf("qp-leaks asked the agent, source %q", rep.Source)
		}
		if cond(rep) || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(200 * time.Millisecond) // the agent offers no notification of its history
	}
}

func findingQPNs(rep agentapi.CheckReport, rule string) []uint32 {
	var out []uint32
	for _, f := range rep.Findings {
		if f.Rule == rule {
			out = append(out, f.QPN)
		}
	}
	slices.Sort(out)
	return out
}

// A healthy NVMe-oF connection (connected, I/O through the namespace,
// held) gets no finding, over rxe and siw, with and without SRQs; the
// teardown that follows takes milliseconds everywhere but siw with SRQs
// (TestLabNVMeoFDrainStalled) and leaves no finding.
func TestLabNVMeoFHealthy(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s")
	defer stop()
	for _, c := range []struct {
		dev    vmtest.Device
		useSRQ bool
	}{{vmtest.RXE, true}, {vmtest.RXE, false}, {vmtest.SIW, false}} {
		t.Run(string(c.dev)+map[bool]string{true: "/use_srq=1", false: "/use_srq=0"}[c.useSRQ], func(t *testing.T) {
			trace := tracer(t, c.dev)
			done := qpLeaks(t, "--no-agent", "--dev", string(c.dev), "--watch", "12s", "--min-age", "4s", "--interval", "1s")
			n := vmtest.StartNVMeoF(t, vmtest.NVMeoFOptions{Device: c.dev, UseSRQ: c.useSRQ})
			if moved := n.IO(t, 64); moved != 2*64*4096 {
				t.Errorf("I/O moved %d bytes", moved)
			}
			qps, targetSRQ := kernelQPs(t, c.dev)
			if (len(targetSRQ) == 3) != c.useSRQ || (!c.useSRQ && len(targetSRQ) != 0) {
				t.Errorf("nvmet_rdma use_srq=%v: target QPs on its SRQs %v", c.useSRQ, targetSRQ)
			}
			checkResQP(t, c.dev, qps, targetSRQ)
			checkResMR(t, c.dev)
			trace.checkStacks(t, qps, targetSRQ)
			rep := done() // the connection is held past --min-age
			check(t, rep, nil)
			rep, _, _ = runQPLeaks(t, "--agent-socket", sock, "--dev", string(c.dev), "--min-age", "4s")
			if rep.Source != "agent" {
				t.Fatalf("qp-leaks asked the agent, source %q", rep.Source)
			}
			check(t, rep, nil)

			disc, port := n.Disconnect(t), n.RemovePort(t)
			drains := trace.wait(qpnsOf(qps), 10*time.Second)
			t.Logf("%s use_srq=%v on %s: disconnect %s, port removal %s, ib_drain_qp by QP (s): %v",
				c.dev, c.useSRQ, vmtest.Kernel(), disc.Round(time.Millisecond), port.Round(time.Millisecond), drains)
			if port > 10*time.Second {
				t.Errorf("port removal took %s, want well under the 60 s SRQ drain", port)
			}
			for _, qpn := range targetSRQ {
				if d, ok := drains[qpn]; !ok || d > 5 {
					t.Errorf("target SRQ QP %d: drain %v s (seen %v), want a fast one", qpn, d, ok)
				}
			}
			rep, _, _ = runQPLeaks(t, "--agent-socket", sock, "--dev", string(c.dev), "--min-age", "1s")
			check(t, rep, nil)
		})
	}
}

// nvmet_rdma with use_srq=1 over siw, disconnected: where ib_drain_qp
// waits for LAST_WQE_REACHED on SRQ QPs, srq-drain-stalled names exactly
// the target's SRQ QPs, attributed to nvmet_rdma, while they wait (a CLI
// watch and the agent) and afterwards (the agent's history, with a drain
// near 60 s); the agent's findings carry the QPs' creation stacks
// through nvmet_rdma. Elsewhere (6.1) the drain does not wait and nothing
// is reported.
func TestLabNVMeoFDrainStalled(t *testing.T) {
	vmtest.Require(t, vmtest.SIW)
	stalls := vmtest.Fact(t, "ib_drain_qp waits for LAST_WQE_REACHED on SRQ QPs")
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	stop := startAgent(t, sock, "--interval", "1s")
	defer stop()
	trace := tracer(t, vmtest.SIW)
	n := vmtest.StartNVMeoF(t, vmtest.NVMeoFOptions{Device: vmtest.SIW, UseSRQ: true})
	n.IO(t, 16)
	qps, targetSRQ := kernelQPs(t, vmtest.SIW)
	if len(targetSRQ) != 3 {
		t.Fatalf("target QPs on nvmet_rdma's SRQs: %v, want 3", targetSRQ)
	}
	checkResQP(t, vmtest.SIW, qps, targetSRQ)
	trace.checkStacks(t, qps, targetSRQ)

	// A CLI watch sees the drains begin and reports them still waiting.
	done := qpLeaks(t, "--no-agent", "--dev", "siw0", "--watch", "12s", "--min-age", "5s", "--interval", "1s")
	disconnected := time.Now()
	n.Disconnect(t)
	watch := done()
	waited := time.Since(disconnected)
	agentRep, _, _ := runQPLeaks(t, "--agent-socket", sock, "--dev", "siw0", "--min-age", "5s")
	if agentRep.Source != "agent" {
		t.Fatalf("qp-leaks asked the agent, source %q", agentRep.Source)
	}
	checkStalled := func(who string, rep agentapi.CheckReport, draining bool) {
		t.Helper()
		got := findingQPNs(rep, leakwatch.RuleSRQDrainStalled)
		if !stalls {
			check(t, rep, nil)
			return
		}
		if !slices.Equal(got, targetSRQ) {
			t.Errorf("%s: srq-drain-stalled for QPs %v, want the target's SRQ QPs %v (all findings %v)", who, got, targetSRQ, leaks(rep))
		}
		// While they wait, the same kernel QPs sit in Error on siw's SRQ
		// without LAST_WQE_REACHED, as a user QP would.
		var lastWQE []uint32
		if draining {
			lastWQE = targetSRQ
		}
		if got := findingQPNs(rep, leakwatch.RuleLastWQENotEmitted); !slices.Equal(got, lastWQE) {
			t.Errorf("%s: last-wqe-not-emitted for QPs %v, want %v", who, got, lastWQE)
		}
		for _, f := range rep.Findings {
			// The target's QPs serve the host, at siw0's own address:
			// a scan of the rdma_cm IDs (the CLI's), or a dump of them as
			// the QPs connected (the agent's), named it, and it stays.
			if f.Peer != vmtest.SIWAddr {
				t.Errorf("%s: %s qpn %d: peer %q, want %s", who, f.Rule, f.QPN, f.Peer, vmtest.SIWAddr)
			}
			if f.Rule == leakwatch.RuleLastWQENotEmitted {
				if f.ULP != "nvmet_rdma" || !strings.Contains(f.Hint, "kernel QP of nvmet_rdma") {
					t.Errorf("%s: last-wqe-not-emitted qpn %d: ulp %q, hint %q", who, f.QPN, f.ULP, f.Hint)
				}
				continue
			}
			if f.Rule != leakwatch.RuleSRQDrainStalled {
				t.Errorf("%s: unexpected finding %s qpn %d ulp %q", who, f.Rule, f.QPN, f.ULP)
				continue
			}
			wantSev := leakwatch.SeverityError
			if draining {
				wantSev = leakwatch.SeverityCritical
			}
			// The agent saw the QPs created; the CLI watch began after.
			if strings.HasPrefix(who, "agent") && !slices.ContainsFunc(f.Stack, func(frame string) bool { return strings.HasSuffix(frame, " [nvmet_rdma]") }) {
				t.Errorf("%s: finding qpn %d: creation stack %q has no nvmet_rdma frame", who, f.QPN, f.Stack)
			}
			if f.ULP != "nvmet_rdma" || f.KernName != "rdma_cm" || f.Draining != draining || f.Severity != wantSev ||
				!strings.Contains(f.Hint, "nvmet_rdma") || !strings.Contains(f.Hint, "use_srq=0") {
				t.Errorf("%s: finding qpn %d: ulp %q kern %q draining %v severity %s, hint %q", who, f.QPN, f.ULP, f.KernName, f.Draining, f.Severity, f.Hint)
			}
			t.Logf("%s: %s qpn %d %s drain %.3fs draining=%v ulp %s", who, f.Rule, f.QPN, f.Severity, f.DrainSeconds, f.Draining, f.ULP)
		}
	}
	if stalls && waited > 50*time.Second {
		t.Fatalf("the watch ended %s after the disconnect: too late to see the drains wait", waited)
	}
	checkStalled("CLI watch", watch, true)
	checkStalled("agent while waiting", agentRep, true)

	port := n.RemovePort(t) // returns once the target's queues are freed
	removed := time.Since(disconnected)
	drains := trace.wait(qpnsOf(qps), 10*time.Second)
	t.Logf("siw0 use_srq=1 on %s: port removal %s (%s after the disconnect), ib_drain_qp by QP (s): %v",
		vmtest.Kernel(), port.Round(time.Millisecond), removed.Round(time.Millisecond), drains)
	for _, qpn := range targetSRQ {
		d := drains[qpn]
		if stalls && (d < 55 || d > 70) {
			t.Errorf("target SRQ QP %d: ib_drain_qp took %.3fs, want about 60 s", qpn, d)
		}
		if !stalls && d > 5 {
			t.Errorf("target SRQ QP %d: ib_drain_qp took %.3fs on a kernel without the SRQ wait", qpn, d)
		}
	}
	if !stalls && removed > 20*time.Second {
		t.Errorf("teardown took %s on a kernel without the SRQ wait", removed)
	}
	after := agentUntil(t, sock, "siw0", 5*time.Second, func(rep agentapi.CheckReport) bool {
		if !stalls {
			return true
		}
		// The last destroy can reach the agent just after the port's
		// removal returns: wait for all three to be history.
		for _, f := range rep.Findings {
			if f.Rule == leakwatch.RuleSRQDrainStalled && f.State != "destroyed" {
				return false
			}
		}
		return slices.Equal(findingQPNs(rep, leakwatch.RuleSRQDrainStalled), targetSRQ)
	})
	checkStalled("agent history", after, false)
	for _, f := range after.Findings {
		if f.Rule == leakwatch.RuleSRQDrainStalled && (f.DrainSeconds < 55 || f.DrainSeconds > 70 || f.State != "destroyed") {
			t.Errorf("agent history: qpn %d drain %.3fs state %s, want about 60 s, destroyed", f.QPN, f.DrainSeconds, f.State)
		}
	}
}
