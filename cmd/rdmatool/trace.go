package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/spf13/cobra"
)

const traceLong = `Trace the queue pair lifecycle and device events on ib_core with eBPF: QP
create, modify and destroy, async QP events (LAST_WQE_REACHED among them),
device events, register, unregister and rename, and drains. One line per
event (one JSON object per line with -j) until interrupted or --duration.

When the probes are attached, a line saying so goes to stderr. At the end
the number of events that could not be delivered is printed: on stderr, or
as a last JSON line {"kind":"summary",...} with -j. With -d, the time each
program spent in the kernel follows on stderr (counted while sysctl
kernel.bpf_stats_enabled is 1).

JSON fields, always present: kind, time (RFC 3339 UTC), device, dev_index,
qpn, qp_type, srq, srqn, new_state, result, pid, tid, comm, kern_owner,
event, event_code, port, new_name, probe, duration_seconds. qp_type is ""
on device events, new_state "" when a modify did not change the state,
event "" unless kind is qp_event or device_event; pid 0 and comm "" on async
events, which run in no particular task. kern_owner is the module that
created a kernel QP, "" for user QPs.

Needs CAP_BPF and CAP_PERFMON (or root) and a kernel with BTF. fentry probes
pin ib_core while attached (modprobe -r fails with "in use"); --kprobes
avoids that.`

