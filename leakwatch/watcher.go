package leakwatch

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
	"unique"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// maxEvidence bounds the observations kept per QP.
const maxEvidence = 12

// probeMargin is how long before a scan began a probe must have seen
// something for the scan to contradict it: for the scan's not listing a
// QP to mean that the QP is gone, for another state in the scan to mean a
// transition the probes cannot see. Probe times are monotonic clock
// readings converted to wall time once, so they drift from the scans' wall
// clock when it is stepped.
const probeMargin = 2 * time.Second

// goneRetain is how long a destroyed QP no destroy rule can report on is
// kept (at most Config.Retain): long enough for a probe event or a scan
// that raced with the destroy to find its history, short enough that QP
// churn of thousands a second does not hold minutes of histories.
const goneRetain = time.Minute

// maxSamples bounds the QP count samples kept per device for growth.
const maxSamples = 256

type qpKey struct {
	dev uint32
	qpn uint32
}

// History is what was observed of one QP. Restrack carries no timestamps,
// so every time here is when rdmatool first saw something: a scan or a
// probe event.
type History struct {
	historyFields
	// notes are the observations Evidence returns, oldest first.
	notes []note
}

// historyFields are a History's fields but its notes: comparable, so that
// whether a scan changed a history is one comparison (Watcher.Scan).
type historyFields struct {
	// Its fields are ordered for size, not by theme, and its times are
	// Stamps: the agent keeps one per QP, 60,000 and more.

	// State is the last known state, StateSince when it was first seen in
	// it. StateKnown is false while the only source is a netlink state
	// the kernel does not fill in (siw before 6.2 reports RESET always).
	StateSince Stamp
	FirstSeen  Stamp

	// names are the device's name and the owner but for its thread
	// (pid), interned: the QPs of one process or kernel module on one
	// device share one copy, whichever of its threads created them.
	names unique.Handle[qpNames]
	// peer is the address at the other end of the QP's rdma_cm
	// connection (none when no rdma_cm ID named one: DeviceScan.Peers,
	// Watcher.Peers), kept once known, after the QP is destroyed too. Not
	// in names: the QPs of a process to as many peers (an MPI job's
	// all-to-all) would each make their own copy of the names.
	peer peerAddr

	// events are the QP's Error, LAST_WQE_REACHED, drains and end (nil
	// while none was seen, as for most QPs): read with seen, written
	// through record.
	events *qpEvents
	// scanGen is the Watcher.scanGen of the last scan that listed the QP
	// (32 bits: a scan a second wraps it in 136 years, and with it the
	// struct fits 96 bytes rather than 112).
	scanGen  uint32
	DevIndex uint32
	QPN      uint32
	// pid is the thread that created the QP, as netlink records it
	// (Owner's PID).
	pid  uint32
	SRQN uint32
	// pdn is the QP's protection domain as a scan listed it (0 for a
	// kernel QP, and until a scan lists it): part of what tells a QP from
	// another that reuses its number (sameQP).
	pdn uint32

	Type        rdmanl.QPType
	State       rdmanl.QPState
	stateSource source // of State: none yet, a scan or a probe
	StateKnown  bool
	EverRTS     bool
	OnSRQ       bool
	Destroyed   bool
	// DestroySeen says a probe saw the destroy (not just a scan missing the
	// QP); only then are the destroy rules evaluated.
	DestroySeen          bool
	ErrBeforeDestroy     bool
	LastWQEBeforeDestroy bool
	DeviceGone           bool // destroyed by device unregistration
	inScan               bool
	// keep says the destroy rules may report this destroyed QP, so it is
	// kept for Config.Retain; others go after goneRetain.
	keep bool
	// restored says the history was restored (Watcher.Restore) and a
	// probe event took it up before a scan listed the QP again: that
	// scan checks it is the same QP.
	restored bool
	// counted is what the QP rules found on this QP as the watcher's
	// counts hold it (CountFindings), and queued says the history waits
	// there to be counted again: the watcher's bookkeeping, not the QP's.
	counted qpVerdict
	queued  bool
}

// historyShape is what a history holds but its notes, its scan generation
// and the watcher's bookkeeping: two shapes differ when a history changed.
type historyShape struct {
	historyFields
	seen  qpEvents
	drain drainState
}

// shape is the history's shape now.
func (h *History) shape() historyShape {
	s := historyShape{historyFields: h.historyFields}
	s.scanGen, s.counted, s.queued = 0, 0, false
	if h.events != nil { // most QPs have none: their shape is their fields
		s.seen = *h.events
		if d := s.seen.drain; d != nil {
			s.drain, s.seen.drain = *d, nil
		}
	}
	return s
}

