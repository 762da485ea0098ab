package agent

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"go.uber.org/goleak"
)

// liveStream is a probe source the test drives: events it is sent, a lost
// count it sets, a failure it triggers.
type liveStream struct {
	events chan bpf.Event
	lost   atomic.Uint64
	fail   chan struct{}
	once   sync.Once
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

// With probes the agent dumps a RoCE device once and then lives on the
// events; an iWARP device, whose RTS the probes cannot see, is still dumped
// every interval; lost events bring a dump forward; probes that fail put
// every device back on the interval.
func TestRunReconcile(t *testing.T) {
	defer goleak.VerifyNone(t)
	roce := rdmanl.Device{Index: 1, Name: "rxe0", Protocol: "roce"}
	iw := rdmanl.Device{Index: 2, Name: "siw0", Protocol: "iw"}
	host := newFakeHost(roce, iw)
	host.qps[roce.Index] = []rdmanl.QP{qp(17, rdmanl.QPStateRTS, 0)}
	src := newLiveStream()
	d := Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       host.dial,
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil },
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, d, RunOptions{Socket: sock, Interval: 10 * time.Millisecond, Reconcile: time.Hour, Retry: time.Hour})
	}()
	defer stopRun(t, cancel, done)
	waitFor(t, "the probes on and both devices dumped", func() bool {
		st, err := AskStatus(context.Background(), sock)
		return err == nil && st.Probes == "on" && host.dumpsOf("rxe0") > 0 && host.dumpsOf("siw0") > 0
	})
	// A few intervals for rxe0's dump under the probes (its first may
	// have begun before they attached).
	iwDumps := host.dumpsOf("siw0")
	waitFor(t, "3 more intervals", func() bool { return host.dumpsOf("siw0") >= iwDumps+3 })
	// The iWARP device goes on being dumped; the RoCE one is not, while
	// the events keep its history (a QP the probes saw created).
	roceDumps := host.dumpsOf("rxe0")
	iwDumps = host.dumpsOf("siw0")
	src.events <- bpf.Event{Kind: bpf.KindQPCreate, Time: time.Now(), DevIndex: roce.Index, DevName: roce.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7}
	waitFor(t, "20 more dumps of the iWARP device", func() bool { return host.dumpsOf("siw0") >= iwDumps+20 })
	if n := host.dumpsOf("rxe0"); n != roceDumps {
		t.Errorf("rxe0 dumped %d times more within %d intervals, with probes and a reconcile of an hour", n-roceDumps, 20)
	}
	if st, _ := AskStatus(context.Background(), sock); st.QPs != 2 {
		t.Errorf("the agent tracks %d QPs, want 2 (one dumped, one created under the probes)", st.QPs)
	}
	// Lost events: the next interval dumps it, once.
	src.lost.Store(3)
	waitFor(t, "a dump after lost events", func() bool { return host.dumpsOf("rxe0") == roceDumps+1 })
	iwDumps = host.dumpsOf("siw0")
	waitFor(t, "10 more intervals", func() bool { return host.dumpsOf("siw0") >= iwDumps+10 })
	if n := host.dumpsOf("rxe0"); n != roceDumps+1 {
		t.Errorf("rxe0 dumped %d times after one loss of events, want once", n-roceDumps)
	}
	// The probes fail: netlink every interval from then on.
	close(src.fail)
	waitFor(t, "rxe0 dumped every interval without probes", func() bool { return host.dumpsOf("rxe0") >= roceDumps+6 })
}

// With Rename the agent gives every device it sees appear its persistent
// name: at its start, and again when the device comes back under its
// kernel name (a reset re-registers it).
func TestRunRenamesAppearingDevices(t *testing.T) {
	defer goleak.VerifyNone(t)
	dev := rdmanl.Device{Index: 7, Name: "rxe9", Protocol: "roce", NodeGUID: 0x021122fffe334455}
	host := newFakeHost(dev)
	var logs syncBuffer
	d := Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Dial: host.dial}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := RunOptions{Socket: filepath.Join(t.TempDir(), "agent.sock"), Interval: 10 * time.Millisecond, NoProbes: true, Retry: time.Hour,
		Rename: &rename.Options{Policies: []rename.Policy{rename.PolicyGUID}}}
	go func() { done <- Run(ctx, d, opts) }()
	defer stopRun(t, cancel, done)
	const want = "rocex021122fffe334455"
	name := func() string {
		host.mu.Lock()
		defer host.mu.Unlock()
		if len(host.devs) == 0 {
			return ""
		}
		return host.devs[0].Name
	}
	waitFor(t, "rxe9 renamed at start", func() bool { return name() == want })
	// The device goes and comes back under its kernel name, a new index.
	host.set(nil, nil)
	waitFor(t, "the device gone", func() bool {
		st, err := AskStatus(context.Background(), opts.Socket)
		return err == nil && len(st.Devices) == 0
	})
	back := dev
	back.Index = 8
	host.set([]rdmanl.Device{back}, nil)
	waitFor(t, "renamed again when it came back", func() bool { return name() == want })
	waitFor(t, "the agent lists it under its name", func() bool {
		st, err := AskStatus(context.Background(), opts.Socket)
		return err == nil && len(st.Devices) == 1 && st.Devices[0] == want
	})
	if n := strings.Count(logs.String(), `msg="device renamed" source=agent device=rxe9 name=`+want); n != 2 {
		t.Errorf("%d renames logged, want 2:\n%s", n, logs.String())
	}
	host.mu.Lock()
	renames := host.renames
	host.mu.Unlock()
	if renames != 2 {
		t.Errorf("%d renames made, want 2 (a device already named is left alone)", renames)
	}
}
