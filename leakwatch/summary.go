package leakwatch

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Group is the findings of one rule on one device for one owner, counted:
// what an operator reads first when thousands of QPs leak the same way.
type Group struct {
	Device   string   `json:"device"`
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// Owner is the findings' owner as a process: PID is the process
	// (each finding's TGID, else its thread PID) and TGID is 0.
	Owner
	Count int `json:"count"`
	// QPNs are the group's QP numbers as ranges, "17-40,45".
	QPNs string `json:"qpns"`
	// MaxAgeSeconds is the oldest finding's age.
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	Hint          string  `json:"hint"`
}

// groupJSON is a Group as reports write it: the owner's keys in the
// order groups have always had, without tgid (pid is the process). A
// Group decodes as it is, by its fields' names.
type groupJSON struct {
	Device        string   `json:"device"`
	Rule          string   `json:"rule"`
	Severity      Severity `json:"severity"`
	PID           uint32   `json:"pid"`
	Comm          string   `json:"comm"`
	KernName      string   `json:"kern_name"`
	ULP           string   `json:"ulp"`
	Cgroup        string   `json:"cgroup"`
	ContainerID   string   `json:"container_id"`
	Count         int      `json:"count"`
	QPNs          string   `json:"qpns"`
	MaxAgeSeconds float64  `json:"max_age_seconds"`
	Hint          string   `json:"hint"`
}

// MarshalJSON writes the group as groupJSON.
func (g Group) MarshalJSON() ([]byte, error) {
	return json.Marshal(groupJSON{
		Device: g.Device, Rule: g.Rule, Severity: g.Severity,
		PID: g.PID, Comm: g.Comm, KernName: g.KernName, ULP: g.ULP, Cgroup: g.Cgroup, ContainerID: g.ContainerID,
		Count: g.Count, QPNs: g.QPNs, MaxAgeSeconds: g.MaxAgeSeconds, Hint: g.Hint,
	})
}

// SiteGroup is the findings of one device whose QPs were created at one
// site, counted by rule: "30,000 QPs created at app!connect_peer+0x4c via
// rdma_create_qp".
type SiteGroup struct {
	Device string `json:"device"`
	// Site is the call (Finding.Site) or, for kernel QPs, the innermost
	// kernel frame; SiteVia the library function called, SiteBuildID the
	// build ID of the file holding the call.
	Site        string `json:"site"`
	SiteVia     string `json:"site_via,omitempty"`
	SiteBuildID string `json:"site_build_id,omitempty"`
	// QPs counts the group's findings (one a QP and rule), Rules the
	// findings of each rule.
	QPs   int            `json:"qps"`
	Rules map[string]int `json:"rules"`
}

// maxSiteGroups bounds Report.Sites.
const maxSiteGroups = 20

// PeerGroup is the findings whose QPs had one rdma_cm peer, counted by
// rule, and the devices they are on: "12 findings of QPs connected to
// 192.0.2.7". Peer "" gathers the findings that have none.
type PeerGroup struct {
	Peer     string         `json:"peer"`
	Findings int            `json:"findings"`
	Devices  []string       `json:"devices"` // sorted
	Rules    map[string]int `json:"rules"`
}

// maxPeerGroups bounds Report.Peers.
const maxPeerGroups = 20

// siteGroupKey is what the findings of a SiteGroup have in common: the
// device and what names the site.
type siteGroupKey struct {
	device, site, via, buildID string
	offset                     uint64
}

// groupKey is what the findings of a Group have in common.
type groupKey struct {
	device, rule string
	owner        Owner // asProcess
}

// summarizer builds a report's groups (Report.Summary: by device, rule
// and owner, most severe and largest first) one finding at a time.
type summarizer struct {
	idx    map[groupKey]int
	groups []Group
	qpns   [][]uint32
	// sites groups the findings with a creation site (Report.Sites).
	sites map[siteGroupKey]*SiteGroup
	// peers groups every finding by its peer (Report.Peers).
	peers map[string]*PeerGroup
}

