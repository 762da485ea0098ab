package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A warning repeated identically is logged once per window, then once
// more with the count of those not logged; what differs, and Info, all
// pass.
func TestRepeatLimiter(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var b strings.Builder
	// A record passed on keeps its own time (slog's clock: "now"); a
	// count is timed by the limiter's clock (the time from t0).
	text := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key != slog.TimeKey {
			return a
		}
		if d := a.Value.Time().Sub(t0); d < time.Hour {
			return slog.String(a.Key, d.String())
		}
		return slog.String(a.Key, "now")
	}})
	lim := newRepeatLimiter(text, time.Minute, func() time.Time { return now })
	log := slog.New(lim).With("source", "agent")
	broken := errors.New("dial unixgram /run/notify: connect: no such file or directory")
	for range 190000 {
		log.Warn("sd_notify WATCHDOG failed", "err", broken)
	}
	log.Warn("sd_notify WATCHDOG failed", "err", errors.New("another error"))
	slog.New(lim).With("source", "policy").Warn("sd_notify WATCHDOG failed", "err", broken)
	for range 2 {
		log.Info("configuration reloaded")
	}
	now = now.Add(30 * time.Second)
	log.Warn("sd_notify WATCHDOG failed", "err", broken) // counted: within the minute
	now = now.Add(31 * time.Second)
	log.Info("listening")                                // after the minute: the count goes first
	log.Warn("sd_notify WATCHDOG failed", "err", broken) // a new minute of them
	now = now.Add(time.Second)
	lim.flush(context.Background())
	lim.flush(context.Background()) // nothing left
	want := `time=now level=WARN msg="sd_notify WATCHDOG failed" source=agent err="dial unixgram /run/notify: connect: no such file or directory"
time=now level=WARN msg="sd_notify WATCHDOG failed" source=agent err="another error"
time=now level=WARN msg="sd_notify WATCHDOG failed" source=policy err="dial unixgram /run/notify: connect: no such file or directory"
time=now level=INFO msg="configuration reloaded" source=agent
time=now level=INFO msg="configuration reloaded" source=agent
time=1m1s level=WARN msg="sd_notify WATCHDOG failed" source=agent err="dial unixgram /run/notify: connect: no such file or directory" suppressed=190000
time=now level=INFO msg=listening source=agent
time=1m2s level=WARN msg="sd_notify WATCHDOG failed" source=agent err="dial unixgram /run/notify: connect: no such file or directory" suppressed=1
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// QP limits are logged as they are, a long device name cut.
func TestLoggedMaxQP(t *testing.T) {
	short := map[string]uint64{"rxe0": 100}
	if got := loggedMaxQP(short); !cmp.Equal(got, short) {
		t.Errorf("loggedMaxQP(%v) = %v", short, got)
	}
	long := strings.Repeat("d", 1<<20)
	want := map[string]uint64{"rxe0": 100, `"` + strings.Repeat("d", 64) + `" (1048576 bytes)`: 5}
	if diff := cmp.Diff(want, loggedMaxQP(map[string]uint64{"rxe0": 100, long: 5})); diff != "" {
		t.Errorf("loggedMaxQP (-want +got):\n%s", diff)
	}
}
