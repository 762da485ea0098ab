package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/docs"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/watch"
	"github.com/spf13/cobra"
)

func newQPLeaksCmd(g *globals) *cobra.Command {
	var o watch.CheckOptions
	var maxQP []string
	var noAgent bool
	var view leaksView
	cmd := &cobra.Command{
		Use:   "qp-leaks",
		Short: "Report queue pairs that look leaked",
		Long:  docs.Page("rules"),
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("interval") && o.Interval > o.Watch {
				o.Interval = o.Watch // a short --watch scans at least at its end
			}
			if o.Limit < 0 {
				return fmt.Errorf("--limit %d: want 0 (all) or more", o.Limit)
			}
			if err := checkDurations(
				durationFlag{name: "min-age", value: o.MinAge},
				durationFlag{name: "watch", value: o.Watch, min: time.Second},
				durationFlag{name: "interval", value: o.Interval, min: 100 * time.Millisecond, max: max(o.Watch, 100*time.Millisecond)},
			); err != nil {
				return err
			}
			var err error
			if o.MaxQP, err = leakwatch.ParseMaxQP(maxQP); err != nil {
				return fmt.Errorf("--max-qp: %w", err)
			}
			if cmd.Flags().Changed("dev") {
				if err := rowfilter.CheckDevice(o.Device); err != nil {
					return fmt.Errorf("--dev: %w", err)
				}
			}
			if noAgent {
				o.AgentSocket = ""
			}
			if o.AgentSocket != "" {
				if err := checkSocketPath("--agent-socket", o.AgentSocket, false); err != nil {
					return err
				}
			}
			o.AgentTimeout = agentTimeout
			rep, err := watch.Check(cmd.Context(), g.deps(), o)
			if err != nil {
				return agentCause(cmd.Context(), o, err)
			}
			if g.json {
				err = g.renderJSON(cmd.OutOrStdout(), rep)
			} else {
				err = renderLeaks(cmd.OutOrStdout(), rep, view)
			}
			if err != nil || max(rep.FindingsTotal, len(rep.Findings)) == 0 {
				return err
			}
			return errFindings
		},
	}
	f := cmd.Flags()
	newOnceFlag(f, &o.Device, "dev", "", "only this device")
	f.DurationVar(&o.Watch, "watch", 10*time.Second, "how long to observe (ignored when the agent answers)")
	f.DurationVar(&o.Interval, "interval", 2*time.Second, "time between netlink scans (ignored when the agent answers)")
	f.StringVar(&o.AgentSocket, "agent-socket", agentapi.DefaultSocket, `ask the agent on this socket first ("": observe locally, as --no-agent)`)
	f.BoolVar(&noAgent, "no-agent", false, "observe locally even when the agent runs")
	f.DurationVar(&o.MinAge, "min-age", 5*time.Second, "report states held, and SRQ QP drains waiting (at least 1s), at least this long")
	f.StringArrayVar(&o.Rules, "rule", nil, "evaluate only this rule (repeatable)")
	// The shells complete --rule with the rule IDs.
	_ = cmd.RegisterFlagCompletionFunc("rule", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return leakwatch.Rules(), cobra.ShellCompDirectiveNoFileComp
	})
	f.BoolVar(&o.NoProbes, "no-probes", false, "use netlink only (with the agent: skip the rules that need probes)")
	f.StringArrayVar(&maxQP, "max-qp", nil, "DEV=N: the device's max_qp, for qp-exhaustion, over what the device reports (repeatable)")
	f.BoolVar(&view.stacks, "stacks", false, "text: show each finding's creation site (a kernel QP's stack) and group the findings by site (JSON has them whenever known)")
	f.BoolVar(&view.byPeer, "by-peer", false, "text: group the findings by the address at the other end of their QPs' rdma_cm connections, and count them by peer (JSON has each finding's peer and the counts)")
	f.IntVar(&o.Limit, "limit", 1000, "list at most this many findings QP by QP, the most severe first (0: all); the summary counts every one")
	return cmd
}

// agentCause is err, the agent's refusal of a question about o.Device,
// unless the agent cannot read RDMA netlink at all: it then knows no
// device, and refuses a question about any (with the listing's error, or
// "no RDMA device" from an agent older than that answer). Its status says
// what is wrong, and that is the error, in the words watch.Check has for
// the question about every device.
func agentCause(ctx context.Context, o watch.CheckOptions, err error) error {
	var ask *agentapi.AskError
	if o.Device == "" || !errors.As(err, &ask) || errors.Is(err, agentapi.ErrNoAgent) ||
		errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	st, serr := agentapi.AskStatus(ctx, o.AgentSocket)
	if serr != nil || len(st.Devices) > 0 || st.ScanError == "" {
		return err
	}
	return fmt.Errorf("agent: the agent on %s cannot read RDMA netlink: %s", o.AgentSocket, st.ScanError)
}

