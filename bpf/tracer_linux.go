//go:build linux && (amd64 || arm64)

package bpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Tracer holds the attached probes and the ring buffer they write to.
// Events has one consumer at a time; Stats, StackStats, Mode, Probes and
// Close may be called from any goroutine.
type Tracer struct {
	log    *slog.Logger
	opts   Options
	dec    decoder
	maps   map[string]*ebpf.Map // every map of the object, shared by all programs
	events *ebpf.Map
	counts *ebpf.Map
	// waits is the reader_waits flag: whether the next record wakes the
	// reader (Events).
	waits  *ebpf.Map
	reader *ringbuf.Reader
	progs  []program
	links  []link.Link
	probes []Probe
	// memlock is why RLIMIT_MEMLOCK could not be raised, or nil.
	memlock error
	// With Options.Sites: the uprobes on the verbs libraries, and the two
	// generations of stack maps with the stacks read from them.
	sites  *sites
	stacks *stackGens

	malformed    atomic.Uint64
	lastReported atomic.Uint64 // lost total last logged
	closeOnce    sync.Once
	closeErr     error
}

// program is an attached program and its name in qp.c (the kernel keeps
// only 15 characters of it).
type program struct {
	name string
	*ebpf.Program
}

// Open loads the programs and attaches one probe per traced function:
// fentry/fexit where the kernel allows it, kprobe/kretprobe otherwise (or
// always, with Options.Kprobes). Functions a kernel lacks are skipped and
// reported by Probes. Without privileges or BTF it returns an error wrapping
// ErrNoPrivilege, ErrNoBTF or ErrNoIBCore. Before loading it raises
// RLIMIT_MEMLOCK to infinity for kernels before 5.11 (see raiseMemlock).
// With Options.Sites it then attaches the creation-site uprobes to the
// host's verbs libraries and to those every process maps; a failure there
// is not Open's (Sites reports it). Close detaches everything.
func Open(log *slog.Logger, opts Options) (*Tracer, error) {
	size, err := opts.bufferBytes()
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	period, err := opts.stackPeriod()
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	entries, err := opts.stackEntries()
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	if err := checkPrivileges(); err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	if err := checkBTF(); err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	memlock := raiseMemlock(log)
	spec, err := loadQp()
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	spec.Maps["events"].MaxEntries = uint32(size)
	if opts.Sites {
		if err := spec.Variables["kernel_stacks"].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("bpf: open probes: %w", err)
		}
		spec.Maps["stacks0"].MaxEntries = entries
		spec.Maps["stacks1"].MaxEntries = entries
	} else {
		spec.Maps["stacks0"].MaxEntries = 1 // never written
		spec.Maps["stacks1"].MaxEntries = 1
	}

	t := &Tracer{log: log, opts: opts, memlock: memlock}
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	if t.dec.epoch, err = monotonicEpoch(); err != nil {
		return nil, fmt.Errorf("bpf: open probes: read clocks: %w", err)
	}
	if err := spec.Variables["wakeup_bytes"].Set(uint64(size / 16)); err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w", err)
	}
	t.maps = map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue // .rodata: constants, loaded with each program
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			return nil, fmt.Errorf("bpf: open probes: create map %s: %w", name, mapPermission(err, memlock))
		}
		t.maps[name] = m
	}
	t.events, t.counts, t.waits = t.maps["events"], t.maps["counters"], t.maps["reader_waits"]
	l, err := t.newLoader(spec)
	if err != nil {
		return nil, err
	}
	if err := t.attachAll(l); err != nil {
		return nil, err
	}
	if t.reader, err = ringbuf.NewReader(t.events); err != nil {
		return nil, fmt.Errorf("bpf: open probes: ring buffer reader: %w", err)
	}
	ok = true
	attached := 0
	for _, p := range t.probes {
		if p.Mode != ModeNone {
			attached++
		}
	}
	log.Info("probes attached", "mode", t.Mode().String(), "probes", attached)
	if opts.Sites {
		t.stacks = newStackGens(log, [2]stackMap{t.maps["stacks0"], t.maps["stacks1"]}, t.maps["stack_gen"], period,
			monotonicNow, time.Now())
		t.sites = openSites(log, l, "/proc")
		t.sites.attachHost()
		log.Info("creation site uprobes attached", "libraries", len(t.sites.report().Libraries))
	}
	return t, nil
}

