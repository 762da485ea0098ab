package agent

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"go.uber.org/goleak"
)

// fakeHost is a host's RDMA netlink as the agent sees it: devices and
// their QPs, changed by the test while the agent runs. Every client it
// hands out counts its dumps and is closed at the end.
type fakeHost struct {
	mu      sync.Mutex
	devs    []rdmanl.Device
	qps     map[uint32][]rdmanl.QP // by device index
	cmIDs   map[uint32][]rdmanl.CMID
	ctxs    map[uint32][]rdmanl.Context // verbs contexts by device index
	srqs    map[uint32][]rdmanl.SRQ     // by device index
	dumps   map[string]int              // QP dumps per device name
	open    int                         // clients not closed
	blockOn string                      // a device whose QP dump blocks until its ctx ends
	renames int                         // devices renamed through a client
	// srqDumps and cmIDDumps count SRQ and rdma_cm ID dumps per device
	// name; a QP dump that joins SRQs it was not given makes an SRQ dump
	// of its own, as rdmanl's does (TestQPsJoinTheCallersSRQs).
	srqDumps, cmIDDumps map[string]int
}

func newFakeHost(devs ...rdmanl.Device) *fakeHost {
	return &fakeHost{devs: devs, qps: map[uint32][]rdmanl.QP{}, dumps: map[string]int{}, srqDumps: map[string]int{}, cmIDDumps: map[string]int{}}
}

func (h *fakeHost) dial() (Netlink, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open++
	return &fakeClient{h: h}, nil
}

func (h *fakeHost) set(devs []rdmanl.Device, qps map[uint32][]rdmanl.QP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devs, h.qps = devs, qps
}

func (h *fakeHost) dumpsOf(dev string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dumps[dev]
}

func (h *fakeHost) openClients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

type fakeClient struct {
	h      *fakeHost
	closed bool
}

func (c *fakeClient) Devices(ctx context.Context) ([]rdmanl.Device, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return slices.Clone(c.h.devs), ctx.Err()
}

// Summary counts a device's QPs, as the kernel's summary does.
func (c *fakeClient) Summary(ctx context.Context, dev rdmanl.Device) (rdmanl.Summary, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if !slices.ContainsFunc(c.h.devs, func(d rdmanl.Device) bool { return d.Index == dev.Index }) {
		return rdmanl.Summary{}, &rdmanl.Error{Op: "summarize resources of " + dev.Name, Err: rdmanl.ErrNoDevice}
	}
	return rdmanl.Summary{DevIndex: dev.Index, DevName: dev.Name,
		Counts: []rdmanl.ResourceCount{{Name: "pd", Current: 1}, {Name: "qp", Current: uint64(len(c.h.qps[dev.Index]))}}}, ctx.Err()
}

func (c *fakeClient) QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error] {
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
		present := slices.ContainsFunc(c.h.devs, func(d rdmanl.Device) bool { return d.Index == dev.Index })
		block := c.h.blockOn == dev.Name
		c.h.mu.Unlock()
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

func (c *fakeClient) SRQs(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.SRQ, error] {
	return func(yield func(rdmanl.SRQ, error) bool) {
		c.h.mu.Lock()
		c.h.srqDumps[dev.Name]++
		srqs := slices.Clone(c.h.srqs[dev.Index])
		c.h.mu.Unlock()
		for _, s := range srqs {
			if !yield(s, nil) {
				return
			}
		}
	}
}

func (c *fakeClient) CMIDs(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error] {
	return func(yield func(rdmanl.CMID, error) bool) {
		c.h.mu.Lock()
		c.h.cmIDDumps[dev.Name]++
		ids := slices.Clone(c.h.cmIDs[dev.Index])
		c.h.mu.Unlock()
		for _, id := range ids {
			if !yield(id, nil) {
				return
			}
		}
	}
}

// Rename renames a device of the host, as the kernel would.
func (c *fakeClient) Rename(_ context.Context, dev rdmanl.Device, name string) error {
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

func (c *fakeClient) Contexts(ctx context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.Context, error] {
	return func(yield func(rdmanl.Context, error) bool) {
		c.h.mu.Lock()
		ctxs := slices.Clone(c.h.ctxs[dev.Index])
		c.h.mu.Unlock()
		for _, x := range ctxs {
			if !yield(x, nil) {
				return
			}
		}
	}
}

func (c *fakeClient) Close() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.h.open--
	}
	return nil
}

// stopRun cancels a Run started with done as its result and requires it
// to return nil within a minute.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop")
	}
}

