package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"runtime/debug"
	"strings"

	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/internal/quote"
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
Numbers take ranges and lists: lqpn 0-6, pid 10,20-30. Words take
lists of the kernel's names, as the rows print them (state ERR,SQE); a
name that is none of them is an error that lists them. Filters are
ANDed: one given again narrows it (lqpn 0-10 lqpn 6-20), and two that
share no value (state ERR state INIT) are an error. A number beyond the
field's range is an error. link or dev selects one device, once. --raw asks the kernel for the provider's raw
QP/CQ/MR/SRQ context (needs CAP_NET_ADMIN). A qp or mr row names the
kernel ULP it serves (ulp): for a QP rdma_cm made, the module its rdma_cm
ID or SRQ names; for a kernel MR, the module that allocated its PD
(rds_rdma, nvme_rdma), but ib_core's own.`

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

// resRequest is a parsed `res` command line: the filter, and the device
// (and port) the link or dev filter selects.
type resRequest struct {
	flt  rowfilter.Filter
	dev  string // "" for every device
	port uint32 // 0 for every port
}

// resObjects are the resource types with the row their filters name, the
// kernel's names for their enumerated fields, and the selectors each
// takes (qp and cm_id rows have a port: link first).
var resObjects = map[string]rowfilter.Spec{
	"qp": {Row: qpRow{}, Selectors: []string{"link", "dev"}, Enums: map[string]func() []string{
		"type": byteEnum[rdmanl.QPType], "state": byteEnum[rdmanl.QPState], "path_mig_state": byteEnum[rdmanl.PathMigState]}},
	"cq":  {Row: cqRow{}, Selectors: []string{"dev", "link"}, Enums: map[string]func() []string{"poll_ctx": byteEnum[rdmanl.PollCtx]}},
	"mr":  {Row: mrRow{}, Selectors: []string{"dev", "link"}},
	"pd":  {Row: pdRow{}, Selectors: []string{"dev", "link"}},
	"ctx": {Row: ctxRow{}, Selectors: []string{"dev", "link"}},
	"srq": {Row: srqRow{}, Selectors: []string{"dev", "link"}, Enums: map[string]func() []string{"type": byteEnum[rdmanl.SRQType]}},
	"cm_id": {Row: cmIDRow{}, Selectors: []string{"link", "dev"}, Enums: map[string]func() []string{
		"qp_type": byteEnum[rdmanl.QPType], "state": byteEnum[rdmanl.CMState], "ps": portSpaces}},
}

// byteEnum lists the names of an enum the kernel sends in a byte, in the
// order of their values, as rdmanl prints them (the rows' words): every
// value's String but those it prints as "unknown(N)".
func byteEnum[E interface {
	~uint8
	String() string
}]() []string {
	var names []string
	for v := range 256 {
		if s := E(v).String(); !strings.HasPrefix(s, "unknown(") {
			names = append(names, s)
		}
	}
	return names
}

// portSpaces lists the rdma_cm port spaces rdmanl names. The kernel's are
// 16-bit (enum rdma_ucm_port_space, include/uapi/rdma/rdma_user_cm.h).
func portSpaces() []string {
	var names []string
	for v := range 1 << 16 {
		if s := rdmanl.PortSpace(v).String(); !strings.HasPrefix(s, "unknown(") {
			names = append(names, s)
		}
	}
	return names
}

// parseRes checks everything the user typed, before netlink is opened.
func parseRes(object string, args []string) (resRequest, error) {
	var r resRequest
	if object == "summary" {
		if len(args) > 0 {
			return r, fmt.Errorf("res summary takes no filters")
		}
		return r, nil
	}
	o, ok := resObjects[object]
	if !ok {
		return r, fmt.Errorf("unknown resource %s (want summary, qp, cq, mr, pd, ctx, srq or cm_id)", quote.String(object))
	}
	flt, extras, err := rowfilter.Parse(o, args)
	if err != nil {
		return r, err
	}
	r.flt = flt
	for name, sel := range extras { // one at most
		if sel == "" { // not every device
			return r, fmt.Errorf("%s \"\": no device name", name)
		}
		if r.dev, r.port, err = rowfilter.ParseLink(sel); err != nil {
			return r, err
		}
	}
	return r, nil
}

