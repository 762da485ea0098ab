package leakwatch

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unique"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// SavedVersion is the version of the records Save writes. A change to
// what a record holds or means bumps it; the caller frames the records
// with it and gives Restore only records of a version it reads
// (ReadsSavedVersion). Version 2 added creation sites, version 3 the
// device's protocol; Restore reads older versions' records as they are
// (their QPs have no site, their devices no protocol).
const SavedVersion = 3

// ReadsSavedVersion says whether Restore reads records of version v.
func ReadsSavedVersion(v int) bool { return v >= 1 && v <= SavedVersion }

// The records Save hands out and Restore takes back, one value each (a
// JSON line with a json.Encoder): first the watcher's, then each device's,
// each QP owner's and creation site's before the first QP that has it,
// each QP's, and last the end's, which counts the others, so that records
// cut short at a value's end are refused too. A QP names its device, owner
// and site by the id of their records: the owners and sites of 60,000 QPs
// are a few. Fields that are
// zero are left out (omitzero): this is the agent's own file, not an
// output whose fields are API, and 60,000 QPs make tens of MB of it.
type record struct {
	Watcher *watcherRecord `json:"watcher,omitzero"`
	Device  *deviceRecord  `json:"device,omitzero"`
	Owner   *ownerRecord   `json:"owner,omitzero"`
	Site    *siteRecord    `json:"site,omitzero"`
	QP      *qpRecord      `json:"qp,omitzero"`
	End     *endRecord     `json:"end,omitzero"`
}

// watcherRecord is what the watcher keeps besides its devices and QPs.
type watcherRecord struct {
	Started time.Time `json:"started"` // when it began observing
}

// deviceRecord is a device as a watcher knew it: its index and name then,
// its node GUID and protocol (what find it again after a rename or a
// re-registration: soft RoCE and soft iWARP on one netdev share a GUID), what the rules learned of it, and its QP counts for
// qp-exhaustion's growth.
type deviceRecord struct {
	ID           int            `json:"id"`
	Index        uint32         `json:"index"`
	Name         string         `json:"name"`
	NodeGUID     rdmanl.GUID    `json:"node_guid"`
	Protocol     string         `json:"protocol,omitzero"`
	EmitsLastWQE bool           `json:"emits_last_wqe,omitzero"`
	Samples      []sampleRecord `json:"samples,omitzero"`
}

type sampleRecord struct {
	Time time.Time `json:"time"`
	QPs  int       `json:"qps"`
}

// ownerRecord is a QP owner but for its thread (PID 0: each QP keeps its
// own).
type ownerRecord struct {
	ID int `json:"id"`
	Owner
}

// siteRecord is a creation site (Site).
type siteRecord struct {
	ID      int      `json:"id"`
	Call    string   `json:"call,omitzero"`
	Via     string   `json:"via,omitzero"`
	File    string   `json:"file,omitzero"`
	BuildID string   `json:"build_id,omitzero"`
	Offset  uint64   `json:"offset,omitzero"`
	Stack   []string `json:"stack,omitzero"`
}

// qpRecord is one QP's history. Type and state are the kernel's names
// (rdmanl's String); what identifies the QP (sameQP) is its device, LQPN,
// type, PID, its owner's kern_name, its SRQ and its PDN.
type qpRecord struct {
	Device      int       `json:"device"`
	LQPN        uint32    `json:"lqpn"`
	Type        string    `json:"type"`
	PID         uint32    `json:"pid,omitzero"`
	Owner       int       `json:"owner,omitzero"`
	Site        int       `json:"site,omitzero"`
	PDN         uint32    `json:"pdn,omitzero"`
	OnSRQ       bool      `json:"srq,omitzero"`
	SRQN        uint32    `json:"srqn,omitzero"`
	FirstSeen   savedTime `json:"first_seen"`
	State       string    `json:"state"`
	StateKnown  bool      `json:"state_known,omitzero"`
	StateSince  savedTime `json:"state_since,omitzero"`
	StateSource string    `json:"state_source,omitzero"` // "scan" or "probe"
	EverRTS     bool      `json:"ever_rts,omitzero"`
	InScan      bool      `json:"in_scan,omitzero"`
	// A destroyed QP is saved only while the destroy rules may report it
	// (History.keep).
	Destroyed            bool          `json:"destroyed,omitzero"`
	DestroySeen          bool          `json:"destroy_seen,omitzero"`
	ErrBeforeDestroy     bool          `json:"err_before_destroy,omitzero"`
	LastWQEBeforeDestroy bool          `json:"last_wqe_before_destroy,omitzero"`
	Events               *eventsRecord `json:"events,omitzero"`
	Notes                []noteRecord  `json:"notes,omitzero"`
}

