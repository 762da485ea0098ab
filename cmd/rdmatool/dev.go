package main

import (
	"context"
	"errors"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/spf13/cobra"
)

func newDevCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "dev [show [DEV]]",
		Aliases: []string{"device"},
		Short:   "Show RDMA devices",
		Args:    cobra.MaximumNArgs(2),
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
			devs, err := selectDevices(cmd.Context(), c, name)
			if err != nil {
				return err
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
	return cmd
}

// selectDevices lists every device, or only the one called name; no device
// at all is an error.
func selectDevices(ctx context.Context, c *rdmanl.Client, name string) ([]rdmanl.Device, error) {
	devs, err := c.Devices(ctx)
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, errors.New("no RDMA devices")
	}
	if name == "" {
		return devs, nil
	}
	d, err := rdmanl.FindDevice(devs, name)
	if err != nil {
		return nil, err
	}
	return []rdmanl.Device{d}, nil
}
