package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agent"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/watch"
	"github.com/spf13/cobra"
)

// fuzzSeeds are command lines of every command, right and wrong: the
// corpus FuzzCommandLine mutates.
var fuzzSeeds = [][]string{
	{}, {"version", "-j", "-p"}, {"--version"}, {"bogus"}, {"de"}, {"help"}, {"help", "bogus"}, {"help", "dev", "show"},
	{"completion", "bash"}, {"completion", "tcsh"}, {"docs"}, {"docs", "foo"}, {"docs", "man", "man8"}, {"docs", "man", ""},
	{"dev"}, {"dev", "rxe0", "rxe1"}, {"dev", "show", "rxe0", "-d", "-j"}, {"dev", "-d", "--counters"},
	{"link"}, {"link", "show", "rxe0/1"}, {"link", "show", "rxe0/0"}, {"link", "add", "rxe9", "type", "rxe", "netdev", "eth0"},
	{"link", "delete", "rxe9"},
	{"res"}, {"res", "show", "summary", "-j"}, {"res", "qp", "state", "ERR,RTS", "lqpn", "0-6"}, {"res", "qp", "state", "FOO"},
	{"res", "qp", "dev", "rxe0", "link", "rxe1"}, {"res", "qp", "dev", "a", "dev", "b"}, {"res", "qp", "type", "unknown(9)", "-p", "-j"},
	{"res", "cq", "poll-ctx", "DIRECT"}, {"res", "mr", "iova", "0x10-0xffffffffffffffff"}, {"res", "pd", "-d"}, {"res", "ctx"},
	{"res", "srq", "type", "XRC"}, {"res", "cm_id", "ps", "TCP", "state", "LISTEN"}, {"res", "qp", "srq", "yes"},
	{"qp-leaks", "--no-agent"}, {"qp-leaks", "--max-qp", "rxe0=5", "--max-qp", "rxe0=6"}, {"qp-leaks", "--dev", "a", "--dev", "b"},
	{"qp-leaks", "--agent-socket", "agent.sock", "--watch", "1s", "--min-age", "-1s"}, {"qp-leaks", "--limit", "-1", "--rule", "bogus"},
	{"agent", "--exhaustion-threshold", "NaN"}, {"agent", "--socket", "", "--metrics-address", ""}, {"agent", "--socket", "rel.sock"},
	{"agent", "--max-qp", "rxe0=1", "--rename", "map,guid", "--names-map", "names.conf", "--log-format", "xml"},
	{"agent", "--state-file", "", "--state-interval", "0s"}, {"agent", "--state-file", "state.json"},
	{"agent", "--config", "agent.yaml", "--state-file", "$DIR/state.json", "--socket", "$DIR/a.sock", "--metrics-address", ""},
	{"agent", "--config", "agent.yaml", "--max-qp", "rxe0=5", "--policy", "reset", "--state-file", ""},
	{"trace", "--dev", "rxe0", "--qpn", "17", "--pid", "1", "--duration", "1s", "--buffer-mib", "3"},
	{"rename", "--all", "--dry-run", "--map", "names.conf"}, {"rename", "udev", "--", "rxe0"}, {"rename", "--policy", "map,bogus", "rxe0"},
	{"reset", "rxe0", "--method", "bogus"}, {"reset", "rxe0", "--dry-run", "--timeout", "0s"}, {"reset-helper"},
	{"version", "--json=maybe"}, {"-jpdv", "dev"}, {"--", "dev"}, {"dev", "--bogus"}, {"qp-leaks", "--watch"},
}

// fuzzConfigs are agent configurations, right and wrong, that
// FuzzCommandLine writes to agent.yaml in its directory.
var fuzzConfigs = []string{
	"",
	"interval: 10s\nmax_qp:\n  rxe0: 40\nstate_file: /var/lib/rdmatool/state.json\n",
	"policy:\n  mode: reset\n  qp_use: 0.9\n  dry_run: true\n",
	"max_qp:\n  rxe0: [1, 2]\n",
	"interval: 10s\n---\nreconcile: [\n",
	"state_file: /\n",
	"rename: map,guid\nnames_map: /etc/rdmatool/names.conf\n",
	"socket: \"/run/a\\x01\"\n",
}