// differs says whether two shapes of one history differ.
func (s *historyShape) differs(o *historyShape) bool {
	if s.historyFields != o.historyFields {
		return true
	}
	return s.events != nil && (s.seen != o.seen || s.drain != o.drain)
}

// changedFrom says whether the history's shape differs from was.
func (h *History) changedFrom(was *historyShape) bool {
	s := h.shape()
	return s.differs(was)
}

// qpEvents is what was seen of a QP besides its states and owner.
type qpEvents struct {
	// ErrAt is when a probe saw the QP moved to ERR (zero if not seen).
	ErrAt Stamp
	// LastWQEAt is the first LAST_WQE_REACHED after ErrAt (or ever, if no
	// ERR was seen); LastWQECount counts deliveries (rxe sends it again
	// when a WR is posted after ERR).
	LastWQEAt Stamp
	// lastWQELatest is the newest delivery: one stamped after a modify
	// to ERR began belongs to that ERR even when it reached the ring
	// buffer first (the provider delivered it before the modify returned).
	lastWQELatest Stamp
	DestroyedAt   Stamp
	// drain is what the probes saw of the QP's drains (nil: none seen).
	drain        *drainState
	LastWQECount int32
	// errCause is why the QP is in Error, from its entry until it leaves
	// Error (0 while not in Error, or in it since before it was seen).
	errCause ErrorCause
}

// seen is a copy of the QP's events (all zero when none was seen).
func (h *History) seen() qpEvents {
	if h.events == nil {
		return qpEvents{}
	}
	return *h.events
}

// record returns the QP's events for writing.
func (h *History) record() *qpEvents {
	if h.events == nil {
		h.events = &qpEvents{}
	}
	return h.events
}

// Stamp is a time as nanoseconds since the Unix epoch, 0 for none: a
// History and its events keep six, 8 bytes each where a time.Time takes 24.
type Stamp int64

// stampOf is t as a Stamp.
func stampOf(t time.Time) Stamp {
	if t.IsZero() {
		return 0
	}
	return Stamp(t.UnixNano())
}

// Time is the stamp as a time in UTC; the zero time for none.
func (s Stamp) Time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s)).UTC()
}

// IsZero says whether the stamp is none.
func (s Stamp) IsZero() bool { return s == 0 }

// source is where an observation came from.
type source uint8

const (
	sourceNone source = iota
	sourceScan
	sourceProbe
)

func (s source) String() string {
	switch s {
	case sourceScan:
		return "scan"
	case sourceProbe:
		return "probe"
	}
	return ""
}

// note is one observation as a History keeps it: 16 bytes where its
// Evidence takes 56. Most texts are the same for many QPs ("first seen",
// "state INIT"): each is kept once.
type note struct {
	at   Stamp
	what unique.Handle[noteWhat]
}

// noteWhat is a note's text and where it came from.
type noteWhat struct {
	text   string
	source source
}

// qpNames are a QP's device name and its owner as netlink, /proc or a
// probe named them, but for the owner's thread (its PID is 0 here: the
// History keeps it), and where the probes saw it created: the QPs one
// process made at one site on one device share one copy, so a site costs
// a QP nothing.
type qpNames struct {
	device string
	owner  Owner
	site   siteHandle
}

// peerAddr is an rdma_cm peer's IP address, an IPv4 one mapped into
// IPv6 (the zone of a link-local one is not kept); the zero value is none.
// Sixteen bytes a QP, where an interned string costs each distinct
// address about 200 bytes of heap.
type peerAddr [16]byte

// peerFrom parses an address as rdmanl.Peers gives it; none when it is
// not one.
func peerFrom(s string) peerAddr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return peerAddr{}
	}
	return a.As16()
}

// String is the address as netip writes it ("" for none).
func (p peerAddr) String() string {
	if p == (peerAddr{}) {
		return ""
	}
	return netip.AddrFrom16(p).Unmap().String()
}

func (h *History) qpNames() qpNames {
	if h.names == (unique.Handle[qpNames]{}) {
		return qpNames{}
	}
	return h.names.Value()
}

// setNames makes n the history's names; the same names keep their handle.
func (h *History) setNames(n qpNames) {
	if h.names != (unique.Handle[qpNames]{}) && h.names.Value() == n {
		return
	}
	h.names = unique.Make(n)
}

// Device is the name of the QP's device.
func (h *History) Device() string { return h.qpNames().device }

