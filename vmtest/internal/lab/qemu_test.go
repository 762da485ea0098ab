package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMarkerFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		writes     []string // the guest's serial output, as the pipe delivers it
		want       string   // what the user sees
		wantStatus int
		wantFound  bool
	}{
		{
			name:   "marker line removed",
			writes: []string{"=== RUN   TestX\n--- PASS: TestX\nPASS\n", "vmtest-exit-status: 0\n"},
			want:   "=== RUN   TestX\n--- PASS: TestX\nPASS\n", wantStatus: 0, wantFound: true,
		},
		{
			name:   "non-zero status",
			writes: []string{"FAIL\nvmtest-exit-status: 1\n"},
			want:   "FAIL\n", wantStatus: 1, wantFound: true,
		},
		{
			name:   "marker glued to output without a newline",
			writes: []string{"abcvmtest-exit-status: 3\n"},
			want:   "abc\n", wantStatus: 3, wantFound: true,
		},
		{
			name:   "marker glued and the stream ends without a newline",
			writes: []string{"line\nabcvmtest-exit-status: 3"},
			want:   "line\nabc\n", wantStatus: 3, wantFound: true,
		},
		{
			name:   "marker split across writes",
			writes: []string{"out", "put\nvmtest-ex", "it-status: 1", "2\n"},
			want:   "output\n", wantStatus: 12, wantFound: true,
		},
		{
			name:   "one byte at a time",
			writes: strings.Split("ok\nvmtest-exit-status: 125\n", ""),
			want:   "ok\n", wantStatus: 125, wantFound: true,
		},
		{
			name:   "serial line endings",
			writes: []string{"line\r\nvmtest-exit-status: 4\r\n"},
			want:   "line\r\n", wantStatus: 4, wantFound: true,
		},
		{
			name:   "text that merely mentions the marker",
			writes: []string{"grep 'vmtest-exit-status: ' console.log\n", "vmtest-exit-status: none\n"},
			want:   "grep 'vmtest-exit-status: ' console.log\nvmtest-exit-status: none\n",
		},
		{
			name:   "marker followed by more text",
			writes: []string{"vmtest-exit-status: 3 and more\n"},
			want:   "vmtest-exit-status: 3 and more\n",
		},
		{
			name:   "output after the marker is kept",
			writes: []string{"vmtest-exit-status: 0\n[  1.0] reboot: Power down\n"},
			want:   "[  1.0] reboot: Power down\n", wantStatus: 0, wantFound: true,
		},
		{
			name:   "last line without a newline",
			writes: []string{"a\n", "partial"},
			want:   "a\npartial",
		},
		{name: "no output", writes: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			m := &markerFilter{w: &out}
			for _, w := range tt.writes {
				n, err := m.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v, want %d, nil", w, n, err, len(w))
				}
			}
			m.flush()
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if m.status != tt.wantStatus || m.found != tt.wantFound {
				t.Errorf("status = %d, found %v, want %d, %v", m.status, m.found, tt.wantStatus, tt.wantFound)
			}
		})
	}
}

func TestMarkerFilterWithoutWriter(t *testing.T) {
	t.Parallel()
	m := &markerFilter{} // Run with a nil Stdout still gets the status
	if _, err := m.Write([]byte("output\nabcvmtest-exit-status: 7\n")); err != nil {
		t.Fatal(err)
	}
	m.flush()
	if m.status != 7 || !m.found {
		t.Errorf("status = %d, found %v, want 7, true", m.status, m.found)
	}
}

func TestDedupShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dirs []string
		want []string
	}{
		{name: "none", dirs: nil, want: nil},
		{name: "child after parent", dirs: []string{"/work/main", "/work/main/vmtest"}, want: []string{"/work/main"}},
		{name: "child before parent", dirs: []string{"/work/main/vmtest", "/work/main"}, want: []string{"/work/main"}},
		{name: "sibling with a common prefix", dirs: []string{"/work/main", "/work/main2"}, want: []string{"/work/main", "/work/main2"}},
		{name: "duplicates", dirs: []string{"/work/main", "/work/main/", "/work/./main"}, want: []string{"/work/main"}},
		{name: "unclean child", dirs: []string{"/root/go/pkg/mod/../mod/x", "/root/go/pkg/mod"}, want: []string{"/root/go/pkg/mod"}},
		{
			name: "repository, module cache and build cache",
			dirs: []string{"/work/main", "/root/go/pkg/mod", "/root/.cache/go-build", "/work/main/.lab/runs"},
			want: []string{"/work/main", "/root/go/pkg/mod", "/root/.cache/go-build"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, dedupShares(tt.dirs)); diff != "" {
				t.Errorf("dedupShares(%q) (-want +got):\n%s", tt.dirs, diff)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	// Words the guest script writes unquoted stay readable.
	for _, s := range []string{"go", "-test.run=TestLab", "/work/main/rdmanl", "a,b+c@d%e:f_g.h", "GOFLAGS=-mod=mod"} {
		if got := shellQuote(s); got != s {
			t.Errorf("shellQuote(%q) = %q, want it unquoted", s, got)
		}
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	args := []string{
		"", " ", "two words", "it's", "'", "''", `"`, `\`, `a\nb`, "a\nb", "\t",
		"$HOME", "${PATH}", "`id`", "$(id)", "*", "?", "[a]", "~", "!", "#comment", ";", "&&", "|", ">x", "<x",
		"-test.run=^TestQP$", "é", "%s", "-n", "a'b'c",
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	// One printf with every argument: each must come back as one word, unchanged.
	out, err := exec.CommandContext(t.Context(), "sh", "-c", "printf '<%s>' "+strings.Join(quoted, " ")).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	var want strings.Builder
	for _, a := range args {
		want.WriteString("<" + a + ">")
	}
	if diff := cmp.Diff(want.String(), string(out)); diff != "" {
		t.Errorf("arguments after the shell (-want +got):\n%s", diff)
	}
}

func TestReadStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		content *string // nil: no file
		want    int
		wantOK  bool
	}{
		{name: "success", content: ptr("0\n"), want: 0, wantOK: true},
		{name: "failure", content: ptr("1\n"), want: 1, wantOK: true},
		{name: "no newline", content: ptr("125"), want: 125, wantOK: true},
		{name: "spaces", content: ptr("  3 \n"), want: 3, wantOK: true},
		{name: "empty", content: ptr("")},
		{name: "garbage", content: ptr("exit 3\n")},
		{name: "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := readStatus(path)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("readStatus() = %d, %v, want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// fakeQEMU puts a qemu-system-x86_64 on PATH that plays a guest from a
// script of boots: boot N runs the shell text boots[N-1] with $console set
// to the -serial file and $run to the run share. It returns the file that
// counts the boots.
func fakeQEMU(t *testing.T, boots ...string) string {
	t.Helper()
	bin := t.TempDir()
	count := filepath.Join(bin, "boots")
	var sc strings.Builder
	sc.WriteString("#!/bin/sh\n")
	sc.WriteString("while [ $# -gt 0 ]; do\n")
	sc.WriteString("  case \"$2\" in file:*) console=${2#file:} ;; esac\n")
	sc.WriteString("  case \"$2\" in local,path=*mount_tag=vmtest_run,*) run=${2#local,path=}; run=${run%%,*} ;; esac\n")
	sc.WriteString("  shift\ndone\n")
	sc.WriteString("echo x >>" + count + "\nn=$(wc -l <" + count + ")\n")
	sc.WriteString("case $n in\n")
	for i, b := range boots {
		fmt.Fprintf(&sc, "%d) %s ;;\n", i+1, b)
	}
	sc.WriteString("esac\n")
	if err := os.WriteFile(filepath.Join(bin, "qemu-system-x86_64"), []byte(sc.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("VMTEST_ACCEL", "tcg")
	return count
}

func bootsIn(t *testing.T, count string) int {
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "x")
}

const (
	panicBoot = `echo "[    2.2] Kernel panic - not syncing: Fatal exception in interrupt" >"$console"; exit 0`
	goodBoot  = `echo "booted" >"$console"; echo vmtest-command-start; echo "test output"; echo 0 >"$run/exit-status"; echo "vmtest-exit-status: 0"`
	failBoot  = `echo vmtest-command-start; echo "--- FAIL: TestX"; echo "vmtest-exit-status: 1"`
	dieBoot   = `echo vmtest-command-start; echo "half a line"; exit 0`
)

func TestRunBootsAgainAfterAPanicBeforeTheCommand(t *testing.T) {
	count := fakeQEMU(t, panicBoot, goodBoot)
	var out bytes.Buffer
	status, err := Run(t.Context(), RunSpec{Image: Image{Kernel: "7.x"}, Command: []string{"true"}, Dir: "/", Stdout: &out, RunDir: t.TempDir()})
	if err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if n := bootsIn(t, count); n != 2 {
		t.Errorf("booted %d times, want 2", n)
	}
	if got := out.String(); got != "test output\n" {
		t.Errorf("output = %q, want the command's output without markers", got)
	}
}

func TestRunGivesUpAfterRepeatedBootPanics(t *testing.T) {
	count := fakeQEMU(t, panicBoot, panicBoot, panicBoot, goodBoot)
	_, err := Run(t.Context(), RunSpec{Command: []string{"true"}, Dir: "/", RunDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "Kernel panic") {
		t.Errorf("Run error = %v, want one that shows the panic", err)
	}
	if n := bootsIn(t, count); n != bootAttempts {
		t.Errorf("booted %d times, want %d", n, bootAttempts)
	}
}

func TestRunNeverRetriesOnceTheCommandStarted(t *testing.T) {
	for _, tt := range []struct {
		name, boot string
		wantStatus int
		wantErr    bool
	}{
		{"failing command", failBoot, 1, false},
		{"guest died during the command", dieBoot, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			count := fakeQEMU(t, tt.boot, goodBoot)
			status, err := Run(t.Context(), RunSpec{Command: []string{"true"}, Dir: "/", RunDir: t.TempDir()})
			if status != tt.wantStatus || (err != nil) != tt.wantErr {
				t.Errorf("Run = %d, %v; want %d, error %v", status, err, tt.wantStatus, tt.wantErr)
			}
			if n := bootsIn(t, count); n != 1 {
				t.Errorf("booted %d times, want 1", n)
			}
		})
	}
}

// A system guest whose command asks for a reboot boots again, the boot
// count in the run share one higher, until the command reports a status.
func TestRunSystemBootsAgainWhenTheCommandAsks(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("no qemu-img")
	}
	rebootBoot := `echo vmtest-command-start; echo "boot $(cat $run/boot)"; touch "$run/reboot"; exit 0`
	lastBoot := `echo vmtest-command-start; echo "boot $(cat $run/boot)"; echo 0 >"$run/exit-status"; echo "vmtest-exit-status: 0"`
	count := fakeQEMU(t, rebootBoot, rebootBoot, lastBoot)
	root := filepath.Join(t.TempDir(), "root.img")
	if err := os.WriteFile(root, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	status, err := Run(t.Context(), RunSpec{Command: []string{"true"}, Dir: "/", Stdout: &out, RunDir: t.TempDir(),
		System: &System{Root: root}})
	if err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if n := bootsIn(t, count); n != 3 {
		t.Errorf("booted %d times, want 3", n)
	}
	if got, want := out.String(), "boot 1\nboot 2\nboot 3\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestHostThreads(t *testing.T) {
	t.Setenv("VMTEST_ACCEL", "tcg")
	for _, tt := range []struct {
		kernel    string
		icount    int
		oneThread bool
		want      int
	}{
		{"6.12", 0, false, 2}, // multi-threaded TCG: a host thread a vCPU
		{"6.12", 0, true, 1},
		{"7.x", 0, false, 1}, // serialTCG
		{"6.1", 2, false, 1}, // icount
	} {
		accel := accelArgs(tt.icount, tt.kernel, tt.oneThread)
		if got := hostThreads(accel, 2); got != tt.want {
			t.Errorf("%s icount %d oneThread %v: %v, %d host threads; want %d", tt.kernel, tt.icount, tt.oneThread, accel, got, tt.want)
		}
	}
}

// TestTakeCPUs: guests take CPUs of the budget all at once or not at all,
// wait while they are held, and get them when they are released.
func TestTakeCPUs(t *testing.T) {
	dir := t.TempDir()
	take := func(n int, wait time.Duration) (func(), error) {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		return takeCPUs(ctx, dir, n, 2)
	}
	a, err := take(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := take(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := take(1, 500*time.Millisecond); err == nil {
		t.Fatal("a third CPU of a budget of 2 was taken")
	}
	a()
	if _, err := take(2, 500*time.Millisecond); err == nil {
		t.Fatal("2 CPUs taken while another guest holds 1 of 2")
	}
	done := make(chan error, 1)
	go func() {
		release, err := take(2, 10*time.Second)
		if err == nil {
			release()
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	b()
	if err := <-done; err != nil {
		t.Errorf("2 CPUs once both were released: %v", err)
	}
}

func TestRunStats(t *testing.T) {
	fakeQEMU(t, panicBoot, goodBoot)
	var st RunStats
	status, err := Run(t.Context(), RunSpec{Image: Image{Kernel: "6.12"}, Command: []string{"true"}, Dir: "/", RunDir: t.TempDir(), Stats: &st, HostCPUs: 4})
	if err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if st.Boots != 2 || st.Threads != 2 || st.Wall <= 0 || st.Boot <= 0 || st.Boot > st.Wall || st.CPU <= 0 {
		t.Errorf("stats %+v: want 2 boots on 2 threads, a wall time, a boot time within it, a CPU time", st)
	}
}
