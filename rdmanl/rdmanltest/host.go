package rdmanltest

import (
	"context"
	"iter"
	"maps"
	"slices"
	"sync"
	"syscall"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// Host is a fake host's RDMA netlink: devices and their QPs, SRQs, rdma_cm
// IDs, verbs contexts and MRs, which a test may change while the clients Dial
// hands out read them. A client answers as rdmanl.Client's methods do
// (a QP dump joins SRQs as rdmanl.DumpOptions says; a device that is gone
// gives rdmanl.ErrNoDevice), and the host counts the dumps and the clients
// not closed. It is safe for concurrent use.
type Host struct {
	mu      sync.Mutex
	devs    []rdmanl.Device
	qps     map[uint32][]rdmanl.QP // by device index
	cmIDs   map[uint32][]rdmanl.CMID
	ctxs    map[uint32][]rdmanl.Context
	srqs    map[uint32][]rdmanl.SRQ
	mrs     map[uint32][]rdmanl.MR
	open    int    // clients not closed
	blockOn string // a device whose QP dump blocks until its ctx ends
	onDump  func(dev string)
	renames int
	// QP, SRQ, rdma_cm ID and MR dumps per device name; a QP dump that
	// joins SRQs it was not given makes an SRQ dump of its own, as
	// rdmanl's does. summaries counts the resource summaries read.
	dumps, srqDumps, cmIDDumps, mrDumps, summaries map[string]int
}

// NewHost returns a host with devs and nothing on them.
func NewHost(devs ...rdmanl.Device) *Host {
	return &Host{devs: devs, qps: map[uint32][]rdmanl.QP{}, cmIDs: map[uint32][]rdmanl.CMID{},
		ctxs: map[uint32][]rdmanl.Context{}, srqs: map[uint32][]rdmanl.SRQ{}, mrs: map[uint32][]rdmanl.MR{},
		dumps: map[string]int{}, srqDumps: map[string]int{}, cmIDDumps: map[string]int{}, mrDumps: map[string]int{},
		summaries: map[string]int{}}
}

// Set replaces the host's devices and their QPs (by device index).
func (h *Host) Set(devs []rdmanl.Device, qps map[uint32][]rdmanl.QP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devs, h.qps = slices.Clone(devs), maps.Clone(qps)
	if h.qps == nil {
		h.qps = map[uint32][]rdmanl.QP{}
	}
}

// SetQPs replaces the QPs of the device with index.
func (h *Host) SetQPs(index uint32, qps ...rdmanl.QP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.qps[index] = qps
}

// SetSRQs replaces the SRQs of the device with index.
func (h *Host) SetSRQs(index uint32, srqs ...rdmanl.SRQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.srqs[index] = srqs
}

// SetCMIDs replaces the rdma_cm IDs of the device with index.
func (h *Host) SetCMIDs(index uint32, ids ...rdmanl.CMID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmIDs[index] = ids
}

// SetContexts replaces the verbs contexts of the device with index.
func (h *Host) SetContexts(index uint32, ctxs ...rdmanl.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctxs[index] = ctxs
}

// SetMRs replaces the MRs of the device with index.
func (h *Host) SetMRs(index uint32, mrs ...rdmanl.MR) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mrs[index] = mrs
}

// Block makes QP dumps of the device named dev block until their ctx
// ends ("": none block).
func (h *Host) Block(dev string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.blockOn = dev
}

// OnQPDump makes fn run as each QP dump begins, with the device's name, as
// if what fn changes came while the dump ran (nil: nothing runs). fn must
// not call back into a client of h from the dump's goroutine.
func (h *Host) OnQPDump(fn func(dev string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onDump = fn
}

// Devices returns the host's devices as they are now (renamed, maybe).
func (h *Host) Devices() []rdmanl.Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.devs)
}

// Dumps counts the QP dumps of the device named dev.
func (h *Host) Dumps(dev string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dumps[dev]
}

// SRQDumps counts the SRQ dumps, by device name.
func (h *Host) SRQDumps() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.srqDumps)
}

// CMIDDumps counts the rdma_cm ID dumps, by device name.
func (h *Host) CMIDDumps() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.cmIDDumps)
}

// MRDumps counts the MR dumps of the device named dev.
func (h *Host) MRDumps(dev string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mrDumps[dev]
}

// Summaries counts the resource summaries of the device named dev read.
func (h *Host) Summaries(dev string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.summaries[dev]
}

// Renames counts the devices renamed through the host's clients.
func (h *Host) Renames() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renames
}

// Open counts the clients handed out and not closed.
func (h *Host) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// Dial returns a client of the host; Close it as an rdmanl.Client.
func (h *Host) Dial() *Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open++
	return &Client{h: h}
}

// Client reads a Host as an rdmanl.Client reads the kernel.
type Client struct {
	h      *Host
	closed bool
}

