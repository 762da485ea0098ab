package leakwatch

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// RuleMRLeak is the rule ID for an owner whose MRs pile up over its QP
// reconnects: each connection registers an MR, and the one before it is
// never deregistered.
const RuleMRLeak = "mr-leak"

// Config's defaults for mr-leak. Three MRs more over three QP creates
// within ten minutes, while the owner's live QPs did not grow: a consumer
// that registers an MR per connection and deregisters it when the
// connection ends keeps its count flat across reconnects, and one that
// registers the next connection's MR before it frees the last one's is
// one MR up for a moment; three more over as many reconnects is a
// pattern, each cycle pinning one more buffer for good. Ten minutes holds
// two of the agent's MR dumps at its default reconcile (5 minutes), also
// when the count did not change in between, and three cycles of a
// reconnect loop with a backoff of up to three minutes.
const (
	DefaultMRLeakGrowth = 3
	DefaultMRLeakWindow = 10 * time.Minute
)

// maxMRSamples bounds the samples a device keeps of one owner of MRs:
// when they are full, every other one goes (the first and the last stay),
// so they cover the window at a coarser step.
const maxMRSamples = 64

// maxOwnerCreates bounds the QP creates a device keeps of one owner (the
// newest, none older than the window when the last came); a count at the
// bound reads "at least".
const maxOwnerCreates = 256

// oldestMRs is how many of an owner's oldest MRs a device keeps for the
// evidence.
const oldestMRs = 3

// mrSample is what one MR dump counted of an owner on a device.
type mrSample struct {
	at    Stamp
	mrs   uint64
	bytes uint64
	// qps are the owner's live QPs on the device in the history at the
	// dump.
	qps int
}

// mrSeen is one of an owner's oldest MRs: the lowest MR numbers, which
// the kernel hands out in increasing order (restrack's cyclic IDs).
type mrSeen struct {
	mrn, rkey, lkey uint32
	hasKeys         bool
	length          uint64
	since           Stamp // the first dump that listed it
}

// mrOwnerKey is an owner as mr-leak matches MRs with QPs: a process (pid:
// its TGID, else the thread the kernel recorded) or a kernel module
// (kern). Netlink names the module whose PD an MR was registered through,
// the ULP itself (nvme_rdma, rds_rdma); the QPs rdma_cm made for a ULP
// count under the ULP where it is known.
type mrOwnerKey struct {
	pid  uint32
	kern string
}

// known says whether the key names an owner: MRs whose creator is gone,
// or in another pid namespace, have none.
func (k mrOwnerKey) known() bool { return k.pid != 0 || k.kern != "" }

// keyOf is the key of a QP's owner, its creation site's stack naming
// the ULP of a kernel QP rdma_cm made where no scan named it.
func keyOf(o Owner, site Site) mrOwnerKey {
	switch {
	case o.ULP != "":
		return mrOwnerKey{kern: o.ULP}
	case o.KernName == "rdma_cm":
		if ulp := stackULP(site.Stack); ulp != "" {
			return mrOwnerKey{kern: ulp}
		}
		return mrOwnerKey{kern: o.KernName}
	case o.Kernel():
		return mrOwnerKey{kern: o.KernName}
	}
	return mrOwnerKey{pid: o.process()}
}

// stackULP is the module a kernel QP's creation stack (innermost first)
// passes through first after ib_core and rdma_cm: the ULP that asked
// rdma_cm for the QP ("nvme_rdma_create_queue_ib+0x1f0 [nvme_rdma]");
// "" when no frame names another module.
func stackULP(stack []string) string {
	for _, f := range stack {
		i := strings.LastIndex(f, " [")
		if i < 0 || !strings.HasSuffix(f, "]") {
			continue
		}
		if m := f[i+2 : len(f)-1]; m != "ib_core" && m != "rdma_cm" {
			return m
		}
	}
	return ""
}

// mrOwner is what a device keeps of one owner of MRs.
type mrOwner struct {
	// owner is the owner as the last dump that listed it named it.
	owner   Owner
	samples []mrSample // oldest first, at most maxMRSamples
	oldest  []mrSeen   // by MR number, at most oldestMRs
}