func (s *summarizer) add(f *Finding) {
	if site := f.creationSite(); site != "" {
		k := siteGroupKey{f.Device, site, f.SiteVia, f.SiteBuildID, f.SiteOffset}
		g := s.sites[k]
		if g == nil {
			if s.sites == nil {
				s.sites = map[siteGroupKey]*SiteGroup{}
			}
			site := f.Site
			if site == "" {
				site = f.Stack[0]
			}
			g = &SiteGroup{Device: f.Device, Site: site, SiteVia: f.SiteVia, SiteBuildID: f.SiteBuildID, Rules: map[string]int{}}
			s.sites[k] = g
		}
		g.QPs++
		g.Rules[f.Rule]++
	}
	s.addPeer(f)
	k := groupKey{f.Device, f.Rule, f.Owner.asProcess()}
	i, ok := s.idx[k]
	if !ok {
		if s.idx == nil {
			s.idx = map[groupKey]int{}
		}
		i = len(s.groups)
		s.idx[k] = i
		s.groups = append(s.groups, Group{Device: f.Device, Rule: f.Rule, Severity: f.Severity, Owner: k.owner, Hint: f.Hint})
		s.qpns = append(s.qpns, nil)
	}
	g := &s.groups[i]
	g.Count++
	g.MaxAgeSeconds = max(g.MaxAgeSeconds, f.AgeSeconds)
	if severityRank(f.Severity) > severityRank(g.Severity) {
		g.Severity = f.Severity
	}
	if f.Rule != RuleQPExhaustion {
		s.qpns[i] = append(s.qpns[i], f.QPN)
	}
}

func (s *summarizer) result() []Group {
	groups := s.groups
	if groups == nil {
		groups = []Group{}
	}
	for i := range groups {
		groups[i].QPNs = ranges(s.qpns[i])
	}
	slices.SortStableFunc(groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(severityRank(b.Severity), severityRank(a.Severity)), cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.Device, b.Device), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.PID, b.PID))
	})
	return groups
}

// siteResult is Report.Sites and SitesOmitted: the largest groups first,
// at most maxSiteGroups of them; nil when no finding had a site.
func (s *summarizer) siteResult() ([]SiteGroup, int) {
	if len(s.sites) == 0 {
		return nil, 0
	}
	out := make([]SiteGroup, 0, len(s.sites))
	for _, g := range s.sites {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b SiteGroup) int {
		return cmp.Or(cmp.Compare(b.QPs, a.QPs), cmp.Compare(a.Device, b.Device), cmp.Compare(a.Site, b.Site),
			cmp.Compare(a.SiteVia, b.SiteVia), cmp.Compare(a.SiteBuildID, b.SiteBuildID))
	})
	if len(out) > maxSiteGroups {
		return out[:maxSiteGroups], len(out) - maxSiteGroups
	}
	return out, 0
}

// addPeer counts f in its peer's group.
func (s *summarizer) addPeer(f *Finding) {
	g := s.peers[f.Peer]
	if g == nil {
		if s.peers == nil {
			s.peers = map[string]*PeerGroup{}
		}
		g = &PeerGroup{Peer: f.Peer, Devices: []string{}, Rules: map[string]int{}}
		s.peers[f.Peer] = g
	}
	g.Findings++
	g.Rules[f.Rule]++
	if !slices.Contains(g.Devices, f.Device) {
		g.Devices = append(g.Devices, f.Device)
	}
}

// peerResult is Report.Peers and PeersOmitted: the largest groups first
// (the one without a peer last of its size), at most maxPeerGroups of
// them; empty when there are no findings.
func (s *summarizer) peerResult() ([]PeerGroup, int) {
	out := make([]PeerGroup, 0, len(s.peers))
	for _, g := range s.peers {
		slices.Sort(g.Devices)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b PeerGroup) int {
		return cmp.Or(cmp.Compare(b.Findings, a.Findings), cmp.Compare(noPeer(a.Peer), noPeer(b.Peer)), cmp.Compare(a.Peer, b.Peer))
	})
	if len(out) > maxPeerGroups {
		return out[:maxPeerGroups], len(out) - maxPeerGroups
	}
	return out, 0
}

// noPeer orders a peer group without a peer after those with one.
func noPeer(peer string) int {
	if peer == "" {
		return 1
	}
	return 0
}

