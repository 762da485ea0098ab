package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rdmatool/rdmatool/cmd/internal/udevrename"
	"github.com/rdmatool/rdmatool/docs"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/spf13/cobra"
)

// renameConn is the kernel connection rename uses: *rdmanl.Client, or a
// fake in tests.
type renameConn = udevrename.Conn

// dialRename opens the RDMA netlink client for rename.
func dialRename(g *globals) func() (renameConn, error) {
	return func() (renameConn, error) {
		c, err := g.dial()
		if err != nil {
			return nil, err // not a nil *rdmanl.Client in an interface
		}
		return c, nil
	}
}

// renameFlags are the flags rename and rename udev share.
type renameFlags struct {
	policies string
	mapFile  string
	force    bool
}

func (f *renameFlags) options(cmd *cobra.Command) (rename.Options, error) {
	return udevrename.Flags{Policies: f.policies, MapFile: f.mapFile, MapNamed: cmd.Flags().Changed("map"), Force: f.force}.Options()
}

func newRenameCmd(g *globals) *cobra.Command { return newRenameCmdDial(g, dialRename(g)) }

// newRenameCmdDial is newRenameCmd with the kernel connection it opens,
// after every argument and the map file have been checked.
func newRenameCmdDial(g *globals, dial func() (renameConn, error)) *cobra.Command {
	var f renameFlags
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "rename [DEV|--all]",
		Short: "Rename RDMA devices persistently, by node GUID, map file or PCI address",
		Long:  docs.Page("naming"),
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return errors.New("rename: name one device or use --all")
			}
			o, err := f.options(cmd)
			if err != nil {
				return err
			}
			o.All, o.Devices, o.DryRun = all, args, dryRun
			job, err := rename.Prepare(cmd.Context(), o)
			if err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer c.Close() //nolint:errcheck // the renames are done or failed before it closes
			rep, err := job.Run(cmd.Context(), c)
			if rerr := renderRenames(cmd.OutOrStdout(), g, rep); rerr != nil {
				return rerr
			}
			return err
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.policies, "policy", rename.DefaultPolicies, "policies to try, in order: map, guid, pci, keep")
	pf.StringVar(&f.mapFile, "map", rename.DefaultMapFile, "map file of \"GUID NAME\" lines (the default may be missing)")
	pf.BoolVar(&f.force, "force", false, "also rename devices whose name user space assigned")
	cmd.Flags().BoolVar(&all, "all", false, "rename every device")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the renames without making them")
	cmd.AddCommand(newRenameUdevCmd(&f, dial))
	return cmd
}

// newRenameUdevCmd is what packaging/udev's rule runs on a device's add
// event: it prints nothing, and one line on stderr when it fails.
func newRenameUdevCmd(f *renameFlags, dial func() (renameConn, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "udev [flags] -- KERNEL_NAME",
		Short: "Rename one new device (run by the udev rule)",
		Long: `Rename one new device, as the udev rule does for each device added:

  rdmatool rename udev -- KERNEL_NAME

The packaged rule runs the same rename as /lib/udev/rdmatool-udev-rename,
with the same flags, in a program that starts faster. Flags go before "--", so a device name that starts with '-' is not read as
one. It prints nothing and exits 0 when it renamed the device or had
nothing to do; on failure it prints one line and exits 2. Run by udev
(DEVPATH set), it refuses a KERNEL_NAME other than the event's device.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.options(cmd)
			if err != nil {
				return err
			}
			return udevrename.Run(cmd.Context(), o, args[0], os.Getenv("DEVPATH"), dial)
		},
	}
}

// renderRenames prints a rename report: one JSON object, or a line per
// device: "rxe1 -> rocex000000fffe000a01 (guid 0000:00ff:fe00:0a01)", the
// names escaped (quote.Text: the kernel takes any byte in a name).
func renderRenames(w io.Writer, g *globals, rep rename.Report) error {
	if g.json {
		return g.renderJSON(w, rep)
	}
	t := quote.Text
	var b strings.Builder
	for _, r := range rep.Renames {
		switch r.Status {
		case rename.StatusRenamed:
			fmt.Fprintf(&b, "%s -> %s (%s)\n", t(r.From), t(r.To), t(r.Reason))
		case rename.StatusPlanned:
			fmt.Fprintf(&b, "%s -> %s (%s; dry run)\n", t(r.From), t(r.To), t(r.Reason))
		case rename.StatusUnchanged:
			fmt.Fprintf(&b, "%s unchanged (%s)\n", t(r.From), t(r.Reason))
		case rename.StatusSkipped:
			fmt.Fprintf(&b, "%s skipped (%s)\n", t(r.From), t(r.Reason))
		case rename.StatusFailed:
			fmt.Fprintf(&b, "%s -> %s failed (%s): %s\n", t(r.From), t(r.To), t(r.Reason), t(r.Error))
		}
	}
	if g.details {
		for _, s := range rep.Steps {
			tmp := ""
			if s.Temporary {
				tmp = " (temporary)"
			}
			fmt.Fprintf(&b, "step: index %d %s -> %s%s\n", s.Index, t(s.From), t(s.To), tmp)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