// noteRecord is one of a QP's notes, as Evidence shows it.
type noteRecord struct {
	Time   savedTime `json:"time"`
	Source string    `json:"source"`
	What   string    `json:"what"`
}

// savedTime is a Stamp as the records hold it: RFC 3339 UTC text, as a
// time.Time's JSON. It is an encoding.TextMarshaler, not a
// json.Marshaler, whose output encoding/json would parse again: a QP's
// record has several.
type savedTime Stamp

// IsZero says whether the time is none (omitzero leaves it out).
func (t savedTime) IsZero() bool { return t == 0 }

// MarshalText implements encoding.TextMarshaler.
func (t savedTime) MarshalText() ([]byte, error) {
	return Stamp(t).Time().AppendFormat(nil, time.RFC3339Nano), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *savedTime) UnmarshalText(b []byte) error {
	v, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return err
	}
	*t = savedTime(stampOf(v))
	return nil
}

// eventsRecord is what the probes saw of a QP (qpEvents).
type eventsRecord struct {
	ErrAt         savedTime    `json:"err_at,omitzero"`
	LastWQEAt     savedTime    `json:"last_wqe_at,omitzero"`
	LastWQELatest savedTime    `json:"last_wqe_latest,omitzero"`
	LastWQECount  int32        `json:"last_wqe_count,omitzero"`
	DestroyedAt   savedTime    `json:"destroyed_at,omitzero"`
	Drain         *drainRecord `json:"drain,omitzero"`
}

// drainRecord is what the probes saw of a QP's drains (drainState).
type drainRecord struct {
	Since  time.Time `json:"since,omitzero"`
	Func   string    `json:"func,omitzero"`
	Depth  int       `json:"depth,omitzero"`
	TookNS int64     `json:"took_ns,omitzero"`
	Ended  time.Time `json:"ended,omitzero"`
	Bound  bool      `json:"bound,omitzero"`
}

type endRecord struct {
	Devices int `json:"devices"`
	Owners  int `json:"owners"`
	Sites   int `json:"sites,omitzero"`
	QPs     int `json:"qps"`
}

// Restored counts what became of the QP histories a watcher restored.
type Restored struct {
	// QPs is how many were restored (live QPs, and destroyed ones the
	// destroy rules may still report).
	QPs int
	// Kept are those that went on: listed again by their device's first
	// scan as the same QP (or taken up by a probe event before it), and
	// the destroyed ones.
	Kept int
	// New are those whose number the first scan listed for another QP.
	New int
	// Gone are those not listed again (destroyed while no one watched), or
	// whose device was not listed, or was registered again.
	Gone int
	// Waiting are those whose device has not been scanned yet.
	Waiting int
}

// restoredDevice is a device Restore read, and its QP histories (by LQPN)
// waiting for the device's first scan.
type restoredDevice struct {
	dev deviceState // name, nodeGUID, emitsLastWQE and samples
	// index is the device's index when it was saved until a listing found
	// the device (confirmed), then its index now: a probe event finds its
	// QPs there.
	index     uint32
	confirmed bool
	qps       map[uint32]*History
}

// same says whether the device listed as d is the one saved: the same
// node GUID and protocol (where both sides know it: soft RoCE and soft
// iWARP on one netdev share the netdev's GUID, and an rxe0 listed after a
// saved siw0 went is not it), or where the GUID was not known, the same
// name.
func (rd *restoredDevice) same(d rdmanl.Device) bool {
	if rd.dev.nodeGUID != 0 {
		return rd.dev.nodeGUID == d.NodeGUID && (rd.dev.protocol == "" || d.Protocol == "" || rd.dev.protocol == d.Protocol)
	}
	return rd.dev.name == d.Name
}

// find is the listed device rd is: among those that are the same (same),
// the one with its name, else the first.
func (rd *restoredDevice) find(devs []rdmanl.Device) int {
	found := -1
	for i, d := range devs {
		if rd.same(d) {
			if d.Name == rd.dev.name {
				return i
			}
			if found < 0 {
				found = i
			}
		}
	}
	return found
}

