package main

import (
	"strings"
	"testing"
)

// TestUnknownWords: a word that is no command, no argument a command takes
// and no flag is exit status 2 and one line, cobra's own commands
// included (issue 24: completion tcsh, docs foo and help bogus printed
// help and exited 0).
func TestUnknownWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"completion", "tcsh"}, `rdmatool: unknown command "tcsh" for "rdmatool completion"`},
		{[]string{"completion", "bash", "extra"}, `rdmatool: unknown command "extra" for "rdmatool completion bash"`},
		{[]string{"docs", "foo"}, `rdmatool: unknown command "foo" for "rdmatool docs"`},
		{[]string{"docs", "--help", "foo"}, `rdmatool: unknown command "foo" for "rdmatool docs"`},
		{[]string{"help", "bogus"}, `rdmatool: unknown help topic "bogus" (rdmatool help lists the commands)`},
		{[]string{"help", "dev", "show"}, `rdmatool: unknown help topic "dev show": "show" is not a command of "rdmatool dev"`},
		{[]string{"help", "link", "show", "x"}, `rdmatool: unknown help topic "link show x": "x" is not a command of "rdmatool link show"`},
		{[]string{"bogus"}, `rdmatool: unknown command "bogus" for "rdmatool"`},
		{[]string{"--help", "bogus"}, `rdmatool: unknown command "bogus" for "rdmatool"`},
		{[]string{"de"}, `rdmatool: unknown command "de" for "rdmatool" (did you mean dev?)`},
		{[]string{"-j", "qp-leak"}, `rdmatool: unknown command "qp-leak" for "rdmatool" (did you mean qp-leaks?)`},
		{[]string{"version", "x"}, `rdmatool: unknown command "x" for "rdmatool version"`},
		{[]string{"link", "bogus"}, `rdmatool: unknown command "bogus" for "rdmatool link"`},
		{[]string{"version", strings.Repeat("v", 1<<20)}, `rdmatool: unknown command "` + strings.Repeat("v", 64) + `" (1048576 bytes) for "rdmatool version"`},
		{[]string{"docs", "a\x1b]0;x\x07\r\nb"}, `rdmatool: unknown command "a\x1b]0;x\a\r\nb" for "rdmatool docs"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 2 || stdout != "" || !strings.HasPrefix(stderr, tt.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("rdmatool %.80q: exit %d, stdout %.80q, stderr %.200q; want 2, nothing, one line starting %.200q", tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// TestKnownWords: the commands that only group others, and help of a
// command, print help and exit 0 as before.
func TestKnownWords(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"docs"}, {"completion"}, {"help"}, {"help", "dev"}, {"help", "link", "show"}, {"dev", "--help"},
		{"completion", "bash"}, {"completion", "zsh", "--no-descriptions"}, {"--help"}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || stdout == "" || stderr != "" {
			t.Errorf("rdmatool %q: exit %d, stdout %d bytes, stderr %q; want 0 and help", args, code, len(stdout), stderr)
		}
	}
}

// TestFlagErrors: pflag's errors are kept for what fits a line; a flag
// name or value longer than quote.Max, or with a control character, is
// quoted and cut; a string flag given twice names both values.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("z", 1<<20)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"version", "--bogus"}, "rdmatool: unknown flag: --bogus\n"},
		{[]string{"qp-leaks", "--watch", "x"}, "rdmatool: invalid argument \"x\" for \"--watch\" flag: time: invalid duration \"x\"\n"},
		{[]string{"version", "--" + long}, `rdmatool: unknown flag "--` + strings.Repeat("z", 62) + `" (1048578 bytes)` + "\n"},
		{[]string{"version", "-j" + long}, `rdmatool: unknown shorthand flag "z" in "-` + strings.Repeat("z", 63) + `" (1048577 bytes)` + "\n"},
		{[]string{"qp-leaks", "--watch", long}, `rdmatool: invalid argument "` + strings.Repeat("z", 64) + `" (1048576 bytes) for "--watch" flag: not a duration` + "\n"},
		{[]string{"qp-leaks", "--limit=1\x1b[2J"}, `rdmatool: invalid argument "1\x1b[2J" for "--limit" flag: not a int` + "\n"},
		{[]string{"version", "---" + long}, `rdmatool: bad flag syntax: "---` + strings.Repeat("z", 61) + `" (1048579 bytes)` + "\n"},
		{[]string{"trace", "--dev", "mlx5_0", "--dev", "mlx5_1"}, `rdmatool: --dev "mlx5_0" and --dev "mlx5_1": give one` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.want[:min(40, len(tt.want))], func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 2 || stdout != "" || stderr != tt.want {
				t.Errorf("rdmatool %.80q: exit %d, stdout %.80q, stderr %.300q; want 2 and %q", tt.args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// TestErrorLineEscaped: an error is one line whatever it quotes: a name
// the kernel was asked about goes through rdmanl's error as it is, and the
// line is escaped when it is printed.
func TestErrorLineEscaped(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dev", "a\x1b[2J\nb"}, {"link", "show", "a\rb/1"}, {"res", "qp", "dev", "x\ny"}} {
		code, stdout, stderr := runRecorded(t, "6.12", args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || strings.ContainsAny(strings.TrimSuffix(stderr, "\n"), "\x1b\r\n") ||
			!strings.Contains(stderr, "no such RDMA device") {
			t.Errorf("rdmatool %q: exit %d, stdout %q, stderr %q; want 2 and one escaped line", args, code, stdout, stderr)
		}
	}
}
