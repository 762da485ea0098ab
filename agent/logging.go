package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// repeatWindow is how long the agent logs a warning once however often it
// comes (repeatLimiter).
const repeatWindow = time.Minute

// repeatLimiter is the agent's logging: a slog.Handler that passes every
// record on to the handler it wraps, except warnings and errors repeated
// identically. A warning or an error identical to one passed less than its
// window ago (the same level, message and attributes, those given to
// WithAttrs and WithGroup included) is not passed but counted; the first
// record after the window that finds some counted passes them on as one:
// the record again, timed then, with suppressed=N, the number of records
// not passed. flush passes on every count still held. Debug and Info
// records, and records whose attributes differ (a duration, a count), all
// pass.
type repeatLimiter struct {
	inner  slog.Handler
	prefix string // the WithAttrs and WithGroup calls that made inner, as text
	r      *repeats
}

// repeats is what the handlers derived from one repeatLimiter share.
type repeats struct {
	now    func() time.Time
	window time.Duration
	mu     sync.Mutex
	seen   map[string]*repeat // by record, as repeatKey writes it
}

// repeat is a record passed at most a window ago and the identical ones
// counted since.
type repeat struct {
	passed  time.Time
	count   int
	rec     slog.Record
	handler slog.Handler // the handler that passes it on
}

// newRepeatLimiter wraps h: identical warnings pass at most once per window
// of the time now reads.
func newRepeatLimiter(h slog.Handler, window time.Duration, now func() time.Time) *repeatLimiter {
	return &repeatLimiter{inner: h, r: &repeats{now: now, window: window, seen: map[string]*repeat{}}}
}

func (h *repeatLimiter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *repeatLimiter) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		writeAttr(&b, a)
	}
	return &repeatLimiter{inner: h.inner.WithAttrs(attrs), prefix: b.String(), r: h.r}
}

func (h *repeatLimiter) WithGroup(name string) slog.Handler {
	return &repeatLimiter{inner: h.inner.WithGroup(name), prefix: h.prefix + "\x00group " + name, r: h.r}
}

func (h *repeatLimiter) Handle(ctx context.Context, rec slog.Record) error {
	now := h.r.now()
	due := h.r.due(now, false)
	pass := true
	if rec.Level >= slog.LevelWarn {
		key := h.repeatKey(rec)
		h.r.mu.Lock()
		if p := h.r.seen[key]; p != nil {
			p.count++
			pass = false
		} else {
			h.r.seen[key] = &repeat{passed: now, rec: rec.Clone(), handler: h.inner}
		}
		h.r.mu.Unlock()
	}
	for _, p := range due {
		_ = p.handler.Handle(ctx, p.summary(now)) // as the record itself would have been
	}
	if !pass {
		return nil
	}
	return h.inner.Handle(ctx, rec)
}

// flush passes on, as Handle would after the window, the records counted
// and not yet passed on.
func (h *repeatLimiter) flush(ctx context.Context) {
	now := h.r.now()
	for _, p := range h.r.due(now, true) {
		_ = p.handler.Handle(ctx, p.summary(now)) // nowhere to report a failure to log
	}
}

// due takes the records whose window has passed at now (every one when
// all is set) and returns those counted since, to pass on as summaries. An entry
// with a count starts a new window, so that a warning that keeps coming
// is logged once per window; one without is forgotten.
func (r *repeats) due(now time.Time, all bool) []repeat {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []repeat
	for key, p := range r.seen {
		if !all && now.Sub(p.passed) < r.window {
			continue
		}
		if p.count == 0 {
			delete(r.seen, key)
			continue
		}
		due = append(due, *p)
		p.passed, p.count = now, 0
	}
	return due
}

// summary is the record p stands for, at now, with the count of those not
// passed on.
func (p repeat) summary(now time.Time) slog.Record {
	rec := slog.NewRecord(now, p.rec.Level, p.rec.Message, p.rec.PC)
	p.rec.Attrs(func(a slog.Attr) bool {
		rec.AddAttrs(a)
		return true
	})
	rec.AddAttrs(slog.Int("suppressed", p.count))
	return rec
}

// repeatKey is rec as the limiter compares records: its level, message and
// attributes with h's.
func (h *repeatLimiter) repeatKey(rec slog.Record) string {
	var b strings.Builder
	b.WriteString(rec.Level.String())
	b.WriteByte(0)
	b.WriteString(rec.Message)
	b.WriteString(h.prefix)
	rec.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, a)
		return true
	})
	return b.String()
}

// writeAttr writes a as repeatKey compares it.
func writeAttr(b *strings.Builder, a slog.Attr) {
	b.WriteByte(0)
	b.WriteString(a.Key)
	b.WriteByte('=')
	b.WriteString(a.Value.Resolve().String())
}

// loggedMaxQP is QP limits as the log shows them: a device name longer
// than quote.Max bytes (the file or the command line may give one) cut
// and quoted, as quote.String does.
func loggedMaxQP(limits map[string]uint64) map[string]uint64 {
	long := false
	for name := range limits {
		long = long || len(name) > quote.Max
	}
	if !long {
		return limits
	}
	cut := make(map[string]uint64, len(limits))
	for name, n := range limits {
		if len(name) > quote.Max {
			name = quote.String(name)
		}
		cut[name] = n
	}
	return cut
}