// agentTimeout is how long qp-leaks waits for the agent's answer to begin;
// an answer that has begun gets agentapi.AnswerWriteTimeout more to arrive.
// Either running out is an error, not a reason to observe locally.
const agentTimeout = 10 * time.Second

// leaksView is how qp-leaks prints a report as text: with stacks, each
// finding shows where its QP was created (a kernel QP its stack) and the
// findings are counted by creation site; with byPeer, the findings are
// listed under their peer (their QP's rdma_cm peer, or "no rdma_cm peer")
// and counted by peer.
type leaksView struct {
	stacks, byPeer bool
}

// renderLeaks prints the findings listed QP by QP under a line naming
// their device and owner, then a line of totals from the report's summary.
// When the report condenses many QPs (a group of several, or findings left
// out by --limit) the summary's groups come first, one line each. Every
// string of the report, which comes from the agent, the kernel and the
// processes' own names, is printed through quote.Line: a command name
// with ESC, CR or LF in it reaches the terminal escaped, and a string
// longer than 512 bytes (an agent's answer owes the terminal nothing) is
// cut. The view says
// what else it prints (leaksView): the creation sites, the peers.
func renderLeaks(w io.Writer, rep agentapi.CheckReport, view leaksView) error {
	t := quote.Line
	bw := bufio.NewWriter(w)
	total := max(rep.FindingsTotal, len(rep.Findings))
	condensed := rep.FindingsOmitted > 0 || slices.ContainsFunc(rep.Summary, func(g leakwatch.Group) bool { return g.Count > 1 })
	if condensed {
		fmt.Fprintf(bw, "%d findings in %d groups:\n", total, len(rep.Summary))
		for _, g := range rep.Summary {
			fmt.Fprintf(bw, "  %s  %-8s %-29s %d QPs  %s", t(g.Device), t(string(g.Severity)), t(g.Rule), g.Count, groupOwner(g))
			if g.QPNs != "" {
				fmt.Fprintf(bw, "  qpn %s", t(g.QPNs))
			}
			fmt.Fprintf(bw, "  oldest %.1fs\n", g.MaxAgeSeconds)
		}
		fmt.Fprintln(bw)
	}
	if view.byPeer {
		for _, p := range byPeer(rep.Findings) {
			if p.peer == "" {
				fmt.Fprintln(bw, "no rdma_cm peer:")
			} else {
				fmt.Fprintf(bw, "peer %s:\n", t(p.peer))
			}
			writeListed(&indented{w: bw}, p.findings, view.stacks)
		}
	} else {
		writeListed(bw, rep.Findings, view.stacks)
	}
	if rep.FindingsOmitted > 0 {
		fmt.Fprintf(bw, "%d more findings not listed QP by QP (--limit 0 lists them all)\n", rep.FindingsOmitted)
	}
	if view.stacks {
		writeSiteGroups(bw, rep)
	}
	if view.byPeer {
		writePeerGroups(bw, rep)
	}
	severities := map[leakwatch.Severity]int{} // every finding, also those not listed
	for _, g := range rep.Summary {
		severities[g.Severity] += g.Count
	}
	var parts []string
	for _, s := range []leakwatch.Severity{leakwatch.SeverityCritical, leakwatch.SeverityError, leakwatch.SeverityWarning} {
		if n := severities[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	summary := fmt.Sprintf("%d findings", total)
	if len(parts) > 0 {
		summary += " (" + strings.Join(parts, ", ") + ")"
	}
	observed := fmt.Sprintf("observed %.0fs", rep.ObservedSeconds)
	if rep.Source == "agent" {
		observed = fmt.Sprintf("observed by the agent for %.0fs", rep.ObservedSeconds)
	}
	devices := t(strings.Join(rep.Devices, ", "))
	if devices == "" {
		devices = "no devices"
	}
	summary += fmt.Sprintf(" over %d QPs on %s, %s, probes %s", rep.QPs, devices, observed, t(rep.Probes))
	if rep.SitesError != "" {
		summary += " (sites: " + t(rep.SitesError) + ")"
	}
	if rep.LostEvents > 0 {
		summary += fmt.Sprintf(", %d probe events lost", rep.LostEvents)
	}
	if rep.ScanError != "" {
		summary += "; scans failed: " + t(rep.ScanError)
	}
	if len(rep.SkippedRules) > 0 {
		var skipped []string
		for _, s := range rep.SkippedRules {
			skipped = append(skipped, t(s.Rule)+" ("+t(s.Reason)+")")
		}
		summary += "; not evaluated: " + strings.Join(skipped, "; ")
	}
	fmt.Fprintln(bw, summary)
	return bw.Flush()
}

// writeListed writes findings under the line that names their device and
// owner as the text does: those that print the same line share it (the
// summary's groups tell apart what the text does not print, such as the
// thread that created a kernel QP). With stacks, each says where its QP
// was created.
func writeListed(w io.Writer, findings []leakwatch.Finding, stacks bool) {
	t := quote.Line
	type heading struct{ dev, owner string }
	listed := map[heading][]leakwatch.Finding{}
	var order []heading
	for _, f := range findings {
		// Netlink records the creating thread; the line names its process
		// (each finding names the thread when it is another one).
		o := f.Owner
		if o.TGID != 0 && o.Comm != "" {
			o.PID = o.TGID
		}
		owner := ownerText(f.Rule, o)
		if o.Cgroup != "" {
			owner += " cgroup " + t(o.Cgroup)
		}
		owner += containerText(o)
		k := heading{f.Device, owner}
		if _, ok := listed[k]; !ok {
			order = append(order, k)
		}
		listed[k] = append(listed[k], f)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].dev < order[j].dev })
	for _, k := range order {
		dev := k.dev
		if dev == "" {
			dev = "(unregistered device)" // zombie-uverbs-context
		}
		fmt.Fprintf(w, "%s  %s\n", t(dev), k.owner)
		for _, f := range listed[k] {
			severity, rule := t(string(f.Severity)), t(f.Rule)
			switch {
			case f.Rule == leakwatch.RuleQPExhaustion:
				fmt.Fprintf(w, "  %-8s %-29s %d of %d QPs\n", severity, rule, f.Count, f.Limit)
			case f.Rule == leakwatch.RuleZombieUverbsContext && len(f.Evidence) > 0:
				fmt.Fprintf(w, "  %-8s %-29s %s for %.1fs\n", severity, rule, t(f.Evidence[0].What), f.AgeSeconds)
			case f.Rule == leakwatch.RuleMRLeak && len(f.Evidence) > 0:
				fmt.Fprintf(w, "  %-8s %-29s %s\n", severity, rule, t(f.Evidence[0].What))
			default:
				srq := ""
				if f.SRQ {
					srq = fmt.Sprintf(" srqn %d", f.SRQN)
				}
				if f.TGID != 0 && f.TGID != f.PID {
					srq += fmt.Sprintf(" thread %d", f.PID)
				}
				if f.Draining {
					srq += " draining"
				} else if f.DrainSeconds > 0 {
					srq += fmt.Sprintf(" drain took %.1fs", f.DrainSeconds)
				}
				fmt.Fprintf(w, "  %-8s %-29s qpn %d %s %s%s for %.1fs\n", severity, rule, f.QPN, t(f.Type), t(f.State), srq, f.AgeSeconds)
			}
			if stacks {
				writeFindingSite(w, f)
			}
			fmt.Fprintf(w, "           %s\n", t(f.Hint))
		}
	}
}