// qpTypes and qpStates read the names qpRecord has back, made once.
var qpTypes, qpStates = func() (types map[string]rdmanl.QPType, states map[string]rdmanl.QPState) {
	types, states = map[string]rdmanl.QPType{}, map[string]rdmanl.QPState{}
	for v := range 256 {
		types[rdmanl.QPType(v).String()] = rdmanl.QPType(v)
		states[rdmanl.QPState(v).String()] = rdmanl.QPState(v)
	}
	return types, states
}()

// saved says whether Save keeps h: a live QP, or a destroyed one the
// destroy rules may still report.
func (w *Watcher) saved(h *History, now time.Time) bool {
	if !h.Destroyed {
		return true
	}
	return h.keep && !h.DeviceGone && now.Sub(h.seen().DestroyedAt.Time()) <= w.retention(h)
}

// Save hands put the watcher's state as records, in the order Restore
// reads them (put is typically a json.Encoder's Encode, and puts each
// value on a line of its own): when it began observing, its devices with
// what the rules learned of them (whether a LAST_WQE_REACHED was seen on
// them, their QP counts), and the histories of its live QPs, and of the
// destroyed QPs that the destroy rules may still report, with all they
// hold (states and since when, owners, what the probes saw, the notes
// evidence is made of). Histories restored and not yet taken up are saved
// again. It returns the number of QP histories saved, or put's first
// error. It is SaveSnapshot then the snapshot's Put.
func (w *Watcher) Save(put func(record any) error) (qps int, err error) {
	return w.SaveSnapshot().Put(put)
}

// SaveSnapshot is a copy of what Save writes, as it is now, that Put
// writes later without the watcher: a caller that serializes the watcher
// with a lock holds it while the values are copied (some 20 ms at 60,000
// QPs: BenchmarkSaveSnapshot), not while they are sorted, made records
// and encoded (ten times that: BenchmarkSave). It holds values only,
// compactly: a QP takes 64 bytes, each of its notes 16, what the probes
// saw of it (most QPs have nothing) 144, and while the copy is made 16
// more; its names, owner, creation site and the texts of its notes are
// interned, never change, and are shared with the watcher.
type SaveSnapshot struct {
	started time.Time
	devices []savedDevice // the device with id i+1 at i
	// qps are the live QPs' in runs[0] and then each restored device's,
	// until the next run's start; Put sorts each run (by device and QPN).
	qps    []savedQP
	runs   []int
	notes  []note
	events []savedEvents
	sorted bool
}

// savedDevice is a device a SaveSnapshot holds.
type savedDevice struct {
	index        uint32
	name         string
	nodeGUID     rdmanl.GUID
	protocol     string
	emitsLastWQE bool
	samples      []sample
}

// savedQP is a QP's history as a SaveSnapshot holds it (64 bytes).
type savedQP struct {
	firstSeen, stateSince Stamp
	names                 unique.Handle[qpNames]
	qpn, pid, pdn, srqn   uint32
	notes                 uint32 // its first note in SaveSnapshot.notes
	events                uint32 // 1 + its index in SaveSnapshot.events; 0: none seen
	dev                   uint32 // its device's id
	nNotes                uint8
	typ                   rdmanl.QPType
	state                 rdmanl.QPState
	stateSource           source
	stateKnown, everRTS, onSRQ, inScan, destroyed, destroySeen,
	errBeforeDestroy, lastWQEBeforeDestroy bool
}

// savedEvents is what the probes saw of a QP, its drains copied: the
// watcher changes its own in place.
type savedEvents struct {
	qpEvents // drain nil
	drain    drainState
	drained  bool // drain holds the QP's drains
}

