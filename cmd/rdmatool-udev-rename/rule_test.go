package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rdmatool/rdmatool/cmd/internal/udevrename"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// packagedRule is the udev rule as installed.
const packagedRule = "../../packaging/udev/70-rdmatool-naming.rules"

// udevRun returns the command of the packaged rule's RUN+= assignment.
func udevRun(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(packagedRule)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if _, v, ok := strings.Cut(line, `RUN+="`); ok {
			cmd, _, ok := strings.Cut(v, `"`)
			if !ok || strings.Contains(cmd, `\`) {
				t.Fatalf("%s: cannot read the RUN value of %q", packagedRule, line)
			}
			runs = append(runs, cmd)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("%s has %d RUN+= assignments, want 1", packagedRule, len(runs))
	}
	return runs[0]
}

// udevSplit splits a RUN command into arguments as systemd-udevd does
// (strv_split_full with EXTRACT_UNQUOTE|EXTRACT_RELAX|EXTRACT_RETAIN_ESCAPE):
// words are separated by whitespace, single or double quotes group and are
// removed, a backslash is an ordinary character, and an unterminated quote
// ends at the end of the string.
func udevSplit(cmd string) []string {
	var args []string
	var word strings.Builder
	inWord := false
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case strings.ContainsRune(" \t\n\r", r):
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		args = append(args, word.String())
	}
	return args
}

func TestUdevSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"/bin/x a  b", []string{"/bin/x", "a", "b"}},
		{"/bin/x 'a b' \"c 'd\"", []string{"/bin/x", "a b", "c 'd"}},
		{"/bin/x a'b c'd", []string{"/bin/x", "ab cd"}},
		{"/bin/x '' x", []string{"/bin/x", "", "x"}},
		{"/bin/x 'a\\b'", []string{"/bin/x", "a\\b"}},
		{"/bin/x 'a'b'", []string{"/bin/x", "ab"}},
	}
	for _, tt := range tests {
		if got := udevSplit(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("udevSplit(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestUdevRuleArgs runs what the packaged udev rule runs for devices whose
// names look like flags or hold spaces and quotes: udev puts the kernel
// name in place of %k, splits the command into arguments and sets DEVPATH,
// and the program must rename that device and no other.
func TestUdevRuleArgs(t *testing.T) {
	t.Parallel()
	rule := udevRun(t)
	const bin = "/lib/udev/rdmatool-udev-rename "
	if !strings.HasPrefix(rule, bin) || strings.Count(rule, "%k") != 1 {
		t.Fatalf("the packaged rule runs %q, want %s... with %%k once", rule, bin)
	}
	names := []string{"rxe0", "-labdash", "lab space", "--force", "-j", "udev", `lab"dq`, `lab\bs`, "lab$k", "lab'q", "labq"}
	var devs []rdmanl.Device
	for i, name := range names {
		devs = append(devs, rdmanl.Device{Index: uint32(i + 1), Name: name, NodeGUID: rdmanl.GUID(i + 1), Protocol: "roce"})
	}
	tests := []struct {
		kernelName string
		wantStderr string // "" when the rename works
	}{
		{"rxe0", ""},
		{"-labdash", ""},
		{"lab space", ""},
		{"--force", ""},
		{"-j", ""},
		{"udev", ""},
		{`lab"dq`, ""},
		{`lab\bs`, ""},
		{"lab$k", ""},
		// udev substitutes %k before it splits the command, and has no
		// escape for a ' inside '...': "lab'q" reaches the program as
		// "labq", another device, which it must leave alone.
		{"lab'q", `rdmatool-udev-rename: rename: the udev event is for device "lab'q" (DEVPATH=/devices/virtual/infiniband/lab'q), not "labq" (udev drops the quotes of a name with ' in it)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.kernelName, func(t *testing.T) {
			t.Parallel()
			argv := udevSplit(strings.Replace(rule, "%k", tt.kernelName, 1))
			k := &kernel{devs: slices.Clone(devs)}
			// Only the guid policy: the host's own map file stays out.
			args := append([]string{"--policy", "guid"}, argv[1:]...)
			var stderr strings.Builder
			code := run(args, "/devices/virtual/infiniband/"+tt.kernelName, &stderr, func() (udevrename.Conn, error) { return k, nil })
			var wantCalls []string
			wantCode := 2
			if tt.wantStderr == "" {
				i := slices.Index(names, tt.kernelName)
				wantCalls, wantCode = []string{fmt.Sprintf("%s>rocex%016x", tt.kernelName, i+1)}, 0
			}
			if code != wantCode || stderr.String() != tt.wantStderr {
				t.Errorf("%q: exit %d, stderr %q; want %d, %q", argv, code, stderr.String(), wantCode, tt.wantStderr)
			}
			if !slices.Equal(wantCalls, k.calls) {
				t.Errorf("%q: renames %q, want %q", argv, k.calls, wantCalls)
			}
		})
	}
}
