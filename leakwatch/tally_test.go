package leakwatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestTally(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	kernel := qp(1, rdmanl.QPTypeGSI, rdmanl.QPStateRTS, 0)
	kernel.Owner = rdmanl.Owner{KernName: "ib_core"}
	s := scan(c.at(0), rxe,
		qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42),
		qp(19, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(20, rdmanl.QPTypeUD, rdmanl.QPStateRTS, 43),
		qp(21, rdmanl.QPTypeRC, rdmanl.QPStateInit, 44), kernel)
	s.Devices[0].Owners[42] = Owner{TGID: 40, Comm: "app"}
	s.Devices = append(s.Devices, DeviceScan{Device: siw, QPs: []rdmanl.QP{qp(30, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 43)}, Owners: map[uint32]Owner{43: {Comm: "other"}}})
	w.Scan(s)
	w.Event(ev(c.at(time.Second), EventQPDestroyed, rxe, 21)) // destroyed: not counted

	got := w.Tally(2)
	want := []DeviceTally{
		{Index: 0, Name: "rxe0", QPs: 5,
			Classes: map[QPClass]int{
				{rdmanl.QPTypeRC, rdmanl.QPStateErr, true}:  2,
				{rdmanl.QPTypeRC, rdmanl.QPStateInit, true}: 1,
				{rdmanl.QPTypeUD, rdmanl.QPStateRTS, true}:  1,
				{rdmanl.QPTypeGSI, rdmanl.QPStateRTS, true}: 1,
			},
			// pid 42 is thread of process 40; kernel QPs go by module.
			Owners:   []OwnerQPs{{Owner: Owner{PID: 40, Comm: "app"}, QPs: 3}, {Owner: Owner{PID: 0, Comm: "ib_core"}, QPs: 1}},
			OtherQPs: 1},
		{Index: 1, Name: "siw0", QPs: 1,
			Classes: map[QPClass]int{{rdmanl.QPTypeRC, rdmanl.QPStateRTS, true}: 1},
			Owners:  []OwnerQPs{{Owner: Owner{PID: 43, Comm: "other"}, QPs: 1}}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Tally (-want +got):\n%s", d)
	}
}

func TestResolveOwners(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	kernel := qp(1, rdmanl.QPTypeGSI, rdmanl.QPStateRTS, 0)
	kernel.Owner = rdmanl.Owner{KernName: "ib_core"}
	w.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43), kernel))
	w.ResolveOwners(func(tid uint32) (Owner, bool) {
		if tid == 42 {
			return Owner{TGID: 40, Comm: "moved", Cgroup: "/new.slice"}, true
		}
		return Owner{}, false
	})
	got := map[uint32]Owner{}
	for _, h := range w.histories() {
		got[h.QPN] = h.Owner()
	}
	if o := got[17]; o.TGID != 40 || o.Comm != "moved" || o.Cgroup != "/new.slice" {
		t.Errorf("qpn 17 owner %d %q %q, want the lookup's", o.TGID, o.Comm, o.Cgroup)
	}
	if o := got[18]; o.Comm != "other" { // not found: what the scan said stays
		t.Errorf("qpn 18 comm %q, want other kept", o.Comm)
	}
	if o := got[1]; o.Comm != "" || o.TGID != 0 {
		t.Errorf("kernel QP touched: %+v", o)
	}
}

// The tally counts live QPs by creation site too: the topN sites, the
// rest together, QPs without a site in neither.
func TestTallySites(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	qpn := uint32(17)
	for _, s := range []struct {
		call string
		n    int
	}{{"app!a+0x1", 3}, {"app!b+0x1", 2}, {"app!c+0x1", 1}, {"app!d+0x1", 1}, {"", 4}} {
		for range s.n {
			e := create(c.at(0), rxe, qpn, false)
			if s.call != "" {
				e.Site = Site{Call: s.call, Via: "ibv_create_qp"}
			}
			w.Event(e)
			qpn++
		}
	}
	got := w.Tally(2)
	if len(got) != 1 || got[0].QPs != 11 {
		t.Fatalf("Tally = %+v", got)
	}
	want := []SiteQPs{{"app!a+0x1 via ibv_create_qp", 3}, {"app!b+0x1 via ibv_create_qp", 2}}
	if diff := cmp.Diff(want, got[0].Sites); diff != "" || got[0].OtherSiteQPs != 2 {
		t.Errorf("sites (-want +got), %d other:\n%s", got[0].OtherSiteQPs, diff)
	}
}
