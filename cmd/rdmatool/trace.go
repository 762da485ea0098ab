package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/watch"
	"github.com/spf13/cobra"
)

// traceLong is the trace command's help. The JSON field list is read from
// the json tags of bpf.EventJSON, the type that defines a -j line.
func traceLong() string {
	fields := "JSON fields, always present: " + strings.Join(jsonFieldNames(reflect.TypeFor[bpf.EventJSON]()), ", ") +
		`. time is RFC 3339 UTC. qp_type is "" on device events, new_state "" when a modify did ` +
		`not change the state, cur_state the QP's state as the provider saw it when a modify began (where ` +
		`the provider tells ib_modify_qp_is_ok: rxe, mlx4, mlx5 and others; "" elsewhere): ERR where the ` +
		`provider moved the QP to Error itself, event "" unless kind is qp_event or device_event; pid 0 and comm "" on ` +
		`async events, which run in no particular task. kern_owner is the module that created a ` +
		`kernel QP, "" for user QPs.`
	sites := "A qp_create line says where the QP was created, when the probes saw it. For a user QP, " +
		"JSON adds " + strings.Join(jsonFieldNames(reflect.TypeFor[userSiteJSON]()), ", ") + ": the application's " +
		`call of site_via, the outermost of ibv_create_qp, rdma_create_qp, rdma_create_qp_ex and rdma_create_ep ` +
		`(uprobes on libibverbs and librdmacm); site is FILE!FUNCTION+0xOFFSET (or the file's offset and build ` +
		`ID where it has no symbols, "?" when the process was gone), site_file the file as the process maps it, ` +
		`site_build_id its GNU build ID, site_offset the call instruction's offset in it, stack (where the ` +
		`program has frame pointers) the calls above it, its caller's first. For a kernel QP, JSON ` +
		`adds ` + strings.Join(jsonFieldNames(reflect.TypeFor[kernelSiteJSON]()), ", ") + `: the kernel ` +
		`functions that led to the create, innermost first, as FUNCTION+0xOFFSET [MODULE] (an address in hex ` +
		`where kallsyms names none). A text line ends in "at SITE" (with -d, "via FUNCTION" after a user ` +
		`site). A QP made through a provider directly (ibv_create_qp_ex asking for more than ` +
		`ibv_create_qp) has no site, nor has a process's first QP made through its own copy of a library ` +
		`(a container's): the uprobes are attached to it then. --no-sites leaves the sites out and ` +
		`attaches no uprobes.`
	return `Trace the queue pair lifecycle and device events on ib_core with eBPF: QP
create, modify and destroy, async QP events (LAST_WQE_REACHED among them),
device events, register, unregister and rename, and drains. One line per
event (one JSON object per line with -j) until interrupted or --duration.

When the probes are attached, a line saying so goes to stderr, with the
verbs libraries that the creation-site uprobes are on, or why some or all
are missing. At the end the number of events that could not be delivered
is printed, and the number of creates whose stack the probes' stack map
could not store (its bucket held another): on stderr, or as a last JSON
line {"kind":"summary",...} with -j. With -d, the time each program spent
in the kernel follows on stderr (counted while sysctl
kernel.bpf_stats_enabled is 1).

` + wrapWords(fields, 76) + `

` + wrapWords(sites, 76) + `

Needs CAP_BPF and CAP_PERFMON (or root) and a kernel with BTF. fentry probes
pin ib_core while attached (modprobe -r fails with "in use"); --kprobes
avoids that.`
}

// jsonFieldNames lists the JSON names of a struct type's fields, in order.
func jsonFieldNames(rt reflect.Type) []string {
	var names []string
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// wrapWords breaks s into lines of at most width characters, at spaces (a
// longer word gets a line of its own).
func wrapWords(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

func newTraceCmd(g *globals) *cobra.Command {
	var (
		o        bpf.Options
		qpns     []uint
		pids     []uint
		duration time.Duration
		bufMiB   int
		noSites  bool
	)
	cmd := &cobra.Command{
		Use:   "trace [--dev DEV] [--qpn N]... [--pid P]... [--duration D]",
		Short: "Trace the QP lifecycle and device events on ib_core (eBPF)",
		Long:  traceLong(),
		Args:  noArgs,
		// The flags, checked before the probes load (a test runs the
		// checks without them).
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dev") {
				if err := rowfilter.CheckDevice(o.Device); err != nil {
					return fmt.Errorf("--dev: %w", err)
				}
			}
			if duration != 0 { // 0: until interrupted
				if err := checkDurations(durationFlag{name: "duration", value: duration, min: 100 * time.Millisecond}); err != nil {
					return err
				}
			}
			var err error
			if o.QPNs, err = uint32s("--qpn", qpns); err != nil {
				return err
			}
			if o.PIDs, err = uint32s("--pid", pids); err != nil {
				return err
			}
			if bufMiB < 1 || bufMiB > 1024 || bufMiB&(bufMiB-1) != 0 {
				return fmt.Errorf("--buffer-mib %d: want a power of two from 1 to 1024", bufMiB)
			}
			o.BufferBytes = bufMiB << 20
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Sites = !noSites
			return runTrace(cmd.Context(), g, cmd.OutOrStdout(), o, duration)
		},
	}
	f := cmd.Flags()
	newOnceFlag(f, &o.Device, "dev", "", "only events of this device")
	f.UintSliceVar(&qpns, "qpn", nil, "only QP events of these QP numbers")
	f.UintSliceVar(&pids, "pid", nil, "only events of these processes")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	f.BoolVar(&o.Kprobes, "kprobes", false, "use kprobes only (they do not pin ib_core)")
	f.BoolVar(&noSites, "no-sites", false, "no creation sites: neither uprobes on the verbs libraries nor kernel stacks")
	f.IntVar(&bufMiB, "buffer-mib", 4, "ring buffer size in MiB, a power of two (4 MiB holds about 20,000 events)")
	return cmd
}