// qpCreate is a QP create the probes saw, as mr-leak keeps it.
type qpCreate struct {
	at   Stamp
	site siteHandle
}

// mrState is what a device keeps for mr-leak: its MR dumps by owner, and
// its owners' QP creates.
type mrState struct {
	// dumped is when the last MR dump ended (0: none yet); mrs and bytes
	// are what it counted.
	dumped     Stamp
	mrs, bytes uint64
	owners     map[mrOwnerKey]*mrOwner
	// creates are each owner's newest QP creates, oldest first (at most
	// maxOwnerCreates, none older than the window when the newest came);
	// pruned is how many owners it had at its last pruning.
	creates map[mrOwnerKey][]qpCreate
	pruned  int
}

// mrState returns what the device keeps for mr-leak, made on first use.
func (d *deviceState) mrState() *mrState {
	if d.mrs == nil {
		d.mrs = &mrState{owners: map[mrOwnerKey]*mrOwner{}, creates: map[mrOwnerKey][]qpCreate{}}
	}
	return d.mrs
}

// qpCreated records a QP create the probes saw on dev (a successful one)
// for mr-leak: the reconnects of its owner, the process (Event.PID) or
// the kernel module that created it.
func (w *Watcher) qpCreated(dev *deviceState, ev Event) {
	k := keyOf(Owner{KernName: ev.KernOwner, TGID: ev.PID}, ev.Site)
	if !k.known() {
		return
	}
	st := dev.mrState()
	since := stampOf(ev.Time.Add(-w.cfg.MRLeakWindow))
	cs := st.creates[k]
	drop, _ := slices.BinarySearchFunc(cs, since+1, func(c qpCreate, t Stamp) int { return cmp.Compare(c.at, t) })
	drop = max(drop, len(cs)+1-maxOwnerCreates)
	if drop > 0 {
		cs = cs[:copy(cs, cs[drop:])]
	}
	st.creates[k] = append(cs, qpCreate{at: stampOf(ev.Time), site: ev.Site.intern()})
	// Owners that created nothing within the window go, once their
	// number doubled since the last pruning: a host's short-lived
	// processes do not pile up between MR dumps.
	if len(st.creates) >= 2*max(st.pruned, 64) {
		st.pruneCreates(since)
	}
}

// pruneCreates forgets the owners whose newest create is at or before
// since.
func (st *mrState) pruneCreates(since Stamp) {
	maps.DeleteFunc(st.creates, func(_ mrOwnerKey, cs []qpCreate) bool { return len(cs) == 0 || cs[len(cs)-1].at <= since })
	st.pruned = len(st.creates)
}

// MRDump is one device's MR dump as a watcher takes it (ScanMRs). The
// caller adds each MR as the dump streams it (Add), so a dump of 100,000
// MRs is counted, never held, and names the owners' processes (Owners).
// Its zero value, with Device and Time, is an empty dump.
type MRDump struct {
	Device rdmanl.Device
	// Time is when the dump ended.
	Time time.Time
	// Owners maps an MR owner PID (the thread the kernel recorded) to what
	// /proc says of its process (TGID, Comm, Cgroup, ContainerID), as
	// DeviceScan.Owners does; absent owners have exited or are in
	// another pid namespace.
	Owners map[uint32]Owner

	counts     map[rdmanl.Owner]*mrCount
	mrs, bytes uint64
}

// mrCount is what a dump counted of one owner.
type mrCount struct {
	mrs, bytes uint64
	oldest     []mrSeen
}

// add counts one MR.
func (c *mrCount) add(mrs, bytes uint64, seen ...mrSeen) {
	c.mrs += mrs
	c.bytes += bytes
	for _, s := range seen {
		i, found := slices.BinarySearchFunc(c.oldest, s.mrn, func(m mrSeen, mrn uint32) int { return cmp.Compare(m.mrn, mrn) })
		if found || i >= oldestMRs {
			continue
		}
		c.oldest = slices.Insert(c.oldest, i, s)
		c.oldest = c.oldest[:min(len(c.oldest), oldestMRs)]
	}
}