func showRes(ctx context.Context, cmd *cobra.Command, g *globals, object string, args []string, opts rdmanl.DumpOptions) error {
	req, err := parseRes(object, args)
	if err != nil {
		return err
	}
	// A listing streams: it holds a few MiB however many entries it
	// prints, so the collector may let the heap grow by 4x what is live
	// between cycles (two or three collections for 60k QPs, not dozens,
	// and fewer fresh pages to fault in); GOGC, when set, wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	procs, _ := owner.NewResolver(g.procRoot()) // without /proc, comm stays empty
	lw := newListWriter(cmd.OutOrStdout(), g)
	devs, _, err := selectDevices(ctx, c, req.dev)
	if err != nil {
		return err
	}
	opts.Port = req.port
	log := g.logger()
	switch object {
	case "summary":
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
		err = listQPs(ctx, c, req.flt, devs, opts, procs, g.json, lw, log)
	case "cq":
		err = listRes(ctx, req.flt, devs, opts, c.CQs, func(v rdmanl.CQ) cqRow { return cqRowOf(v, procs) }, lw, log)
	case "mr":
		err = listRes(ctx, req.flt, devs, opts, c.MRs, func(v rdmanl.MR) mrRow { return mrRowOf(v, procs) }, lw, log)
	case "pd":
		err = listRes(ctx, req.flt, devs, opts, c.PDs, func(v rdmanl.PD) pdRow { return pdRowOf(v, procs) }, lw, log)
	case "ctx":
		err = listRes(ctx, req.flt, devs, opts, c.Contexts, func(v rdmanl.Context) ctxRow { return ctxRowOf(v, procs) }, lw, log)
	case "srq":
		err = listRes(ctx, req.flt, devs, opts, c.SRQs, func(v rdmanl.SRQ) srqRow { return srqRowOf(v, procs) }, lw, log)
	case "cm_id":
		err = listRes(ctx, req.flt, devs, opts, c.CMIDs, func(v rdmanl.CMID) cmIDRow { return cmIDRowOf(v, procs) }, lw, log)
	}
	if err != nil {
		return err
	}
	return lw.close()
}

// qpDumps are the dumps a QP listing makes; *rdmanl.Client has them.
type qpDumps interface {
	CMIDs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error]
	SRQs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.SRQ, error]
	QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error]
}

// listQPs streams the QPs of devs through the filter into the listing,
// each with its ULP named (ulpIndex): a device's rdma_cm IDs, SRQs and QPs
// are dumped once each, the SRQs serving the QP dump's join too. Rows for
// JSON (jsonRows) leave out the text output's words.
func listQPs(ctx context.Context, nl qpDumps, flt rowfilter.Filter, devs []rdmanl.Device, opts rdmanl.DumpOptions,
	procs *owner.Resolver, jsonRows bool, lw *listWriter, log interface{ Warn(string, ...any) }) error {
	for _, d := range devs {
		ulps, srqs, err := ulpIndex(ctx, nl, d, log)
		if err != nil {
			return err
		}
		conv := func(v rdmanl.QP) qpRow { return qpRowOf(v, procs, ulps) }
		if jsonRows {
			conv = func(v rdmanl.QP) qpRow { return qpRowData(v, procs, ulps) }
		}
		o := opts
		o.SRQs = &srqs
		if err := listRes(ctx, flt, []rdmanl.Device{d}, o, nl.QPs, conv, lw, log); err != nil {
			return err
		}
	}
	return nil
}

// ulpIndex reads dev's rdma_cm IDs and SRQs, which name the ULPs of the
// QPs rdma_cm created, and returns the SRQs for the QP dump's join too.
// Without either the QPs are listed all the same, with a warning and no
// ULP names. An SRQ dump that failed still serves the join where
// rdmanl.SRQJoinable says so; otherwise its error ends the listing.
func ulpIndex(ctx context.Context, nl qpDumps, dev rdmanl.Device, log interface{ Warn(string, ...any) }) (rdmanl.ULPIndex, []rdmanl.SRQ, error) {
	named := true
	var ids []rdmanl.CMID
	for id, err := range nl.CMIDs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			log.Warn("no ULP names: cannot read the rdma_cm IDs", "device", dev.Name, "err", err)
			named = false
			break
		}
		ids = append(ids, id)
	}
	var srqs []rdmanl.SRQ
	for srq, err := range nl.SRQs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			if named {
				log.Warn("no ULP names: cannot read the SRQs", "device", dev.Name, "err", err)
				named = false
			}
			if !rdmanl.SRQJoinable(err) {
				return rdmanl.ULPIndex{}, nil, err
			}
			break
		}
		srqs = append(srqs, srq)
	}
	if !named {
		return rdmanl.ULPIndex{}, srqs, nil
	}
	return rdmanl.NewULPIndex(ids, srqs), srqs, nil
}

type dumpFunc[T any] func(context.Context, rdmanl.Device, rdmanl.DumpOptions) iter.Seq2[T, error]

// listRes streams one resource type of devs through the filter into the
// listing. Malformed entries the kernel sent are skipped with a warning
// that counts them.
func listRes[T, R any](ctx context.Context, flt rowfilter.Filter, devs []rdmanl.Device, opts rdmanl.DumpOptions,
	dump dumpFunc[T], conv func(T) R, lw *listWriter, log interface{ Warn(string, ...any) }) error {
	var row R // one for the listing: the writer and the filter take its address, not a copy per entry
	for _, d := range devs {
		for v, err := range dump(ctx, d, opts) {
			if err != nil {
				var pe *rdmanl.PartialError
				if errors.As(err, &pe) {
					log.Warn("skipped malformed entries", "device", d.Name, "count", pe.Skipped, "err", pe.First)
					continue
				}
				return err
			}
			row = conv(v)
			if !flt.Empty() && !flt.Match(&row) {
				continue
			}
			if err := lw.row(&row); err != nil {
				return err
			}
		}
	}
	return nil
}
