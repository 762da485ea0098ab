package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/docs"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
	"github.com/spf13/cobra"
)

// resetHelperCmd is the hidden command the reset runs its removal in.
const resetHelperCmd = "reset-helper"

func newResetCmd(g *globals) *cobra.Command {
	var (
		method          string
		grace, timeout  time.Duration
		dryRun, yes     bool
		probes          bool
		policies, mapFl string
	)
	var o reset.Options
	cmd := &cobra.Command{
		Use:   "reset DEV",
		Short: "Reset an RDMA device in bounded time and bring it back under its name",
		Long:  docs.Page("reset"),
		Args:  cobra.ExactArgs(1),
		// The arguments, checked before anything touches the device (a
		// test runs the checks without the reset).
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if err := rowfilter.CheckDevice(args[0]); err != nil {
				return err
			}
			if err := checkPath("--map", mapFl); err != nil {
				return err
			}
			m, err := reset.ParseMethod(method)
			if err != nil {
				return err
			}
			pols, err := rename.ParsePolicies(policies)
			if err != nil {
				return err
			}
			if err := checkDurations(durationFlag{name: "timeout", value: timeout, min: time.Millisecond},
				durationFlag{name: "grace", value: grace}); err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("reset: find the rdmatool binary: %w", err)
			}
			o = reset.Options{
				Device: args[0], Method: m, Grace: grace, Timeout: timeout, DryRun: dryRun, Yes: yes,
				Rename: rename.Options{Policies: pols, MapFile: mapFl, MapMustExist: cmd.Flags().Changed("map")},
				Helper: []string{exe, resetHelperCmd},
				Who:    operator(),
				Log:    slog.New(slog.NewJSONHandler(g.stderr, nil)),
			}
			return reset.Check(o)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if probes && yes && !dryRun {
				if t, err := bpf.Open(g.logger(), bpf.Options{}); err == nil {
					defer t.Close()
					o.Observe = probeObserver{t}
				} else {
					g.logger().Warn("device events from netlink only", "err", err)
				}
			}
			rep, err := reset.Run(cmd.Context(), c, o)
			if rep.Kind != "" {
				if rerr := renderReset(cmd.OutOrStdout(), g, rep); rerr != nil {
					return rerr
				}
			}
			if errors.Is(err, reset.ErrNotConfirmed) {
				return fmt.Errorf("%w: nothing was changed (add --yes to reset it)", err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&method, "method", string(reset.MethodAuto), "auto, relink, devlink-reload, pci-reset, unbind or netdev-bounce")
	f.DurationVar(&grace, "grace", 0, "wait up to this long for holders to close the device first")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "return after this long, the reset unfinished if it must wait for holders")
	f.BoolVar(&dryRun, "dry-run", false, "show what the reset would do and destroy, and do nothing")
	f.BoolVar(&yes, "yes", false, "reset: without it nothing is changed")
	f.BoolVar(&probes, "probes", false, "list the kernel's device events from eBPF probes (they take a moment to attach)")
	f.StringVar(&policies, "policy", rename.DefaultPolicies, "rename policies that give the persistent name: map, guid, pci")
	f.StringVar(&mapFl, "map", rename.DefaultMapFile, "map file of \"GUID NAME\" lines (the default may be missing)")
	return cmd
}

// newResetHelperCmd is the process a reset runs its removal in (see
// reset.RunHelper): it reads its step on stdin, reports progress on fd 3
// and logs JSON to stderr, which the reset points at its log file.
func newResetHelperCmd() *cobra.Command {
	return &cobra.Command{
		Use:    resetHelperCmd,
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := os.NewFile(reset.HelperProgressFD, "progress")
			if out == nil {
				return errors.New("reset-helper: no progress pipe on fd 3 (run by rdmatool reset only)")
			}
			defer out.Close() //nolint:errcheck // each line is written whole or its error returned
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			// The helper must outlive the reset that started it: it ends
			// with its step, not on the terminal's signals.
			return reset.RunHelper(context.WithoutCancel(cmd.Context()), cmd.InOrStdin(), out, log)
		},
	}
}

