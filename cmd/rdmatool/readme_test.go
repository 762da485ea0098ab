package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeRunners names, for each command of README.md's shell blocks that
// vmtest/demo.sh does not run as written, the lab test that runs it. A
// test runs a command when its file holds each word of the command (but
// rdmatool and the lab's device names, which the tests take from vmtest)
// as a Go string, or, with unit set, when the command is the agent unit's
// ExecStart, which the test runs under the unit's hardening.
var readmeRunners = []readmeRunner{
	{"rdmatool agent --socket /run/rdmatool/agent.sock", "packaging/harden_lab_test.go", "TestLabHardenedAgent", true},
	{"rdmatool qp-leaks", "agent/lab_test.go", "TestLabAgent", false},
	{"rdmatool trace -j --kprobes --dev siw0", "agent/nvmeof_lab_test.go", "TestLabNVMeoFDrainStalled", false},
	{"rdmatool rename rxe0 --policy guid --dry-run -j", "rename/lab_test.go", "TestLabGUIDNamesMatchRDMARename", false},
	{"rdmatool reset rxe0", "reset/lab_test.go", "TestLabResetChangesNothing", false},
	{"rdmatool reset rxe0 --yes --grace 5s --timeout 20s -j", "reset/lab_test.go", "TestLabResetHolder", false},
}

type readmeRunner struct {
	command string
	file    string // from the module's root
	test    string
	unit    bool
}

// TestREADMECommands: every command in README.md's shell blocks (and each
// "$ " line of its console blocks) is run by `make demo` (vmtest/demo.sh),
// by the lab test readmeRunners names, or is a target of the Makefile.
func TestREADMECommands(t *testing.T) {
	root := filepath.Join("..", "..")
	commands := readmeCommands(t, filepath.Join(root, "README.md"))
	if len(commands) == 0 {
		t.Fatal("README.md has no commands in shell blocks")
	}
	demo := demoCommands(t, filepath.Join(root, "vmtest", "demo.sh"))
	makefile := readFile(t, filepath.Join(root, "Makefile"))
	used := map[string]bool{}
	for _, c := range commands {
		switch {
		case strings.HasPrefix(c, "make "):
			target := strings.Fields(c)[1]
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).MatchString(makefile) {
				t.Errorf("README runs %q: the Makefile has no target %s", c, target)
			}
		case slices.Contains(demo, c):
		default:
			i := slices.IndexFunc(readmeRunners, func(r readmeRunner) bool { return r.command == c })
			if i < 0 {
				t.Errorf("README runs %q, which neither vmtest/demo.sh runs nor readmeRunners names a lab test for", c)
				continue
			}
			used[c] = true
			checkRunner(t, root, readmeRunners[i])
		}
	}
	for _, r := range readmeRunners {
		if !used[r.command] {
			t.Errorf("readmeRunners names %q, which README.md does not run (or the demo runs as written)", r.command)
		}
	}
}

// checkRunner checks that r.test, in r.file, runs r.command.
func checkRunner(t *testing.T, root string, r readmeRunner) {
	t.Helper()
	command, file, test := r.command, r.file, r.test
	src := readFile(t, filepath.Join(root, file))
	if !strings.Contains(src, "func "+test+"(t *testing.T)") {
		t.Errorf("README runs %q: %s has no %s", command, file, test)
		return
	}
	if r.unit {
		service := readFile(t, filepath.Join(root, "packaging", "systemd", "rdmatool-agent.service"))
		exec, _, _ := strings.Cut(strings.SplitN(service, "\nExecStart=", 2)[1], "\n")
		if got := strings.TrimPrefix(exec, "/usr/sbin/"); got != command || !strings.Contains(src, `"ExecStart"`) {
			t.Errorf("README runs %q as the unit's ExecStart, which is %q (%s runs it)", command, exec, test)
		}
		return
	}
	device := regexp.MustCompile(`^(rxe|siw)[0-9]+$`)
	for _, word := range strings.Fields(command)[1:] {
		if !device.MatchString(word) && !strings.Contains(src, `"`+word+`"`) {
			t.Errorf("README runs %q: %s (%s) does not pass %q", command, file, test, word)
		}
	}
}

// readmeCommands returns the command lines of path's ```sh blocks,
// without their comments, and the "$ " lines of its ```console blocks.
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	var commands []string
	block := ""
	sc := bufio.NewScanner(strings.NewReader(readFile(t, path)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if block == "" {
				block = strings.TrimPrefix(line, "```")
				if block == "" {
					block = "text"
				}
			} else {
				block = ""
			}
			continue
		}
		switch block {
		case "sh":
			line, _, _ = strings.Cut(line, " #")
		case "console":
			var ok bool
			if line, ok = strings.CutPrefix(line, "$ "); !ok {
				continue
			}
		default:
			continue
		}
		if c := strings.Join(strings.Fields(line), " "); c != "" && !strings.HasPrefix(c, "#") {
			commands = append(commands, c)
		}
	}
	return commands
}

// demoCommands returns the rdmatool commands vmtest/demo.sh runs, with its
// variables put in and "rdmatool" for the binary's path: the words from
// the binary up to a redirection, a pipe or the end of the command.
func demoCommands(t *testing.T, path string) []string {
	t.Helper()
	script := readFile(t, path)
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z]+)=(\S+)$`).FindAllStringSubmatch(script, -1) {
		vars[m[1]] = m[2]
	}
	script = regexp.MustCompile(`\$\{?([a-z]+)\}?`).ReplaceAllStringFunc(script, func(v string) string {
		if val, ok := vars[strings.Trim(v, "${}")]; ok {
			return val
		}
		return v
	})
	bin := vars["bin"] + "/rdmatool"
	var commands []string
	for _, line := range strings.Split(script, "\n") {
		words := strings.Fields(line)
		for i, w := range words {
			if !strings.HasSuffix(w, bin) {
				continue
			}
			c := []string{"rdmatool"}
			for _, a := range words[i+1:] {
				if strings.ContainsAny(a[:1], "<>&|;)") || strings.HasPrefix(a, "2>") {
					break
				}
				if before, _, closes := strings.Cut(a, ")"); closes { // $(rdmatool version)
					c = append(c, before)
					break
				}
				c = append(c, a)
			}
			commands = append(commands, strings.Join(c, " "))
		}
	}
	if len(commands) == 0 {
		t.Fatalf("%s runs no %s", path, bin)
	}
	return commands
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
