package bpf

import (
	"errors"
	"slices"
	"time"
)

// Options configure a Tracer.
type Options struct {
	// Device keeps only the events of the device with this name ("" keeps
	// every device). A rename matches by its old or its new name.
	Device string
	// QPNs keeps only QP events (create, modify, destroy, async QP events,
	// drains) of these QP numbers; empty keeps all events. With QPNs set,
	// device events are dropped.
	QPNs []uint32
	// PIDs keeps only the events of these processes (thread group ids);
	// empty keeps all.
	PIDs []uint32
	// Kprobes attaches kprobes even where fentry/fexit would work. Kprobes
	// cost a little more per call but do not pin ib_core (see the package
	// documentation).
	Kprobes bool
	// BufferBytes is the ring buffer's size: a power of two, at least one
	// page. Zero means 4 MiB, room for about 20,000 records.
	BufferBytes int
	// Sites captures where QPs are created: Event.Via and ViaReturn for
	// user QPs, through uprobes on the verbs libraries that processes map
	// (see Tracer.AttachLibraries and Tracer.Sites), and Event.Stack for
	// kernel QPs.
	Sites bool
	// StackPeriod is how often Events flips the generation of the stack
	// maps Sites stores stacks in, emptying the older map (see the package
	// documentation): they hold only what the last two periods stored.
	// Zero means 30 s. A library call that runs longer than a period
	// before its QP is created loses its user stack. Tests shorten it.
	StackPeriod time.Duration
	// StackEntries is how many stacks each of the two stack maps holds.
	// Zero means 1024, the most it may be. Tests shrink it, to fill a map
	// with fewer processes.
	StackEntries int
}

// defaultBufferBytes is the ring buffer size when Options.BufferBytes is 0.
const defaultBufferBytes = 4 << 20

// errBufferSize is returned for a BufferBytes that is not a power of two.
var errBufferSize = errors.New("ring buffer size must be a power of two of at least 4096 bytes")

func (o Options) bufferBytes() (int, error) {
	n := o.BufferBytes
	if n == 0 {
		return defaultBufferBytes, nil
	}
	if n < 4096 || n&(n-1) != 0 {
		return 0, errBufferSize
	}
	return n, nil
}

// defaultStackPeriod is how often the stack generation flips when
// Options.StackPeriod is 0.
const defaultStackPeriod = 30 * time.Second

// errStackPeriod is returned for a negative StackPeriod.
var errStackPeriod = errors.New("stack period must not be negative")

func (o Options) stackPeriod() (time.Duration, error) {
	switch {
	case o.StackPeriod < 0:
		return 0, errStackPeriod
	case o.StackPeriod == 0:
		return defaultStackPeriod, nil
	}
	return o.StackPeriod, nil
}

// stackMapCapacity is the most stacks a stack map holds (qp.c's
// max_entries), and bounds a walk of one: an id is a bucket.
const stackMapCapacity = 1024

// errStackEntries is returned for a StackEntries out of range.
var errStackEntries = errors.New("stack map entries must be between 1 and 1024")

func (o Options) stackEntries() (uint32, error) {
	switch {
	case o.StackEntries == 0:
		return stackMapCapacity, nil
	case o.StackEntries < 0 || o.StackEntries > stackMapCapacity:
		return 0, errStackEntries
	}
	return uint32(o.StackEntries), nil
}

// match reports whether ev passes the filters.
func (o *Options) match(ev *Event) bool {
	if o.Device != "" && ev.DevName != o.Device && (ev.Kind != KindDeviceRename || ev.NewName != o.Device) {
		return false
	}
	if len(o.QPNs) > 0 && (!ev.Kind.HasQP() || !slices.Contains(o.QPNs, ev.QPN)) {
		return false
	}
	if len(o.PIDs) > 0 && !slices.Contains(o.PIDs, ev.PID) {
		return false
	}
	return true
}