// waitFor polls cond (the agent's goroutines change what it reads) until
// it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The agent scans each device on its own, applies probe events while a
// scan of another device hangs, ends the QPs of a device that goes away,
// and on cancel leaves no goroutine, socket or netlink client behind.
func TestRunPerDevice(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := newFakeHost(rxe, siw)
	host.qps[rxe.Index] = []rdmanl.QP{qp(17, rdmanl.QPStateErr, 0)}
	host.qps[siw.Index] = []rdmanl.QP{qp(3, rdmanl.QPStateRTS, 0)}
	src := &stream{closed: make(chan struct{}), events: []bpf.Event{
		{Kind: bpf.KindQPCreate, Time: time.Now(), DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7, Comm: "app"},
		{Kind: bpf.KindDeviceEvent, Time: time.Now(), DevIndex: rxe.Index, DevName: rxe.Name, IBEvent: bpf.IBEventDeviceFatal},
	}}
	d := Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       host.dial,
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil },
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, Reconcile: 10 * time.Millisecond, Retry: time.Hour, Version: "test"})
	}()
	status := func() Status {
		st, err := AskStatus(context.Background(), sock)
		if err != nil {
			return Status{}
		}
		return st
	}
	waitFor(t, "both devices scanned and the probe's QP", func() bool {
		st := status()
		return st.Probes == "on" && host.dumpsOf("rxe0") > 1 && host.dumpsOf("siw0") > 1 && st.QPs == 3
	})
	// siw0's dump hangs: rxe0 is still scanned and its history current.
	host.mu.Lock()
	host.blockOn = "siw0"
	host.mu.Unlock()
	before := host.dumpsOf("rxe0")
	waitFor(t, "rxe0 scanned while siw0's dump hangs", func() bool { return host.dumpsOf("rxe0") > before+3 })

	// siw0 goes away: its scanner stops and its QPs end.
	host.set([]rdmanl.Device{rxe}, map[uint32][]rdmanl.QP{rxe.Index: {qp(17, rdmanl.QPStateErr, 0)}})
	waitFor(t, "siw0 gone", func() bool {
		st := status()
		return slices.Equal(st.Devices, []string{"rxe0"}) && st.QPs == 1
	})
	if st := status(); st.ScanError != "" {
		t.Errorf("scan error %q after siw0 went away", st.ScanError)
	}
	rep, err := Ask(context.Background(), sock, CheckOptions{MinAge: 0})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Rule, Device string
		QPN          uint32
	}
	var findings []got
	for _, f := range rep.Findings {
		findings = append(findings, got{f.Rule, f.Device, f.QPN})
	}
	if diff := cmp.Diff([]got{{leakwatch.RuleStaleErrorQP, "rxe0", 17}}, findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	stopRun(t, cancel, done)
	select {
	case <-src.closed:
	default:
		t.Error("the probes were not closed")
	}
	if n := host.openClients(); n != 0 {
		t.Errorf("%d netlink clients left open", n)
	}
}

