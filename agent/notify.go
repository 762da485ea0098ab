package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd (Type=notify) that the agent serves its socket.
// Outside systemd (no NOTIFY_SOCKET) it does nothing.
func notifyReady(log *slog.Logger) {
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify READY failed", "err", err)
	}
}

// notifyStopping tells systemd the agent is shutting down.
func notifyStopping() {
	// Nothing to do when systemd does not hear it: the agent stops anyway.
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
}

// watchdog pets systemd's watchdog (WatchdogSec=) at half its period until
// ctx ends, for as long as the history answers: a deadlocked agent stops
// petting and systemd restarts it. Without a watchdog it returns at once.
func watchdog(ctx context.Context, st *state, log *slog.Logger) {
	period, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings unreadable", "err", err)
		return
	}
	if period == 0 {
		return
	}
	tick := time.NewTicker(period / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st.Status() // blocks if the history is stuck behind its lock
		if _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); err != nil {
			log.Warn("sd_notify WATCHDOG failed", "err", err)
		}
	}
}