// SaveSnapshot copies what Save writes (see the type).
func (w *Watcher) SaveSnapshot() *SaveSnapshot {
	now := w.now()
	s := &SaveSnapshot{started: w.start.UTC()}
	addDevice := func(d *deviceState, index uint32) uint32 {
		s.devices = append(s.devices, savedDevice{index: index, name: d.name, nodeGUID: d.nodeGUID, protocol: d.protocol,
			emitsLastWQE: d.emitsLastWQE, samples: slices.Clone(d.samples)})
		return uint32(len(s.devices))
	}
	devIDs := map[uint32]uint32{} // by index
	for _, index := range slices.Sorted(maps.Keys(w.devs)) {
		if d := w.devs[index]; !d.gone {
			devIDs[index] = addDevice(d, index)
		}
	}
	pending := make([]uint32, len(w.restoring)) // the device ids of what waits
	for i, rd := range w.restoring {
		if id, ok := devIDs[rd.index]; ok && rd.confirmed {
			pending[i] = id
			continue
		}
		pending[i] = addDevice(&rd.dev, rd.index)
	}
	// The histories first, then their values in slices of the size
	// they take: append's growth would copy them over and over.
	type saving struct {
		h   *History
		dev uint32
	}
	hs := make([]saving, 0, len(w.qps))
	runs := make([]int, 0, 1+len(w.restoring))
	notes, events := 0, 0
	add := func(h *History, dev uint32) {
		if w.saved(h, now) {
			hs = append(hs, saving{h, dev})
			notes += len(h.notes)
			if h.events != nil {
				events++
			}
		}
	}
	for k, h := range w.qps {
		if id, ok := devIDs[k.dev]; ok {
			add(h, id)
		}
	}
	runs = append(runs, len(hs))
	for i, rd := range w.restoring {
		for _, h := range rd.qps {
			add(h, pending[i])
		}
		runs = append(runs, len(hs))
	}
	s.qps, s.notes, s.events, s.runs = make([]savedQP, 0, len(hs)), make([]note, 0, notes), make([]savedEvents, 0, events), runs
	for _, h := range hs {
		s.addQP(h.h, h.dev)
	}
	return s
}

// addQP copies h, of the device with id dev.
func (s *SaveSnapshot) addQP(h *History, dev uint32) {
	q := savedQP{
		firstSeen: h.FirstSeen, stateSince: h.StateSince, names: h.names,
		qpn: h.QPN, pid: h.pid, pdn: h.pdn, srqn: h.SRQN, dev: dev,
		notes: uint32(len(s.notes)), nNotes: uint8(len(h.notes)), // at most maxEvidence
		typ: h.Type, state: h.State, stateSource: h.stateSource,
		stateKnown: h.StateKnown, everRTS: h.EverRTS, onSRQ: h.OnSRQ, inScan: h.inScan,
		destroyed: h.Destroyed, destroySeen: h.DestroySeen,
		errBeforeDestroy: h.ErrBeforeDestroy, lastWQEBeforeDestroy: h.LastWQEBeforeDestroy,
	}
	s.notes = append(s.notes, h.notes...)
	if e := h.events; e != nil {
		se := savedEvents{qpEvents: *e}
		se.qpEvents.drain = nil
		if e.drain != nil {
			se.drain, se.drained = *e.drain, true
		}
		s.events = append(s.events, se)
		q.events = uint32(len(s.events))
	}
	s.qps = append(s.qps, q)
}

// QPs is the number of QP histories the snapshot holds.
func (s *SaveSnapshot) QPs() int { return len(s.qps) }

