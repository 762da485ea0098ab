package symbolize

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The helpers here build testdata/qpwork.c with gcc, run it, and read what
// objdump and readelf (binutils) say of it, for the tests to hold sites to.

// needTools skips t when a tool is missing.
func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// buildQPWork compiles testdata/qpwork.c into dir/name with flags added.
func buildQPWork(t testing.TB, dir, name string, flags ...string) string {
	t.Helper()
	needTools(t, "gcc", "objdump", "readelf")
	bin := filepath.Join(dir, name)
	args := append([]string{"-O2", "-Wl,--build-id", "-o", bin, "testdata/qpwork.c"}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// stripped writes a copy of bin with every symbol table removed but
// .dynsym (strip -s), which keeps the build ID.
func stripped(t testing.TB, bin, name string) string {
	t.Helper()
	out := filepath.Join(filepath.Dir(bin), name)
	if b, err := exec.Command("strip", "-s", "-o", out, bin).CombinedOutput(); err != nil {
		t.Fatalf("strip %s: %v\n%s", bin, err, b)
	}
	return out
}

// qpwork is a running qpwork and what it printed.
type qpwork struct {
	pid                uint32
	ret, retEx, leakQP uint64 // create_qp's return addresses, leak_qps
}

// startQPWork runs argv (qpwork, or a command that execs it) until the test
// ends, and reads its line. ok is false when it exited without printing it.
func startQPWork(t testing.TB, argv ...string) (qpwork, bool) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // qpwork exits
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Logf("%s printed nothing (%v): %s", argv[0], err, stderr.String())
		return qpwork{}, false
	}
	var q qpwork
	if _, err := fmt.Sscanf(line, "%d 0x%x 0x%x 0x%x", &q.pid, &q.ret, &q.retEx, &q.leakQP); err != nil {
		t.Fatalf("qpwork printed %q: %v", line, err)
	}
	return q, true
}

// objFunc is a function as objdump -d -F shows it: its address, file
// offset and instructions.
type objFunc struct {
	name          string
	addr, fileOff uint64
	insns         []objInsn
}

type objInsn struct {
	addr uint64
	text string // "call   11e0 <create_qp> ..."
}

var (
	objFuncRE = regexp.MustCompile(`^([0-9a-f]+) <([^>]+)> \(File Offset: 0x([0-9a-f]+)\):$`)
	objInsnRE = regexp.MustCompile(`^ +([0-9a-f]+):\t(.*)$`)
)

// objdump returns bin's functions by name.
func objdump(t testing.TB, bin string) map[string]objFunc {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "-F", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", bin, err)
	}
	funcs := map[string]objFunc{}
	var cur *objFunc
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		if m := objFuncRE.FindStringSubmatch(line); m != nil {
			if cur != nil {
				funcs[cur.name] = *cur
			}
			cur = &objFunc{name: m[2], addr: hexU(t, m[1]), fileOff: hexU(t, m[3])}
			continue
		}
		if m := objInsnRE.FindStringSubmatch(line); m != nil && cur != nil {
			cur.insns = append(cur.insns, objInsn{addr: hexU(t, m[1]), text: m[2]})
		}
	}
	if cur != nil {
		funcs[cur.name] = *cur
	}
	return funcs
}

// callBefore returns the instruction of f that ends where ret (a link-time
// address) begins, which must be a call.
func callBefore(t testing.TB, f objFunc, ret uint64) objInsn {
	t.Helper()
	for i := 0; i+1 < len(f.insns); i++ {
		if f.insns[i+1].addr == ret {
			if !strings.HasPrefix(f.insns[i].text, "call") {
				t.Fatalf("%s: the instruction before %#x is %q, not a call", f.name, ret, f.insns[i].text)
			}
			return f.insns[i]
		}
	}
	t.Fatalf("%s: no instruction ends at %#x", f.name, ret)
	return objInsn{}
}

var buildIDRE = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

// readelfBuildID returns the build ID readelf -n prints for bin.
func readelfBuildID(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", bin).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", bin, err)
	}
	m := buildIDRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("readelf -n %s shows no build ID:\n%s", bin, out)
	}
	return string(m[1])
}

func hexU(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fixtureProc writes a /proc root for tests: files by path under it.
func fixtureProc(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