// loader loads the programs of one probe at a time, sharing the maps and
// the kernel's BTF between them.
type loader struct {
	spec  *ebpf.CollectionSpec
	maps  map[string]*ebpf.Map
	cache *btf.Cache
	opts  ebpf.ProgramOptions
}

// load loads the named programs; a name "" is skipped.
func (l *loader) load(names ...string) (map[string]*ebpf.Program, error) {
	// Variables too: cilium/ebpf writes the values Open set (wakeup_bytes,
	// kernel_stacks) into .rodata from them, not from Maps.
	sub := &ebpf.CollectionSpec{Maps: l.spec.Maps, Programs: map[string]*ebpf.ProgramSpec{}, Variables: l.spec.Variables,
		Types: l.spec.Types, ByteOrder: l.spec.ByteOrder}
	for _, n := range names {
		if n != "" {
			sub.Programs[n] = l.spec.Programs[n]
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(sub, ebpf.CollectionOptions{MapReplacements: l.maps, Programs: l.opts, Cache: l.cache})
	if err != nil {
		return nil, err
	}
	defer coll.Close() // the map clones; the programs are detached first
	progs := map[string]*ebpf.Program{}
	for n := range sub.Programs {
		progs[n] = coll.DetachProgram(n)
	}
	return progs, nil
}

// newLoader reads the BTF the programs are relocated against.
func (t *Tracer) newLoader(spec *ebpf.CollectionSpec) (*loader, error) {
	cache := btf.NewCache()
	kernel, err := cache.Kernel()
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w: vmlinux: %w", ErrNoBTF, err)
	}
	ibCore, err := cache.Module("ib_core")
	if err != nil {
		return nil, fmt.Errorf("bpf: open probes: %w: module ib_core: %w", ErrNoBTF, err)
	}
	// Relocate against vmlinux and ib_core only: other modules carry copies
	// of the ib_core types, and reading all of them would cost time.
	return &loader{
		spec:  spec,
		maps:  t.maps,
		cache: cache,
		opts:  ebpf.ProgramOptions{KernelTypes: kernel, ExtraRelocationTargets: []*btf.Spec{ibCore}},
	}, nil
}

func (t *Tracer) attachAll(l *loader) error {
	attached := map[string]bool{}
	for _, ps := range probeSpecs {
		p := Probe{Function: ps.function}
		switch {
		case ps.skipWhenAttached != "" && attached[ps.skipWhenAttached]:
			p.Note = "covered by " + ps.skipWhenAttached
			t.log.Debug("probe not needed", "function", ps.function, "covered_by", ps.skipWhenAttached)
		default:
			mode, note, err := t.attach(l, ps)
			if err != nil {
				return err
			}
			p.Mode, p.Note = mode, note
		}
		attached[ps.function] = p.Mode != ModeNone
		t.probes = append(t.probes, p)
	}
	return nil
}

// attach attaches one probe: fentry/fexit first unless Options.Kprobes,
// then kprobe/kretprobe. A function that does not exist is not an error
// unless the probe is required.
func (t *Tracer) attach(l *loader, ps probeSpec) (Mode, string, error) {
	log := t.log.With("function", ps.function)
	var note string
	if !t.opts.Kprobes {
		err := t.attachFentry(l, ps)
		if err == nil {
			return ModeFentry, "", nil
		}
		// Without CAP_SYS_ADMIN, for one, the module's BTF object cannot
		// be opened, so fentry on ib_core is out of reach; kprobes work.
		note = "fentry: " + err.Error()
		log.Debug("fentry failed, trying kprobe", "err", err)
	}
	err := t.attachKprobe(l, ps)
	switch {
	case err == nil:
		if !t.opts.Kprobes {
			log.Warn("kprobe fallback", "err", note)
		}
		return ModeKprobe, note, nil
	case errors.Is(err, os.ErrNotExist) && !ps.required:
		msg := ps.notInKernelMessage
		if msg == "" {
			msg = "not in this kernel"
		}
		log.Debug("probe skipped", "reason", msg)
		return ModeNone, msg, nil
	case errors.Is(err, os.ErrNotExist):
		return ModeNone, "", fmt.Errorf("bpf: attach %s: %w: %w", ps.function, ErrNoIBCore, err)
	}
	return ModeNone, "", fmt.Errorf("bpf: attach %s: %w", ps.function, mapPermission(err, t.memlock))
}

// attachFentry loads and attaches a probe's fentry and fexit programs, entry
// first so that no return is seen without its entry. On failure nothing of
// the probe stays attached.
func (t *Tracer) attachFentry(l *loader, ps probeSpec) error {
	progs, err := l.load(ps.fentry, ps.fexit)
	if err != nil {
		return err
	}
	var links []link.Link
	for _, n := range []string{ps.fentry, ps.fexit} {
		if n == "" {
			continue
		}
		lk, err := link.AttachTracing(link.TracingOptions{Program: progs[n]})
		if err != nil {
			closeAll(links, progs)
			return err
		}
		links = append(links, lk)
	}
	t.keep(links, progs)
	return nil
}

// attachKprobe loads and attaches a probe's kprobe and kretprobe programs,
// one by one (no kprobe_multi, which Debian's 6.1 lacks).
func (t *Tracer) attachKprobe(l *loader, ps probeSpec) error {
	progs, err := l.load(ps.kprobe, ps.kretprobe)
	if err != nil {
		return err
	}
	var links []link.Link
	if ps.kprobe != "" {
		lk, err := link.Kprobe(ps.function, progs[ps.kprobe], nil)
		if err != nil {
			closeAll(links, progs)
			return err
		}
		links = append(links, lk)
	}
	if ps.kretprobe != "" {
		lk, err := link.Kretprobe(ps.function, progs[ps.kretprobe], nil)
		if err != nil {
			closeAll(links, progs)
			return err
		}
		links = append(links, lk)
	}
	t.keep(links, progs)
	return nil
}

func (t *Tracer) keep(links []link.Link, progs map[string]*ebpf.Program) {
	t.links = append(t.links, links...)
	for _, n := range slices.Sorted(maps.Keys(progs)) {
		t.progs = append(t.progs, program{n, progs[n]})
	}
}

func closeAll(links []link.Link, progs map[string]*ebpf.Program) {
	for _, l := range links {
		l.Close()
	}
	for _, p := range progs {
		p.Close()
	}
}

// Mode reports how the probes are attached: ModeFentry or ModeKprobe when
// all attached probes agree, ModeMixed otherwise.
func (t *Tracer) Mode() Mode {
	mode := ModeNone
	for _, p := range t.probes {
		switch {
		case p.Mode == ModeNone:
		case mode == ModeNone:
			mode = p.Mode
		case mode != p.Mode:
			return ModeMixed
		}
	}
	return mode
}

// Probes reports every traced function: attached, how, or why not.
func (t *Tracer) Probes() []Probe { return append([]Probe(nil), t.probes...) }

// Stats reads the drop counters from the kernel.
func (t *Tracer) Stats() (Stats, error) {
	s := Stats{Malformed: t.malformed.Load()}
	for slot, dst := range []*uint64{&s.Lost, &s.Unmatched} {
		var perCPU []uint64
		if err := t.counts.Lookup(uint32(slot), &perCPU); err != nil {
			return s, fmt.Errorf("bpf: read drop counters: %w", err)
		}
		for _, n := range perCPU {
			*dst += n
		}
	}
	for _, p := range t.progs {
		if st, err := p.Stats(); err == nil {
			s.Missed += st.RecursionMisses
		}
	}
	for _, l := range t.links {
		info, err := l.Info()
		if err != nil {
			continue
		}
		if pe := info.PerfEvent(); pe != nil {
			if kp := pe.Kprobe(); kp != nil {
				s.Missed += kp.Missed
			}
		}
	}
	return s, nil
}

// ResourceChanges counts the returns of rdma_restrack_add,
// rdma_restrack_del, rdma_restrack_begin_del and rdma_restrack_abort_del:
// every QP, CQ, PD, MR, SRQ, user context, rdma_cm ID and counter of every
// device added to or removed from the kernel's resource tracking (or put
// back after a failed destroy) since Open. A device's resource summary
// read after a count lists every change that count holds: when the count
// has not moved since, the summary has not either. ok is false when the
// probes on rdma_restrack_add or rdma_restrack_del are not attached
// (begin_del and abort_del are skipped on a kernel without them, which
// removes every resource through rdma_restrack_del).
func (t *Tracer) ResourceChanges() (n uint64, ok bool) {
	for _, f := range []string{"rdma_restrack_add", "rdma_restrack_del"} {
		if !slices.ContainsFunc(t.probes, func(p Probe) bool { return p.Function == f && p.Mode != ModeNone }) {
			return 0, false
		}
	}
	var perCPU []uint64
	if err := t.counts.Lookup(uint32(counterRestrack), &perCPU); err != nil {
		return 0, false
	}
	for _, c := range perCPU {
		n += c
	}
	return n, true
}

// Slots of "counters" in qp.c: COUNTER_RESTRACK, which ResourceChanges
// reads, and COUNTER_STACKS_REFUSED, which StackStats reads.
const (
	counterRestrack      = 2
	counterStacksRefused = 3
)

// StackStats reads how full the creation sites' stack maps are
// (Options.Sites; without it, all is 0).
func (t *Tracer) StackStats() (StackStats, error) {
	if t.stacks == nil {
		return StackStats{}, nil
	}
	s := StackStats{Held: int(t.stacks.held.Load()), Capacity: 2 * int(t.maps["stacks0"].MaxEntries()), Flips: t.stacks.flipCount.Load()}
	var perCPU []uint64
	if err := t.counts.Lookup(uint32(counterStacksRefused), &perCPU); err != nil {
		return s, fmt.Errorf("bpf: read stacks refused: %w", err)
	}
	for _, n := range perCPU {
		s.Refused += n
	}
	return s, nil
}

// ProgramStats reports the run count and the time in the kernel of every
// attached program, in the order they were attached, the creation-site
// uprobes' last. The kernel counts only while statistics are enabled
// (sysctl kernel.bpf_stats_enabled=1), which adds two clock reads to every
// run.
func (t *Tracer) ProgramStats() ([]ProgramStat, error) {
	var out []ProgramStat
	progs := t.progs
	if t.sites != nil && t.sites.entry != nil {
		progs = append(slices.Clip(progs), program{"uprobe_lib_entry", t.sites.entry}, program{"uretprobe_lib_return", t.sites.ret})
	}
	for _, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("bpf: program statistics: %w", err)
		}
		out = append(out, ProgramStat{Program: p.name, Runs: st.RunCount, RunTime: st.Runtime})
	}
	return out, nil
}

