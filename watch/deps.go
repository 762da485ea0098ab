package watch

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Netlink is what a watch reads over RDMA netlink; *rdmanl.Client is one.
// A Netlink serves one caller at a time: each of the agent's scanners
// dials its own.
type Netlink interface {
	Devices(ctx context.Context) ([]rdmanl.Device, error)
	Summary(ctx context.Context, dev rdmanl.Device) (rdmanl.Summary, error)
	QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error]
	CMIDs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error]
	SRQs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.SRQ, error]
	MRs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.MR, error]
	// Rename renames a device (rename.Renamer), for the agent's renames.
	Rename(ctx context.Context, dev rdmanl.Device, name string) error
	Contexts(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.Context, error]
	Close() error
}

// EventSource is a stream of probe events (the bpf tracer).
type EventSource interface {
	Events(ctx context.Context) iter.Seq2[bpf.Event, error]
	Close() error
}

// statser is an EventSource that counts the events it lost.
type statser interface {
	Stats() (bpf.Stats, error)
}

// stackCounter is an EventSource that stores creation sites' stacks and
// counts them (bpf.Tracer.StackStats).
type stackCounter interface {
	StackStats() (bpf.StackStats, error)
}

// changeCounter is an EventSource that counts the devices' resources
// added and removed (bpf.Tracer.ResourceChanges).
type changeCounter interface {
	ResourceChanges() (uint64, bool)
}

// Deps are what a check or the agent talks to; tests and the CLI pass their
// own.
type Deps struct {
	Log *slog.Logger
	// Dial opens an RDMA netlink client.
	Dial func() (Netlink, error)
	// OpenProbes attaches the eBPF probes; nil or an error means netlink
	// only, and the report says which rules were skipped and why.
	OpenProbes func(ctx context.Context, log *slog.Logger) (EventSource, error)
	// ProcRoot is /proc, where QP owners are resolved ("": not resolved).
	ProcRoot string
	// LearnDevice learns a device's facts (LearnDevice with /sys and /dev);
	// nil learns nothing: no max_qp from the device, no provider table.
	LearnDevice func(rdmanl.Device) DeviceFacts
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DialNetlink opens an rdmanl.Client as a Netlink.
func DialNetlink() (Netlink, error) {
	c, err := rdmanl.Dial()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// WithDefaults returns d with what it leaves nil filled in: time.Now for
// Now, a logger that discards for Log.
func (d Deps) WithDefaults() Deps {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return d
}
