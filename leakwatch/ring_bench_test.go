package leakwatch

import (
	"testing"
	"time"
)

// BenchmarkEnteredErrorFull is the cost of one entry into Error on a
// device whose list of Error entries is full: a failure qp-error-storm
// counts (QP_ACCESS_ERR), and a teardown's modify to Error.
func BenchmarkEnteredErrorFull(b *testing.B) {
	for _, bb := range []struct {
		name  string
		cause ErrorCause
	}{{"failure", CauseQPAccessErr}, {"teardown", CauseModify}} {
		b.Run(bb.name, func(b *testing.B) {
			w := New(Config{Probes: true}, func() time.Time { return t0 })
			w.Event(create(t0, rxe, 10, false))
			h, dev := w.qps[qpKey{rxe.Index, 10}], w.devs[rxe.Index]
			at := t0
			for range 2 * MaxQPErrors {
				h.record().errCause = 0
				at = at.Add(time.Microsecond)
				w.enteredError(h, dev, at, CauseQPAccessErr)
			}
			for b.Loop() {
				h.events.errCause = 0
				at = at.Add(time.Microsecond)
				w.enteredError(h, dev, at, bb.cause)
			}
		})
	}
}

// BenchmarkCreateFailedFull is the cost of one failed create on a device
// whose list of failed creates is full.
func BenchmarkCreateFailedFull(b *testing.B) {
	w := New(Config{Probes: true}, func() time.Time { return t0 })
	w.Event(create(t0, rxe, 10, false))
	dev := w.devs[rxe.Index]
	at := t0
	for range 2 * MaxCreateFailures {
		at = at.Add(time.Microsecond)
		dev.createFailed(at, 12, siteHandle{})
	}
	for b.Loop() {
		at = at.Add(time.Microsecond)
		dev.createFailed(at, 12, siteHandle{})
	}
}
