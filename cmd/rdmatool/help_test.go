package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/agent"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/docs"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpPages are the commands whose help is a page of docs/.
var helpPages = []struct{ command, page string }{
	{"agent", "agent"},
	{"qp-leaks", "rules"},
	{"reset", "reset"},
	{"rename", "naming"},
}

// flagDefault matches a flag the pages name with its default in
// parentheses: "`--watch` (10s)", "`--policy` (`map,guid` unless given)".
var flagDefault = regexp.MustCompile("`--([a-z0-9-]+)`\\s+\\((`[^`]+`|[0-9/][^);,\\s]*)")

// TestHelpFromDocs: the commands' help is their page, fit for a terminal;
// every flag a page names exists, and the defaults it gives are the
// flags' own.
func TestHelpFromDocs(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	for _, h := range helpPages {
		t.Run(h.command, func(t *testing.T) {
			cmd, _, err := root.Find([]string{h.command})
			if err != nil {
				t.Fatal(err)
			}
			page := docs.Page(h.page)
			if cmd.Long != page {
				t.Errorf("rdmatool %s's help is not docs/%s.md", h.command, h.page)
			}
			for i, line := range strings.Split(page, "\n") {
				if len(line) > 80 {
					t.Errorf("docs/%s.md: line %d longer than 80 characters: %q", h.page, i+2, line)
				}
			}
			for _, m := range regexp.MustCompile("`--([a-z0-9-]+)").FindAllStringSubmatch(page, -1) {
				if anyFlag(root, m[1]) == nil {
					t.Errorf("docs/%s.md names --%s, which no command has", h.page, m[1])
				}
			}
			for _, m := range flagDefault.FindAllStringSubmatch(page, -1) {
				f := flagOf(cmd, m[1])
				if f == nil {
					t.Errorf("docs/%s.md gives a default for --%s, which %s does not have", h.page, m[1], h.command)
					continue
				}
				if doc := strings.Trim(m[2], "`"); !sameDefault(doc, f.DefValue) {
					t.Errorf("docs/%s.md: --%s defaults to %q, not %q", h.page, m[1], f.DefValue, doc)
				}
			}
		})
	}
}

// flagOf finds the flag name of cmd: its own, persistent or inherited.
func flagOf(cmd *cobra.Command, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// anyFlag finds a flag by name on any command of the tree.
func anyFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := flagOf(cmd, name); f != nil {
		return f
	}
	for _, c := range cmd.Commands() {
		if f := anyFlag(c, name); f != nil {
			return f
		}
	}
	return nil
}

// sameDefault compares a default as a page writes it with pflag's, as
// durations when both are ("5m" and "5m0s").
func sameDefault(doc, def string) bool {
	a, errA := time.ParseDuration(doc)
	b, errB := time.ParseDuration(def)
	if errA == nil && errB == nil {
		return a == b
	}
	return doc == def
}

// TestRulesPage: docs/rules.md has one section per rule, in the order the
// rules are evaluated, titled with the rule's ID.
func TestRulesPage(t *testing.T) {
	t.Parallel()
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^## ([a-z]+(?:-[a-z]+)+)$`).FindAllStringSubmatch(docs.Page("rules"), -1) {
		sections = append(sections, m[1])
	}
	if diff := cmp.Diff(leakwatch.Rules(), sections); diff != "" {
		t.Errorf("docs/rules.md's rule sections (-leakwatch.Rules +docs):\n%s", diff)
	}
}

// TestPagesNameDefaults: the pages give the agent's files and addresses
// as the code has them.
func TestPagesNameDefaults(t *testing.T) {
	t.Parallel()
	for page, want := range map[string][]string{
		"agent": {agentapi.DefaultSocket, agent.DefaultConfig, agent.DefaultMetricsAddress, agent.DefaultStateFile},
		"rules": {agentapi.DefaultSocket},
	} {
		for _, s := range want {
			if !strings.Contains(docs.Page(page), s) {
				t.Errorf("docs/%s.md does not name %s", page, s)
			}
		}
	}
}

// TestManPagesFromDocs: the man pages of the commands whose help is a page
// carry the page.
func TestManPagesFromDocs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runCLI(t, "docs", "man", dir); code != 0 {
		t.Fatalf("rdmatool docs man: exit %d: %s", code, stderr)
	}
	want := map[string][]string{
		"rdmatool-agent.8":    {"/v1/status", "READY", "no_max_qp"},
		"rdmatool-qp-leaks.8": leakwatch.Rules(),
		"rdmatool-reset.8":    {"devlink-reload", "netdev-bounce", "still waiting on pid"},
		"rdmatool-rename.8":   {"NAME_GUID", "0x0002c90300a1b2c4", "70-rdmatool-naming.rules"},
	}
	for name, texts := range want {
		page, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if !strings.Contains(string(page), s) {
				t.Errorf("%s does not contain %q", name, s)
			}
		}
	}
}

// fullWriter fails every write, as /dev/full does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// Output that cannot be written is an error, also the help, the docs and
// completion scripts cobra writes without looking at the result.
func TestOutputNotWritten(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "res"}, {"docs"}, {"completion"}, {"completion", "bash"}, {"version"}} {
		var stderr strings.Builder
		code := run(args, fullWriter{}, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), "no space left on device") {
			t.Errorf("rdmatool %s to a full disk: exit %d, stderr %q; want %d and the write's error", strings.Join(args, " "), code, stderr.String(), exitError)
		}
	}
}

// Every rule docs/rules.md has (a "## rule-id" section) is named in
// rdmatool --help and in README.md, and they name no other.
func TestRulesListed(t *testing.T) {
	heading := regexp.MustCompile(`(?m)^## ([a-z0-9]+(?:-[a-z0-9]+)+)$`)
	var rules []string
	for _, m := range heading.FindAllStringSubmatch(docs.Page("rules"), -1) {
		rules = append(rules, m[1])
	}
	if len(rules) < 12 {
		t.Fatalf("docs/rules.md has %d rule sections: %q", len(rules), rules)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	help := newRootCmd().Long
	for _, r := range rules {
		if !strings.Contains(help, r) {
			t.Errorf("rdmatool --help does not name rule %s", r)
		}
		if !strings.Contains(string(readme), "`"+r+"`") {
			t.Errorf("README.md does not name rule %s", r)
		}
	}
	named := regexp.MustCompile(`(?m)^    ([a-z0-9-]+)(?:, ([a-z0-9-]+))? {2,}`)
	n := 0
	for _, m := range named.FindAllStringSubmatch(help, -1) {
		for _, r := range m[1:] {
			if r == "" {
				continue
			}
			n++
			if !slices.Contains(rules, r) {
				t.Errorf("rdmatool --help names %s, which docs/rules.md has not", r)
			}
		}
	}
	if n != len(rules) {
		t.Errorf("rdmatool --help's rule list names %d rules, docs/rules.md has %d", n, len(rules))
	}
}
