package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/agent"
	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/docs"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/watch"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newAgentCmd(g *globals) *cobra.Command {
	o := agent.RunOptions{Policy: agent.DefaultPolicy(), Retain: leakwatch.DefaultRetain}
	var maxQP []string
	var logFormat, configPath, renamePolicies, namesMap string
	var renameForce bool
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the daemon that keeps QP history and answers qp-leaks",
		Long:  docs.Page("agent"),
		Args:  noArgs,
		// The flags alone, checked before anything starts (a test runs
		// the checks without the daemon).
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.MaxQP, err = leakwatch.ParseMaxQP(maxQP); err != nil {
				return fmt.Errorf("--max-qp: %w", err)
			}
			// NaN fails both comparisons: the range is written so that it
			// fails the check instead.
			if !(o.ExhaustionThreshold > 0 && o.ExhaustionThreshold <= 1) {
				return fmt.Errorf("--exhaustion-threshold %g: want a share of max_qp above 0 and at most 1", o.ExhaustionThreshold)
			}
			if o.CreateFailures < 1 {
				return fmt.Errorf("--create-failures %d: want 1 or more", o.CreateFailures)
			}
			if o.ErrorStormCycles < 1 {
				return fmt.Errorf("--error-storm-cycles %d: want 1 or more", o.ErrorStormCycles)
			}
			if o.MRLeakGrowth < 1 {
				return fmt.Errorf("--mr-leak-growth %d: want 1 or more", o.MRLeakGrowth)
			}
			if err := checkDurations(durationFlag{name: "create-failure-window", value: o.CreateFailureWindow, min: time.Second},
				durationFlag{name: "error-storm-window", value: o.ErrorStormWindow, min: time.Second},
				durationFlag{name: "mr-leak-window", value: o.MRLeakWindow, min: time.Second}); err != nil {
				return err
			}
			if m := o.Policy.Mode; m != agent.PolicyObserve && m != agent.PolicyReset {
				return fmt.Errorf("--policy %s: want %s or %s", quote.String(m), agent.PolicyObserve, agent.PolicyReset)
			}
			if o.Policy.DryRun && o.Policy.Mode == agent.PolicyObserve && cmd.Flags().Changed("policy") {
				return fmt.Errorf("--policy-dry-run: set with --policy %s, which never resets: a dry run needs --policy %s", agent.PolicyObserve, agent.PolicyReset)
			}
			if err := checkSocketPath("--socket", o.Socket, true); err != nil {
				return err
			}
			if err := agent.CheckMetricsAddress(o.MetricsAddress); err != nil {
				return fmt.Errorf("--metrics-address %s: %w", quote.String(o.MetricsAddress), err)
			}
			if err := checkPath("--config", configPath); err != nil {
				return err
			}
			if err := checkAbsPath("--names-map", namesMap); err != nil {
				return err
			}
			if o.StateFile != "" { // "" keeps no state
				if err := checkAbsPath("--state-file", o.StateFile); err != nil {
					return err
				}
			}
			if renamePolicies != "" {
				policies, err := rename.ParsePolicies(renamePolicies)
				if err != nil {
					return fmt.Errorf("--rename: %w", err)
				}
				o.Rename = &rename.Options{Policies: policies, MapFile: namesMap,
					MapMustExist: cmd.Flags().Changed("names-map"), Force: renameForce}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := agentLogger(g.stderr, logFormat, g.verbose)
			if err != nil {
				return err
			}
			// The file first, then the command line over it.
			optional := !cmd.Flags().Changed("config")
			conf, err := agent.LoadConfig(cmd.Context(), configPath, optional)
			if err != nil && cmd.Context().Err() != nil {
				// SIGTERM while the read hangs (a hung file system): a
				// stop, not a failure.
				log.Warn("stopping while the configuration is read, which is left unfinished", "source", "agent", "path", configPath)
				return nil
			}
			if err != nil {
				return err
			}
			given := func(key string) bool {
				flag := map[string]string{"probes": "no-probes"}[key]
				if flag == "" {
					flag = strings.ReplaceAll(key, "_", "-")
				}
				return cmd.Flags().Changed(flag)
			}
			base := o
			conf.Apply(&o, given)
			if err := checkDurations(durationFlag{name: "interval", value: o.Interval, min: time.Second},
				durationFlag{name: "reconcile", value: o.Reconcile, min: time.Second},
				durationFlag{name: "state-interval", value: o.StateInterval, min: time.Second}); err != nil {
				return err
			}
			running := o
			o.Reload = func() (agent.Reloadable, error) {
				return agent.ReloadFrom(configPath, optional, base, running, given)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("agent: find the rdmatool binary for resets: %w", err)
			}
			o.ResetHelper = []string{exe, resetHelperCmd}
			o.Version = version
			d := g.deps()
			d.Log = log
			tuneAgentMemory(&d)
			if g.runAgent != nil {
				return g.runAgent(cmd.Context(), d, o)
			}
			return agent.Run(cmd.Context(), d, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", agent.DefaultConfig, "configuration file (YAML; flags override it; SIGHUP reloads it)")
	f.StringVar(&o.Socket, "socket", agentapi.DefaultSocket, `unix socket to serve: an absolute path of at most 107 bytes ("" is refused: the agent always serves one)`)
	f.DurationVar(&o.Interval, "interval", agent.DefaultInterval, "time between device listings, and between QP dumps without probes")
	f.DurationVar(&o.Reconcile, "reconcile", agent.DefaultReconcile, "time between QP dumps of a device while the probes feed the history")
	f.BoolVar(&o.NoProbes, "no-probes", false, "use netlink only")
	f.StringArrayVar(&maxQP, "max-qp", nil, "DEV=N: the device's max_qp, for qp-exhaustion, over what the device reports (repeatable)")
	f.StringVar(&o.StateFile, "state-file", agent.DefaultStateFile, `file the history is kept in across restarts, read at the start and written on stop and every --state-interval ("" keeps none)`)
	f.DurationVar(&o.StateInterval, "state-interval", agent.DefaultStateInterval, "time between saves of the history to --state-file (sooner after a large change); a save not written within 30s, or this interval when shorter, is given up")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.MetricsAddress, "metrics-address", agent.DefaultMetricsAddress, `HOST:PORT serving /metrics ("" for none)`)
	f.StringVar(&renamePolicies, "rename", "", `rename policies applied to each device as it appears, such as "map,guid" ("" for none)`)
	f.StringVar(&namesMap, "names-map", rename.DefaultMapFile, "the map policy's file")
	f.BoolVar(&renameForce, "rename-force", false, "rename devices whose name user space assigned too")
	f.Float64Var(&o.ExhaustionThreshold, "exhaustion-threshold", leakwatch.DefaultExhaustionThreshold, "share of max_qp in use that qp-exhaustion reports")
	f.IntVar(&o.CreateFailures, "create-failures", leakwatch.DefaultCreateFailures, "failed QP creates on a device within --create-failure-window that qp-create-failing reports")
	f.DurationVar(&o.CreateFailureWindow, "create-failure-window", leakwatch.DefaultCreateFailureWindow, "the window of --create-failures")
	f.IntVar(&o.ErrorStormCycles, "error-storm-cycles", leakwatch.DefaultErrorStormCycles, "reconnect cycles in which one owner's QPs on a device failed into Error within --error-storm-window that qp-error-storm reports")
	f.DurationVar(&o.ErrorStormWindow, "error-storm-window", leakwatch.DefaultErrorStormWindow, "the window of --error-storm-cycles")
	f.IntVar(&o.MRLeakGrowth, "mr-leak-growth", leakwatch.DefaultMRLeakGrowth, "MRs one owner on a device gained within --mr-leak-window, over as many QP creates while its live QPs did not grow, that mr-leak reports")
	f.DurationVar(&o.MRLeakWindow, "mr-leak-window", leakwatch.DefaultMRLeakWindow, "the window of --mr-leak-growth")
	f.StringVar(&o.Policy.Mode, "policy", agent.PolicyObserve, "remediation policy: observe (never act) or reset (thresholds in the config's policy key)")
	f.BoolVar(&o.Policy.DryRun, "policy-dry-run", false, "with --policy reset, log the resets the policy would make and make none")
	return cmd
}

// agentLogger logs at Info (Debug with -v), as text or JSON, to stderr.
func agentLogger(w io.Writer, format string, verbose bool) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if verbose {
		opts.Level = slog.LevelDebug
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %s: want text or json", quote.String(format))
}

// tuneAgentMemory sets the Go runtime and the probes up for a daemon whose
// heap is mostly its long-lived QP history, 60,000 QPs and more:
//   - the heap may grow by a quarter of what is live between collections,
//     not by all of it (GOGC=25, unless GOGC is set). The agent allocates
//     little between its answers and scans, so collections stay rare;
//   - the probes' ring buffer is 1 MiB (agentRingBytes), not the 4 MiB
//     trace uses: a reader maps its pages twice, and the agent, which
//     reads events as they come, needs room for bursts of about 5,000.
//     Events lost in a longer burst are counted, and the devices are
//     dumped at the next --interval instead of the next --reconcile;
//   - the heap the kernel's BTF filled while the probes were loaded (tens
//     of MiB, garbage once they are attached) goes back to the OS at once,
//     not over minutes;
//   - no transparent huge pages for the process (prctl
//     PR_SET_THP_DISABLE): where THP is "always" (Debian's kernels), a
//     2 MiB page holding a little of a sparse heap counts whole, and
//     khugepaged fills in again what the runtime gave back.
func tuneAgentMemory(d *watch.Deps) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	// Its error is not handled: a kernel that refuses (before 3.15) only
	// leaves the agent with huge pages, as every process has them.
	_ = unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0)
	if d.OpenProbes != nil {
		d.OpenProbes = func(_ context.Context, log *slog.Logger) (watch.EventSource, error) {
			t, err := bpf.Open(log, bpf.Options{BufferBytes: agentRingBytes, Sites: true})
			debug.FreeOSMemory()
			if err != nil {
				return nil, err
			}
			return t, nil
		}
	}
}

// agentRingBytes is the agent's probe ring buffer: about 5,000 events of
// 208 bytes.
const agentRingBytes = 1 << 20