// Owner is the QP's owner: the creating thread of a user QP as netlink
// records it, its process, command, cgroup and container as /proc (at the
// last scan or report that found it) or the probe that saw the QP created
// named them; the module of a kernel QP, and the ULP it serves (from the
// scans' DeviceScan.ULPs, or for a QP rdma_cm created the module above
// rdma_cm in the stack the probes took at its create).
func (h *History) Owner() Owner {
	o := h.qpNames().owner
	o.PID = h.pid
	return o
}

// Site is where the probes saw the QP created (none when they did not,
// or saw no site).
func (h *History) Site() Site { return siteOf(h.qpNames().site) }

// Peer is the address at the other end of the QP's rdma_cm connection, as
// the rdma_cm ID bound to it last named it; "" when none did.
func (h *History) Peer() string { return h.peer.String() }

// Evidence is what was observed of the QP, oldest first (at most
// maxEvidence observations; the first is always kept).
func (h *History) Evidence() []Evidence {
	out := make([]Evidence, len(h.notes))
	for i, n := range h.notes {
		w := n.what.Value()
		out[i] = Evidence{Time: n.at.Time(), Source: w.source.String(), What: w.text}
	}
	return out
}

// ended records that the QP is gone at t. Only an SRQ QP whose destroy a
// probe saw, torn down other than by the full IB spec 10.3.1 sequence, can
// still be reported (srq-destroy-without-last-wqe); any other keeps just
// enough for the races with scans and events, without its evidence
// unless a destroy event may still come.
func (h *History) ended(t time.Time) {
	h.Destroyed, h.record().DestroyedAt = true, stampOf(t)
	h.restored = false // a probe saw it end: there is no scan to check it against
	src := sourceScan
	if h.DestroySeen {
		src = sourceProbe
	}
	h.drainClosed(t, src)
	h.keep = h.DestroySeen && !h.DeviceGone && h.OnSRQ && !(h.ErrBeforeDestroy && h.LastWQEBeforeDestroy)
	// An SRQ QP whose drain was slow stays for srq-drain-stalled.
	d := h.seen().drain
	h.keep = h.keep || (h.OnSRQ && d != nil && d.DrainTook >= slowDrain)
	// An SRQ QP a scan found gone may still get its destroy event (it
	// waited in the ring buffer) and become reportable: its evidence stays
	// until then.
	awaitingDestroy := h.OnSRQ && !h.DeviceGone && !h.DestroySeen
	if !h.keep && !awaitingDestroy {
		h.notes = nil
	}
}

func (h *History) note(t time.Time, src source, format string, args ...any) {
	what := format // most notes are fixed text: no copy of it per QP
	if len(args) > 0 {
		what = fmt.Sprintf(format, args...)
	}
	h.noteText(t, src, what)
}

// noteText is note with the text as it is.
func (h *History) noteText(t time.Time, src source, what string) {
	if len(h.notes) >= maxEvidence {
		copy(h.notes[1:], h.notes[2:]) // keep the first observation
		h.notes = h.notes[:maxEvidence-1]
	}
	if len(h.notes) == cap(h.notes) {
		// One more, not append's doubling: most QPs keep two or three
		// notes, and each count of 16-byte notes up to maxEvidence is a
		// size class of its own.
		h.notes = append(make([]note, 0, len(h.notes)+1), h.notes...)
	}
	h.notes = append(h.notes, note{at: stampOf(t), what: unique.Make(noteWhat{what, src})})
}

// stateNotes are the notes of the states the kernel defines, made once
// rather than once per QP.
var stateNotes = func() (notes [8]string) {
	for i := range notes {
		notes[i] = "state " + rdmanl.QPState(i).String()
	}
	return notes
}()

func (h *History) setState(s rdmanl.QPState, t time.Time, src source) {
	if !h.StateKnown || h.State != s {
		h.State, h.StateSince = s, stampOf(t)
		if int(s) < len(stateNotes) {
			h.noteText(t, src, stateNotes[s])
		} else {
			h.note(t, src, "state %s", s)
		}
	}
	h.StateKnown, h.stateSource = true, src
	h.leftError(s)
	if s == rdmanl.QPStateRTS {
		h.EverRTS = true
	}
}

type sample struct {
	t time.Time
	n int
}

