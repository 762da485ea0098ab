package watch

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
	"go.uber.org/goleak"
)

// dialer dials host's clients as Deps.Dial does.
func dialer(host *rdmanltest.Host) func() (Netlink, error) {
	return func() (Netlink, error) { return host.Dial(), nil }
}

// stream is a probe source that yields its events, then fails with err or,
// when err is nil, waits for ctx like a tracer with nothing to read.
type stream struct {
	events []bpf.Event
	err    error
	closed chan struct{}
}

func (s *stream) Events(ctx context.Context) iter.Seq2[bpf.Event, error] {
	return func(yield func(bpf.Event, error) bool) {
		for _, ev := range s.events {
			if !yield(ev, nil) {
				return
			}
		}
		if s.err == nil {
			<-ctx.Done()
			return
		}
		yield(bpf.Event{}, s.err)
	}
}
func (s *stream) Close() error { close(s.closed); return nil }

// checkOnce applies the probe events it reads until the end of the watch,
// then stops the reader and returns without leaving a goroutine behind.
func TestCheckOnceStopsItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := rdmanltest.NewHost(rxe)
	created := time.Now()
	src := &stream{closed: make(chan struct{}), events: []bpf.Event{
		{Kind: bpf.KindQPCreate, Time: created, DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7, Comm: "app"},
		{Kind: bpf.KindQPModify, Time: created, DevIndex: rxe.Index, DevName: rxe.Name, QPN: 40, NewState: rdmanl.QPStateErr, HasState: true},
		{Kind: bpf.KindQPCreate, Time: created, DevIndex: 9, DevName: "other0", QPN: 41, QPType: rdmanl.QPTypeRC, PID: 7, TID: 7},
	}}
	host.SetQPs(rxe.Index, qp(40, rdmanl.QPStateErr, 7))
	d := Deps{
		Log:        slog.New(slog.DiscardHandler),
		Dial:       dialer(host),
		OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil },
	}
	rep, err := checkOnce(context.Background(), d, CheckOptions{Device: "rxe0", Watch: 50 * time.Millisecond, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "on" || rep.Source != "local" || rep.QPs != 1 || !slices.Equal(rep.Devices, []string{"rxe0"}) {
		t.Errorf("report: probes %s, source %s, %d QPs on %v; want the one QP of rxe0, probes on", rep.Probes, rep.Source, rep.QPs, rep.Devices)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Rule != leakwatch.RuleStaleErrorQP || rep.Findings[0].Comm != "app" {
		t.Errorf("findings %+v; want stale-error-qp for QP 40 of app", rep.Findings)
	}
	if host.Open() != 0 {
		t.Errorf("netlink client left open")
	}
}

// A probe stream that fails during a watch leaves a netlink-only report
// that says why.
func TestCheckOnceProbeStreamFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	host := rdmanltest.NewHost(rxe)
	src := &stream{err: errors.New("bpf: read ring buffer: bad"), closed: make(chan struct{})}
	d := Deps{Dial: dialer(host), OpenProbes: func(context.Context, *slog.Logger) (EventSource, error) { return src, nil }}
	rep, err := checkOnce(context.Background(), d, CheckOptions{Watch: 50 * time.Millisecond, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Probes != "off" || rep.ProbesError != "probe stream failed: bpf: read ring buffer: bad" {
		t.Errorf("probes %s (%s), want off because the stream failed", rep.Probes, rep.ProbesError)
	}
}
