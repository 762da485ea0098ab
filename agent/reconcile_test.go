package agent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/watch"
	"go.uber.org/goleak"
)

// liveStream is a probe source the test drives: events it is sent, a lost
// count it sets, a failure it triggers, and a count of resource changes
// when counts is set (bpf.Tracer.ResourceChanges).
type liveStream struct {
	events  chan bpf.Event
	lost    atomic.Uint64
	fail    chan struct{}
	counts  atomic.Bool
	changes atomic.Uint64
}

func newLiveStream() *liveStream {
	return &liveStream{events: make(chan bpf.Event), fail: make(chan struct{})}
}

func (s *liveStream) Events(ctx context.Context) iter.Seq2[bpf.Event, error] {
	return func(yield func(bpf.Event, error) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.fail:
				yield(bpf.Event{}, errors.New("bpf: ring buffer: gone"))
				return
			case ev := <-s.events:
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}

func (s *liveStream) Stats() (bpf.Stats, error) { return bpf.Stats{Lost: s.lost.Load()}, nil }
func (s *liveStream) Close() error              { return nil }

func (s *liveStream) ResourceChanges() (uint64, bool) { return s.changes.Load(), s.counts.Load() }

// runProbed runs the agent on host with src as its probes, the devices
// listed every 10ms, a reconcile of an hour and the clock now (time.Now
// when nil); stop stops it.
func runProbed(t *testing.T, host *rdmanltest.Host, src *liveStream, now func() time.Time) (sock string, stop func()) {
	t.Helper()
	d := watch.Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       dialer(host),
		OpenProbes: func(context.Context, *slog.Logger) (watch.EventSource, error) { return src, nil },
		Now:        now,
	}
	sock = filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, Reconcile: time.Hour, retry: time.Hour})
	}()
	return sock, func() { t.Helper(); stopRun(t, cancel, done) }
}

// With probes the agent dumps a RoCE device once and then lives on the
// events; an iWARP device, whose RTS the probes cannot see, is still dumped
// every interval; lost events bring a dump forward; probes that fail put
// every device back on the interval.
func TestRunReconcile(t *testing.T) {
	defer goleak.VerifyNone(t)
	roce := rdmanl.Device{Index: 1, Name: "rxe0", Protocol: "roce"}
	iw := rdmanl.Device{Index: 2, Name: "siw0", Protocol: "iw"}
	host := rdmanltest.NewHost(roce, iw)
	host.SetQPs(roce.Index, qp(17, rdmanl.QPStateRTS, 0))
	src := newLiveStream()
	sock, stop := runProbed(t, host, src, nil)
	defer stop()
	waitFor(t, "the probes on and both devices dumped", func() bool {
		st, err := askStatus(context.Background(), sock)
		return err == nil && st.Probes == "on" && host.Dumps("rxe0") > 0 && host.Dumps("siw0") > 0
	})
	// A few intervals for rxe0's dump under the probes (its first may
	// have begun before they attached).
	iwDumps := host.Dumps("siw0")
	waitFor(t, "3 more intervals", func() bool { return host.Dumps("siw0") >= iwDumps+3 })
	// The iWARP device goes on being dumped; the RoCE one is not, while
	// the events keep its history (a QP the probes saw created).
	roceDumps := host.Dumps("rxe0")
	iwDumps = host.Dumps("siw0")
	src.events <- bpf.Event{Kind: bpf.KindQPCreate, Time: time.Now(), DevIndex: roce.Index, DevName: roce.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7}
	waitFor(t, "20 more dumps of the iWARP device", func() bool { return host.Dumps("siw0") >= iwDumps+20 })
	if n := host.Dumps("rxe0"); n != roceDumps {
		t.Errorf("rxe0 dumped %d times more within %d intervals, with probes and a reconcile of an hour", n-roceDumps, 20)
	}
	if st, _ := askStatus(context.Background(), sock); st.QPs != 2 {
		t.Errorf("the agent tracks %d QPs, want 2 (one dumped, one created under the probes)", st.QPs)
	}
	// Lost events: the next interval dumps it, once.
	src.lost.Store(3)
	waitFor(t, "a dump after lost events", func() bool { return host.Dumps("rxe0") == roceDumps+1 })
	iwDumps = host.Dumps("siw0")
	waitFor(t, "10 more intervals", func() bool { return host.Dumps("siw0") >= iwDumps+10 })
	if n := host.Dumps("rxe0"); n != roceDumps+1 {
		t.Errorf("rxe0 dumped %d times after one loss of events, want once", n-roceDumps)
	}
	// The probes fail: netlink every interval from then on.
	close(src.fail)
	waitFor(t, "rxe0 dumped every interval without probes", func() bool { return host.Dumps("rxe0") >= roceDumps+6 })
}