// Put hands put the snapshot's records, as Save does. It may be called
// again, and from another goroutine than the one that made the snapshot.
func (s *SaveSnapshot) Put(put func(record any) error) (qps int, err error) {
	if !s.sorted {
		from := 0
		for _, to := range s.runs {
			slices.SortFunc(s.qps[from:to], func(a, b savedQP) int {
				return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.qpn, b.qpn))
			})
			from = to
		}
		s.sorted = true
	}
	if err := put(record{Watcher: &watcherRecord{Started: s.started}}); err != nil {
		return 0, err
	}
	end := endRecord{}
	for i := range s.devices {
		d := &s.devices[i]
		r := deviceRecord{ID: i + 1, Index: d.index, Name: d.name, NodeGUID: d.nodeGUID, Protocol: d.protocol, EmitsLastWQE: d.emitsLastWQE}
		for _, smp := range d.samples {
			r.Samples = append(r.Samples, sampleRecord{Time: smp.t.UTC(), QPs: smp.n})
		}
		end.Devices++
		if err := put(record{Device: &r}); err != nil {
			return 0, err
		}
	}
	ownerIDs := map[Owner]int{}
	siteIDs := map[siteHandle]int{}
	var q qpRecord // one at a time: put does not keep it
	var notes []noteRecord
	var events eventsRecord
	var drain drainRecord
	for i := range s.qps {
		h := &s.qps[i]
		var names qpNames
		if h.names != (unique.Handle[qpNames]{}) {
			names = h.names.Value()
		}
		oid, ok := ownerIDs[names.owner]
		if !ok && names.owner != (Owner{}) {
			end.Owners++
			oid, ownerIDs[names.owner] = end.Owners, end.Owners
			if err := put(record{Owner: &ownerRecord{ID: oid, Owner: names.owner}}); err != nil {
				return 0, err
			}
		}
		sid, ok := siteIDs[names.site]
		if !ok && names.site != (siteHandle{}) {
			end.Sites++
			sid, siteIDs[names.site] = end.Sites, end.Sites
			st := siteOf(names.site)
			r := siteRecord{ID: sid, Call: st.Call, Via: st.Via, File: st.File, BuildID: st.BuildID, Offset: st.Offset, Stack: st.Stack}
			if err := put(record{Site: &r}); err != nil {
				return 0, err
			}
		}
		notes = notes[:0]
		for _, n := range s.notes[h.notes : h.notes+uint32(h.nNotes)] {
			what := n.what.Value()
			notes = append(notes, noteRecord{Time: savedTime(n.at), Source: what.source.String(), What: what.text})
		}
		q = qpRecord{
			Device: int(h.dev), LQPN: h.qpn, Type: h.typ.String(), PID: h.pid, Owner: oid, Site: sid, PDN: h.pdn,
			OnSRQ: h.onSRQ, SRQN: h.srqn, FirstSeen: savedTime(h.firstSeen),
			State: h.state.String(), StateKnown: h.stateKnown, StateSince: savedTime(h.stateSince), StateSource: h.stateSource.String(),
			EverRTS: h.everRTS, InScan: h.inScan, Destroyed: h.destroyed, DestroySeen: h.destroySeen,
			ErrBeforeDestroy: h.errBeforeDestroy, LastWQEBeforeDestroy: h.lastWQEBeforeDestroy, Notes: notes,
		}
		if h.events > 0 {
			e := &s.events[h.events-1]
			var d *drainState
			if e.drained {
				d = &e.drain
			}
			events = eventsRecord{ErrAt: savedTime(e.ErrAt), LastWQEAt: savedTime(e.LastWQEAt), LastWQELatest: savedTime(e.lastWQELatest),
				LastWQECount: e.LastWQECount, DestroyedAt: savedTime(e.DestroyedAt), Drain: drainOf(d, &drain)}
			q.Events = &events
		}
		end.QPs++
		if err := put(record{QP: &q}); err != nil {
			return 0, err
		}
	}
	return end.QPs, put(record{End: &end})
}

// drainOf is the record of a QP's drains in r (nil: none seen).
func drainOf(d *drainState, r *drainRecord) *drainRecord {
	if d == nil {
		return nil
	}
	*r = drainRecord{Since: d.DrainSince, Func: d.DrainFunc, Depth: d.drainDepth,
		TookNS: int64(d.DrainTook), Ended: d.DrainEnded, Bound: d.DrainBound}
	return r
}

// errRestoreInto is Restore's refusal of a watcher that has observed
// something already.
var errRestoreInto = errors.New("leakwatch: restore into a watcher that has histories")

