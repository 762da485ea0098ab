package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmatool/rdmatool/vmtest/internal/lab"
)

func TestParseJobs(t *testing.T) {
	jobs, err := parseJobs(strings.NewReader(`# the lab
/l/6.12-agent.log 6.12 lab VMTEST_EXPECT_GUEST=1 sh vmtest/labtests.sh /l/agent.list

/l/6.1-system.log 6.1 system/1 VMTEST_EXPECT_SYSTEM=1 A=b=c sh vmtest/systemtests.sh /l/system.list -update
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2: %+v", len(jobs), jobs)
	}
	a, s := jobs[0], jobs[1]
	if a.log != "/l/6.12-agent.log" || a.kernel != "6.12" || a.system || a.oneThread || strings.Join(a.env, " ") != "VMTEST_EXPECT_GUEST=1" ||
		strings.Join(a.command, " ") != "sh vmtest/labtests.sh /l/agent.list" {
		t.Errorf("first job %+v", a)
	}
	if !s.system || !s.oneThread || strings.Join(s.env, " ") != "VMTEST_EXPECT_SYSTEM=1 A=b=c" || s.command[len(s.command)-1] != "-update" {
		t.Errorf("second job %+v", s)
	}
	for _, bad := range []string{
		"log 6.12 lab",                  // no command
		"log 6.12 lab A=1",              // only a variable
		"log 6.12 guest sh x",           // not lab or system
		"log 6.12 lab/2 sh x",           // one thread is /1; two are the default
		"log 5.4 lab sh x",              // not a kernel of the matrix
		"log 6.12 lab sh x\nlog 6.12 x", // a short line after a good one
	} {
		if _, err := parseJobs(strings.NewReader(bad)); err == nil {
			t.Errorf("parseJobs(%q): no error", bad)
		}
	}
}

// TestRunJobs: guests run in the jobs' order, no more at once than the
// budget holds; each one's output lands in its log, its status beside it,
// its ok/FAIL lines on the terminal under its name; a failed guest is
// returned.
func TestRunJobs(t *testing.T) {
	bin := t.TempDir()
	trace := filepath.Join(bin, "trace")
	// The fake guest: the command is the run share's cmd file; "fail"
	// in it exits 1. It logs its start and end to trace.
	fake := `#!/bin/sh
while [ $# -gt 0 ]; do
  case "$2" in local,path=*mount_tag=vmtest_run,*) run=${2#local,path=}; run=${run%%,*} ;; esac
  shift
done
status=0; grep -q fail "$run/cmd" && status=1
echo start >>` + trace + `
echo vmtest-command-start
echo "=== RUN   TestX"
if [ $status = 0 ]; then printf 'ok  \t./pkg\t1s\n'; else printf -- '--- FAIL: TestX (0.10s)\nFAIL\t./pkg\t1s\n'; fi
sleep 0.3
echo end >>` + trace + `
echo "vmtest-exit-status: $status"
`
	if err := os.WriteFile(filepath.Join(bin, "qemu-system-x86_64"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("VMTEST_ACCEL", "tcg")

	dir, runs := t.TempDir(), t.TempDir()
	var jobs []job
	for _, name := range []string{"a", "b", "fail", "d"} {
		jobs = append(jobs, job{log: filepath.Join(dir, name+".log"), kernel: "6.12", command: []string{"sh", name}})
	}
	start := func(j job) (lab.RunSpec, error) {
		return lab.RunSpec{Image: lab.Image{Kernel: j.kernel}, Command: j.command, Dir: "/", RunDir: runs, OneThread: true, HostCPUs: 2}, nil
	}
	var term strings.Builder
	times := filepath.Join(dir, "times")
	failed := runJobs(t.Context(), jobs, start, 2, times, &term)
	if len(failed) != 1 || failed[0].log != jobs[2].log {
		t.Errorf("failed %+v, want the third job", failed)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	running, most := 0, 0
	for _, ev := range strings.Fields(string(b)) {
		if ev == "start" {
			running++
		} else {
			running--
		}
		most = max(most, running)
	}
	if most != 2 {
		t.Errorf("guests: %q: at most %d at once, want 2 (one-thread guests, a budget of 2)", b, most)
	}
	for i, want := range []string{"0", "0", "1", "0"} {
		got, err := os.ReadFile(jobs[i].log + ".status")
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s.status: %q (%v), want %s", jobs[i].log, got, err, want)
		}
		log, err := os.ReadFile(jobs[i].log)
		if err != nil || !strings.Contains(string(log), "=== RUN   TestX") || !strings.Contains(string(log), "vmlab: 6.12 lab guest: ") {
			t.Errorf("%s: %q (%v), want the guest's output and what it cost", jobs[i].log, log, err)
		}
	}
	out := term.String()
	for _, want := range []string{"a: ok  \t./pkg\t1s\n", "fail: --- FAIL: TestX (0.10s)\n", "fail: FAIL\t./pkg\t1s\n", "d: vmlab: 6.12 lab guest: "} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "=== RUN") {
		t.Errorf("terminal shows more than progress lines:\n%s", out)
	}
	runsFile, err := readTimes(times)
	if err != nil || len(runsFile) != 4 || runsFile[0].threads != 1 {
		t.Errorf("times %+v (%v), want 4 runs of one thread", runsFile, err)
	}
}
