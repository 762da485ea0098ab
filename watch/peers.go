package watch

import (
	"context"
	"errors"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// The pace of the rdma_cm ID dumps probe events ask for (FollowPeers): at
// most one every peersEvery, and none sooner after the last than
// peersCost times what it took, so that a host connecting thousands of
// QPs a second, with as many rdma_cm IDs listed in each dump, spends at
// most a fiftieth of a CPU on them. A dump lists each ID from memory: no
// provider query, unlike a QP or MR dump.
const (
	peersEvery = 10 * time.Millisecond
	peersCost  = 50
)

// askPeers asks for a dump of the rdma_cm IDs of le's device (FollowPeers)
// when le says that a QP whose peer no ID named yet
// (leakwatch.Watcher.WantsPeer) is being connected, connected, failed or
// disconnected: while it is, its rdma_cm ID, if it has one, names the
// other end; a QP of a reconnect loop lives for milliseconds, and no scan
// lists it. The caller holds s.mu.
func (s *State) askPeers(le *leakwatch.Event) {
	switch {
	case le.Kind == leakwatch.EventQPModified && le.Result == 0 && le.HasState &&
		(le.NewState == rdmanl.QPStateRTR || le.NewState == rdmanl.QPStateRTS || le.NewState == rdmanl.QPStateErr):
	case le.Kind == leakwatch.EventQPAsync && !le.LastWQE:
	default:
		return
	}
	if !s.w.WantsPeer(le.DevIndex, le.QPN) {
		return
	}
	name := le.DevName
	if n := s.listed[le.DevIndex]; n != "" {
		name = n
	}
	s.peersWanted[le.DevIndex] = name
	select {
	case s.peersAsked <- struct{}{}:
	default: // asked already
	}
}

// takePeersWanted returns the devices whose rdma_cm IDs were asked for
// since it was last called.
func (s *State) takePeersWanted() []rdmanl.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	devs := make([]rdmanl.Device, 0, len(s.peersWanted))
	for index, name := range s.peersWanted {
		devs = append(devs, rdmanl.Device{Index: index, Name: name})
	}
	clear(s.peersWanted)
	return devs
}

// Peers gives the QPs of the device with index the peers a dump of its
// rdma_cm IDs named (leakwatch.Watcher.Peers).
func (s *State) Peers(index uint32, peers map[uint32]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Peers(index, peers)
}

// DumpPeers dumps dev's rdma_cm IDs and returns the peers of the QPs they
// are bound to, by QPN (rdmanl.Peers). A device that went away gives an
// error matching rdmanl.ErrNoDevice.
func (s Scanner) DumpPeers(ctx context.Context, dev rdmanl.Device) (map[uint32]string, error) {
	ids, err := collect(s.NL.CMIDs(ctx, dev, rdmanl.DumpOptions{}))
	if err != nil {
		return nil, err
	}
	return rdmanl.Peers(ids), nil
}

// FollowPeers dumps the rdma_cm IDs of the devices st's probe events ask
// for (a QP without a known peer connecting, failing or disconnected)
// into st (State.Peers), at the pace peersEvery and peersCost set, on a
// netlink client of its own, until ctx ends. A failed dump is logged at
// Debug and the client dialled again at the next; the scans, which dump
// the rdma_cm IDs too, say what fails.
func FollowPeers(ctx context.Context, d Deps, st *State) {
	d = d.WithDefaults()
	var nl Netlink
	defer func() {
		if nl != nil {
			nl.Close()
		}
	}()
	var next time.Time // no dump before
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.peersAsked:
		}
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		start := time.Now()
		nl = dumpPeers(ctx, d, st, nl)
		next = start.Add(max(peersEvery, time.Since(start)*peersCost))
	}
}

// dumpPeers dumps the rdma_cm IDs of the devices st was asked for since
// the last time into st, on nl (dialled when nil), and returns the client
// to use next time: nil after a failure.
func dumpPeers(ctx context.Context, d Deps, st *State, nl Netlink) Netlink {
	for _, dev := range st.takePeersWanted() {
		if nl == nil {
			c, err := d.Dial()
			if err != nil {
				d.Log.Debug("rdma_cm ID dump failed", "device", dev.Name, "err", err)
				return nil
			}
			nl = c
		}
		peers, err := Scanner{NL: nl}.DumpPeers(ctx, dev)
		switch {
		case err == nil:
			st.Peers(dev.Index, peers)
		case errors.Is(err, rdmanl.ErrNoDevice), ctx.Err() != nil:
		default:
			d.Log.Debug("rdma_cm ID dump failed", "device", dev.Name, "err", err)
			nl.Close()
			return nil
		}
	}
	return nl
}