// awaitIntervals waits for n more dumps of iwDev, an iWARP device the agent
// dumps every interval: n more intervals.
func awaitIntervals(t *testing.T, host *rdmanltest.Host, iwDev string, n int) {
	t.Helper()
	from := host.Dumps(iwDev)
	waitFor(t, fmt.Sprintf("%d more intervals", n), func() bool { return host.Dumps(iwDev) >= from+n })
}

// The agent dumps a device's MRs once, then only when its resource
// summary, read every interval, counts another number of them, and every
// reconcile: never at every interval otherwise. An iWARP device, dumped
// every interval, paces the test.
func TestRunDumpsMRs(t *testing.T) {
	defer goleak.VerifyNone(t)
	roce := rdmanl.Device{Index: 1, Name: "rxe0", Protocol: "roce"}
	iw := rdmanl.Device{Index: 2, Name: "siw0", Protocol: "iw"}
	host := rdmanltest.NewHost(roce, iw)
	mr := func(mrn uint32) rdmanl.MR { return rdmanl.MR{MRN: mrn, Len: 4096, Owner: rdmanl.Owner{PID: 7}} }
	host.SetMRs(roce.Index, mr(1), mr(2))
	var now atomic.Int64 // the agent's clock, which the test moves
	now.Store(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixNano())
	sock, stop := runProbed(t, host, newLiveStream(), func() time.Time { return time.Unix(0, now.Load()) })
	defer stop()
	waitFor(t, "the probes on and rxe0's MRs dumped", func() bool {
		st, err := askStatus(context.Background(), sock)
		return err == nil && st.Probes == "on" && host.MRDumps("rxe0") > 0
	})
	intervals := func(n int) { t.Helper(); awaitIntervals(t, host, "siw0", n) }
	intervals(20)
	if n := host.MRDumps("rxe0"); n != 1 {
		t.Errorf("rxe0's MRs dumped %d times over 20 intervals of an unchanged count, want once", n)
	}
	if n := host.MRDumps("siw0"); n != 1 {
		t.Errorf("siw0's MRs dumped %d times, want once (its QPs every interval)", n)
	}
	// One more MR: the next interval dumps them, once.
	host.SetMRs(roce.Index, mr(1), mr(2), mr(3))
	waitFor(t, "an MR dump after the count changed", func() bool { return host.MRDumps("rxe0") == 2 })
	intervals(20)
	if n := host.MRDumps("rxe0"); n != 2 {
		t.Errorf("rxe0's MRs dumped %d times after one change, want 2", n)
	}
	// An MR replaced: the count stays, the dump waits for the reconcile.
	host.SetMRs(roce.Index, mr(1), mr(2), mr(4))
	intervals(20)
	if n := host.MRDumps("rxe0"); n != 2 {
		t.Errorf("rxe0's MRs dumped %d times before the reconcile, want 2", n)
	}
	now.Add(int64(time.Hour))
	waitFor(t, "an MR dump at the reconcile", func() bool { return host.MRDumps("rxe0") == 3 && host.MRDumps("siw0") == 2 })
	intervals(20)
	if n := host.MRDumps("rxe0"); n != 3 {
		t.Errorf("rxe0's MRs dumped %d times after the reconcile, want 3", n)
	}
}

