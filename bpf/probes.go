package bpf

import (
	"strconv"
	"time"
)

// Mode says how a probe is attached.
type Mode uint8

// Attach modes. A Tracer's Mode is ModeMixed when some probes fell back to
// kprobes and others did not.
const (
	ModeNone   Mode = iota // not attached
	ModeFentry             // fentry/fexit through a BPF trampoline: pins ib_core
	ModeKprobe             // kprobe/kretprobe
	ModeMixed
)

var modeNames = []string{"none", "fentry", "kprobe", "mixed"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Probe reports how one kernel function is traced.
type Probe struct {
	// Function is the traced kernel function.
	Function string
	// Mode is ModeFentry or ModeKprobe when attached, ModeNone when not.
	Mode Mode
	// Note says why a probe is not attached ("not in this kernel", or the
	// probe that covers its events), or why fentry was not used.
	Note string
}

// probeSpec is one traced kernel function and its programs in qp.c. The id
// is the PROBE_* value the programs write into each record.
type probeSpec struct {
	id       uint8
	function string
	// fentry/fexit programs, kprobe/kretprobe programs; "" when the
	// function is not traced on that side.
	fentry, fexit      string
	kprobe, kretprobe  string
	required           bool   // Open fails when it cannot be attached
	skipWhenAttached   string // a function whose probe makes this one redundant
	notInKernelMessage string
}

// probeSpecs lists the probes in the order they are attached. A function
// that does not exist on a kernel is skipped, unless required.
var probeSpecs = []probeSpec{
	{id: 1, function: "ib_create_qp_user", fexit: "fexit_create_qp_user",
		kprobe: "kprobe_create_qp_user", kretprobe: "kretprobe_create_qp_user", required: true},
	{id: 2, function: "ib_create_qp_kernel", fexit: "fexit_create_qp_kernel",
		kprobe: "kprobe_create_qp_kernel", kretprobe: "kretprobe_create_qp_kernel", required: true},
	{id: 3, function: "_ib_modify_qp", fentry: "fentry_modify_qp", fexit: "fexit_modify_qp",
		kprobe: "kprobe_modify_qp", kretprobe: "kretprobe_modify_qp", required: true},
	{id: 4, function: "ib_destroy_qp_user", fentry: "fentry_destroy_qp", fexit: "fexit_destroy_qp",
		kprobe: "kprobe_destroy_qp", kretprobe: "kretprobe_destroy_qp", required: true},
	// __ib_qp_event_handler (6.11+) sees every non-XRC QP's events, user
	// QPs' included, so ib_uverbs_qp_event_handler is only needed without it.
	{id: 6, function: "__ib_qp_event_handler", fentry: "fentry_qp_event", kprobe: "kprobe_qp_event"},
	{id: 5, function: "ib_uverbs_qp_event_handler", fentry: "fentry_uverbs_qp_event", kprobe: "kprobe_uverbs_qp_event",
		skipWhenAttached: "__ib_qp_event_handler", notInKernelMessage: "ib_uverbs is not loaded"},
	{id: 7, function: "__ib_shared_qp_event_handler", fentry: "fentry_shared_qp_event", kprobe: "kprobe_shared_qp_event"},
	{id: 8, function: "ib_dispatch_event", fentry: "fentry_dispatch_event", kprobe: "kprobe_dispatch_event"},
	{id: 9, function: "ib_register_device", fexit: "fexit_register_device",
		kprobe: "kprobe_register_device", kretprobe: "kretprobe_register_device"},
	{id: 10, function: "__ib_unregister_device", fentry: "fentry_unregister_device", kprobe: "kprobe_unregister_device"},
	{id: 11, function: "ib_device_rename", fentry: "fentry_device_rename", fexit: "fexit_device_rename",
		kprobe: "kprobe_device_rename", kretprobe: "kretprobe_device_rename"},
	{id: 12, function: "ib_drain_qp", fentry: "fentry_drain_qp", fexit: "fexit_drain_qp",
		kprobe: "kprobe_drain_qp", kretprobe: "kretprobe_drain_qp"},
	{id: 13, function: "ib_drain_rq", fentry: "fentry_drain_rq", fexit: "fexit_drain_rq",
		kprobe: "kprobe_drain_rq", kretprobe: "kretprobe_drain_rq"},
	// Only inside a modify, its programs record nothing of their own: they
	// give the modify's record the provider's state (Event.CurState).
	{id: 14, function: "ib_modify_qp_is_ok", fentry: "fentry_modify_qp_is_ok", kprobe: "kprobe_modify_qp_is_ok"},
	// They record nothing: their returns are counted (ResourceChanges).
	{id: 15, function: "rdma_restrack_add", fexit: "fexit_restrack_add", kretprobe: "kretprobe_restrack_add"},
	{id: 16, function: "rdma_restrack_del", fexit: "fexit_restrack_del", kretprobe: "kretprobe_restrack_del"},
	{id: 17, function: "rdma_restrack_begin_del", fexit: "fexit_restrack_begin_del", kretprobe: "kretprobe_restrack_begin_del"},
	{id: 18, function: "rdma_restrack_abort_del", fexit: "fexit_restrack_abort_del", kretprobe: "kretprobe_restrack_abort_del"},
}

// probeName names the function behind a record's probe id.
func probeName(id uint8) string {
	for i := range probeSpecs {
		if probeSpecs[i].id == id {
			return probeSpecs[i].function
		}
	}
	return "unknown(" + strconv.Itoa(int(id)) + ")"
}

// ProgramStat is what one attached program cost in the kernel.
type ProgramStat struct {
	Program string        // the program's name in qp.c, e.g. fexit_modify_qp
	Runs    uint64        // times it ran
	RunTime time.Duration // total time in the program
}

// Stats counts what the tracer could not deliver.
type Stats struct {
	// Lost counts records dropped because the ring buffer was full.
	Lost uint64
	// Missed counts probe runs the kernel skipped: BPF recursion
	// protection, and kretprobe instances exhausted (where the kernel
	// reports them, 6.7+).
	Missed uint64
	// Unmatched counts returns whose entry was not seen, so the record
	// was dropped (only calls in flight while Open attached the probes).
	Unmatched uint64
	// Malformed counts records that could not be decoded.
	Malformed uint64
}

// StackStats says how full the maps that creation sites store kernel and
// user stacks in are (Options.Sites). Two maps take turns (generations):
// Events flips them every Options.StackPeriod, emptying the one it flips
// to, so they hold what the last two periods stored.
type StackStats struct {
	// Refused counts stacks the probes could not store, so that a create
	// has no Event.Stack or Event.UserStack: the map's hash bucket held
	// another stack (the map is filling), or the kernel could not walk
	// the stack.
	Refused uint64
	// Held is how many stacks the two maps hold, as the reader counts
	// them: the previous generation's when it stopped being the current
	// one, and those it read from the current one since.
	Held int
	// Capacity is how many stacks the two maps can hold (0 without
	// Options.Sites).
	Capacity int
	// Flips counts the generation flips Events made: after a flip the
	// current map is the one it emptied.
	Flips uint32
}

// Total is the number of events that did not reach the caller. An entry
// probe the kernel skipped can count twice, as Missed and then Unmatched at
// its return, so Total errs high, never low.
func (s Stats) Total() uint64 { return s.Lost + s.Missed + s.Unmatched + s.Malformed }