// Add counts one MR of the dump: its owner, its length and, while it is
// one of its owner's oldest, its number, keys and length.
func (d *MRDump) Add(mr rdmanl.MR) {
	if d.counts == nil {
		d.counts = map[rdmanl.Owner]*mrCount{}
	}
	c := d.counts[mr.Owner]
	if c == nil {
		c = &mrCount{}
		d.counts[mr.Owner] = c
	}
	c.add(1, mr.Len, mrSeen{mrn: mr.MRN, rkey: mr.RKey, lkey: mr.LKey, hasKeys: mr.HasKeys, length: mr.Len})
	d.mrs++
	d.bytes += mr.Len
}

// ScanMRs folds a device's MR dump into what the watcher keeps of the
// device's owners of MRs, for mr-leak and MRTally: each owner's MRs,
// their bytes and its live QPs on the device now make a sample (a series
// per owner, bounded, covering the window), and its oldest MRs are kept.
// An owner's first sample is the first dump that lists it. An owner the
// dump does not list has no MRs from then on, and is forgotten once that
// is older than the window. The dumps of a device come in time order.
func (w *Watcher) ScanMRs(d *MRDump) {
	dev := w.device(d.Device.Index, d.Device.Name)
	if d.Device.NodeGUID != 0 {
		dev.nodeGUID = d.Device.NodeGUID
	}
	st := dev.mrState()
	at := stampOf(d.Time)
	since := stampOf(d.Time.Add(-w.cfg.MRLeakWindow))
	counts := map[mrOwnerKey]*mrCount{}
	names := map[mrOwnerKey]Owner{}
	for ro, c := range d.counts {
		o := Owner{PID: ro.PID, KernName: ro.KernName}
		if o.Kernel() {
			o.Comm = o.KernName
		} else if p, ok := d.Owners[ro.PID]; ok {
			o.resolve(p)
		}
		k := mrOwnerKey{pid: o.process()}
		if o.Kernel() {
			k = mrOwnerKey{kern: o.KernName}
		}
		sum := counts[k]
		if sum == nil {
			sum = &mrCount{}
			counts[k] = sum
		}
		sum.add(c.mrs, c.bytes, c.oldest...)
		// A process's threads are one owner: its main thread names it
		// where it registered MRs, else the lowest thread.
		if n, ok := names[k]; !ok || o.PID == o.TGID || (n.PID != n.TGID && o.PID < n.PID) {
			names[k] = o
		}
	}
	live := w.liveQPs(d.Device.Index)
	for k, c := range counts {
		o := st.owners[k]
		if o == nil {
			o = &mrOwner{}
			st.owners[k] = o
		}
		o.owner = names[k]
		o.add(mrSample{at: at, mrs: c.mrs, bytes: c.bytes, qps: live[k]}, since)
		for i, s := range c.oldest {
			if j := slices.IndexFunc(o.oldest, func(m mrSeen) bool { return m.mrn == s.mrn && m.length == s.length }); j >= 0 {
				c.oldest[i].since = o.oldest[j].since
			} else {
				c.oldest[i].since = at
			}
		}
		o.oldest = c.oldest
	}
	for k, o := range st.owners {
		if counts[k] != nil {
			continue
		}
		last := o.samples[len(o.samples)-1]
		switch {
		case last.mrs == 0 && last.at <= since:
			delete(st.owners, k)
		case last.mrs != 0:
			o.add(mrSample{at: at, qps: live[k]}, since)
			o.oldest = nil
		}
	}
	st.dumped, st.mrs, st.bytes = at, d.mrs, d.bytes
	st.pruneCreates(since)
}

// add appends s, dropping the samples no window ending at s or later
// needs: those before the newest at or before since. Samples that say
// what the last says are not added.
func (o *mrOwner) add(s mrSample, since Stamp) {
	if n := len(o.samples); n > 0 {
		if last := o.samples[n-1]; last.mrs == s.mrs && last.bytes == s.bytes && last.qps == s.qps {
			return
		}
	}
	i, _ := slices.BinarySearchFunc(o.samples, since+1, func(m mrSample, t Stamp) int { return cmp.Compare(m.at, t) })
	if i > 1 {
		o.samples = o.samples[:copy(o.samples, o.samples[i-1:])]
	}
	if len(o.samples) >= maxMRSamples {
		kept := o.samples[:0]
		for j, m := range o.samples {
			if j%2 == 0 || j == len(o.samples)-1 {
				kept = append(kept, m)
			}
		}
		o.samples = kept
	}
	o.samples = append(o.samples, s)
}