// countedAgent is an agent on a fake host of rxe0 (one MR) and siw0 (an
// iWARP device, dumped every interval: it paces a test), whose probes
// count resources added and removed, on a clock the test moves.
type countedAgent struct {
	host *rdmanltest.Host
	src  *liveStream
	now  atomic.Int64 // the agent's clock, in Unix nanoseconds
	roce rdmanl.Device
	sock string
}

// countedMR is an MR of a page of process 7.
func countedMR(mrn uint32) rdmanl.MR {
	return rdmanl.MR{MRN: mrn, Len: 4096, Owner: rdmanl.Owner{PID: 7}}
}

// startCounted starts a countedAgent and waits until its probes are on, it
// dumped rxe0's QPs and MRs, and three intervals more passed; stop stops
// it.
func startCounted(t *testing.T) (a *countedAgent, stop func()) {
	t.Helper()
	a = &countedAgent{roce: rdmanl.Device{Index: 1, Name: "rxe0", Protocol: "roce"}, src: newLiveStream()}
	a.host = rdmanltest.NewHost(a.roce, rdmanl.Device{Index: 2, Name: "siw0", Protocol: "iw"})
	a.host.SetMRs(a.roce.Index, countedMR(1))
	a.src.counts.Store(true)
	a.src.changes.Store(5)
	a.now.Store(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixNano())
	a.sock, stop = runProbed(t, a.host, a.src, func() time.Time { return time.Unix(0, a.now.Load()) })
	started := false
	defer func() {
		if !started { // the wait failed: the agent stops all the same
			stop()
		}
	}()
	waitFor(t, "the probes on and rxe0 dumped", func() bool {
		st, err := askStatus(context.Background(), a.sock)
		return err == nil && st.Probes == "on" && a.host.Dumps("rxe0") > 0 && a.host.MRDumps("rxe0") > 0
	})
	awaitIntervals(t, a.host, "siw0", 3)
	started = true
	return a, stop
}

// Where the probes count the resources added and removed, the agent reads
// a device's resource summary again only when that count moved, and every
// reconcile: an MR registered on an idle host is dumped at the next
// interval all the same. Probes that do not count put the summary back on
// every interval.
func TestRunSummaryFollowsChanges(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, stop := startCounted(t)
	defer stop()
	host, src, now, roce, mr := a.host, a.src, &a.now, a.roce, countedMR
	intervals := func(n int) { t.Helper(); awaitIntervals(t, host, "siw0", n) }
	// A summary at most after the dump (which may have begun before the
	// probes attached: startCounted waits three intervals), then none
	// while nothing changes.
	sums := host.Summaries("rxe0")
	intervals(20)
	if n := host.Summaries("rxe0") - sums; n != 0 {
		t.Errorf("rxe0's summary read %d times over 20 intervals without a change, want none", n)
	}
	// An MR registered: the count moves, one summary counts it, its MRs
	// are dumped.
	host.SetMRs(roce.Index, mr(1), mr(2))
	src.changes.Add(1)
	waitFor(t, "an MR dump after a counted change", func() bool { return host.MRDumps("rxe0") == 2 })
	intervals(20)
	if n := host.Summaries("rxe0") - sums; n != 1 {
		t.Errorf("rxe0's summary read %d times after one change, want once", n)
	}
	// A change the probes did not count waits for the reconcile.
	host.SetMRs(roce.Index, mr(1), mr(2), mr(3))
	intervals(20)
	if n := host.MRDumps("rxe0"); n != 2 {
		t.Errorf("rxe0's MRs dumped %d times before the reconcile, want 2", n)
	}
	now.Add(int64(time.Hour))
	waitFor(t, "an MR dump at the reconcile", func() bool { return host.MRDumps("rxe0") == 3 })
	// Probes that count nothing: the summary every interval.
	src.counts.Store(false)
	sums = host.Summaries("rxe0")
	intervals(10)
	if n := host.Summaries("rxe0") - sums; n < 5 {
		t.Errorf("rxe0's summary read %d times over 10 intervals without a count, want every interval", n)
	}
}