// Devices lists the host's devices.
func (c *Client) Devices(ctx context.Context) ([]rdmanl.Device, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return slices.Clone(c.h.devs), ctx.Err()
}

// present says whether the host has the device with index. The caller
// holds c.h.mu.
func (c *Client) present(index uint32) bool {
	return slices.ContainsFunc(c.h.devs, func(d rdmanl.Device) bool { return d.Index == index })
}

// Summary counts a device's QPs, rdma_cm IDs and MRs, as the kernel's
// summary does, and one PD.
func (c *Client) Summary(ctx context.Context, dev rdmanl.Device) (rdmanl.Summary, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if !c.present(dev.Index) {
		return rdmanl.Summary{}, &rdmanl.Error{Op: "summarize resources of " + dev.Name, Err: rdmanl.ErrNoDevice}
	}
	c.h.summaries[dev.Name]++
	return rdmanl.Summary{DevIndex: dev.Index, DevName: dev.Name,
		Counts: []rdmanl.ResourceCount{{Name: "pd", Current: 1}, {Name: "qp", Current: uint64(len(c.h.qps[dev.Index]))},
			{Name: "cm_id", Current: uint64(len(c.h.cmIDs[dev.Index]))}, {Name: "mr", Current: uint64(len(c.h.mrs[dev.Index]))}}}, ctx.Err()
}

// QPs dumps a device's QPs, joined with its SRQs as opts says.
func (c *Client) QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error] {
	return func(yield func(rdmanl.QP, error) bool) {
		c.h.mu.Lock()
		c.h.dumps[dev.Name]++
		var srqs []rdmanl.SRQ
		switch {
		case opts.NoSRQJoin:
		case opts.SRQs != nil:
			srqs = *opts.SRQs
		default:
			c.h.srqDumps[dev.Name]++
			srqs = c.h.srqs[dev.Index]
		}
		qps := slices.Clone(c.h.qps[dev.Index])
		for i, q := range qps {
			if j := slices.IndexFunc(srqs, func(s rdmanl.SRQ) bool { return s.HasQP(q.LQPN) }); j >= 0 {
				qps[i].OnSRQ, qps[i].SRQN = true, srqs[j].SRQN
			}
		}
		present := c.present(dev.Index)
		block := c.h.blockOn == dev.Name
		onDump := c.h.onDump
		c.h.mu.Unlock()
		if onDump != nil {
			onDump(dev.Name)
		}
		if block {
			<-ctx.Done()
			yield(rdmanl.QP{}, ctx.Err())
			return
		}
		if !present {
			yield(rdmanl.QP{}, &rdmanl.Error{Op: "dump QPs of " + dev.Name, Err: rdmanl.ErrNoDevice})
			return
		}
		for _, q := range qps {
			q.DevIndex, q.DevName = dev.Index, dev.Name
			if !yield(q, nil) {
				return
			}
		}
	}
}

// SRQs dumps a device's SRQs.
func (c *Client) SRQs(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.SRQ, error] {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.srqDumps[dev.Name]++
	return yieldAll(slices.Clone(c.h.srqs[dev.Index]))
}

// CMIDs dumps a device's rdma_cm IDs.
func (c *Client) CMIDs(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error] {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.cmIDDumps[dev.Name]++
	return yieldAll(slices.Clone(c.h.cmIDs[dev.Index]))
}

// Contexts dumps a device's verbs contexts.
func (c *Client) Contexts(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.Context, error] {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return yieldAll(slices.Clone(c.h.ctxs[dev.Index]))
}

// MRs dumps a device's MRs; a device that is gone gives
// rdmanl.ErrNoDevice.
func (c *Client) MRs(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.MR, error] {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.mrDumps[dev.Name]++
	if !c.present(dev.Index) {
		return func(yield func(rdmanl.MR, error) bool) {
			yield(rdmanl.MR{}, &rdmanl.Error{Op: "dump MRs of " + dev.Name, Err: rdmanl.ErrNoDevice})
		}
	}
	mrs := slices.Clone(c.h.mrs[dev.Index])
	for i := range mrs {
		mrs[i].DevIndex, mrs[i].DevName = dev.Index, dev.Name
	}
	return yieldAll(mrs)
}

// yieldAll yields vs without error.
func yieldAll[T any](vs []T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for _, v := range vs {
			if !yield(v, nil) {
				return
			}
		}
	}
}

// Rename renames a device of the host, as the kernel would: EEXIST when
// another device has the name, rdmanl.ErrNoDevice when dev is gone.
func (c *Client) Rename(_ context.Context, dev rdmanl.Device, name string) error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	for i, d := range c.h.devs {
		if d.Name == name {
			return syscall.EEXIST
		}
		if d.Index == dev.Index {
			c.h.devs[i].Name = name
			c.h.renames++
			return nil
		}
	}
	return rdmanl.ErrNoDevice
}

// Close counts the client closed, once.
func (c *Client) Close() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.h.open--
	}
	return nil
}