// While records come the reader polls the ring buffer every pollEvery (the
// programs wake it only when the ring fills up); when a poll finds the ring
// empty, it waits to be woken by the next record (at most waitAtMost:
// below). It compares the drop counters with what it last reported at most
// every lostCheckEvery while it polls, and when it begins to wait (a quiet
// ring drops nothing).
const (
	pollEvery      = 100 * time.Millisecond
	lostCheckEvery = time.Second
	// waitAtMost bounds a wait for a record that should have woken the
	// reader but did not: one the programs wrote as the reader set
	// reader_waits, whose store the program's read of the flag did not
	// see yet. The reader checks the ring after setting the flag, so such
	// a record is seldom left; the bound keeps it from waiting for the
	// next record.
	waitAtMost = 5 * time.Second
)

// Events yields the decoded events that pass the Options filters, in the
// order the probes wrote them, until ctx ends (after yielding what the ring
// buffer still holds) or Close is called. An event arrives within about
// pollEvery (100 ms) of happening, at once when it comes after a quiet
// spell (an idle reader is woken by the next record; until then its only
// system call is a wait that ends every waitAtMost). Events yields an
// error only when the
// ring buffer fails, and then ends. Records that were dropped or do not
// decode are counted in Stats and logged at Warn as they are noticed.
// With Options.Sites, Events also flips the generation of the stack maps
// every Options.StackPeriod (see Stack maps in the package documentation):
// while no Events runs, they only fill.
//
// Modify, destroy and rename records are written when the call returns but
// carry the time it began, so an async event raised during the call (rxe
// may deliver LAST_WQE_REACHED while the modify to ERR is still returning)
// can come first in the stream with a later Time: order by Time when it
// matters.
func (t *Tracer) Events(ctx context.Context) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		stop := context.AfterFunc(ctx, func() { _ = t.reader.Flush() }) // fails only when closed
		defer stop()
		defer t.reportLost()
		var rec ringbuf.Record
		var ev Event
		lastCheck := time.Now()
		waiting := false // reader_waits is set
		read := false    // a record was read since the last poll ended
		defer func() {
			if waiting {
				t.setWaits(false)
			}
		}()
		for n := 1; ; n++ {
			if rec.Remaining == 0 { // the next read may wait
				if waiting {
					t.reader.SetDeadline(time.Now().Add(waitAtMost))
				} else {
					t.reader.SetDeadline(time.Now().Add(pollEvery))
				}
			}
			err := t.reader.ReadInto(&rec)
			if err != nil {
				rec.Remaining = 0
			}
			switch {
			case err == nil:
				read = true
				if waiting { // woken: poll while records come
					waiting = !t.setWaits(false)
				}
			case errors.Is(err, os.ErrDeadlineExceeded):
				quiet := !read && !waiting // a whole poll found nothing
				read = false
				// A record written before the flag was set did not wake
				// the reader, and the wait would not see it: one there
				// is read by polling on.
				if quiet && t.setWaits(true) {
					waiting = t.Backlog() == 0 || !t.setWaits(false)
					if waiting { // what the last records lost, before a quiet spell
						t.reportLost()
						lastCheck = time.Now()
					}
				}
				if !waiting && time.Since(lastCheck) >= lostCheckEvery {
					t.reportLost()
					lastCheck = time.Now()
				}
				t.flipStacks()
				continue
			case errors.Is(err, ringbuf.ErrFlushed):
				if ctx.Err() != nil {
					return
				}
				continue
			case errors.Is(err, os.ErrClosed):
				return
			default:
				yield(Event{}, fmt.Errorf("bpf: read ring buffer: %w", err))
				return
			}
			if n%1024 == 0 {
				if time.Since(lastCheck) >= lostCheckEvery {
					t.reportLost()
					lastCheck = time.Now()
				}
				t.flipStacks()
			}
			if err := t.dec.decode(rec.RawSample, &ev); err != nil {
				t.malformed.Add(1)
				t.log.Debug("malformed record", "err", err)
				continue
			}
			if t.dec.stackID >= 0 && t.stacks != nil {
				st := t.stacks.stack(t.dec.stackGen, t.dec.stackID, t.dec.ts)
				if !t.dec.userStack {
					ev.Stack = st
				} else if len(st) > 1 { // the first frame is the library function's entry
					ev.UserStack = st[1:]
				}
			}
			t.noteCreate(&ev)
			if !t.opts.match(&ev) {
				continue
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// flipStacks flips the stack maps' generation when it is due (stackGens).
func (t *Tracer) flipStacks() {
	if t.stacks != nil {
		t.stacks.maybeFlip(time.Now())
	}
}

// noteCreate attaches the verbs libraries of a process that created a
// user QP without a site, once per process: the uprobes were not on the
// library it maps (its own copy, in a container or chroot), so its later
// creates have sites.
func (t *Tracer) noteCreate(ev *Event) {
	if t.sites == nil || ev.Kind != KindQPCreate || ev.Via != "" || ev.PID == 0 || ev.Probe != "ib_create_qp_user" {
		return
	}
	if n, err := t.sites.scan(ev.PID, false); err != nil {
		t.log.Debug("libraries of a process not attached", "pid", ev.PID, "err", err)
	} else if n > 0 {
		t.log.Debug("libraries of a process attached", "pid", ev.PID, "libraries", n)
	}
}

// AttachLibraries attaches the creation-site uprobes to the verbs
// libraries (libibverbs, librdmacm) that process pid maps and that have
// none yet, and returns how many library files it attached. Events does
// this by itself for a process whose user QP create had no site; a caller
// that learns of a new process sooner (one that opened a uverbs device)
// can call it then, so that the process's first create has a site. It
// does nothing without Options.Sites. A library that cannot be attached
// is reported by Sites, not here; the error is reading the process's
// maps (it has exited) or os.ErrClosed.
func (t *Tracer) AttachLibraries(pid uint32) (int, error) {
	if t.sites == nil {
		return 0, nil
	}
	return t.sites.scan(pid, true)
}

// Sites reports the library files with creation-site uprobes and why
// some or all are missing (Options.Sites; empty without it).
func (t *Tracer) Sites() Sites {
	if t.sites == nil {
		return Sites{}
	}
	return t.sites.report()
}

// Backlog is the number of bytes of records waiting in the ring buffer. A
// consumer of Events can flush its output when it reaches 0.
func (t *Tracer) Backlog() int { return t.reader.AvailableBytes() }

// setWaits sets the reader_waits flag to on, and says whether it did
// (a failure, which should not happen, leaves the reader polling).
func (t *Tracer) setWaits(on bool) bool {
	v := uint32(0)
	if on {
		v = 1
	}
	if err := t.waits.Put(uint32(0), v); err != nil {
		t.log.Debug("reader_waits not set", "err", err)
		return false
	}
	return true
}

// reportLost logs at Warn when more events were dropped since last time.
func (t *Tracer) reportLost() {
	s, err := t.Stats()
	if err != nil {
		return
	}
	total := s.Total()
	if last := t.lastReported.Swap(total); total > last {
		t.log.Warn("probe events lost", "lost", s.Lost, "missed", s.Missed, "unmatched", s.Unmatched,
			"malformed", s.Malformed, "new", total-last)
	}
}

// Close detaches every probe and frees the maps. Nothing is pinned, so
// nothing stays behind.
func (t *Tracer) Close() error {
	t.closeOnce.Do(func() {
		var errs []error
		if t.reader != nil {
			errs = append(errs, t.reader.Close())
		}
		if t.sites != nil {
			errs = append(errs, t.sites.close())
		}
		for _, l := range t.links {
			errs = append(errs, l.Close())
		}
		for _, p := range t.progs {
			errs = append(errs, p.Close())
		}
		for _, m := range t.maps {
			errs = append(errs, m.Close())
		}
		if err := errors.Join(errs...); err != nil {
			t.closeErr = fmt.Errorf("bpf: close probes: %w", err)
		}
	})
	return t.closeErr
}

// monotonicNow is CLOCK_MONOTONIC in ns, the probes' bpf_ktime_get_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // not on Linux
	}
	return uint64(ts.Nano())
}