type deviceState struct {
	name string
	// nodeGUID identifies the device across renames and re-registrations
	// (0 until a listing or a scan names it), for the histories a watcher
	// saves.
	nodeGUID rdmanl.GUID
	// protocol is the device's ("roce", "iw", "ib"), which tells soft RoCE
	// and soft iWARP on one netdev apart where the GUID does not.
	protocol     string
	emitsLastWQE bool // a LAST_WQE_REACHED was seen on this device
	// lastWQE and lastWQESource are the provider table's word, from scans.
	lastWQE       LastWQE
	lastWQESource string
	maxQP         uint64 // as the device reported it
	gone          bool   // no longer listed (DeviceGone) or unregistered
	contexts      uint64
	samples       []sample
	// failures are the newest failed QP creates (at most
	// MaxCreateFailures), oldest first, for qp-create-failing; failed
	// counts them all by errno and site label, failureSites the sites
	// with a label of their own (CreateFailures).
	failures     ring[createFailure]
	failed       map[failureKey]uint64
	failureSites []string
	// qpErrors are the newest failures of its QPs into Error, the
	// entries of every cause but CauseModify (at most MaxQPErrors),
	// oldest first, for qp-error-storm; errors counts every entry by
	// cause, the modifies too (QPErrors).
	qpErrors ring[qpError]
	errors   [numCauses]uint64
	// mrs is what the MR dumps and the QP creates say of its owners,
	// for mr-leak (nil until either came).
	mrs *mrState
}

// Watcher keeps QP histories from scans and probe events and evaluates the
// rules over them. It is not safe for concurrent use; a long-running caller
// serializes its calls (CountFindings, Tally and LiveQPs keep what they
// counted, too).
//
// Its memory follows the host's QPs: destroyed QPs are forgotten after
// Config.Retain, a QP whose destroy event was lost is taken as gone when a
// scan no longer lists it, each QP keeps at most a dozen observations and
// each device a bounded series of QP counts.
type Watcher struct {
	cfg   Config
	now   func() time.Time
	start time.Time
	qps   map[qpKey]*History
	// perDev counts the histories in qps of each device index, and
	// destroyed those destroyed (put, drop, end): a scan's walk over the
	// histories and expire's are skipped where they would find nothing,
	// as at each interval's scan of an iWARP device without QPs beside
	// 60,000 QPs of another.
	perDev    map[uint32]int
	destroyed int
	devs      map[uint32]*deviceState
	// scanGen counts the scans folded in (History.scanGen).
	scanGen uint32
	// zombies is the last look at the host's processes.
	zombies zombieState
	// restoring holds what Restore took from a saved watcher, per device,
	// until the device's first scan (saved.go); restoredQPs counts what
	// became of it.
	restoring   []*restoredDevice
	restoredQPs Restored
	// counts are what CountFindings keeps (nil until it is called), gen
	// counts the changes to the histories, and tallied holds what Tally
	// and LiveQPs counted at one gen.
	counts  *counter
	gen     uint64
	tallied tallied
	// retired are the counters of gone devices by name, until the name
	// comes back (continue.go); unattributed counts failed creates of no
	// known device.
	retired      map[string]*retiredCounts
	unattributed uint64
}

// Config's defaults, which New applies to what is 0.
const (
	// DefaultExhaustionThreshold is Config.ExhaustionThreshold's default.
	DefaultExhaustionThreshold = 0.8
	// DefaultRetain is Config.Retain's default.
	DefaultRetain = 10 * time.Minute
)

