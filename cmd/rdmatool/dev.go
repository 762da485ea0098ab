package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/spf13/cobra"
)

func newDevCmd(g *globals) *cobra.Command {
	var counters bool
	cmd := &cobra.Command{
		Use:     "dev [show [DEV]]",
		Aliases: []string{"device"},
		Short:   "Show RDMA devices",
		Long: `Show RDMA devices as netlink reports them: index, name, node type, firmware,
node and system image GUIDs, protocol.

With -d (details), also what sysfs says (board id, HCA type, the PCI function
with its driver, ids and reset methods, the uverbs device, each port's
state, physical state, rate, link layer and netdev), the processes holding
each device (through its uverbs device, or through rdma_cm with resources on
it) with pid, comm, cgroup, container id and the QPs, rdma_cm IDs and verbs
contexts each owns, and the zombie contexts: processes holding the deleted
uverbs node of an unregistered device with no context on any device. Port
counters are printed with --counters; -d -j always has them, and prints one
object: {"devices":[...],"zombie_contexts":[...],"holders_unreadable":[...]}.
Other users' processes are read only with root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE; the
processes that could not be read are counted (holders_unreadable).`,
		Args: func(_ *cobra.Command, args []string) error {
			_, err := devArg(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := devArg(args)
			if err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			devs, host, err := selectDevices(cmd.Context(), c, name)
			if err != nil {
				return err
			}
			if g.details {
				rep, err := readDevDetails(cmd.Context(), c, devs, host, g.sysRoot(), g.procRoot(), g.logger())
				if err != nil {
					return err
				}
				if g.json {
					return g.renderJSON(cmd.OutOrStdout(), rep)
				}
				return renderDevDetails(cmd.OutOrStdout(), rep, counters)
			}
			lw := newListWriter(cmd.OutOrStdout(), g)
			for _, d := range devs {
				if err := lw.row(devRowOf(d)); err != nil {
					return err
				}
			}
			return lw.close()
		},
	}
	cmd.Flags().BoolVar(&counters, "counters", false, "with -d, print the port counters")
	return cmd
}

// devArg reads dev's words, [show|list] [DEV]: the device named, "" for
// all. A second device, or a word after the device, is refused: the
// command shows one device or all.
func devArg(args []string) (string, error) {
	if len(args) > 0 && (args[0] == "show" || args[0] == "list") {
		args = args[1:]
	}
	switch len(args) {
	case 0:
		return "", nil
	case 1:
		return args[0], rowfilter.CheckDevice(args[0])
	}
	return "", fmt.Errorf("dev: %s and %s: give one device, or none for all", quote.String(args[0]), quote.String(args[1]))
}

// selectDevices lists every device (host) and returns them all, or only
// the one called name; no device at all is an error.
func selectDevices(ctx context.Context, c *rdmanl.Client, name string) (devs, host []rdmanl.Device, err error) {
	host, err = c.Devices(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(host) == 0 {
		return nil, nil, errors.New("no RDMA devices")
	}
	if name == "" {
		return host, host, nil
	}
	d, err := rdmanl.FindDevice(host, name)
	if err != nil {
		return nil, nil, err
	}
	return []rdmanl.Device{d}, host, nil
}