// operator names who runs the reset, for the audit record.
func operator() string {
	uid := os.Getuid()
	if u, err := user.LookupId(fmt.Sprint(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// probeObserver turns the probes' device events into reset events.
type probeObserver struct{ t *bpf.Tracer }

func (p probeObserver) Events(ctx context.Context) func(yield func(reset.Event, error) bool) {
	return func(yield func(reset.Event, error) bool) {
		for ev, err := range p.t.Events(ctx) {
			if err != nil {
				yield(reset.Event{}, err)
				return
			}
			e := reset.Event{Time: ev.Time.UTC(), Device: ev.DevName, Index: ev.DevIndex, Source: "probes"}
			switch {
			case ev.Kind == bpf.KindDeviceRegister:
				e.Kind = "register"
			case ev.Kind == bpf.KindDeviceUnregister:
				e.Kind = "unregister"
			case ev.Kind == bpf.KindDeviceRename:
				e.Kind, e.Device = "rename", ev.NewName
			case ev.Kind == bpf.KindDeviceEvent && ev.IBEvent == bpf.IBEventDeviceFatal:
				e.Kind = "device_fatal"
			default:
				continue
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// renderReset prints the reset's report: one JSON object with -j, else
// what the reset destroys, what it did and where the device is, the names
// (devices, processes, files) escaped (quote.Text).
func renderReset(w io.Writer, g *globals, rep reset.Report) error {
	if g.json {
		return g.renderJSON(w, rep)
	}
	t := quote.Text
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", t(rep.Device), rep.Kind)
	if len(rep.Netdevs) > 0 {
		fmt.Fprintf(&b, " on %s", t(strings.Join(rep.Netdevs, ",")))
	}
	if rep.PCI != "" {
		fmt.Fprintf(&b, ", PCI %s (%s)", t(rep.PCI), t(rep.Driver))
	}
	fmt.Fprintf(&b, ", node_guid %s, method %s\n", rep.NodeGUID, rep.Method)
	fmt.Fprintf(&b, "destroys: %d QPs, %d MRs of %d processes (%d kernel QPs are re-created)\n", rep.QPs, rep.MRs, len(rep.Holders), rep.KernelQPs)
	for _, h := range rep.Holders {
		fmt.Fprintf(&b, "  pid %d (%s) qps %d mrs %d", h.PID, t(h.Comm), h.QPs, h.MRs)
		if len(h.Files) > 0 {
			fmt.Fprintf(&b, " holds %s", t(strings.Join(h.Files, ",")))
		}
		if h.ContainerID != "" {
			fmt.Fprintf(&b, " container %s", t(owner.ShortContainerID(h.ContainerID)))
		}
		b.WriteString("\n")
	}
	if len(rep.Unreadable) > 0 {
		fmt.Fprintf(&b, "  (the fds of %d processes could not be read: more may hold it)\n", len(rep.Unreadable))
	}
	if !rep.Disassociate && len(rep.Holders) > 0 && rep.Method != reset.MethodNetdevBounce {
		fmt.Fprintf(&b, "%s cannot cut its users off: the removal waits until every holder has closed the device\n", rep.Kind)
	}
	if rep.PersistentName != "" {
		fmt.Fprintf(&b, "name: %s (%s policy), applied again after the reset\n", t(rep.PersistentName), rep.NamePolicy)
	}
	switch rep.Result {
	case reset.ResultPlanned:
		b.WriteString("nothing changed\n")
	case reset.ResultDone:
		fmt.Fprintf(&b, "done in %.2fs", rep.DurationSeconds)
		if rep.GraceSeconds > 0 {
			fmt.Fprintf(&b, " (%.2fs of grace)", rep.GraceSeconds)
		}
		b.WriteString("\n")
	default:
		fmt.Fprintf(&b, "%s after %.2fs\n", rep.Result, rep.DurationSeconds)
	}
	for _, h := range rep.WaitingOn {
		fmt.Fprintf(&b, "still held by pid %d (%s)\n", h.PID, t(h.Comm))
	}
	for _, e := range rep.Events {
		fmt.Fprintf(&b, "event: %s %s %s (%s)\n", e.Time.Format("15:04:05.000"), e.Kind, t(e.Device), e.Source)
	}
	if a := rep.After; a != nil {
		same := "same node_guid"
		if !a.SameGUID {
			same = "node_guid changed to " + a.NodeGUID.String()
		}
		fmt.Fprintf(&b, "back: %s, %s", t(a.Device), same)
		for _, p := range a.Ports {
			fmt.Fprintf(&b, ", port %d %s", p.Port, p.State)
			if p.Why != "" {
				fmt.Fprintf(&b, " (%s)", t(p.Why))
			}
		}
		if a.Name != nil {
			fmt.Fprintf(&b, ", name %s (%s)", t(a.Name.To), t(a.Name.Reason))
		}
		b.WriteString("\n")
	}
	if rep.State != "" {
		fmt.Fprintf(&b, "state: %s\n", t(rep.State))
	}
	if rep.Next != "" {
		fmt.Fprintf(&b, "next: %s\n", t(rep.Next))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