// peerFindings are the listed findings of one peer ("" for none).
type peerFindings struct {
	peer     string
	findings []leakwatch.Finding
}

// byPeer splits findings by their peer: the peers with the most findings
// first (then by address), the findings without one last.
func byPeer(findings []leakwatch.Finding) []peerFindings {
	idx := map[string]int{}
	var out []peerFindings
	for _, f := range findings {
		i, ok := idx[f.Peer]
		if !ok {
			i = len(out)
			idx[f.Peer] = i
			out = append(out, peerFindings{peer: f.Peer})
		}
		out[i].findings = append(out[i].findings, f)
	}
	last := func(p peerFindings) int {
		if p.peer == "" {
			return 1
		}
		return 0
	}
	slices.SortFunc(out, func(a, b peerFindings) int {
		return cmp.Or(cmp.Compare(last(a), last(b)), cmp.Compare(len(b.findings), len(a.findings)), cmp.Compare(a.peer, b.peer))
	})
	return out
}

// indented writes what it is given with every line indented by two
// spaces.
type indented struct {
	w       io.Writer
	midLine bool
}

func (iw *indented) Write(p []byte) (int, error) {
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !iw.midLine {
			if _, err := io.WriteString(iw.w, "  "); err != nil {
				return 0, err
			}
		}
		if _, err := iw.w.Write(line); err != nil {
			return 0, err
		}
		iw.midLine = line[len(line)-1] != '\n'
	}
	return len(p), nil
}

