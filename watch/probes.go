package watch

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/leakwatch"
	"golang.org/x/sync/errgroup"
)

// leakEvent converts a probe record into what leakwatch follows. ok is
// false for records the rules do not use (device and port events,
// registrations).
func leakEvent(ev bpf.Event) (le leakwatch.Event, ok bool) {
	le = leakwatch.Event{
		Time: ev.Time, DevIndex: ev.DevIndex, DevName: ev.DevName,
		QPN: ev.QPN, QPType: ev.QPType, OnSRQ: ev.OnSRQ, SRQN: ev.SRQN,
		NewState: ev.NewState, HasState: ev.HasState, CurState: ev.CurState, HasCurState: ev.HasCurState, Result: ev.Result,
		PID: ev.PID, TID: ev.TID, Comm: ev.Comm, KernOwner: ev.KernOwner, NewName: ev.NewName,
	}
	switch ev.Kind {
	case bpf.KindQPCreate:
		le.Kind = leakwatch.EventQPCreated
	case bpf.KindQPModify:
		le.Kind = leakwatch.EventQPModified
	case bpf.KindQPEvent:
		le.Kind = leakwatch.EventQPAsync
		le.Async, le.LastWQE = ev.IBEvent.String(), ev.IBEvent == bpf.IBEventQPLastWQE
	case bpf.KindQPDestroy:
		le.Kind = leakwatch.EventQPDestroyed
	case bpf.KindDeviceUnregister:
		le.Kind = leakwatch.EventDeviceUnregistered
	case bpf.KindDeviceRename:
		le.Kind = leakwatch.EventDeviceRenamed
	case bpf.KindDrainStart:
		le.Kind, le.Drain = leakwatch.EventDrainStarted, ev.Probe
	case bpf.KindDrainEnd:
		le.Kind, le.Drain, le.Duration = leakwatch.EventDrainEnded, ev.Probe, ev.Duration
	default:
		return leakwatch.Event{}, false
	}
	return le, true
}

// sitesReporter is an EventSource that says where its creation-site
// uprobes are (the bpf tracer).
type sitesReporter interface {
	Sites() bpf.Sites
}

// sitesError says why user QPs have no creation site: no uprobes, or a
// library without them; "" when every library found has them.
func sitesError(s bpf.Sites) string {
	switch {
	case s.Err != nil && len(s.Libraries) == 0:
		return "no uprobes (" + s.Err.Error() + ")"
	case s.Err != nil:
		return fmt.Sprintf("uprobes on %d libraries, missing: %s", len(s.Libraries), s.Err)
	case len(s.Libraries) == 0:
		return "no uprobes (no libibverbs or librdmacm found)"
	}
	return ""
}

// FollowProbes applies src's events of device ("" for every device) to st
// as they arrive, keeps st's count of src's lost events and of its stacks
// (bpf.Tracer.StackStats) current every refresh, and lets st read src's count of resources added and removed
// (State.ResourceChanges), until ctx ends or src's events end (it returns
// nil, having applied every event read until then) or the stream fails
// (it returns the stream's error). A QP create's site is named as the
// event is read, through sites (nil: no sites), before the state is locked. An event
// that says a device came, went or was renamed calls deviceChanged too,
// when it is not nil. It does not close src.
func FollowProbes(ctx context.Context, src EventSource, st *State, device string, refresh time.Duration, sites *Sites, deviceChanged func()) error {
	s, counts := src.(statser)
	sr, hasSites := src.(sitesReporter)
	sc, hasStacks := src.(stackCounter)
	updateLost := func() {
		if counts {
			if stats, err := s.Stats(); err == nil {
				st.setLost(stats.Total())
			}
		}
		if hasStacks {
			if stacks, err := sc.StackStats(); err == nil {
				st.setStacks(stacks)
			}
		}
		if hasSites {
			st.setSitesError(sitesError(sr.Sites()))
		}
	}
	updateLost()
	if c, ok := src.(changeCounter); ok {
		st.setChanges(c.ResourceChanges)
		defer st.setChanges(nil)
	}
	g, gctx := errgroup.WithContext(ctx)
	done := make(chan struct{})
	g.Go(func() error {
		defer close(done)
		for ev, err := range src.Events(gctx) {
			if err != nil {
				return err
			}
			if device != "" && ev.DevName != device && ev.NewName != device {
				continue
			}
			switch ev.Kind {
			case bpf.KindDeviceRegister, bpf.KindDeviceUnregister, bpf.KindDeviceRename:
				if deviceChanged != nil {
					deviceChanged()
				}
			}
			if le, ok := leakEvent(ev); ok {
				if sites != nil {
					le.Site = sites.Site(&ev)
				}
				st.probeEvent(ev.Kind.String(), &le)
			} else {
				st.probeEvent(ev.Kind.String(), nil)
			}
		}
		return nil
	})
	g.Go(func() error {
		tick := time.NewTicker(refresh)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return nil
			case <-tick.C:
				updateLost()
			}
		}
	})
	err := g.Wait()
	updateLost()
	return err
}
