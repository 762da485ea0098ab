package agent

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
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