// Restore reads through get (typically a json.Decoder's Decode), one value
// at a time, the records of SavedVersion that Save wrote, up to and with
// the end's, after which get must say io.EOF, and returns the number of
// QP histories read. The watcher, one that has observed nothing yet, then
// begins observing when the saved one did (when that was earlier), and
// holds the histories until its devices are listed (Listed) and scanned: a
// QP that its device's first scan lists again, the device registered as
// it was, as the same QP (its LQPN, type, owner thread and kern_name, SRQ
// and PDN) goes on from its history, its age and evidence included, with
// what that scan lists winning over what was saved; a QP that scan does
// not list is gone. A probe event about a restored QP before that scan
// takes the history up, and the scan then checks it. Records that do not
// follow each other as Save wrote them (a record of no kind or of two, a
// device or owner a QP names and no record defined, a QP saved twice, an
// unknown name, a count the end's does not match, anything after the
// end's), or get's first error (io.EOF before the end's), are an error,
// and the watcher is left as it was.
func (w *Watcher) Restore(get func(record any) error) (qps int, err error) {
	if len(w.qps) > 0 || len(w.restoring) > 0 {
		return 0, errRestoreInto
	}
	n := 0 // records read
	fail := func(format string, a ...any) (int, error) {
		return 0, fmt.Errorf("leakwatch: restore: record %d: %w", n, fmt.Errorf(format, a...))
	}
	var rec record
	next := func() error {
		n++
		rec = record{} // the decoder fills in, it does not clear
		return get(&rec)
	}
	if err := next(); err != nil {
		return fail("%w", err)
	}
	if rec.Watcher == nil || rec.Device != nil || rec.Owner != nil || rec.Site != nil || rec.QP != nil || rec.End != nil {
		return fail("want the watcher's record first")
	}
	started := rec.Watcher.Started
	devs := map[int]*restoredDevice{}
	var order []*restoredDevice
	owners := map[int]Owner{0: {}}
	sites := map[int]siteHandle{0: {}}
	count := endRecord{}
	for {
		if err := next(); err != nil {
			return fail("%w", err)
		}
		kinds := 0
		for _, set := range []bool{rec.Watcher != nil, rec.Device != nil, rec.Owner != nil, rec.Site != nil, rec.QP != nil, rec.End != nil} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			return fail("want one record of a device, an owner, a site, a QP or the end, got %d", kinds)
		}
		switch {
		case rec.Watcher != nil:
			return fail("a second watcher's record")
		case rec.Device != nil:
			d := rec.Device
			if _, dup := devs[d.ID]; dup || d.ID == 0 {
				return fail("device id %d given twice, or 0", d.ID)
			}
			rd := &restoredDevice{index: d.Index, qps: map[uint32]*History{},
				dev: deviceState{name: d.Name, nodeGUID: d.NodeGUID, protocol: d.Protocol, emitsLastWQE: d.EmitsLastWQE}}
			for _, s := range d.Samples[max(0, len(d.Samples)-maxSamples):] {
				rd.dev.samples = append(rd.dev.samples, sample{s.Time, s.QPs})
			}
			devs[d.ID] = rd
			order = append(order, rd)
			count.Devices++
		case rec.Owner != nil:
			o := rec.Owner
			if _, dup := owners[o.ID]; dup {
				return fail("owner id %d given twice, or 0", o.ID)
			}
			o.PID = 0
			owners[o.ID] = o.Owner
			count.Owners++
		case rec.Site != nil:
			r := rec.Site
			if _, dup := sites[r.ID]; dup {
				return fail("site id %d given twice, or 0", r.ID)
			}
			s := Site{Call: r.Call, Via: r.Via, File: r.File, BuildID: r.BuildID, Offset: r.Offset, Stack: r.Stack}
			if s.IsZero() || slices.ContainsFunc(s.Stack, func(f string) bool { return f == "" || strings.Contains(f, "\n") }) {
				return fail("site %d names no site, or has an empty or multi-line frame", r.ID)
			}
			sites[r.ID] = s.intern()
			count.Sites++
		case rec.QP != nil:
			q := rec.QP
			rd, ok := devs[q.Device]
			if !ok {
				return fail("QP %d names device %d, which no record defined", q.LQPN, q.Device)
			}
			if _, dup := rd.qps[q.LQPN]; dup {
				return fail("QP %d of device %d given twice", q.LQPN, q.Device)
			}
			h, err := historyOf(q, rd, owners, sites)
			if err != nil {
				return fail("QP %d: %w", q.LQPN, err)
			}
			rd.qps[q.LQPN] = h
			count.QPs++
		case rec.End != nil:
			if *rec.End != count {
				return fail("the end counts %+v, the records before it %+v", *rec.End, count)
			}
			if err := get(&rec); !errors.Is(err, io.EOF) {
				n++
				return fail("want nothing after the end's record, got %v", cmp.Or(err, errors.New("a record")))
			}
			if !started.IsZero() && started.Before(w.start) {
				w.start = started
			}
			w.restoring = order
			w.restoredQPs = Restored{QPs: count.QPs, Waiting: count.QPs}
			w.counts = nil // counted again from what it holds now
			return count.QPs, nil
		}
	}
}