// MRs registered while a long QP dump runs (after the summary the dump
// began with) are dumped once: the summary is read again before the MR
// dump, so its mark counts them, and the next interval does not find
// another number of MRs than the mark and dump them a second time.
func TestRunMRsChangedDuringQPDump(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, stop := startCounted(t)
	defer stop()
	host, src, now, roce, mr := a.host, a.src, &a.now, a.roce, countedMR
	// rxe0's next QP dump (the reconcile's) takes two seconds, in which
	// a process registers an MR.
	var once sync.Once
	host.OnQPDump(func(dev string) {
		if dev == roce.Name {
			once.Do(func() {
				host.SetMRs(roce.Index, mr(1), mr(2))
				src.changes.Add(1)
				now.Add(int64(2 * time.Second))
			})
		}
	})
	dumps, mrDumps := host.Dumps("rxe0"), host.MRDumps("rxe0")
	now.Add(int64(time.Hour))
	waitFor(t, "the reconcile's QP and MR dumps", func() bool {
		return host.Dumps("rxe0") > dumps && host.MRDumps("rxe0") > mrDumps
	})
	awaitIntervals(t, host, "siw0", 20)
	if n := host.MRDumps("rxe0") - mrDumps; n != 1 {
		t.Errorf("rxe0's MRs dumped %d times after the reconcile and one MR registered during its QP dump, want once", n)
	}
}

// With Rename the agent gives every device it sees appear its persistent
// name: at its start, and again when the device comes back under its
// kernel name (a reset re-registers it).
func TestRunRenamesAppearingDevices(t *testing.T) {
	defer goleak.VerifyNone(t)
	dev := rdmanl.Device{Index: 7, Name: "rxe9", Protocol: "roce", NodeGUID: 0x021122fffe334455}
	host := rdmanltest.NewHost(dev)
	var logs syncBuffer
	d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: dialer(host)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond, NoProbes: true, retry: time.Hour,
		Rename: &rename.Options{Policies: []rename.Policy{rename.PolicyGUID}}}
	go func() { done <- Run(ctx, d, opts) }()
	defer stopRun(t, cancel, done)
	const want = "rocex021122fffe334455"
	name := func() string {
		if devs := host.Devices(); len(devs) > 0 {
			return devs[0].Name
		}
		return ""
	}
	waitFor(t, "rxe9 renamed at start", func() bool { return name() == want })
	// The device goes and comes back under its kernel name, a new index.
	host.Set(nil, nil)
	waitFor(t, "the device gone", func() bool {
		st, err := askStatus(context.Background(), opts.Socket)
		return err == nil && len(st.Devices) == 0
	})
	back := dev
	back.Index = 8
	host.Set([]rdmanl.Device{back}, nil)
	waitFor(t, "renamed again when it came back", func() bool { return name() == want })
	waitFor(t, "the agent lists it under its name", func() bool {
		st, err := askStatus(context.Background(), opts.Socket)
		return err == nil && len(st.Devices) == 1 && st.Devices[0] == want
	})
	if n := strings.Count(logs.String(), `msg="device renamed" source=agent device=rxe9 name=`+want); n != 2 {
		t.Errorf("%d renames logged, want 2:\n%s", n, logs.String())
	}
	if renames := host.Renames(); renames != 2 {
		t.Errorf("%d renames made, want 2 (a device already named is left alone)", renames)
	}
}

