package main

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/spf13/cobra"
)

func newLinkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "link",
		Short: "Show RDMA ports; add and delete software RDMA devices",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return showLinks(cmd, g, "")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "show [DEV[/PORT]]",
		Aliases: []string{"list"},
		Short:   "Show ports with their state and netdev",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel := ""
			if len(args) == 1 {
				sel = args[0]
			}
			return showLinks(cmd, g, sel)
		},
	}, &cobra.Command{
		Use:   "add NAME type rxe|siw netdev IF",
		Short: "Create a soft RoCE (rxe) or soft iWARP (siw) device on a netdev",
		Args:  cobra.ExactArgs(5),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] != "type" || args[3] != "netdev" {
				return fmt.Errorf("usage: rdmatool link add NAME type rxe|siw netdev IF")
			}
			if args[2] != "rxe" && args[2] != "siw" {
				return fmt.Errorf("link type %s: only rxe and siw devices can be added", quote.String(args[2]))
			}
			// The kernel numbers a name with one %d in it (rxe%d); it is
			// checked as the name it becomes.
			if err := rename.ValidateName(strings.Replace(args[0], "%d", "0", 1)); err != nil {
				return fmt.Errorf("link add %s: %w", quote.String(args[0]), err)
			}
			if err := checkNetdevName(args[4]); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			return c.LinkAdd(cmd.Context(), args[0], args[2], args[4])
		},
	}, &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"del"},
		Short:   "Delete a software RDMA device",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rowfilter.CheckDevice(args[0]); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			d, err := c.Device(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.LinkDelete(cmd.Context(), d)
		},
	})
	return cmd
}

// checkNetdevName refuses what the kernel's dev_valid_name refuses: an
// empty name, one of 16 bytes or more, "." and "..", '/', ':' and
// whitespace.
func checkNetdevName(name string) error {
	switch {
	case name == "", len(name) >= 16, name == ".", name == "..",
		strings.ContainsAny(name, "/:"), strings.IndexFunc(name, unicode.IsSpace) >= 0:
		return fmt.Errorf("netdev %s: not a network interface name", quote.String(name))
	}
	return nil
}

func showLinks(cmd *cobra.Command, g *globals, sel string) error {
	devName, port := "", uint32(0)
	if sel != "" {
		var err error
		if devName, port, err = rowfilter.ParseLink(sel); err != nil {
			return err
		}
	}
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	devs, _, err := selectDevices(cmd.Context(), c, devName)
	if err != nil {
		return err
	}
	lw := newListWriter(cmd.OutOrStdout(), g)
	for _, d := range devs {
		ports, err := c.Ports(cmd.Context(), d)
		if err != nil {
			return err
		}
		for _, p := range ports {
			if port != 0 && p.Index != port {
				continue
			}
			if err := lw.row(linkRowOf(p)); err != nil {
				return err
			}
		}
	}
	return lw.close()
}