// historyOf is the history a QP's record holds, on the device rd, its
// owner one of owners, its creation site one of sites.
func historyOf(q *qpRecord, rd *restoredDevice, owners map[int]Owner, sites map[int]siteHandle) (*History, error) {
	o, ok := owners[q.Owner]
	if !ok {
		return nil, fmt.Errorf("owner %d, which no record defined", q.Owner)
	}
	site, ok := sites[q.Site]
	if !ok {
		return nil, fmt.Errorf("site %d, which no record defined", q.Site)
	}
	typ, typeOK := qpTypes[q.Type]
	state, stateOK := qpStates[q.State]
	if !typeOK || !stateOK {
		return nil, fmt.Errorf("type %q or state %q unknown", q.Type, q.State)
	}
	src, ok := sourceNamed(q.StateSource)
	if !ok {
		return nil, fmt.Errorf("state source %q unknown", q.StateSource)
	}
	if len(q.Notes) > maxEvidence {
		return nil, fmt.Errorf("%d notes, more than the %d a history keeps", len(q.Notes), maxEvidence)
	}
	h := &History{historyFields: historyFields{
		DevIndex: rd.index, QPN: q.LQPN, pid: q.PID, pdn: q.PDN, OnSRQ: q.OnSRQ, SRQN: q.SRQN,
		FirstSeen: Stamp(q.FirstSeen), Type: typ, State: state, StateKnown: q.StateKnown,
		StateSince: Stamp(q.StateSince), stateSource: src, EverRTS: q.EverRTS, inScan: q.InScan,
		Destroyed: q.Destroyed, DestroySeen: q.DestroySeen, ErrBeforeDestroy: q.ErrBeforeDestroy,
		LastWQEBeforeDestroy: q.LastWQEBeforeDestroy,
		keep:                 q.Destroyed, // only those the destroy rules may report are saved
	}}
	h.setNames(qpNames{device: rd.dev.name, owner: o, site: site})
	if e := q.Events; e != nil {
		r := h.record()
		r.ErrAt, r.LastWQEAt, r.lastWQELatest = Stamp(e.ErrAt), Stamp(e.LastWQEAt), Stamp(e.LastWQELatest)
		r.LastWQECount, r.DestroyedAt = e.LastWQECount, Stamp(e.DestroyedAt)
		if d := e.Drain; d != nil {
			r.drain = &drainState{DrainSince: d.Since, DrainFunc: d.Func, drainDepth: d.Depth,
				DrainTook: time.Duration(d.TookNS), DrainEnded: d.Ended, DrainBound: d.Bound}
		}
	}
	if len(q.Notes) > 0 {
		h.notes = make([]note, len(q.Notes))
		for i, e := range q.Notes {
			src, ok := sourceNamed(e.Source)
			if !ok {
				return nil, fmt.Errorf("note source %q unknown", e.Source)
			}
			h.notes[i] = note{at: Stamp(e.Time), what: unique.Make(noteWhat{e.What, src})}
		}
	}
	return h, nil
}

// sourceNamed is the source s names (source.String's).
func sourceNamed(s string) (source, bool) {
	for _, src := range []source{sourceNone, sourceScan, sourceProbe} {
		if src.String() == s {
			return src, true
		}
	}
	return sourceNone, false
}

// Listed says which devices the host has now (a listing of them). The
// watcher learns their node GUIDs, and finds the devices of the histories
// it restored among them: by node GUID, or where the GUID was not known
// by name, at whatever index and under whatever name they have now. What
// was restored of such a device joins what the watcher knows of it (a
// LAST_WQE_REACHED seen on it, its QP counts), and its destroyed QPs are
// tracked again; its live QPs wait for its first scan, unless the device
// is at another index: registered again, it lost them. What was restored
// of a device not listed is dropped: it went away with its QPs.
func (w *Watcher) Listed(devs []rdmanl.Device) {
	for _, d := range devs {
		if dev, ok := w.devs[d.Index]; ok {
			dev.nodeGUID, dev.protocol = d.NodeGUID, d.Protocol
		}
	}
	for _, rd := range slices.Clone(w.restoring) {
		i := rd.find(devs)
		if i < 0 {
			w.dropRestored(rd)
			continue
		}
		if !rd.confirmed {
			w.confirmDevice(rd, devs[i])
		}
		rd.index = devs[i].Index
	}
}

// confirmDevice takes up what was restored of a device, listed as d. A
// device listed at another index than it had was registered again (the
// kernel gives each registration an index of its own, as after a reset):
// its QPs went with the registration they were on.
func (w *Watcher) confirmDevice(rd *restoredDevice, d rdmanl.Device) {
	rd.confirmed = true
	dev := w.device(d.Index, d.Name)
	dev.nodeGUID, dev.protocol = d.NodeGUID, d.Protocol
	dev.emitsLastWQE = dev.emitsLastWQE || rd.dev.emitsLastWQE
	dev.samples = append(rd.dev.samples, dev.samples...)
	dev.samples = dev.samples[max(0, len(dev.samples)-maxSamples):]
	registered := rd.index != d.Index
	for qpn, h := range rd.qps {
		h.DevIndex = d.Index
		n := h.qpNames()
		n.device = dev.name
		h.setNames(n)
		if !h.Destroyed {
			if registered {
				delete(rd.qps, qpn)
				w.restoredQPs.Waiting--
				w.restoredQPs.Gone++
			}
			continue
		}
		delete(rd.qps, qpn)
		w.restoredQPs.Waiting--
		k := qpKey{d.Index, qpn}
		if w.qps[k] == nil {
			w.put(k, h)
			w.restoredQPs.Kept++
		} else {
			w.restoredQPs.New++
		}
	}
}