// liveQPs counts the live QPs of each owner on the device with index.
func (w *Watcher) liveQPs(index uint32) map[mrOwnerKey]int {
	out := map[mrOwnerKey]int{}
	for _, h := range w.qps {
		if h.DevIndex == index && !h.Destroyed {
			n := h.qpNames()
			out[keyOf(n.owner, siteOf(n.site))]++
		}
	}
	return out
}

// mrsUndumped says whether the devices a query asks about (every device
// when dev is "") are some, and none had its MRs dumped.
func (w *Watcher) mrsUndumped(dev string) bool {
	some := false
	for _, d := range w.devs {
		if dev != "" && d.name != dev {
			continue
		}
		if d.mrs != nil && d.mrs.dumped != 0 {
			return false
		}
		some = true
	}
	return some
}

// span is an owner's samples over the window that begins at since, from
// the one at its start (the newest at or before since, else the oldest)
// to the newest.
func (o *mrOwner) span(since Stamp) []mrSample {
	i, _ := slices.BinarySearchFunc(o.samples, since+1, func(m mrSample, t Stamp) int { return cmp.Compare(m.at, t) })
	return o.samples[max(i-1, 0):]
}

// createsBetween are the owner's QP creates on the device after from,
// up to to.
func (st *mrState) createsBetween(k mrOwnerKey, from, to Stamp) []qpCreate {
	cs := st.creates[k]
	at := func(t Stamp) int {
		i, _ := slices.BinarySearchFunc(cs, t+1, func(c qpCreate, t Stamp) int { return cmp.Compare(c.at, t) })
		return i
	}
	return cs[at(from):at(to)]
}

// mrLeak is what mr-leak found of an owner: the two dumps its MRs grew
// between (base, top), the QP creates between them, its last dump and its
// live QPs now.
type mrLeak struct {
	base, top, last mrSample
	creates         []qpCreate
	now             int
}

// mrLeaks reports each owner whose MRs on dev (the device with index) grew
// by at least cfg.MRLeakGrowth within cfg.MRLeakWindow before now, over at
// least as many of its QP creates on dev, while its live QPs did not
// grow, and did not fall back since. It looks for a dump in the window
// (the top) that counts more MRs than every dump before it, and no more
// than every dump after it, and compares it with the earliest dump before
// it (the one in force at the window's start included) at which the owner
// had at least as many live QPs; the creates are those between the two.
// The newest such top is taken. An owner's first dump is its baseline:
// what it registers as it starts is no growth. A consumer that builds
// connections has more QPs at each new count; one whose MRs go with its
// connections comes back to the count it had (a reconnect loop, a
// controller reset), and one that sets up a connection MR pool by MR pool
// creates its QPs first: none reaches a new count over as many creates.
// One that registers an MR for each connection and keeps it does, cycle
// after cycle, also when the last dump came while a connection was up (at
// more live QPs than any dump before it had: the dump before is the top).
// Bare findings (counted, not shown) have the rule, severity, device and
// owner only: no evidence, whose count of the owner's live QPs goes QP by
// QP.
func (w *Watcher) mrLeaks(index uint32, dev *deviceState, now time.Time, cfg ruleConfig, bare bool) []Finding {
	st := dev.mrs
	if st == nil || st.dumped == 0 {
		return nil
	}
	since := stampOf(now.Add(-cfg.MRLeakWindow))
	var live map[mrOwnerKey]int // counted once an owner needs it
	var out []Finding
	for _, k := range slices.SortedFunc(maps.Keys(st.owners), func(a, b mrOwnerKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.kern, b.kern))
	}) {
		if !k.known() {
			continue
		}
		o := st.owners[k]
		l, ok := st.mrLeak(k, o.span(since), since, cfg.MRLeakGrowth)
		if !ok {
			continue
		}
		if bare {
			out = append(out, Finding{Rule: RuleMRLeak, Severity: SeverityError, Device: dev.name, Owner: o.owner})
			continue
		}
		if live == nil {
			live = w.liveQPs(index)
		}
		l.now = live[k]
		out = append(out, mrLeakFinding(dev, o, l, now, cfg))
	}
	return out
}