// FuzzCommandLine runs the whole command tree on any command line (the
// input's words split at NUL, which no exec'd argument holds; $DIR stands
// for the test's directory), with any agent configuration in agent.yaml
// there (config), on a kernel
// without RDMA netlink, or, for the listings, on the 6.12 lab kernel's
// recorded replies, with the working directory and HOME in a temporary
// directory. Whatever the line: no panic, an exit status of 0, 1 or 2,
// one line on stderr for 2 (more only with -v, which asks for debug
// logs), and nothing written where the commands write by default
// (/run/rdmatool, /etc/rdmatool, /var/lib/rdmatool).
//
// What does not run: the daemon (agent.Run: the agent command reads its
// configuration, applies it over the flags and checks it, then stops),
// the probes (trace) and a reset (reset, reset-helper) block, or act on
// the host (the helper writes on, and closes, fd 3: a fuzzing worker's
// pipe from its coordinator); their RunE is replaced, so their checks
// (PreRunE) run and nothing else. docs
// man runs only on a directory inside the temporary one: its pages are the
// one thing rdmatool writes where the command line says (completion and
// help write on stdout, rename and link add on a kernel that has no RDMA
// netlink here).
func FuzzCommandLine(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(strings.Join(s, "\x00"), fuzzConfigs[i%len(fuzzConfigs)])
	}
	watched := []string{"/run/rdmatool", "/etc/rdmatool", "/var/lib/rdmatool"}
	recorded, err := filepath.Abs(recordings) // the test changes directory
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line, config string) {
		dir := t.TempDir()
		var args []string
		if line != "" {
			args = strings.Split(strings.ReplaceAll(line, "$DIR", dir), "\x00")
		}
		if config != "" {
			if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		t.Chdir(dir)
		t.Setenv("HOME", dir)
		t.Setenv("DEVPATH", "") // outside udev
		t.Setenv("GOGC", "100") // res leaves the collector as it is
		before := snapshot(t, watched)

		g := &globals{kernel: noRDMA(t), runAgent: func(context.Context, watch.Deps, agent.RunOptions) error { return nil }}
		root := newRootCmdWith(g)
		if cmd, _, err := root.Find(args); err == nil && cmd != nil && listing(cmd) {
			g.kernel.dial = func() (*rdmanl.Client, error) { return rdmanltest.Replay(t, recorded, "6.12"), nil }
		}
		outside := false
		for _, c := range root.Commands() {
			switch c.Name() {
			case "trace", "reset", resetHelperCmd:
				c.RunE = func(*cobra.Command, []string) error { return nil }
			case "docs":
				man, _, _ := c.Find([]string{"man"})
				write := man.RunE
				man.RunE = func(cmd *cobra.Command, args []string) error {
					if abs, err := filepath.Abs(args[0]); err != nil || !strings.HasPrefix(abs+"/", dir+"/") {
						outside = true
						return nil
					}
					return write(cmd, args)
				}
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		code := runRootContext(ctx, root, args, &stdout, &stderr)
		if outside {
			t.Skip("docs man outside the test's directory")
		}
		if code != exitOK && code != exitFindings && code != exitError {
			t.Fatalf("rdmatool %q: exit %d, stderr %q", args, code, stderr.String())
		}
		if n := strings.Count(stderr.String(), "\n"); code == exitError && (n != 1 && !g.verbose || !strings.HasSuffix(stderr.String(), "\n")) {
			t.Errorf("rdmatool %q: exit 2 with %d lines on stderr: %q", args, n, stderr.String())
		}
		if after := snapshot(t, watched); after != before {
			t.Errorf("rdmatool %q wrote outside its directory:\nbefore %s\nafter  %s", args, before, after)
		}
	})
}

// listing reports whether cmd only reads the kernel (dev, link show,
// res): it runs on recorded replies, which answer dumps and no change.
func listing(cmd *cobra.Command) bool {
	switch cmd.CommandPath() {
	case "rdmatool dev", "rdmatool link show", "rdmatool res":
		return true
	}
	return false
}

// snapshot lists what dirs hold: every file's path, mode, size and time.
func snapshot(t *testing.T, dirs []string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dirs {
		filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				b.WriteString(path + " " + err.Error() + "\n")
				return nil
			}
			if fi, err := e.Info(); err == nil {
				fmt.Fprintln(&b, path, fi.Mode(), fi.ModTime(), fi.Size())
			}
			return nil
		})
	}
	return b.String()
}