func newTraceCmd(g *globals) *cobra.Command {
	var (
		o        bpf.Options
		qpns     []uint
		pids     []uint
		duration time.Duration
		bufMiB   int
	)
	cmd := &cobra.Command{
		Use:   "trace [--dev DEV] [--qpn N]... [--pid P]... [--duration D]",
		Short: "Trace the QP lifecycle and device events on ib_core (eBPF)",
		Long:  traceLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			return runTrace(cmd.Context(), g, cmd.OutOrStdout(), o, duration)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Device, "dev", "", "only events of this device")
	f.UintSliceVar(&qpns, "qpn", nil, "only QP events of these QP numbers")
	f.UintSliceVar(&pids, "pid", nil, "only events of these processes")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	f.BoolVar(&o.Kprobes, "kprobes", false, "use kprobes only (they do not pin ib_core)")
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
		return traceOpenError(err)
	}
	defer tr.Close()
	fmt.Fprintln(g.stderr, "rdmatool trace: "+attachedLine(tr.Probes(), tr.Mode()))

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
		if g.json {
			line = appendTraceJSON(line[:0], ev)
		} else {
			line = appendTraceText(line[:0], ev, g.details)
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
	if err := writeTraceSummary(w, g, events, st); err != nil {
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

// traceOpenError adds what the user can do about a missing privilege.
func traceOpenError(err error) error {
	switch {
	case errors.Is(err, bpf.ErrNoPrivilege):
		return fmt.Errorf("%w (run as root, or grant CAP_BPF and CAP_PERFMON)", err)
	case errors.Is(err, bpf.ErrNoIBCore):
		return fmt.Errorf("%w (modprobe ib_core, or load an RDMA driver)", err)
	}
	return err
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

// traceRow is the JSON API of `rdmatool trace -j`: one object per event.
type traceRow struct {
	Kind            string  `json:"kind"`
	Time            string  `json:"time"`
	Device          string  `json:"device"`
	DevIndex        uint32  `json:"dev_index"`
	QPN             uint32  `json:"qpn"`
	QPType          string  `json:"qp_type"`
	SRQ             bool    `json:"srq"`
	SRQN            uint32  `json:"srqn"`
	NewState        string  `json:"new_state"`
	Result          int32   `json:"result"`
	PID             uint32  `json:"pid"`
	TID             uint32  `json:"tid"`
	Comm            string  `json:"comm"`
	KernOwner       string  `json:"kern_owner"`
	Event           string  `json:"event"`
	EventCode       uint32  `json:"event_code"`
	Port            uint32  `json:"port"`
	NewName         string  `json:"new_name"`
	Probe           string  `json:"probe"`
	DurationSeconds float64 `json:"duration_seconds"`
}

func traceRowOf(ev bpf.Event) traceRow {
	f := traceFieldsOf(ev)
	return traceRow{
		Kind: ev.Kind.String(), Time: ev.Time.UTC().Format(time.RFC3339Nano), Device: ev.DevName, DevIndex: ev.DevIndex,
		QPN: ev.QPN, QPType: f.qpType, SRQ: ev.OnSRQ, SRQN: ev.SRQN, NewState: f.newState, Result: ev.Result,
		PID: ev.PID, TID: ev.TID, Comm: ev.Comm, KernOwner: ev.KernOwner, Event: f.event, EventCode: f.eventCode,
		Port: ev.Port, NewName: ev.NewName, Probe: ev.Probe, DurationSeconds: ev.Duration.Seconds(),
	}
}

// traceFields are the row fields that depend on the event's kind.
type traceFields struct {
	qpType, newState, event string
	eventCode               uint32
}

func traceFieldsOf(ev bpf.Event) traceFields {
	var f traceFields
	if traceHasQP(ev.Kind) {
		f.qpType = ev.QPType.String()
	}
	if ev.HasState {
		f.newState = ev.NewState.String()
	}
	if ev.Kind == bpf.KindQPEvent || ev.Kind == bpf.KindDeviceEvent {
		f.event, f.eventCode = ev.IBEvent.String(), uint32(ev.IBEvent)
	}
	return f
}

func traceHasQP(k bpf.Kind) bool {
	switch k {
	case bpf.KindQPCreate, bpf.KindQPModify, bpf.KindQPDestroy, bpf.KindQPEvent, bpf.KindDrainStart, bpf.KindDrainEnd:
		return true
	}
	return false
}

// appendTraceJSON appends ev as one JSON object and a newline: the
// traceRow fields in order, written by hand because a trace under churn
// prints thousands of lines a second (TestAppendTraceJSON holds it to
// encoding/json's output).
func appendTraceJSON(b []byte, ev bpf.Event) []byte {
	f := traceFieldsOf(ev)
	b = append(b, `{"kind":`...)
	b = appendJSONString(b, ev.Kind.String())
	b = append(b, `,"time":"`...)
	b = appendTime(b, ev.Time)
	b = append(b, `","device":`...)
	b = appendJSONString(b, ev.DevName)
	b = append(b, `,"dev_index":`...)
	b = strconv.AppendUint(b, uint64(ev.DevIndex), 10)
	b = append(b, `,"qpn":`...)
	b = strconv.AppendUint(b, uint64(ev.QPN), 10)
	b = append(b, `,"qp_type":`...)
	b = appendJSONString(b, f.qpType)
	b = append(b, `,"srq":`...)
	b = strconv.AppendBool(b, ev.OnSRQ)
	b = append(b, `,"srqn":`...)
	b = strconv.AppendUint(b, uint64(ev.SRQN), 10)
	b = append(b, `,"new_state":`...)
	b = appendJSONString(b, f.newState)
	b = append(b, `,"result":`...)
	b = strconv.AppendInt(b, int64(ev.Result), 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(ev.PID), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(ev.TID), 10)
	b = append(b, `,"comm":`...)
	b = appendJSONString(b, ev.Comm)
	b = append(b, `,"kern_owner":`...)
	b = appendJSONString(b, ev.KernOwner)
	b = append(b, `,"event":`...)
	b = appendJSONString(b, f.event)
	b = append(b, `,"event_code":`...)
	b = strconv.AppendUint(b, uint64(f.eventCode), 10)
	b = append(b, `,"port":`...)
	b = strconv.AppendUint(b, uint64(ev.Port), 10)
	b = append(b, `,"new_name":`...)
	b = appendJSONString(b, ev.NewName)
	b = append(b, `,"probe":`...)
	b = appendJSONString(b, ev.Probe)
	b = append(b, `,"duration_seconds":`...)
	b = appendJSONFloat(b, ev.Duration.Seconds())
	return append(b, "}\n"...)
}

// appendTime appends t in UTC as time.RFC3339Nano does, without its
// general-purpose layout parsing: events come thousands a second.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		b = append(b, '.')
		b = appendDigits(b, ns, digits)
	}
	return append(b, 'Z')
}

// appendDigits appends v, 0 <= v < 10^width, zero-padded to width digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// appendJSONString appends s as a JSON string. Names from the kernel are
// plain ASCII; anything else goes through encoding/json, which escapes it
// the same way.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json does: plain decimals, and
// exponents only for very small or large values (left to encoding/json).
func appendJSONFloat(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		q, _ := json.Marshal(f) // finite: durations are never NaN
		return append(b, q...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendTraceText appends ev as one text line: the JSON words with hyphens,
// leaving out what does not apply to the event's kind.
func appendTraceText(b []byte, ev bpf.Event, details bool) []byte {
	f := traceFieldsOf(ev)
	b = appendTime(b, ev.Time)
	b = append(b, ' ')
	b = append(b, ev.Kind.String()...)
	b = append(b, ' ')
	b = append(b, ev.DevName...)
	word := func(name, value string) {
		b = append(b, ' ')
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, value...)
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
	if f.qpType != "" {
		num("qpn", int64(ev.QPN))
		word("qp-type", f.qpType)
		if ev.OnSRQ {
			num("srqn", int64(ev.SRQN))
		}
	}
	if f.newState != "" {
		word("new-state", f.newState)
	}
	if f.event != "" {
		word("event", f.event)
		num("event-code", int64(f.eventCode))
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
}

func writeTraceSummary(w *bufio.Writer, g *globals, events uint64, st bpf.Stats) error {
	s := traceSummary{Kind: "summary", Events: events, Lost: st.Total(), RingFull: st.Lost, Missed: st.Missed,
		Unmatched: st.Unmatched, Malformed: st.Malformed}
	if g.json {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		w.Write(b)
		return w.WriteByte('\n')
	}
	_, err := fmt.Fprintf(g.stderr, "rdmatool trace: %d events, %d lost (ring buffer full %d, missed %d, unmatched %d, malformed %d)\n",
		s.Events, s.Lost, s.RingFull, s.Missed, s.Unmatched, s.Malformed)
	return err
}
