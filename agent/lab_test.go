package agent_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agent"
	"github.com/rdmatool/rdmatool/vmtest"
)

// Lab tests of `rdmatool qp-leaks`: real workloads leak (or do not) while
// the command watches, and the findings must name exactly those QPs.

// qpLeaks starts `rdmatool qp-leaks -j` and returns once it is watching
// (after its first scan and, with probes, after they attached).
func qpLeaks(t *testing.T, args ...string) func() agent.CheckReport {
	t.Helper()
	cmd := exec.Command(vmtest.Bin(t, "rdmatool"), append([]string{"qp-leaks", "-j", "-v"}, args...)...)
	var out strings.Builder
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watching := make(chan struct{})
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), `msg=watching`) {
				close(watching)
			}
		}
	}()
	select {
	case <-watching:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("qp-leaks did not start watching: %s", logs.String())
	}
	return func() agent.CheckReport {
		t.Helper()
		err := cmd.Wait()
		var rep agent.CheckReport
		if jerr := json.Unmarshal([]byte(out.String()), &rep); jerr != nil {
			t.Fatalf("qp-leaks: %v; output %q; log %s", err, out.String(), logs.String())
		}
		code := cmd.ProcessState.ExitCode()
		if want := map[bool]int{true: 1, false: 0}[len(rep.Findings) > 0]; code != want {
			t.Errorf("exit status %d with %d findings, want %d", code, len(rep.Findings), want)
		}
		return rep
	}
}

type leak struct {
	Rule, Device string
	QPN          uint32
	PID          uint32
}

func leaks(rep agent.CheckReport) []leak {
	out := []leak{}
	for _, f := range rep.Findings {
		out = append(out, leak{f.Rule, f.Device, f.QPN, f.PID})
	}
	slices.SortFunc(out, func(a, b leak) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

func expect(rule string, w *vmtest.Workload, dev string) []leak {
	var out []leak
	for _, q := range w.QPs() {
		out = append(out, leak{rule, dev, q.QPN, uint32(w.PID())})
	}
	return out
}

func check(t *testing.T, rep agent.CheckReport, want []leak) {
	t.Helper()
	slices.SortFunc(want, func(a, b leak) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if want == nil {
		want = []leak{}
	}
	if got := leaks(rep); !slices.Equal(got, want) {
		t.Errorf("findings:\n got  %v\n want %v\n(skipped %v, probes %s %s)", got, want, rep.SkippedRules, rep.Probes, rep.ProbesError)
	}
}

var watchArgs = []string{"--watch", "9s", "--min-age", "4s", "--interval", "1s"}

func TestLabLeftInErr(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	for _, probes := range []bool{true, false} {
		t.Run(fmt.Sprintf("probes=%v", probes), func(t *testing.T) {
			args := watchArgs
			if !probes {
				args = append(slices.Clone(args), "--no-probes")
			}
			done := qpLeaks(t, append(args, "--dev", "rxe0")...)
			w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "2", "--to", "ERR", "--hold", "stdin")
			w.WaitFor("ready", 30*time.Second)
			healthy := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "2", "--to", "RTS", "--hold", "stdin")
			healthy.WaitFor("ready", 30*time.Second)
			rep := done()
			check(t, rep, expect("stale-error-qp", w, "rxe0"))
			w.Release(30 * time.Second)
			healthy.Release(30 * time.Second)
			skipped := len(rep.SkippedRules) > 1 // qp-exhaustion is always skipped (max_qp unknown)
			if skipped == probes {
				t.Errorf("probes %v but skipped rules %v", probes, rep.SkippedRules)
			}
		})
	}
}

func TestLabNeverConnected(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	done := qpLeaks(t, watchArgs...)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--qps", "3", "--to", "INIT", "--hold", "stdin")
	w.WaitFor("ready", 30*time.Second)
	check(t, done(), expect("never-connected-qp", w, "rxe0"))
	w.Release(30 * time.Second)
}

func TestLabHealthyChurn(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	done := qpLeaks(t, watchArgs...)
	churn := vmtest.StartWorkload(t, "--dev", "rxe0", "--churn", "3000")
	spec := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "2", "--srq", "--to", "RTS", "--teardown", "spec", "--last-wqe-timeout-ms", "500")
	siw := vmtest.StartWorkload(t, "--dev", "siw0", "--pairs", "--qps", "1", "--srq", "--connect", "cm", "--addr", vmtest.SIWAddr, "--to", "RTS", "--teardown", "marker")
	churn.Wait(120 * time.Second)
	spec.Wait(60 * time.Second)
	siw.Wait(60 * time.Second)
	check(t, done(), nil)
}

func TestLabSRQDestroyedFromRTS(t *testing.T) {
	vmtest.Require(t, vmtest.RXE)
	done := qpLeaks(t, watchArgs...)
	w := vmtest.StartWorkload(t, "--dev", "rxe0", "--pairs", "--qps", "1", "--srq", "--to", "RTS", "--teardown", "direct")
	w.Wait(60 * time.Second)
	rep := done()
	if rep.Probes != "on" {
		t.Fatalf("probes did not load in the lab: %s", rep.ProbesError)
	}
	check(t, rep, expect("srq-destroy-without-last-wqe", w, "rxe0"))
}

func TestLabSRQQPInErr(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	for _, dev := range []vmtest.Device{vmtest.RXE, vmtest.SIW} {
		t.Run(string(dev), func(t *testing.T) {
			done := qpLeaks(t, append(slices.Clone(watchArgs), "--dev", string(dev))...)
			w := vmtest.StartWorkload(t, "--dev", string(dev), "--qps", "2", "--srq", "--to", "ERR", "--hold", "stdin")
			w.WaitFor("ready", 30*time.Second)
			rep := done()
			w.Release(30 * time.Second)
			if rep.Probes != "on" {
				t.Fatalf("probes did not load in the lab: %s", rep.ProbesError)
			}
			rule := "last-wqe-not-emitted"
			if vmtest.EmitsLastWQE(t, dev) {
				rule = "last-wqe-unhandled"
			}
			check(t, rep, expect(rule, w, string(dev)))
		})
	}
}