// uint32s converts a flag's numbers, which the kernel keeps in 32 bits.
func uint32s(flag string, vs []uint) ([]uint32, error) {
	out := make([]uint32, 0, len(vs))
	for _, v := range vs {
		if v > math.MaxUint32 {
			return nil, fmt.Errorf("%s %d: out of range", flag, v)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

// runTrace streams events until ctx ends or the duration is over. It returns
// ctx's error when interrupted, so the exit status is 130.
func runTrace(ctx context.Context, g *globals, stdout io.Writer, o bpf.Options, duration time.Duration) error {
	tr, err := bpf.Open(g.logger(), o)
	if err != nil {
		return err // main adds the hint its cause calls for
	}
	defer tr.Close()
	note := "; sites: off (--no-sites)"
	if o.Sites {
		note = sitesNote(tr.Sites())
	}
	fmt.Fprintln(g.stderr, "rdmatool trace: "+attachedLine(tr.Probes(), tr.Mode())+note)
	sites := watch.NewSites(g.logger(), "/proc")

	runCtx := ctx
	if duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	w := bufio.NewWriterSize(stdout, 64*1024)
	var (
		events uint64
		line   []byte
	)
	for ev, err := range tr.Events(runCtx) {
		if err != nil {
			return err
		}
		events++
		site := eventSiteOf(sites, &ev)
		if g.json {
			line = append(site.appendJSON(ev.AppendJSON(line[:0])), '\n')
		} else {
			line = appendTraceText(line[:0], ev, site.short(), g.details)
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		// Output is flushed once the ring buffer is drained: batched
		// under load, at once when events are few.
		if tr.Backlog() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	st, err := tr.Stats()
	if err != nil {
		return err
	}
	stacks, err := tr.StackStats()
	if err != nil {
		return err
	}
	if err := writeTraceSummary(w, g, events, st, stacks.Refused); err != nil {
		return err
	}
	if g.details {
		if err := writeProgramStats(g, tr); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return ctx.Err() // nil after --duration; canceled when interrupted
}

// attachedLine says which probes are attached, how, and which are not.
func attachedLine(probes []bpf.Probe, mode bpf.Mode) string {
	n := 0
	var skipped, fallback []string
	for _, p := range probes {
		switch {
		case p.Mode == bpf.ModeNone:
			skipped = append(skipped, p.Function+" ("+p.Note+")")
		case p.Mode == bpf.ModeKprobe && p.Note != "":
			fallback = append(fallback, p.Function)
		}
		if p.Mode != bpf.ModeNone {
			n++
		}
	}
	line := fmt.Sprintf("attached %d probes (%s)", n, mode)
	if len(fallback) > 0 {
		line += "; kprobe fallback: " + strings.Join(fallback, ", ")
	}
	if len(skipped) > 0 {
		line += "; skipped: " + strings.Join(skipped, ", ")
	}
	return line
}

// sitesNote completes the attach line with where the creation-site
// uprobes are, and why some or all are missing.
func sitesNote(s bpf.Sites) string {
	note := fmt.Sprintf("; sites: uprobes on %d libraries", len(s.Libraries))
	if len(s.Libraries) > 0 {
		note += " (" + quote.Text(strings.Join(s.Libraries, ", ")) + ")"
	}
	if s.Err != nil {
		note += ", missing: " + quote.Text(s.Err.Error())
	}
	return note
}

// appendTraceText appends ev as one text line: the JSON words with hyphens,
// leaving out what does not apply to the event's kind, and "at SITE" where
// the QP was created when site is not "". Names (devices, comm, modules,
// sites) are escaped (quote.AppendText): a task may call itself anything,
// ESC and LF included.
func appendTraceText(b []byte, ev bpf.Event, site string, details bool) []byte {
	b = ev.AppendTime(b)
	b = append(b, ' ')
	b = append(b, ev.Kind.String()...)
	b = append(b, ' ')
	b = quote.AppendText(b, ev.DevName)
	word := func(name, value string) {
		b = append(b, ' ')
		b = append(b, name...)
		b = append(b, ' ')
		b = quote.AppendText(b, value)
	}
	num := func(name string, v int64) {
		b = append(b, ' ')
		b = append(b, name...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	if details {
		num("dev-index", int64(ev.DevIndex))
	}
	if ev.Kind.HasQP() {
		num("qpn", int64(ev.QPN))
		word("qp-type", ev.QPType.String())
		if ev.OnSRQ {
			num("srqn", int64(ev.SRQN))
		}
	}
	if ev.HasState {
		word("new-state", ev.NewState.String())
	}
	if ev.HasCurState {
		word("cur-state", ev.CurState.String())
	}
	if ev.Kind.HasIBEvent() {
		word("event", ev.IBEvent.String())
		num("event-code", int64(ev.IBEvent))
	}
	if ev.Port != 0 {
		num("port", int64(ev.Port))
	}
	if ev.NewName != "" {
		word("new-name", ev.NewName)
	}
	switch ev.Kind {
	case bpf.KindQPCreate, bpf.KindQPModify, bpf.KindQPDestroy, bpf.KindDeviceRegister, bpf.KindDeviceRename:
		num("result", int64(ev.Result))
	case bpf.KindDrainEnd:
		word("duration-seconds", strconv.FormatFloat(ev.Duration.Seconds(), 'f', -1, 64))
	}
	if ev.PID != 0 {
		num("pid", int64(ev.PID))
		if details {
			num("tid", int64(ev.TID))
		}
		word("comm", ev.Comm)
	}
	if ev.KernOwner != "" {
		word("kern-owner", "["+ev.KernOwner+"]")
	}
	if details {
		word("probe", ev.Probe)
	}
	if site != "" {
		word("at", site)
		if details && ev.Via != "" {
			word("via", ev.Via)
		}
	}
	return append(b, '\n')
}

// writeProgramStats prints, on stderr, what each program that ran cost in
// the kernel; the kernel counts only with sysctl kernel.bpf_stats_enabled=1.
func writeProgramStats(g *globals, tr *bpf.Tracer) error {
	ps, err := tr.ProgramStats()
	if err != nil {
		return err
	}
	counted := false
	for _, p := range ps {
		if p.Runs == 0 || p.RunTime == 0 {
			continue
		}
		counted = true
		fmt.Fprintf(g.stderr, "rdmatool trace: program %s: %d runs, %d ns each\n", p.Program, p.Runs, p.RunTime.Nanoseconds()/int64(p.Runs))
	}
	if !counted {
		fmt.Fprintln(g.stderr, "rdmatool trace: no program run time counted (sysctl kernel.bpf_stats_enabled=1 counts it)")
	}
	return nil
}

// traceSummary is the last line of `rdmatool trace -j`.
type traceSummary struct {
	Kind      string `json:"kind"` // "summary"
	Events    uint64 `json:"events"`
	Lost      uint64 `json:"lost"`      // all of the below
	RingFull  uint64 `json:"ring_full"` // ring buffer full
	Missed    uint64 `json:"missed"`    // probe runs the kernel skipped
	Unmatched uint64 `json:"unmatched"` // returns without their entry
	Malformed uint64 `json:"malformed"` // records that did not decode
	// StacksRefused counts the creates delivered without their stack:
	// the stack map's bucket held another stack (bpf.StackStats).
	StacksRefused uint64 `json:"stacks_refused"`
}

func writeTraceSummary(w *bufio.Writer, g *globals, events uint64, st bpf.Stats, stacksRefused uint64) error {
	s := traceSummary{Kind: "summary", Events: events, Lost: st.Total(), RingFull: st.Lost, Missed: st.Missed,
		Unmatched: st.Unmatched, Malformed: st.Malformed, StacksRefused: stacksRefused}
	if g.json {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		w.Write(b)
		return w.WriteByte('\n')
	}
	_, err := fmt.Fprintf(g.stderr, "rdmatool trace: %d events, %d lost (ring buffer full %d, missed %d, unmatched %d, malformed %d), %d stacks not stored\n",
		s.Events, s.Lost, s.RingFull, s.Missed, s.Unmatched, s.Malformed, s.StacksRefused)
	return err
}
