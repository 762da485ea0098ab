package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
)

// hostile is a name a process can give itself (prctl PR_SET_NAME takes any
// byte but NUL), a device can be given (the kernel takes any byte in a
// rename), a cgroup can have: a terminal title, a clear screen, a line
// rewritten from its start, a line of its own, a bidi override, a CSI as
// an 8-bit byte and as a C1 rune.
const hostile = "a\x1b]0;owned\x07\x1b[2J\rb\nc\u202ed\x9b\u009b"

// terminalSafe fails unless out, the text output of names made hostile,
// has the lines of the output of clean names and nothing a terminal acts
// on but its line ends, and shows the names escaped.
func terminalSafe(t *testing.T, what, clean, out string) {
	t.Helper()
	if got, want := strings.Count(out, "\n"), strings.Count(clean, "\n"); got != want {
		t.Errorf("%s: %d lines, want %d:\n%s", what, got, want, out)
	}
	for _, r := range strings.ReplaceAll(out, "\n", "") {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\ufffd' {
			t.Errorf("%s: %U reaches the terminal:\n%q", what, r, out)
			break
		}
	}
	if !strings.Contains(out, `a\x1b]0;owned\a\x1b[2J\rb\nc\u202ed\x9b\u009b`) {
		t.Errorf("%s: the name is not escaped:\n%q", what, out)
	}
}

// TestTextEscapesNames: every text renderer escapes the names it prints
// from the kernel, /proc and the agent (issue 24: a process name with ESC,
// CR and LF reached the terminal raw through qp-leaks); JSON is escaped by
// its encoders already.
func TestTextEscapesNames(t *testing.T) {
	t.Parallel()
	renders := map[string]func(name string) string{
		"qp-leaks": func(name string) string {
			f := leakwatch.Finding{Rule: leakwatch.RuleStaleErrorQP, Severity: leakwatch.SeverityWarning, Device: name, Type: "RC", State: "ERR",
				QPN: 17, AgeSeconds: 6, Hint: "destroy it, " + name,
				Owner: leakwatch.Owner{PID: 100, TGID: 100, Comm: name, Cgroup: "/" + name, ContainerID: name}}
			kernel := f
			kernel.QPN, kernel.Owner = 18, leakwatch.Owner{KernName: name, ULP: name}
			var rep agentapi.CheckReport
			rep.Findings = []leakwatch.Finding{f, kernel}
			rep.Summary = []leakwatch.Group{
				{Device: name, Rule: f.Rule, Severity: f.Severity, Owner: leakwatch.Owner{PID: 100, Comm: name, Cgroup: "/" + name, ContainerID: name}, Count: 2, QPNs: "17,19", Hint: f.Hint},
				{Device: name, Rule: f.Rule, Severity: f.Severity, Owner: kernel.Owner, Count: 1, QPNs: "18", Hint: f.Hint},
			}
			rep.FindingsTotal, rep.FindingsOmitted = 3, 1
			rep.Devices, rep.Probes, rep.ScanError = []string{name}, name, name
			rep.SkippedRules = []leakwatch.Skipped{{Rule: name, Reason: name}}
			var b strings.Builder
			if err := renderLeaks(&b, rep, leaksView{}); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
		"res qp": func(name string) string {
			rows := []qpRow{qpRowOf(rdmanl.QP{DevName: name, Port: 1, LQPN: 17, Type: rdmanl.QPTypeRC, Subtype: name, Owner: rdmanl.Owner{KernName: name}}, nil, rdmanl.ULPIndex{})}
			var b strings.Builder
			lw := newListWriter(&b, &globals{details: true})
			for _, r := range rows {
				r.Comm, r.CommText = name, commText(name, "")
				if err := lw.row(&r); err != nil {
					t.Fatal(err)
				}
			}
			if err := lw.close(); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
		"trace": func(name string) string {
			ev := traceEvents[6]
			ev.DevName, ev.NewName, ev.Comm, ev.KernOwner = name, name, name, name
			return string(appendTraceText(nil, ev, name, true)) // name as the site, too
		},
		"rename": func(name string) string {
			rep := rename.Report{Renames: []rename.Result{
				{From: name, To: name, Reason: name, Status: rename.StatusRenamed},
				{From: name, To: name, Reason: name, Status: rename.StatusFailed, Error: name},
			}, Steps: []rename.Step{{Index: 1, From: name, To: name}}}
			var b strings.Builder
			if err := renderRenames(&b, &globals{details: true}, rep); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
		"reset": func(name string) string {
			rep := reset.Report{Device: name, Kind: "rxe", Netdevs: []string{name}, Method: reset.MethodRelink,
				Holders:   []reset.Holder{{PID: 42, Comm: name, Files: []string{name}, ContainerID: name}},
				Result:    reset.ResultWaiting,
				WaitingOn: []reset.Holder{{PID: 42, Comm: name}},
				State:     name, Next: name,
				Events: []reset.Event{{Time: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), Kind: "rename", Device: name, Source: "probes"}},
			}
			var b strings.Builder
			if err := renderReset(&b, &globals{}, rep); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
		"dev -d": func(name string) string {
			rep := sampleDevDetails()
			d := &rep.Devices[0]
			d.IfName, d.Lead, d.FW = name, "3: "+name+":", name
			d.PortInfo[0].Netdev = name
			d.Holders[0].Comm, d.Holders[0].Cgroup, d.Holders[0].Files[0].Path = name, name, name
			rep.ZombieContexts[0].Comm = name
			var b strings.Builder
			if err := renderDevDetails(&b, rep, true); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
	}
	for what, render := range renders {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			terminalSafe(t, what, render("qpwork"), render(hostile))
		})
	}
}