// writePeerGroups writes every finding counted by peer (the report's
// peers: the largest groups first), with the devices and rules.
func writePeerGroups(w io.Writer, rep agentapi.CheckReport) {
	t := quote.Line
	if len(rep.Peers) == 0 {
		return
	}
	fmt.Fprintln(w, "by peer:")
	for _, g := range rep.Peers {
		peer := "no rdma_cm peer"
		if g.Peer != "" {
			peer = t(g.Peer)
		}
		rules := make([]string, 0, len(g.Rules))
		for _, r := range slices.Sorted(maps.Keys(g.Rules)) {
			rules = append(rules, fmt.Sprintf("%s %d", t(r), g.Rules[r]))
		}
		devs := make([]string, 0, len(g.Devices))
		for _, d := range g.Devices {
			devs = append(devs, t(d))
		}
		fmt.Fprintf(w, "  %s  %d findings on %s  (%s)\n", peer, g.Findings, strings.Join(devs, ", "), strings.Join(rules, ", "))
	}
	if rep.PeersOmitted > 0 {
		fmt.Fprintf(w, "  %d more peers\n", rep.PeersOmitted)
	}
}

// writeFindingSite writes the lines that say where a finding's QP was
// created, none when that is not known.
func writeFindingSite(w io.Writer, f leakwatch.Finding) {
	t := quote.Line
	switch {
	case f.Site != "":
		fmt.Fprintf(w, "           created at %s via %s", t(f.Site), t(f.SiteVia))
		if f.SiteFile != "" {
			fmt.Fprintf(w, " (%s", t(f.SiteFile))
			if f.SiteBuildID != "" {
				fmt.Fprintf(w, " build-id %s", t(f.SiteBuildID))
			}
			fmt.Fprintf(w, " offset 0x%x)", f.SiteOffset)
		}
		fmt.Fprintln(w)
		for _, frame := range f.Stack {
			fmt.Fprintf(w, "             called from %s\n", t(frame))
		}
	case len(f.Stack) > 0:
		fmt.Fprintln(w, "           created by kernel stack:")
		for _, frame := range f.Stack {
			fmt.Fprintf(w, "             %s\n", t(frame))
		}
	}
}

// writeSiteGroups writes the findings counted by device and creation site
// (the report's sites), with the rules they break, or a line saying that
// no finding's site is known.
func writeSiteGroups(w io.Writer, rep agentapi.CheckReport) {
	t := quote.Line
	if len(rep.Sites) == 0 {
		if len(rep.Findings) > 0 {
			fmt.Fprintln(w, "by creation site: no finding's creation site is known")
		}
		return
	}
	fmt.Fprintln(w, "by creation site:")
	for _, g := range rep.Sites {
		site := t(g.Site)
		if g.SiteVia != "" {
			site += " via " + t(g.SiteVia)
		}
		rules := make([]string, 0, len(g.Rules))
		for _, r := range slices.Sorted(maps.Keys(g.Rules)) {
			rules = append(rules, fmt.Sprintf("%s %d", t(r), g.Rules[r]))
		}
		fmt.Fprintf(w, "  %s  %d QPs created at %s  (%s)\n", t(g.Device), g.QPs, site, strings.Join(rules, ", "))
	}
	if rep.SitesOmitted > 0 {
		fmt.Fprintf(w, "  %d more sites\n", rep.SitesOmitted)
	}
}

// ownerText names who owns a finding's QP: the kernel module (and the ULP
// that made it through rdma_cm), the process o.PID with its command, or the
// device itself for qp-exhaustion; the names escaped and cut (quote.Line).
func ownerText(rule string, o leakwatch.Owner) string {
	switch {
	case o.KernName != "" && o.ULP != "":
		return "kernel [" + quote.Line(o.KernName) + "] ulp " + quote.Line(o.ULP)
	case o.KernName != "":
		return "kernel [" + quote.Line(o.KernName) + "]"
	case o.PID != 0 && o.Comm != "":
		return fmt.Sprintf("pid %d (%s)", o.PID, quote.Line(o.Comm))
	case o.PID != 0:
		return fmt.Sprintf("pid %d (exited)", o.PID)
	case rule == leakwatch.RuleQPExhaustion:
		return "device"
	}
	return "no owner process (creator gone or in another pid namespace)"
}

// containerText is " container " and the owner's short container id, ""
// when it has none.
func containerText(o leakwatch.Owner) string {
	if o.ContainerID == "" {
		return ""
	}
	return " container " + quote.Line(owner.ShortContainerID(o.ContainerID))
}

// groupOwner names a summary group's owner as the detailed report does.
func groupOwner(g leakwatch.Group) string {
	return ownerText(g.Rule, g.Owner) + containerText(g.Owner)
}
