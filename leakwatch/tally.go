package leakwatch

import (
	"cmp"
	"maps"
	"slices"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// QPClass is one (type, state) pair of live QPs on a device.
type QPClass struct {
	Type  rdmanl.QPType
	State rdmanl.QPState
	// StateKnown is false for QPs whose only state is one the provider
	// does not fill in (siw before 6.2 reports RESET always).
	StateKnown bool
}

// OwnerQPs is the number of live QPs an owner has on a device. Its Owner
// holds what the owner metric's labels name and no more: for a process,
// PID (the process: its TGID, else the thread) and Comm; for a kernel
// module, its name in Comm (PID 0) and the ULP the QPs serve when the
// module is the rdma_cm that created them.
type OwnerQPs struct {
	Owner
	QPs int
}

// DeviceTally counts a device's live QPs.
type DeviceTally struct {
	Index   uint32
	Name    string
	QPs     int
	Classes map[QPClass]int
	// Owners are the owners with the most live QPs, most first, at most
	// the topN asked for; OtherQPs counts the QPs of the rest.
	Owners   []OwnerQPs
	OtherQPs int
	// Sites are the creation sites (Site.String) with the most live QPs,
	// most first, at most the topN asked for; OtherSiteQPs counts the QPs
	// of the rest. QPs whose site is not known are in neither.
	Sites        []SiteQPs
	OtherSiteQPs int
}

// SiteQPs is the number of live QPs created at one site on a device.
type SiteQPs struct {
	Site string
	QPs  int
}

// Tally counts the live QPs tracked on each device, by class, by owner
// and by creation site (the topN owners and sites per device; the rest
// counted together), sorted by device index. It is what metrics export:
// counts whose label sets stay bounded whatever the host runs. A tally
// with no history changed since the last one, for as many owners and
// sites, is that one again, and counts nothing QP by QP.
func (w *Watcher) Tally(topN int) []DeviceTally {
	t := &w.tallied
	if !t.ok || t.gen != w.gen || t.topN != topN {
		t.devices, t.gen, t.topN, t.ok = w.tally(topN), w.gen, topN, true
	}
	out := slices.Clone(t.devices)
	for i := range out {
		out[i].Classes = maps.Clone(out[i].Classes)
		out[i].Owners = slices.Clone(out[i].Owners)
		out[i].Sites = slices.Clone(out[i].Sites)
	}
	return out
}

// tallied is what Tally and LiveQPs counted last, and at which of the
// watcher's gens.
type tallied struct {
	devices []DeviceTally
	topN    int
	gen     uint64
	ok      bool

	live    int
	liveGen uint64
	liveOK  bool
}

// tally is Tally, counted QP by QP.
func (w *Watcher) tally(topN int) []DeviceTally {
	byDev := map[uint32]*DeviceTally{}
	owners := map[uint32]map[Owner]int{}
	sites := map[uint32]map[siteHandle]int{}
	for _, h := range w.qps {
		if h.Destroyed {
			continue
		}
		t := byDev[h.DevIndex]
		if t == nil {
			t = &DeviceTally{Index: h.DevIndex, Name: h.Device(), Classes: map[QPClass]int{}}
			byDev[h.DevIndex] = t
			owners[h.DevIndex] = map[Owner]int{}
			sites[h.DevIndex] = map[siteHandle]int{}
		}
		if s := h.qpNames().site; s != (siteHandle{}) {
			sites[h.DevIndex][s]++
		}
		t.QPs++
		t.Classes[QPClass{Type: h.Type, State: h.State, StateKnown: h.StateKnown}]++
		owners[h.DevIndex][h.Owner().tallied()]++
	}
	out := make([]DeviceTally, 0, len(byDev))
	for index, t := range byDev {
		for o, n := range owners[index] {
			t.Owners = append(t.Owners, OwnerQPs{Owner: o, QPs: n})
		}
		slices.SortFunc(t.Owners, func(a, b OwnerQPs) int {
			return cmp.Or(cmp.Compare(b.QPs, a.QPs), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Comm, b.Comm))
		})
		if len(t.Owners) > topN {
			for _, o := range t.Owners[topN:] {
				t.OtherQPs += o.QPs
			}
			t.Owners = t.Owners[:topN]
		}
		bySite := map[string]int{} // sites that print the same are one series
		for s, n := range sites[index] {
			bySite[siteOf(s).String()] += n
		}
		for s, n := range bySite {
			t.Sites = append(t.Sites, SiteQPs{Site: s, QPs: n})
		}
		slices.SortFunc(t.Sites, func(a, b SiteQPs) int { return cmp.Or(cmp.Compare(b.QPs, a.QPs), cmp.Compare(a.Site, b.Site)) })
		if len(t.Sites) > topN {
			for _, s := range t.Sites[topN:] {
				t.OtherSiteQPs += s.QPs
			}
			t.Sites = t.Sites[:topN]
		}
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b DeviceTally) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