// What a device reports of itself feeds the rules: qp-exhaustion from its
// own max_qp with none configured, and the provider table.
func TestRunLearnsDevices(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := rdmanltest.NewHost(rxe)
	var qps []rdmanl.QP
	for n := range uint32(9) {
		qps = append(qps, qp(17+n, rdmanl.QPStateRTS, 0))
	}
	host.SetQPs(rxe.Index, qps...)
	learned := 0
	var mu sync.Mutex
	d := watch.Deps{Log: slog.New(slog.DiscardHandler), Dial: dialer(host), LearnDevice: func(dev rdmanl.Device) watch.DeviceFacts {
		mu.Lock()
		defer mu.Unlock()
		learned++
		return watch.DeviceFacts{Provider: "rxe", MaxQP: 10}
	}}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, NoProbes: true, retry: time.Hour})
	}()
	defer stopRun(t, cancel, done)
	var rep agentapi.CheckReport
	waitFor(t, "qp-exhaustion from the device's own max_qp", func() bool {
		var err error
		rep, err = agentapi.Ask(context.Background(), sock, leakwatch.Query{Rules: []string{leakwatch.RuleQPExhaustion}}, 0)
		return err == nil && len(rep.Findings) == 1
	})
	if f := rep.Findings[0]; f.Limit != 10 || f.Count != 9 || f.Severity != leakwatch.SeverityCritical {
		t.Errorf("finding %+v, want 9 of 10 QPs, critical", f)
	}
	// A limit asked for wins over the device's.
	rep, err := agentapi.Ask(context.Background(), sock, leakwatch.Query{Rules: []string{leakwatch.RuleQPExhaustion}, MaxQP: map[string]uint64{"rxe0": 1000}}, 0)
	if err != nil || len(rep.Findings) != 0 {
		t.Errorf("with max_qp 1000 asked: %v, %v", rep.Findings, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if learned != 1 {
		t.Errorf("the device was learned %d times, want once", learned)
	}
}

// monitorClient is a fake client with the RDMA monitor group: events sent
// on events, join refused when refuse is set.
type monitorClient struct {
	*rdmanltest.Client
	events <-chan error // nil error: a register event
	refuse bool
}

func (m *monitorClient) Monitor(ctx context.Context) iter.Seq2[rdmanl.MonitorEvent, error] {
	return func(yield func(rdmanl.MonitorEvent, error) bool) {
		if m.refuse {
			yield(rdmanl.MonitorEvent{}, &rdmanl.Error{Op: rdmanl.OpJoinMonitor, Err: syscall.EINVAL})
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-m.events:
				if !yield(rdmanl.MonitorEvent{Type: 0, DevIndex: 9, DevName: "rxe9"}, err) || err != nil {
					return
				}
			}
		}
	}
}

// Device changes the monitor group reports (and its overruns) have the
// devices listed at once, not at the next interval; a kernel without the
// group leaves the agent on its interval.
func TestRunMonitor(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprint("refuse=", refuse), func(t *testing.T) {
			host := rdmanltest.NewHost(rxe)
			events := make(chan error)
			var logs syncBuffer
			d := watch.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: func() (watch.Netlink, error) {
				return &monitorClient{Client: host.Dial(), events: events, refuse: refuse}, nil
			}}
			sock := filepath.Join(t.TempDir(), "agent.sock")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, d, RunOptions{Socket: sock, Interval: time.Hour, NoProbes: true, retry: time.Hour})
			}()
			defer stopRun(t, cancel, done)
			devices := func() []string {
				st, _ := askStatus(context.Background(), sock)
				return st.Devices
			}
			waitFor(t, "the first listing", func() bool { return len(devices()) == 1 })
			rxe9 := rdmanl.Device{Index: 9, Name: "rxe9"}
			host.Set([]rdmanl.Device{rxe, rxe9}, nil)
			if refuse {
				waitFor(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "rdma netlink monitor group unavailable") })
				if n := len(devices()); n != 1 {
					t.Errorf("%d devices listed without a monitor event within an hour's interval", n)
				}
				return
			}
			events <- nil
			waitFor(t, "rxe9 listed after its register event", func() bool { return len(devices()) == 2 })
			host.Set([]rdmanl.Device{rxe}, nil)
			events <- syscall.ENOBUFS // the overrun: events lost
			waitFor(t, "rxe9 gone after an overrun", func() bool { return len(devices()) == 1 })
			if n := strings.Count(logs.String(), "rdma netlink monitor overrun: events lost, listing the devices"); n != 1 {
				t.Errorf("the overrun logged %d times, want once:\n%s", n, logs.String())
			}
			waitFor(t, "the monitor joined again", func() bool {
				select {
				case events <- nil:
					return true
				case <-time.After(10 * time.Millisecond):
					return false
				}
			})
		})
	}
}
