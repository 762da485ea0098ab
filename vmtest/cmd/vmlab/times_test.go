package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleLog = `=== RUN   TestLabMRLeak
time=2026-12-07T20:43:52.953Z level=INFO msg="creation site uprobes attached"
--- PASS: TestLabMRLeak (32.05s)
=== RUN   TestLabQPLeaks
=== RUN   TestLabQPLeaks/rxe0
    --- PASS: TestLabQPLeaks/rxe0 (9.00s)
--- FAIL: TestLabQPLeaks (12.50s)
--- SKIP: TestLabNothing (0.00s)
FAIL
FAIL	./agent	45s
labtime	./agent	45s	37% busy
=== RUN   TestLabStacksBounded
--- PASS: TestLabStacksBounded (145.24s)
ok  	./bpf	146s
labtime	./bpf	146s	81% busy
`

func TestParseLabLog(t *testing.T) {
	pkgs, err := parseLabLog(strings.NewReader(sampleLog))
	if err != nil {
		t.Fatal(err)
	}
	a, b := pkgs["./agent"], pkgs["./bpf"]
	if len(pkgs) != 2 || a == nil || b == nil {
		t.Fatalf("packages %v, want ./agent and ./bpf", pkgs)
	}
	if a.secs != 45 || a.busy != 37 || len(a.tests) != 3 || a.tests["TestLabMRLeak"] != 32.05 || a.tests["TestLabQPLeaks"] != 12.5 {
		t.Errorf("./agent: %+v; want 45 s, 37%% busy, its three top-level tests (no subtest)", a)
	}
	if b.secs != 146 || b.busy != 81 || len(b.tests) != 1 || b.tests["TestLabStacksBounded"] != 145.24 {
		t.Errorf("./bpf: %+v", b)
	}
}

func TestTimesTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("6.12.log", sampleLog)
	// 7.x's packages in two guests.
	i := strings.Index(sampleLog, "=== RUN   TestLabStacksBounded")
	write("7.x-agent.log", sampleLog[:i])
	write("7.x-rest.log", strings.ReplaceAll(sampleLog[i:], "146s", "200s"))
	write("6.1-x.log", "labtime\t./other\t1s\t1% busy\n") // not 6.12's
	// 6.12's heavy tests in a guest of their own: ./agent in two guests.
	write("6.12-heavy.log", "--- PASS: TestLabChurn (20.00s)\nlabtime\t./agent\t15s\t77% busy\n")
	write("times", "6.12\tlab\t2\t0\t900\t30\t900\t1\t1\n7.x\tlab\t1\t12\t800\t40\t400\t1\t1\n")
	var out strings.Builder
	if err := times(&out, dir, []string{"6.12", "7.x"}, 2); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"6.12 lab  2        0         900     30      900         50%", // 900 s of CPU over 900 s on 2 threads
		"7.x lab   1        12        800     40      400         50%",
		"./agent  60s, 47% busy   45s, 37% busy",
		"./bpf    146s, 81% busy  200s, 81% busy",
		"all      206s            245s",
		"./bpf TestLabStacksBounded  145s  145s  290s",
		"The 2 slowest tests",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestLabNothing") || strings.Contains(got, "./other") {
		t.Errorf("table lists more than the 2 slowest tests, or 6.1's guest as 6.12's:\n%s", got)
	}
}

func TestReadTimesBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "times")
	if err := os.WriteFile(path, []byte("6.12\tlab\t2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readTimes(path); err == nil || !strings.Contains(err.Error(), "3 fields, want 9") {
		t.Errorf("readTimes of a short line: %v, want an error naming its fields", err)
	}
	if runs, err := readTimes(filepath.Join(t.TempDir(), "none")); err != nil || runs != nil {
		t.Errorf("readTimes of no file: %v, %v; want none", runs, err)
	}
}

func TestParseSystemLog(t *testing.T) {
	log := "=== RUN   TestSystemDeb\n--- PASS: TestSystemDeb (40.00s)\nok  \t./packaging TestSystemDeb\t41s\n" +
		"reboot\t./reset TestSystemReset\t20s (boot 1)\nok  \t./reset TestSystemReset\t30s\n"
	pkgs, err := parseLabLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	p, r := pkgs["./packaging"], pkgs["./reset"]
	if p == nil || r == nil || p.secs != 41 || p.busy != -1 || p.tests["TestSystemDeb"] != 41 || r.secs != 50 || r.tests["TestSystemReset"] != 50 {
		t.Errorf("packages %+v %+v: want ./packaging 41 s (its test's line, not go test's), ./reset 50 s over a reboot", p, r)
	}
}
