package main

import (
	"context"
	"errors"

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
Other users' processes are read only with root or CAP_SYS_PTRACE; the
processes that could not be read are counted (holders_unreadable).`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] != "show" && args[0] != "list" {
				args = append([]string{"show"}, args...)
			}
			name := ""
			if len(args) == 2 {
				name = args[1]
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