// restoredAt is the restored device a listing found at index, nil when
// none is.
func (w *Watcher) restoredAt(index uint32) *restoredDevice {
	for _, rd := range w.restoring {
		if rd.confirmed && rd.index == index {
			return rd
		}
	}
	return nil
}

// dropRestored forgets what was restored of a device: its QPs that still
// wait are gone.
func (w *Watcher) dropRestored(rd *restoredDevice) {
	w.restoredQPs.Gone += len(rd.qps)
	w.restoredQPs.Waiting -= len(rd.qps)
	w.restoring = slices.DeleteFunc(w.restoring, func(r *restoredDevice) bool { return r == rd })
}

// takeRestored takes up, for a probe event about the QP k of type typ,
// its restored history, tracked again from now on: a listing found its
// device at k's index, or before one, the device had that index when
// saved. nil when none waits there, or the QP is of another type: another
// QP took the number, and the restored history is dropped (a Save must not
// write both).
func (w *Watcher) takeRestored(k qpKey, typ rdmanl.QPType) *History {
	for _, rd := range w.restoring {
		if rd.index != k.dev {
			continue
		}
		h := rd.qps[k.qpn]
		if h == nil || h.Destroyed {
			return nil
		}
		delete(rd.qps, k.qpn)
		if h.Type != typ {
			w.restoredQPs.Waiting--
			w.restoredQPs.New++
			return nil
		}
		h.DevIndex, h.restored = k.dev, true
		w.put(k, h)
		w.restoredQPs.Waiting--
		w.restoredQPs.Kept++
		return h
	}
	return nil
}

// forgetRestored drops the restored history of the QP k: a probe saw
// another QP created with its number.
func (w *Watcher) forgetRestored(k qpKey) {
	for _, rd := range w.restoring {
		if h := rd.qps[k.qpn]; rd.index == k.dev && h != nil {
			delete(rd.qps, k.qpn)
			w.restoredQPs.Waiting--
			w.restoredQPs.New++
			return
		}
	}
}

// claimRestored takes up the restored history of the QP a device's first
// scan lists as qp, when it is the same QP and no QP since took its
// number, and returns the history the scan goes on with: that one, or h.
func (w *Watcher) claimRestored(rd *restoredDevice, k qpKey, h *History, qp rdmanl.QP) *History {
	r := rd.qps[k.qpn]
	if r == nil {
		return h
	}
	delete(rd.qps, k.qpn)
	w.restoredQPs.Waiting--
	if (h != nil && !h.Destroyed) || !r.sameQP(qp) {
		w.restoredQPs.New++
		return h
	}
	r.DevIndex = k.dev
	w.put(k, r)
	w.restoredQPs.Kept++
	return r
}

// confirmRestored checks a restored history that a probe event took up
// against the first scan that lists its QP as qp: the same QP goes on,
// another that reuses the number starts anew (nil).
func (w *Watcher) confirmRestored(k qpKey, h *History, qp rdmanl.QP) *History {
	h.restored = false
	if h.sameQP(qp) {
		return h
	}
	w.restoredQPs.Kept--
	w.restoredQPs.New++
	w.drop(k)
	return nil
}

// sameQP says whether qp, as a scan lists it at h's number, is the QP h is
// the history of: the same type, creating thread (or none now: the
// kernel stops naming a thread that exited), kern_name, SRQ and, when a
// scan listed h before, protection domain. A QP that differs in any reuses
// the number.
func (h *History) sameQP(qp rdmanl.QP) bool {
	return h.Type == qp.Type &&
		(h.pid == qp.Owner.PID || qp.Owner.PID == 0 && h.qpNames().owner.KernName == "") &&
		h.qpNames().owner.KernName == qp.Owner.KernName &&
		h.OnSRQ == qp.OnSRQ && (!h.OnSRQ || h.SRQN == qp.SRQN) &&
		(!h.inScan || h.pdn == qp.PDN)
}

// Restored counts what became of the histories Restore read.
func (w *Watcher) Restored() Restored { return w.restoredQPs }