// mrLeak looks for mr-leak's growth (mrLeaks) in the owner k's samples in,
// which begin before since or at the owner's first dump.
func (st *mrState) mrLeak(k mrOwnerKey, in []mrSample, since Stamp, growth int) (mrLeak, bool) {
	floor := uint64(math.MaxUint64) // the fewest MRs a dump after the top counted
	for j := len(in) - 1; j > 0; j-- {
		top, before := in[j], in[:j]
		if top.mrs > floor {
			continue // fell back since
		}
		floor = top.mrs
		if slices.ContainsFunc(before, func(s mrSample) bool { return s.mrs >= top.mrs }) {
			continue // no new count
		}
		i := slices.IndexFunc(before, func(s mrSample) bool { return s.qps >= top.qps })
		if i < 0 || top.mrs-before[i].mrs < uint64(growth) {
			continue
		}
		l := mrLeak{base: before[i], top: top, last: in[len(in)-1], creates: st.createsBetween(k, max(before[i].at, since), top.at)}
		if len(l.creates) >= growth {
			return l, true
		}
	}
	return mrLeak{}, false
}

func mrLeakFinding(dev *deviceState, o *mrOwner, l mrLeak, now time.Time, cfg ruleConfig) Finding {
	start := max(l.base.at, stampOf(now.Add(-cfg.MRLeakWindow)))
	growth := int64(l.top.mrs) - int64(l.base.mrs)
	pinned := uint64(max(0, int64(l.top.bytes)-int64(l.base.bytes)))
	f := Finding{
		Rule: RuleMRLeak, Severity: SeverityError, Device: dev.name, Owner: o.owner, Count: l.last.mrs,
		AgeSeconds: math.Round(now.Sub(start.Time()).Seconds()*1000) / 1000,
		Spec:       "IB spec 10.6: a memory region stays registered, its pages pinned, until its consumer deregisters it",
	}
	sites := map[siteHandle]int{}
	for _, c := range l.creates {
		sites[c.site]++
	}
	site, n := siteHandle{}, 0
	for h, k := range sites {
		if h != (siteHandle{}) && (k > n || k == n && siteOf(h).String() < siteOf(site).String()) {
			site, n = h, k
		}
	}
	f.setSite(siteOf(site))
	creates := strconv.Itoa(len(l.creates))
	if len(l.creates) >= maxOwnerCreates {
		creates = "at least " + creates
	}
	f.Evidence = append(f.Evidence, Evidence{Time: l.base.at.Time(), Source: "scan",
		What: fmt.Sprintf("MRs %d → %d (%+d, %s) in %s over %s QP creates while its live QPs did not grow (%d, then %d at those dumps; %d now): %.1f MR and %s per create",
			l.base.mrs, l.top.mrs, growth, signedSize(int64(l.top.bytes)-int64(l.base.bytes)), cfg.MRLeakWindow, creates, l.base.qps, l.top.qps, l.now,
			float64(growth)/float64(len(l.creates)), size(pinned/uint64(len(l.creates))))})
	if l.last.at != l.top.at {
		f.Evidence = append(f.Evidence, Evidence{Time: l.last.at.Time(), Source: "scan",
			What: fmt.Sprintf("at the last dump: %d MRs (%s), %d live QPs", l.last.mrs, size(l.last.bytes), l.last.qps)})
	}
	if where := siteOf(site).String(); where != "" {
		f.Evidence = append(f.Evidence, Evidence{Time: now.UTC(), Source: "probe", What: fmt.Sprintf("%d QPs created at %s", n, where)})
	}
	for _, m := range o.oldest {
		keys := "keys need CAP_NET_ADMIN"
		if m.hasKeys {
			keys = fmt.Sprintf("R_Key 0x%x, L_Key 0x%x", m.rkey, m.lkey)
		}
		f.Evidence = append(f.Evidence, Evidence{Time: m.since.Time(), Source: "scan",
			What: fmt.Sprintf("oldest: MR %d, %s, %s (listed since then)", m.mrn, size(m.length), keys)})
	}
	f.Hint = fmt.Sprintf("%d more MRs (%s pinned) within %s over %s QP creates while its QPs did not grow: each reconnect registers an MR and the one before stays registered. "+
		"Pinned memory runs out at ", growth, size(pinned), cfg.MRLeakWindow, creates)
	if f.Kernel() {
		f.Hint += "the device's max_mr or the host's RAM: the module must deregister an MR (ib_dereg_mr) when the connection it served ends"
	} else {
		f.Hint += "the process's locked-memory limit (ulimit -l, RLIMIT_MEMLOCK), the device's max_mr or the host's RAM: " +
			"deregister an MR (ibv_dereg_mr) when the connection it served ends, and check ulimit -l of the process"
	}
	return f
}