// withDefaults is cfg with its defaults where it has 0.
func (cfg Config) withDefaults() Config {
	orDefault(&cfg.ExhaustionThreshold, DefaultExhaustionThreshold)
	orDefault(&cfg.ExhaustionHorizon, 24*time.Hour)
	orDefault(&cfg.Retain, DefaultRetain)
	orDefault(&cfg.CreateFailures, DefaultCreateFailures)
	orDefault(&cfg.CreateFailureWindow, DefaultCreateFailureWindow)
	orDefault(&cfg.ErrorStormCycles, DefaultErrorStormCycles)
	orDefault(&cfg.ErrorStormWindow, DefaultErrorStormWindow)
	orDefault(&cfg.MRLeakGrowth, DefaultMRLeakGrowth)
	orDefault(&cfg.MRLeakWindow, DefaultMRLeakWindow)
	return cfg
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// New returns a watcher that reads the time from now.
func New(cfg Config, now func() time.Time) *Watcher {
	cfg = cfg.withDefaults()
	return &Watcher{cfg: cfg, now: now, start: now(), qps: map[qpKey]*History{}, perDev: map[uint32]int{}, devs: map[uint32]*deviceState{}}
}

func (w *Watcher) device(index uint32, name string) *deviceState {
	d, ok := w.devs[index]
	if !ok {
		d = &deviceState{}
		w.devs[index] = d
	}
	if name != "" && name != d.name {
		d.name = name
		w.named(index, d, name)
	}
	return d
}

// Scan folds a netlink snapshot of the devices it holds into the
// histories. A QP of a scanned device that the snapshot does not list is
// gone; devices the snapshot does not hold are left as they are, so each
// device can be scanned on its own schedule.
func (w *Watcher) Scan(s Scan) {
	w.scanZombies(s)
	w.scanGen++ // marks the histories this scan lists: no map of 60k keys per scan
	scanned := map[uint32]bool{}
	for _, ds := range s.Devices {
		scanned[ds.Device.Index] = true
		dev := w.device(ds.Device.Index, ds.Device.Name)
		dev.nodeGUID, dev.protocol = ds.Device.NodeGUID, ds.Device.Protocol
		rd := w.restoredAt(ds.Device.Index)
		dev.gone = false
		dev.contexts = ds.Contexts
		dev.lastWQE, dev.lastWQESource = ds.LastWQE, ds.LastWQESource
		if ds.MaxQP > 0 {
			dev.maxQP = ds.MaxQP
		}
		dev.sample(s.Time, len(ds.QPs))
		for _, qp := range ds.QPs {
			k := qpKey{ds.Device.Index, qp.LQPN}
			h := w.qps[k]
			var was historyShape
			if h != nil {
				was = h.shape()
			}
			if w.scanQP(s, &ds, dev, rd, k, qp, h) == h && h != nil && h.changedFrom(&was) {
				w.changed(h, was.names)
			}
		}
	}
	listed := false // a scanned device has histories, which the scan may miss
	for index := range scanned {
		listed = listed || w.perDev[index] > 0
	}
	for k, h := range w.qps {
		if !listed {
			break
		}
		if h.scanGen == w.scanGen || h.Destroyed || !scanned[k.dev] {
			continue
		}
		ends := h.inScan || h.stateSource == sourceScan || (!s.Started.IsZero() && h.FirstSeen.Time().Before(s.Started.Add(-probeMargin)))
		if !h.restored && !ends {
			continue
		}
		if h.restored { // restored, and gone before this first scan
			h.restored = false
			w.restoredQPs.Kept--
			w.restoredQPs.Gone++
		}
		// A QP a scan listed before is gone. So is one a probe saw
		// created before this dump began: its destroy event was lost
		// (a full ring buffer), and keeping it would leak memory and
		// report its last state forever.
		if ends {
			w.end(h, s.Time)
		}
		w.changed(h, h.names)
	}
	for _, ds := range s.Devices {
		if rd := w.restoredAt(ds.Device.Index); rd != nil {
			w.dropRestored(rd) // what its first scan did not list is gone
		}
	}
	w.expire(s.Time)
}

// scanQP folds what a scan s lists of the QP k (qp, on dev, in its
// device's scan ds; rd what was restored of the device) into its history
// h (nil: none yet), and returns the QP's history after it: h, or one
// that replaced it.
func (w *Watcher) scanQP(s Scan, ds *DeviceScan, dev *deviceState, rd *restoredDevice, k qpKey, qp rdmanl.QP, h *History) *History {
	if h != nil && h.Destroyed && h.DestroySeen && !s.Started.IsZero() && !h.seen().DestroyedAt.Time().Before(s.Started.Add(-probeMargin)) {
		// The probes saw it destroyed after this dump began: the
		// kernel listed it before the destroy. A QP that reuses
		// the number comes with its own create event.
		return h
	}
	if rd != nil {
		h = w.claimRestored(rd, k, h, qp)
	}
	if h != nil && h.restored {
		h = w.confirmRestored(k, h, qp)
	}
	if h == nil || h.Destroyed {
		h = &History{historyFields: historyFields{DevIndex: k.dev, QPN: k.qpn, FirstSeen: stampOf(s.Time)}}
		w.put(k, h)
		h.note(s.Time, sourceScan, "first seen")
	}
	h.scanGen = w.scanGen
	h.Type, h.pid, h.pdn = qp.Type, qp.Owner.PID, qp.PDN
	n := h.qpNames()
	peer := h.peer
	n.device, n.owner.KernName = dev.name, qp.Owner.KernName
	if ulp := ds.ULPs[qp.LQPN]; ulp != "" {
		n.owner.ULP = ulp
	}
	if p := ds.Peers[qp.LQPN]; p != "" {
		h.peer = peerFrom(p)
	}
	h.OnSRQ, h.SRQN = qp.OnSRQ, qp.SRQN
	if p, ok := ds.Owners[qp.Owner.PID]; ok {
		n.owner.resolve(p)
	}
	h.setNames(n)
	if h.peer != peer {
		w.peerLearned(dev, h)
	}
	h.inScan = true
	// A QP in RESET has no port: one that reports RESET with a
	// port comes from a provider that does not fill in the state
	// (siw on 6.1). Its rdma_cm ID, when connected, says it is.
	unfilled := qp.State == rdmanl.QPStateReset && qp.Port != 0
	if unfilled && ds.CMConnected[qp.LQPN] && (!h.StateKnown || h.State == rdmanl.QPStateInit || h.State == rdmanl.QPStateRTR) {
		h.setState(rdmanl.QPStateRTS, s.Time, sourceScan)
		h.note(s.Time, sourceScan, "rdma_cm ID connected; the provider reports no QP state")
		return h
	}
	if unfilled {
		if !h.StateKnown {
			h.stateSource = sourceScan
		}
		return h
	}
	// The probes see every transition made through
	// _ib_modify_qp, not those a provider makes itself (an
	// iWARP provider moves a connected QP to RTS in its own CM
	// code, hardware moves a QP to ERR): a dump that began well
	// after the probes' last transition and shows another state
	// reports such a change. Otherwise the probes are
	// authoritative.
	if h.stateSource == sourceProbe && (qp.State == h.State || s.Started.IsZero() || !h.StateSince.Time().Before(s.Started.Add(-probeMargin))) {
		return h
	}
	if qp.State == rdmanl.QPStateErr && h.StateKnown && h.State != rdmanl.QPStateErr {
		cause := CauseProvider
		if !w.cfg.Probes {
			cause = CauseUnknown
		}
		w.enteredError(h, dev, s.Time, cause)
	}
	h.setState(qp.State, s.Time, sourceScan)
	return h
}

// DeviceGone records that a device is no longer listed: its live QPs are
// destroyed with it, and the device is forgotten once no QP history refers
// to it (rxe and siw links come and go, each under a new index).
func (w *Watcher) DeviceGone(index uint32, t time.Time) {
	if rd := w.restoredAt(index); rd != nil {
		w.dropRestored(rd)
	}
	dev, ok := w.devs[index]
	if !ok {
		return
	}
	dev.gone = true
	for _, q := range w.qps {
		if q.DevIndex == index && !q.Destroyed {
			q.DeviceGone = true
			w.end(q, t)
			w.changed(q, q.names)
		}
	}
	w.expire(t)
}

// SetProbes says whether probe events feed the watcher from now on, and
// when not, why; the rules that need them are skipped with that reason.
func (w *Watcher) SetProbes(on bool, reason string) {
	w.cfg.Probes, w.cfg.ProbesReason = on, reason
}

// Started is when the watcher began observing.
func (w *Watcher) Started() time.Time { return w.start }

// retention is how long a destroyed QP is kept.
func (w *Watcher) retention(h *History) time.Duration {
	if h.keep {
		return w.cfg.Retain
	}
	return min(w.cfg.Retain, goneRetain)
}

// expire forgets destroyed QPs older than their retention, and gone devices that
// no QP refers to any more.
func (w *Watcher) expire(now time.Time) {
	for k, h := range w.qps {
		if w.destroyed == 0 {
			break // none to forget: no walk over the live ones
		}
		if h.Destroyed && now.Sub(h.seen().DestroyedAt.Time()) > w.retention(h) {
			w.drop(k)
		}
	}
	for index, d := range w.devs {
		if d.gone && w.perDev[index] == 0 {
			w.retire(d, now)
			delete(w.devs, index)
		}
	}
	w.pruneRetired(now)
}

// end records that h, a history the watcher tracks, is gone at t
// (History.ended), counting it among the destroyed.
func (w *Watcher) end(h *History, t time.Time) {
	if !h.Destroyed {
		w.destroyed++
	}
	h.ended(t)
}

// Event folds an observation of the kernel into the histories.
func (w *Watcher) Event(ev Event) {
	k := qpKey{ev.DevIndex, ev.QPN}
	h := w.qps[k]
	var names unique.Handle[qpNames]
	if h != nil {
		names = h.names
	}
	w.event(ev)
	if w.qps[k] == h && h != nil { // a history that replaced it is counted anyway
		w.changed(h, names)
	}
}

// event is Event.
func (w *Watcher) event(ev Event) {
	if ev.Kind == EventQPCreated && ev.Result != 0 && ev.DevName == "" {
		w.unattributed++ // no device known: counted on none, not on ""
		return
	}
	dev := w.device(ev.DevIndex, ev.DevName)
	k := qpKey{ev.DevIndex, ev.QPN}
	h := w.qps[k]
	get := func() *History {
		if h == nil || h.Destroyed {
			if r := w.takeRestored(k, ev.QPType); r != nil {
				h = r // its first scan checks it is the same QP
				n := h.qpNames()
				n.device = dev.name
				h.setNames(n)
				return h
			}
			h = &History{historyFields: historyFields{DevIndex: k.dev, QPN: k.qpn, FirstSeen: stampOf(ev.Time), Type: ev.QPType}}
			h.setNames(qpNames{device: dev.name})
			w.put(k, h)
		}
		return h
	}
	switch ev.Kind {
	case EventQPCreated:
		if ev.Result != 0 {
			dev.createFailed(ev.Time, -ev.Result, ev.Site.intern())
			return
		}
		w.qpCreated(dev, ev)
		h = nil // a new QP, even if its number was used before
		w.forgetRestored(k)
		h = get()
		// Netlink records the creating thread's id; kernel QPs have none.
		o := Owner{KernName: ev.KernOwner, Comm: ev.Comm}
		if ev.KernOwner == "rdma_cm" {
			// The ULP a scan would name from the QP's rdma_cm ID, for
			// the QPs a ULP that reconnects in a loop makes and ends
			// between scans: the module above rdma_cm in the stack.
			o.ULP = stackULP(ev.Site.Stack)
		}
		if ev.KernOwner == "" {
			h.pid, o.TGID = ev.TID, ev.PID
		}
		h.OnSRQ, h.SRQN = ev.OnSRQ, ev.SRQN
		h.setNames(qpNames{device: dev.name, owner: o, site: ev.Site.intern()})
		fresh := !h.StateKnown
		h.note(ev.Time, sourceProbe, "created")
		if fresh {
			// A QP is created in RESET, which "created" says: no note of
			// its own (16 bytes of 60,000 QPs' and more, and their notes
			// fit a smaller size class).
			h.State, h.StateSince, h.StateKnown, h.stateSource = rdmanl.QPStateReset, stampOf(ev.Time), true, sourceProbe
		} else {
			h.setState(rdmanl.QPStateReset, ev.Time, sourceProbe)
		}
	case EventQPModified:
		if ev.Result != 0 || !ev.HasState {
			return
		}
		h = get()
		if ev.NewState == rdmanl.QPStateErr && (h.State != rdmanl.QPStateErr || h.seen().ErrAt.IsZero()) {
			// A modify's event is stamped when it began and sent when it
			// returned; rxe delivers LAST_WQE_REACHED from its responder
			// work, which may run before the modify returns. Deliveries
			// since the modify began are this Error's.
			at := stampOf(ev.Time)
			e := h.record()
			e.ErrAt = at
			if e.LastWQECount > 0 && e.lastWQELatest >= at {
				if e.LastWQEAt < at {
					e.LastWQEAt, e.LastWQECount = e.lastWQELatest, 1
				}
			} else {
				e.LastWQEAt, e.LastWQECount = 0, 0
			}
		}
		wasErr := h.StateKnown && h.State == rdmanl.QPStateErr
		if ev.HasCurState && ev.CurState == rdmanl.QPStateErr && !wasErr {
			// The provider moved the QP to Error before this modify.
			w.enteredError(h, dev, ev.Time, CauseProvider)
		}
		h.setState(ev.NewState, ev.Time, sourceProbe)
		if ev.NewState == rdmanl.QPStateErr && !wasErr {
			w.enteredError(h, dev, ev.Time, CauseModify)
		}
	case EventQPAsync:
		h = get()
		if ev.LastWQE {
			dev.emitsLastWQE = true
			e := h.record()
			e.LastWQECount++
			e.lastWQELatest = stampOf(ev.Time)
			if e.LastWQECount == 1 {
				e.LastWQEAt = stampOf(ev.Time)
				h.note(ev.Time, sourceProbe, "LAST_WQE_REACHED delivered")
			}
			return
		}
		h.note(ev.Time, sourceProbe, "async event %s", ev.Async)
		if c := asyncCause(ev.Async); c != 0 {
			w.enteredError(h, dev, ev.Time, c)
		}
	case EventQPDestroyed:
		if h != nil && h.Destroyed && !h.DestroySeen && !h.DeviceGone && ev.Result == 0 {
			// A scan that ran while this event waited in the ring
			// buffer already missed the QP: this is its destroy.
			h.Destroyed = false
			w.destroyed--
		}
		if h == nil || h.Destroyed {
			h = get() // a QP created before the probes attached
		}
		if ev.Result != 0 {
			h.note(ev.Time, sourceProbe, "destroy failed: %d", ev.Result)
			return
		}
		h.DestroySeen = true
		h.ErrBeforeDestroy = h.StateKnown && h.State == rdmanl.QPStateErr
		h.LastWQEBeforeDestroy = h.seen().LastWQECount > 0
		h.note(ev.Time, sourceProbe, "destroyed in state %s", h.State)
		w.end(h, ev.Time)
	case EventDrainStarted, EventDrainEnded:
		// A scan that ran while this event waited in the ring buffer
		// may have missed the QP already (the drain returned, then the
		// QP was destroyed): its history still takes the drain, and
		// the destroy event that follows it.
		if h == nil || !h.Destroyed || h.DestroySeen || h.DeviceGone {
			h = get()
		}
		if ev.Kind == EventDrainStarted {
			h.drainStarted(ev)
		} else {
			h.drainEnded(ev)
		}
	case EventDeviceUnregistered:
		if rd := w.restoredAt(ev.DevIndex); rd != nil {
			w.dropRestored(rd)
		}
		dev.gone = true
		for _, q := range w.qps {
			if q.DevIndex == ev.DevIndex && !q.Destroyed {
				q.DeviceGone = true
				w.end(q, ev.Time)
				w.changed(q, q.names)
			}
		}
	case EventDeviceRenamed:
		dev.name = ev.NewName
		renamed := map[unique.Handle[qpNames]]unique.Handle[qpNames]{} // each set of names made once
		for _, q := range w.qps {
			if q.DevIndex != ev.DevIndex {
				continue
			}
			from := q.names
			if to, ok := renamed[from]; ok {
				q.names = to
			} else {
				n := q.qpNames()
				n.device = ev.NewName
				q.setNames(n)
				renamed[from] = q.names
			}
			if q.names != from {
				w.changed(q, from)
			}
		}
	}
}

// LiveQPs is the number of tracked QPs not destroyed.
func (w *Watcher) LiveQPs() int {
	if t := &w.tallied; t.liveOK && t.liveGen == w.gen {
		return t.live
	}
	n := 0
	for _, h := range w.qps {
		if !h.Destroyed {
			n++
		}
	}
	w.tallied.live, w.tallied.liveGen, w.tallied.liveOK = n, w.gen, true
	return n
}

// histories returns copies of the QP histories being tracked, their
// observations included: changing them does not change the watcher.
func (w *Watcher) histories() []History {
	out := make([]History, 0, len(w.qps))
	for _, h := range w.qps {
		c := *h
		c.notes = slices.Clone(h.notes)
		if h.events != nil {
			e := *h.events
			if e.drain != nil {
				d := *e.drain
				e.drain = &d
			}
			c.events = &e
		}
		out = append(out, c)
	}
	return out
}

// SetMaxQP replaces the QP limits per device name that qp-exhaustion uses
// (a configuration reload).
func (w *Watcher) SetMaxQP(maxQP map[string]uint64) { w.cfg.MaxQP = maxQP }

// lastWQEKnown is what is known of the device's provider: an event seen
// on it, else the provider table.
func (d *deviceState) lastWQEKnown() (LastWQE, string) {
	if d.emitsLastWQE {
		return LastWQEDelivered, "seen delivered on " + d.name
	}
	return d.lastWQE, d.lastWQESource
}

// sample records the device's QPs in use at t, for qp-exhaustion's growth.
func (d *deviceState) sample(t time.Time, qps int) {
	d.samples = append(d.samples, sample{t, qps})
	if len(d.samples) > maxSamples {
		d.samples = d.samples[1:]
	}
}

// CountQPs records how many QPs a device has in use at t (its resource
// summary), between the scans that list them: qp-exhaustion follows the
// growth from these too.
func (w *Watcher) CountQPs(index uint32, name string, t time.Time, qps int) {
	w.device(index, name).sample(t, qps)
}

// ResolveOwners refreshes what /proc says of the owners of live user QPs
// (process, command, cgroup, container: the TGID, Comm, Cgroup and
// ContainerID of what lookup returns) through lookup, by the thread id
// the kernel recorded: between netlink dumps, which are rare under the
// probes, a report still names where the owner is now. An owner lookup
// does not find (gone, or in another PID namespace) keeps what was known.
func (w *Watcher) ResolveOwners(lookup func(tid uint32) (Owner, bool)) {
	for _, h := range w.qps {
		if h.Destroyed || h.pid == 0 {
			continue
		}
		n := h.qpNames()
		if n.owner.Kernel() {
			continue
		}
		if p, ok := lookup(h.pid); ok {
			was := h.names
			n.owner.resolve(p)
			h.setNames(n)
			if h.names != was {
				w.changed(h, was)
			}
		}
	}
}