// monotonicEpoch returns CLOCK_REALTIME minus CLOCK_MONOTONIC, the offset
// that turns bpf_ktime_get_ns into wall time, from the tightest of a few
// samples.
func monotonicEpoch() (int64, error) {
	var best, epoch int64 = -1, 0
	for range 5 {
		var m1, r, m2 unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1); err != nil {
			return 0, err
		}
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &r); err != nil {
			return 0, err
		}
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2); err != nil {
			return 0, err
		}
		if d := m2.Nano() - m1.Nano(); best < 0 || d < best {
			best, epoch = d, r.Nano()-(m1.Nano()+d/2)
		}
	}
	return epoch, nil
}

// Capability bits (include/uapi/linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// checkPrivileges reads the effective capabilities: CAP_SYS_ADMIN, or both
// CAP_BPF and CAP_PERFMON, are needed to load and attach tracing programs.
// Without /proc the kernel decides.
func checkPrivileges() error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil
	}
	defer f.Close() //nolint:errcheck // read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if hex, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return nil
			}
			return privilegeError(caps)
		}
	}
	return nil
}

// privilegeError says which capabilities of an effective set are missing.
func privilegeError(caps uint64) error {
	has := func(bit uint) bool { return caps&(1<<bit) != 0 }
	if has(capSysAdmin) || has(capBPF) && has(capPerfmon) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return fmt.Errorf("%w: missing %s (or CAP_SYS_ADMIN)", ErrNoPrivilege, strings.Join(missing, " and "))
}

// checkBTF tells a kernel without BTF from one without ib_core.
func checkBTF() error {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return fmt.Errorf("%w: kernel: %w", ErrNoBTF, err)
	}
	if _, err := os.Stat("/sys/module/ib_core"); errors.Is(err, fs.ErrNotExist) {
		return ErrNoIBCore
	}
	if _, err := os.Stat("/sys/kernel/btf/ib_core"); err != nil {
		return fmt.Errorf("%w: module ib_core: %w", ErrNoBTF, err)
	}
	return nil
}