// size is a number of bytes for people: "512 B", "4 KiB", "1.5 MiB".
func size(b uint64) string {
	if b < 1024 {
		return strconv.FormatUint(b, 10) + " B"
	}
	v, unit := float64(b)/1024, 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	for v >= 1024 && unit < len(units)-1 {
		v, unit = v/1024, unit+1
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + units[unit]
}

// signedSize is size with its sign: "+4 KiB", "-512 B".
func signedSize(b int64) string {
	if b < 0 {
		return "-" + size(uint64(-b))
	}
	return "+" + size(uint64(b))
}

// OwnerMRs is an owner's MRs on a device and their bytes. Its Owner holds
// what the owner metrics' labels name, as OwnerQPs's does: for a process,
// PID (the process: its TGID, else the thread) and Comm; for a kernel
// module, its name in Comm and in ULP (PID 0): the module registered the
// MRs itself, where the QPs rdma_cm made for it name it as their ULP.
type OwnerMRs struct {
	Owner
	MRs, Bytes uint64
}

// DeviceMRs is what a device's last MR dump counted.
type DeviceMRs struct {
	Index uint32
	Name  string
	// At is when the dump ended.
	At         time.Time
	MRs, Bytes uint64
	// Owners are the owners with the most MRs (then bytes), most first,
	// at most the topN asked for; OtherMRs and OtherBytes count the rest.
	Owners               []OwnerMRs
	OtherMRs, OtherBytes uint64
}

// MRTally is what each device's last MR dump counted, its topN owners
// named, sorted by device index; devices whose MRs were never dumped are
// left out. It is what metrics export: counts whose label sets stay
// bounded whatever the host runs.
func (w *Watcher) MRTally(topN int) []DeviceMRs {
	var out []DeviceMRs
	for index, d := range w.devs {
		st := d.mrs
		if st == nil || st.dumped == 0 || d.gone {
			continue // no dump, or a registration gone (its name may have another)
		}
		dm := DeviceMRs{Index: index, Name: d.name, At: st.dumped.Time(), MRs: st.mrs, Bytes: st.bytes}
		for _, o := range st.owners {
			last := o.samples[len(o.samples)-1]
			if last.mrs == 0 {
				continue // none at the last dump
			}
			owner := o.owner.tallied()
			if o.owner.Kernel() {
				owner.ULP = o.owner.KernName
			}
			dm.Owners = append(dm.Owners, OwnerMRs{Owner: owner, MRs: last.mrs, Bytes: last.bytes})
		}
		slices.SortFunc(dm.Owners, func(a, b OwnerMRs) int {
			return cmp.Or(cmp.Compare(b.MRs, a.MRs), cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Comm, b.Comm))
		})
		if len(dm.Owners) > topN {
			for _, o := range dm.Owners[topN:] {
				dm.OtherMRs += o.MRs
				dm.OtherBytes += o.Bytes
			}
			dm.Owners = dm.Owners[:topN]
		}
		out = append(out, dm)
	}
	slices.SortFunc(out, func(a, b DeviceMRs) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
