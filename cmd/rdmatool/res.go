package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/spf13/cobra"
)

const resUsage = `rdmatool res [show] [summary]
rdmatool res [show] qp    [link DEV[/PORT]] [lqpn N] [rqpn N] [type T] [state S] [pid N] [pdn N] [srqn N] [comm C] ...
rdmatool res [show] cq    [dev DEV] [cqn N] [pid N] [ctxn N] ...
rdmatool res [show] mr    [dev DEV] [mrn N] [pdn N] [pid N] ...
rdmatool res [show] pd    [dev DEV] [pdn N] [pid N] ...
rdmatool res [show] ctx   [dev DEV] [ctxn N] [pid N] ...
rdmatool res [show] srq   [dev DEV] [srqn N] [type T] [pid N] ...
rdmatool res [show] cm_id [link DEV[/PORT]] [state S] [lqpn N] [pid N] ...
Numbers take ranges and lists: lqpn 0-6, pid 10,20-30. --raw asks the
kernel for the provider's raw QP/CQ/MR/SRQ context (needs CAP_NET_ADMIN).`

func newResCmd(g *globals) *cobra.Command {
	var raw bool
	cmd := &cobra.Command{
		Use:     "res [show] [summary|qp|cq|mr|pd|ctx|srq|cm_id] [FILTER VALUE]...",
		Aliases: []string{"resource"},
		Short:   "Show RDMA resources tracked by the kernel",
		Long:    "Show the resources the kernel tracks (restrack), as iproute2's rdma resource does.\n\n" + resUsage,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (args[0] == "show" || args[0] == "list") {
				args = args[1:]
			}
			object := "summary"
			if len(args) > 0 {
				object, args = strings.ReplaceAll(args[0], "-", "_"), args[1:]
			}
			return showRes(cmd.Context(), cmd, g, object, args, rdmanl.DumpOptions{Raw: raw})
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "dump the provider's raw resource context")
	return cmd
}

// resTarget is what the link/dev filters select.
type resTarget struct {
	devs []rdmanl.Device
	opts rdmanl.DumpOptions
}

func showRes(ctx context.Context, cmd *cobra.Command, g *globals, object string, args []string, opts rdmanl.DumpOptions) error {
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	procs, _ := owner.NewResolver("/proc") // without /proc, comm stays empty
	lw := newListWriter(cmd.OutOrStdout(), g)
	devs, err := selectDevices(ctx, c, "")
	if err != nil {
		return err
	}
	target := func(extras map[string]string) (resTarget, error) {
		t := resTarget{devs: devs, opts: opts}
		sel := extras["link"]
		if sel == "" {
			sel = extras["dev"]
		}
		if sel == "" {
			return t, nil
		}
		name, port, err := parseLink(sel)
		if err != nil {
			return t, err
		}
		d, err := rdmanl.FindDevice(devs, name)
		if err != nil {
			return t, err
		}
		t.devs, t.opts.Port = []rdmanl.Device{d}, port
		return t, nil
	}
	log := g.logger()
	switch object {
	case "summary":
		if len(args) > 0 {
			return fmt.Errorf("res summary takes no filters")
		}
		sums, err := c.Summaries(ctx)
		if err != nil {
			return err
		}
		for _, s := range sums {
			if err := lw.row(summaryRowOf(s)); err != nil {
				return err
			}
		}
	case "qp":
		err = listRes(ctx, args, []string{"link", "dev"}, target, c.QPs, func(v rdmanl.QP) qpRow { return qpRowOf(v, procs) }, lw, log)
	case "cq":
		err = listRes(ctx, args, []string{"dev", "link"}, target, c.CQs, func(v rdmanl.CQ) cqRow { return cqRowOf(v, procs) }, lw, log)
	case "mr":
		err = listRes(ctx, args, []string{"dev", "link"}, target, c.MRs, func(v rdmanl.MR) mrRow { return mrRowOf(v, procs) }, lw, log)
	case "pd":
		err = listRes(ctx, args, []string{"dev", "link"}, target, c.PDs, func(v rdmanl.PD) pdRow { return pdRowOf(v, procs) }, lw, log)
	case "ctx":
		err = listRes(ctx, args, []string{"dev", "link"}, target, c.Contexts, func(v rdmanl.Context) ctxRow { return ctxRowOf(v, procs) }, lw, log)
	case "srq":
		err = listRes(ctx, args, []string{"dev", "link"}, target, c.SRQs, func(v rdmanl.SRQ) srqRow { return srqRowOf(v, procs) }, lw, log)
	case "cm_id":
		err = listRes(ctx, args, []string{"link", "dev"}, target, c.CMIDs, func(v rdmanl.CMID) cmIDRow { return cmIDRowOf(v, procs) }, lw, log)
	default:
		return fmt.Errorf("unknown resource %q (want summary, qp, cq, mr, pd, ctx, srq or cm_id)", object)
	}
	if err != nil {
		return err
	}
	return lw.close()
}

type dumpFunc[T any] func(context.Context, rdmanl.Device, rdmanl.DumpOptions) iter.Seq2[T, error]

// listRes streams one resource type of the selected devices through the
// filter into the listing. Malformed entries the kernel sent are skipped
// with a warning that counts them.
func listRes[T, R any](ctx context.Context, args, extra []string, target func(map[string]string) (resTarget, error),
	dump dumpFunc[T], conv func(T) R, lw *listWriter, log interface{ Warn(string, ...any) }) error {
	var proto R
	flt, extras, err := parseFilter(proto, args, extra...)
	if err != nil {
		return err
	}
	t, err := target(extras)
	if err != nil {
		return err
	}
	for _, d := range t.devs {
		for v, err := range dump(ctx, d, t.opts) {
			if err != nil {
				var pe *rdmanl.PartialError
				if errors.As(err, &pe) {
					log.Warn("skipped malformed entries", "device", d.Name, "count", pe.Skipped, "err", pe.First)
					continue
				}
				return err
			}
			row := conv(v)
			if !flt.match(row) {
				continue
			}
			if err := lw.row(row); err != nil {
				return err
			}
		}
	}
	return nil
}
