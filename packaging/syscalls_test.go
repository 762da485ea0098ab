package packaging

import (
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the generated files: "+syscallsFile+" and "+prometheusRuleFile)

// syscallsFile holds the system calls the unit's SystemCallFilter allows on
// x86_64, by number: systemd-analyze expands the groups, the kernel's uapi
// header (libc6-dev) gives the numbers. TestLabHardenedAgent loads it as a
// seccomp filter in the lab guest, which has no systemd.
const syscallsFile = "systemd/testdata/syscalls-x86_64.txt"

// unitKey returns the value of the unit's first Key= line.
func unitKey(t *testing.T, key string) string {
	t.Helper()
	return unitKeys(t, key)[0]
}

// unitKeys returns the values of the unit's Key= lines, in order.
func unitKeys(t *testing.T, key string) []string {
	t.Helper()
	b, err := os.ReadFile("systemd/rdmatool-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			values = append(values, v)
		}
	}
	if len(values) == 0 {
		t.Fatalf("the unit has no %s=", key)
	}
	return values
}

// unitSyscalls expands the unit's SystemCallFilter lines as systemd does:
// the allow lists' calls less those of the lines that start with ~.
func unitSyscalls(t *testing.T) []string {
	t.Helper()
	var allow, deny []string
	for _, v := range unitKeys(t, "SystemCallFilter") {
		if d, ok := strings.CutPrefix(v, "~"); ok {
			deny = append(deny, strings.Fields(d)...)
		} else {
			allow = append(allow, strings.Fields(v)...)
		}
	}
	denied := expandFilter(t, deny)
	return slices.DeleteFunc(expandFilter(t, allow), func(c string) bool { return slices.Contains(denied, c) })
}

// expandFilter expands SystemCallFilter's names and @groups with
// systemd-analyze syscall-filter.
func expandFilter(t *testing.T, names []string) []string {
	t.Helper()
	var calls []string
	seen := map[string]bool{}
	var expand func(string)
	expand = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		if !strings.HasPrefix(name, "@") {
			calls = append(calls, name)
			return
		}
		out, err := exec.Command("systemd-analyze", "syscall-filter", name).Output()
		if err != nil {
			t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
		}
		for _, line := range strings.Split(string(out), "\n")[1:] {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			expand(line)
		}
	}
	for _, n := range names {
		expand(n)
	}
	return calls
}

// x86Numbers reads __NR_name numbers from the x86_64 uapi header.
func x86Numbers(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
	if err != nil {
		t.Skipf("no x86_64 syscall table (libc6-dev): %v", err)
	}
	nr := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define __NR_(\w+) (\d+)$`).FindAllStringSubmatch(string(b), -1) {
		n, _ := strconv.Atoi(m[2])
		nr[m[1]] = n
	}
	return nr
}

func TestUnitSyscallFilterFile(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze")
	}
	nr := x86Numbers(t)
	var lines []string
	for _, name := range unitSyscalls(t) {
		if n, ok := nr[name]; ok { // systemd skips names this architecture lacks too
			lines = append(lines, strconv.Itoa(n)+" "+name)
		}
	}
	slices.SortFunc(lines, func(a, b string) int {
		x, _ := strconv.Atoi(strings.Fields(a)[0])
		y, _ := strconv.Atoi(strings.Fields(b)[0])
		return x - y
	})
	lines = slices.Compact(lines)
	want := "# x86_64 system calls the unit's SystemCallFilter allows (go test ./packaging -update).\n" +
		strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(syscallsFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(syscallsFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("%s is out of date (go test ./packaging -update) (-want +got):\n%s", syscallsFile, diff)
	}
	for _, name := range []string{"bpf", "perf_event_open", "execve", "socket", "read"} {
		if !strings.Contains(want, " "+name+"\n") {
			t.Errorf("the filter does not allow %s", name)
		}
	}
	// CAP_SYS_PTRACE is there to read /proc/PID/fd, not to trace.
	for _, name := range []string{"ptrace", "process_vm_readv", "process_vm_writev"} {
		if strings.Contains(want, " "+name+"\n") {
			t.Errorf("the filter allows %s", name)
		}
	}
}
