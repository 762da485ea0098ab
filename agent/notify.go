package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyTimeout bounds each write to systemd's notify socket.
const notifyTimeout = time.Second

// sdNotify sends state to systemd's notify socket (NOTIFY_SOCKET; a
// leading @ names an abstract socket) and gives up after timeout; without
// NOTIFY_SOCKET it does nothing and says false. It is go-systemd's
// daemon.SdNotify with a write deadline: that one writes without any, so
// a socket whose reader stopped reading (systemd wedged, a container's
// init that never reads) blocks it once the socket's queue is full, and
// with it the watchdog and the agent's stop.
func sdNotify(state string, timeout time.Duration) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer conn.Close() //nolint:errcheck // a datagram socket: nothing is left to flush
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return false, err
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}

// notifyReady tells systemd (Type=notify) that the agent serves its socket.
// Outside systemd (no NOTIFY_SOCKET) it does nothing.
func notifyReady(log *slog.Logger) {
	if _, err := sdNotify(daemon.SdNotifyReady, notifyTimeout); err != nil {
		log.Warn("sd_notify READY failed", "err", err)
	}
}

// notifyStopping tells systemd the agent is shutting down, waiting at
// most notifyTimeout for the socket.
func notifyStopping() {
	// Nothing to do when systemd does not hear it: the agent stops anyway.
	_, _ = sdNotify(daemon.SdNotifyStopping, notifyTimeout)
}

// minPet is the shortest time between two pets of the watchdog, whatever
// its period: a period of a microsecond (WATCHDOG_USEC=1) would otherwise
// be a busy loop.
const minPet = 100 * time.Millisecond

// watchdog pets systemd's watchdog (WatchdogSec=) at half its period, at
// most every minPet, until ctx ends, for as long as the history answers: a
// deadlocked agent stops petting and systemd restarts it. Without a
// watchdog it returns at once. A pet that fails is logged when the
// failure is new (another error, or the first after a pet that
// succeeded), and the first pet that succeeds again too.
func watchdog(ctx context.Context, st *state, log *slog.Logger) {
	period, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings unreadable", "err", err)
		return
	}
	if period == 0 {
		return
	}
	tick := time.NewTicker(max(period/2, minPet))
	defer tick.Stop()
	failed := "" // the last pet's error
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ctx.Err() != nil {
			// A tick that waited while a slow pet ran, and the stop
			// since: select picks either, the stop wins here.
			return
		}
		st.Status() // blocks if the history is stuck behind its lock
		_, err := sdNotify(daemon.SdNotifyWatchdog, notifyTimeout)
		switch {
		case err != nil && err.Error() != failed:
			failed = err.Error()
			log.Warn("sd_notify WATCHDOG failed", "err", err)
		case err == nil && failed != "":
			failed = ""
			log.Info("sd_notify WATCHDOG succeeded again")
		}
	}
}
