package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/rdmatool/rdmatool/agent"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/watch"

	"github.com/spf13/cobra"
)

// globals holds the flags every command shares.
type globals struct {
	json    bool
	pretty  bool
	details bool
	verbose bool
	stderr  io.Writer
	// kernel, when set, replaces the host's RDMA netlink, /proc, /sys,
	// probes and clock (tests replay recorded kernels through it).
	kernel *kernelDeps
	// runAgent, when set, replaces agent.Run once the agent command has
	// its options (the fuzz target checks them and starts no daemon).
	runAgent func(ctx context.Context, d watch.Deps, o agent.RunOptions) error
}

// kernelDeps is what the commands read of the host, for tests to replace.
type kernelDeps struct {
	dial      func() (*rdmanl.Client, error)
	now       func() time.Time
	proc, sys string
}

// procRoot is where /proc is.
func (g *globals) procRoot() string {
	if g.kernel != nil {
		return g.kernel.proc
	}
	return "/proc"
}

// sysRoot is where /sys is.
func (g *globals) sysRoot() string {
	if g.kernel != nil {
		return g.kernel.sys
	}
	return "/sys"
}

// dial opens the RDMA netlink client.
func (g *globals) dial() (*rdmanl.Client, error) {
	if g.kernel != nil {
		return g.kernel.dial()
	}
	return rdmanl.Dial()
}

// deps wires the check's dependencies: netlink, /proc and, when the probes
// are available, the eBPF tracer.
func (g *globals) deps() watch.Deps {
	if k := g.kernel; k != nil {
		return watch.Deps{Log: g.logger(), Now: k.now, ProcRoot: k.proc, Dial: func() (watch.Netlink, error) {
			c, err := k.dial()
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
	}
	return watch.Deps{Log: g.logger(), Dial: watch.DialNetlink, ProcRoot: "/proc", OpenProbes: openProbes,
		LearnDevice: func(d rdmanl.Device) watch.DeviceFacts { return watch.LearnDevice("/sys", "/dev", d) }}
}

// logger returns the CLI's logger: text on stderr, Warn unless -v.
func (g *globals) logger() *slog.Logger {
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
}

// renderJSON writes v as JSON: compact, or indented with -p.
func (g *globals) renderJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	if g.pretty {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

func newRootCmd() *cobra.Command { return newRootCmdWith(&globals{}) }

// newRootCmdWith builds the command tree on g, whose kernel field may
// replace the host's.
func newRootCmdWith(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "rdmatool",
		Short: "Find leaked RDMA queue pairs, trace their lifecycle, rename and reset devices",
		Long: `rdmatool reads the kernel's RDMA resource tracking (RDMA netlink), traces the
queue pair lifecycle on ib_core with eBPF, and reports the QPs and MRs that
leak (qp-leaks; its help says what each rule means):

    stale-error-qp, never-connected-qp    QPs stuck in Error, never connected
    srq-destroy-without-last-wqe          SRQ QPs torn down against IB 10.3.1
    last-wqe-not-emitted                  LAST_WQE_REACHED never sent
    last-wqe-unhandled                    LAST_WQE_REACHED sent, not acted on
    srq-drain-stalled                     kernel drains waiting for it
    xrc-tgt-orphan                        XRC targets with no process left
    qp-exhaustion, qp-create-failing      QPs nearing max_qp; refused creates
    qp-error-storm                        QPs sent to Error again and again
    mr-leak                               MRs piling up over reconnects
    zombie-uverbs-context                 processes holding a device gone

It renames devices persistently and resets a device in bounded time,
bringing it back under its name.

Exit status: 0 success (checks: nothing found), 1 findings reported (checks
only), 2 error, 130 interrupted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		// Words that name no command are refused by strayArgs once cobra
		// has found none, on one line: cobra's own check (legacyArgs)
		// writes its suggestions on lines of their own.
		Args: cobra.ArbitraryArgs,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			g.stderr = cmd.ErrOrStderr()
		},
	}
	root.SetVersionTemplate("rdmatool {{.Version}}\n")
	root.SetHelpFunc(strictHelp(root.HelpFunc()))
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.BoolVarP(&g.json, "json", "j", false, "print JSON")
	pf.BoolVarP(&g.pretty, "pretty", "p", false, "indent JSON output")
	pf.BoolVarP(&g.details, "details", "d", false, "print more details")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "log debug messages to stderr")
	root.AddCommand(
		newVersionCmd(g),
		newDevCmd(g),
		newLinkCmd(g),
		newResCmd(g),
		newTraceCmd(g),
		newQPLeaksCmd(g),
		newAgentCmd(g),
		newRenameCmd(g),
		newResetCmd(g),
		newResetHelperCmd(),
		newDocsCmd(),
	)
	return root
}