// CheckOnce applies the probe events it reads until the end of the watch,
// then stops the reader and returns without leaving a goroutine behind.
func TestCheckOnceStopsItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := newFakeHost(rxe)
	created := time.Now()
	src := &stream{closed: make(chan struct{}), events: []bpf.Event{
		{Kind: bpf.KindQPCreate, Time: created, DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7, Comm: "app"},
		{Kind: bpf.KindQPModify, Time: created, DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, NewState: rdmanl.QPStateErr, HasState: true},
		{Kind: bpf.KindQPCreate, Time: created, DevIndex: 9, DevName: "other0", QPN: 41, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7},
	}}
	host.qps[rxe.Index] = []rdmanl.QP{qp(40, rdmanl.QPStateErr, 7)}
	d := Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       host.dial,
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil },
	}
	rep, err := CheckOnce(context.Background(), d, CheckOptions{Device: "rxe0", Watch: 50 * time.Millisecond, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "on" || rep.Source != "local" || rep.QPs != 1 || !slices.Equal(rep.Devices, []string{"rxe0"}) {
		t.Errorf("report: probes %s, source %s, %d QPs on %v; want the one QP of rxe0, probes on", rep.Probes, rep.Source, rep.QPs, rep.Devices)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Rule != leakwatch.RuleStaleErrorQP || rep.Findings[0].Comm != "app" {
		t.Errorf("findings %+v; want stale-error-qp for QP 40 of app", rep.Findings)
	}
	if host.openClients() != 0 {
		t.Errorf("netlink client left open")
	}
}

// A probe stream that fails during a watch leaves a netlink-only report
// that says why.
func TestCheckOnceProbeStreamFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := newFakeHost(rxe)
	src := &stream{err: errors.New("bpf: read ring buffer: bad"), closed: make(chan struct{})}
	d := Deps{Dial: host.dial, OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil }}
	rep, err := CheckOnce(context.Background(), d, CheckOptions{Watch: 50 * time.Millisecond, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "off" || rep.ProbesError != "probe stream failed: bpf: read ring buffer: bad" {
		t.Errorf("probes %s (%s), want off because the stream failed", rep.Probes, rep.ProbesError)
	}
}

// Where the provider reports no QP state, a scan reads the rdma_cm IDs to
// say which QPs are connected; elsewhere it does not dump them.
func TestScanReadsCMIDsOnlyForUnreportedStates(t *testing.T) {
	host := newFakeHost(rxe, siw)
	unfilled := qp(1, rdmanl.QPStateReset, 42) // qp() gives it port 1
	host.qps[siw.Index] = []rdmanl.QP{unfilled, qp(2, rdmanl.QPStateReset, 42)}
	host.qps[rxe.Index] = []rdmanl.QP{qp(17, rdmanl.QPStateRTS, 42)}
	host.cmIDs = map[uint32][]rdmanl.CMID{
		siw.Index: {{LQPN: 1, State: rdmanl.CMStateConnect}, {LQPN: 2, State: 8 /* LISTEN */}, {LQPN: 0, State: rdmanl.CMStateConnect}},
		rxe.Index: {{LQPN: 17, State: rdmanl.CMStateConnect}},
	}
	nl, _ := host.dial()
	defer nl.Close()
	sc, _, err := scanner{nl: nl, now: time.Now}.scan(t.Context(), []rdmanl.Device{rxe, siw})
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Devices[0].CMConnected; got != nil {
		t.Errorf("rxe0 reports its QP states, yet its rdma_cm IDs were read: %v", got)
	}
	if diff := cmp.Diff(map[uint32]bool{1: true}, sc.Devices[1].CMConnected); diff != "" {
		t.Errorf("siw0's connected QPs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"siw0": 1}, host.cmIDDumps); diff != "" {
		t.Errorf("rdma_cm ID dumps (-want +got):\n%s", diff)
	}
}

// QPs netlink reports as rdma_cm's get their ULP from the rdma_cm IDs and
// SRQs; a device without such QPs has no rdma_cm IDs dumped. Each
// device's SRQs are dumped once, for the QPs' SRQ numbers and the ULPs.
func TestScanNamesULPs(t *testing.T) {
	host := newFakeHost(rxe, siw)
	kern := func(n uint32) rdmanl.QP {
		q := qp(n, rdmanl.QPStateRTS, 0)
		q.Owner = rdmanl.Owner{KernName: "rdma_cm"}
		return q
	}
	host.qps[siw.Index] = []rdmanl.QP{kern(2), kern(3), kern(5)}
	host.qps[rxe.Index] = []rdmanl.QP{qp(17, rdmanl.QPStateRTS, 42)}
	host.cmIDs = map[uint32][]rdmanl.CMID{
		siw.Index: {{LQPN: 2, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}}, {LQPN: 5, Owner: rdmanl.Owner{KernName: "nvme_rdma"}}},
		rxe.Index: {{LQPN: 17, Owner: rdmanl.Owner{PID: 42}}},
	}
	host.srqs = map[uint32][]rdmanl.SRQ{siw.Index: {{SRQN: 1, QPs: []rdmanl.QPRange{{Min: 2, Max: 3}}, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}}}}
	nl, _ := host.dial()
	defer nl.Close()
	sc, _, err := scanner{nl: nl, now: time.Now}.scan(t.Context(), []rdmanl.Device{rxe, siw})
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Devices[0].ULPs; got != nil {
		t.Errorf("rxe0 has no rdma_cm QPs, yet ULPs %v", got)
	}
	if diff := cmp.Diff(map[uint32]string{2: "nvmet_rdma", 3: "nvmet_rdma", 5: "nvme_rdma"}, sc.Devices[1].ULPs); diff != "" {
		t.Errorf("siw0's ULPs (-want +got):\n%s", diff)
	}
	var onSRQ []uint32
	for _, q := range sc.Devices[1].QPs {
		if q.OnSRQ && q.SRQN == 1 {
			onSRQ = append(onSRQ, q.LQPN)
		}
	}
	if diff := cmp.Diff([]uint32{2, 3}, onSRQ); diff != "" {
		t.Errorf("siw0's QPs on SRQ 1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"rxe0": 1, "siw0": 1}, host.srqDumps); diff != "" {
		t.Errorf("SRQ dumps (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"siw0": 1}, host.cmIDDumps); diff != "" {
		t.Errorf("rdma_cm ID dumps (-want +got):\n%s", diff)
	}
}