func severityRank(s Severity) int {
	switch s {
	case SeverityCritical:
		return 3
	case SeverityError:
		return 2
	case SeverityWarning:
		return 1
	}
	return 0
}

// ranges writes QP numbers as sorted ranges: 17,18,19,21 -> "17-19,21".
func ranges(ns []uint32) string {
	slices.Sort(ns)
	ns = slices.Compact(ns)
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(ns[i]), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(ns[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// reportOrder is the order of a report's findings: by device, QP, rule
// and owner.
func reportOrder(a, b *Finding) int {
	return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.QPN, b.QPN), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.PID, b.PID))
}

// keepOrder ranks findings for a limited report: the most severe first,
// then in the report's order.
func keepOrder(a, b *Finding) int {
	return cmp.Or(cmp.Compare(severityRank(b.Severity), severityRank(a.Severity)), reportOrder(a, b))
}

// keeper keeps the findings a report lists: all of them (limit 0), none
// (limit below 0), or the limit first by keepOrder, held in a heap whose
// root is the one to drop next, so that an evaluation of 60,000 findings
// holds no more than it reports. A kept finding of a QP gets its evidence
// from its history then: the others never make it.
//
// All of them are kept in chunks, not one slice grown by append: a
// finding is 392 bytes with pointers, and growing a slice of 60,000 of
// them copied it whole at each doubling, in one copy the runtime cannot
// preempt, with the GC's write barriers on while a collection ran (the
// GC's workers spinning to stop the goroutine meanwhile: in the lab, 12
// CPU seconds of a 60,000-finding answer, most of it).
type keeper struct {
	limit  int
	kept   worstFirst
	chunks [][]Finding // limit 0: every finding, keeperChunk at a time
	n      int         // limit 0: the findings in chunks
}

// keeperChunk is how many findings a chunk of a keeper holds.
const keeperChunk = 256

// offer keeps f if the limit lets it through; h is the history of f's QP,
// nil for a device's finding (which carries its evidence).
func (k *keeper) offer(f *Finding, h *History) {
	switch {
	case k.limit < 0:
	case k.limit == 0:
		if k.n%keeperChunk == 0 {
			k.chunks = append(k.chunks, make([]Finding, 0, keeperChunk))
		}
		last := &k.chunks[len(k.chunks)-1]
		*last = append(*last, own(f, h))
		k.n++
	case len(k.kept) < k.limit:
		heap.Push(&k.kept, own(f, h))
	case keepOrder(f, &k.kept[0]) < 0:
		k.kept[0] = own(f, h)
		heap.Fix(&k.kept, 0)
	}
}

// own copies a finding with its evidence.
func own(f *Finding, h *History) Finding {
	c := *f
	if h != nil {
		c.Evidence = h.Evidence()
	} else {
		c.Evidence = append([]Evidence{}, f.Evidence...)
	}
	return c
}

// findings returns what was kept in the report's order. Every finding
// (limit 0) is sorted by pointer and copied once, one at a time, into a
// slice of its size.
func (k *keeper) findings() []Finding {
	if k.limit == 0 {
		ptrs := make([]*Finding, 0, k.n)
		for _, c := range k.chunks {
			for i := range c {
				ptrs = append(ptrs, &c[i])
			}
		}
		slices.SortFunc(ptrs, reportOrder)
		fs := make([]Finding, len(ptrs))
		for i, f := range ptrs {
			fs[i] = *f
		}
		return fs
	}
	fs := []Finding(k.kept)
	if fs == nil {
		fs = []Finding{}
	}
	slices.SortFunc(fs, func(a, b Finding) int { return reportOrder(&a, &b) })
	return fs
}

// worstFirst is a container/heap of findings whose root is the last by
// keepOrder.
type worstFirst []Finding

func (h worstFirst) Len() int           { return len(h) }
func (h worstFirst) Less(i, j int) bool { return keepOrder(&h[i], &h[j]) > 0 }
func (h worstFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *worstFirst) Push(x any)        { *h = append(*h, x.(Finding)) }
func (h *worstFirst) Pop() any {
	old := *h
	f := old[len(old)-1]
	*h = old[:len(old)-1]
	return f
}
