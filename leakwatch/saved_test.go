package leakwatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// save is what w.Save writes as JSON lines.
func save(t testing.TB, w *Watcher) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := w.Save(json.NewEncoder(&b).Encode); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// restore reads saved JSON lines into w, strictly, as the agent does.
func restore(w *Watcher, saved []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(saved))
	dec.DisallowUnknownFields()
	return w.Restore(dec.Decode)
}

func withPDN(q rdmanl.QP, pdn uint32) rdmanl.QP { q.PDN = pdn; return q }

// ages maps each finding's QP to its rule and age.
func ages(r Report) map[uint32]string {
	out := map[uint32]string{}
	for _, f := range r.Findings {
		out[f.QPN] = f.Rule + " " + f.Device + " " + time.Duration(f.AgeSeconds*float64(time.Second)).String()
	}
	return out
}

// A restarted agent goes on from the saved histories: the QPs its first
// dump lists again as the same QP keep their ages and evidence, under the
// device's name now (found by node GUID); a QP whose number another QP
// took (another thread, another PD) is new; a QP not listed is gone; a
// destroyed SRQ QP the destroy rules report stays reported; and what the
// device taught the watcher (LAST_WQE_REACHED seen, QP counts) is kept.
// A device registered again meanwhile (another index) lost its QPs.
func TestRestoreReconciles(t *testing.T) {
	dev := rdmanl.Device{Index: 0, Name: "rxe0", NodeGUID: 0x0002c90300a1b2c3}
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Listed([]rdmanl.Device{dev})
	a.Scan(dump(c.at(0), dev,
		withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1),
		withPDN(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 1),
		withPDN(qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43), 2),
		withPDN(qp(20, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 1),
		withPDN(qp(22, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1)))
	a.Event(lastWQE(c.at(time.Second), dev, 18))
	a.Event(create(c.at(2*time.Second), dev, 30, true))
	a.Event(modify(c.at(3*time.Second), dev, 30, rdmanl.QPStateRTS))
	a.Event(ev(c.at(4*time.Second), EventQPDestroyed, dev, 30))
	c.at(time.Minute)
	if got, want := ages(a.Evaluate(Query{MinAge: 5 * time.Second})), map[uint32]string{
		17: "never-connected-qp rxe0 1m0s", 18: "stale-error-qp rxe0 1m0s", 19: "stale-error-qp rxe0 1m0s",
		20: "stale-error-qp rxe0 1m0s", 22: "never-connected-qp rxe0 1m0s", 30: "srq-destroy-without-last-wqe rxe0 56s",
	}; !cmp.Equal(got, want) {
		t.Fatalf("before the restart: %v", got)
	}
	saved := save(t, a)

	// The agent restarts a minute later; the device was renamed
	// meanwhile.
	b := New(Config{Probes: true}, c.now)
	c.at(2 * time.Minute)
	if n, err := restore(b, saved); n != 6 || err != nil {
		t.Fatalf("Restore: %d QPs, %v", n, err)
	}
	moved := rdmanl.Device{Index: dev.Index, Name: "rxe1", NodeGUID: dev.NodeGUID}
	b.Listed([]rdmanl.Device{moved})
	b.Scan(dump(c.at(2*time.Minute), moved,
		withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1),
		withPDN(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), 1),
		withPDN(qp(19, rdmanl.QPTypeRC, rdmanl.QPStateErr, 44), 2),  // another thread's
		withPDN(qp(22, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 2), // in another PD
		withPDN(qp(23, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1)))
	if diff := cmp.Diff(Restored{QPs: 6, Kept: 3, New: 2, Gone: 1}, b.Restored()); diff != "" {
		t.Errorf("Restored (-want +got):\n%s", diff)
	}
	c.at(3 * time.Minute)
	rep := b.Evaluate(Query{MinAge: 5 * time.Second})
	if diff := cmp.Diff(map[uint32]string{
		17: "never-connected-qp rxe1 3m0s", 18: "stale-error-qp rxe1 3m0s", 19: "stale-error-qp rxe1 1m0s",
		22: "never-connected-qp rxe1 1m0s", 23: "never-connected-qp rxe1 1m0s", 30: "srq-destroy-without-last-wqe rxe1 2m56s",
	}, ages(rep)); diff != "" {
		t.Errorf("after the restart (-want +got):\n%s", diff)
	}
	if rep.ObservedSeconds != 180 || !b.Started().Equal(t0) {
		t.Errorf("observed %gs since %v, want 180s since the saved watcher's start", rep.ObservedSeconds, b.Started())
	}
	for _, f := range rep.Findings {
		if f.QPN == 17 && (len(f.Evidence) == 0 || f.Evidence[0].What != "first seen" || !f.Evidence[0].Time.Equal(t0)) {
			t.Errorf("QP 17's evidence %+v, want it from its first scan at %v", f.Evidence, t0)
		}
	}
	d := b.devs[moved.Index]
	if d == nil || !d.emitsLastWQE || len(d.samples) != 2 || d.nodeGUID != dev.NodeGUID {
		t.Errorf("device state %+v, want LAST_WQE_REACHED seen and both QP counts", d)
	}
	if len(b.restoring) != 0 {
		t.Errorf("%d restored devices still wait after their scan", len(b.restoring))
	}

	// Registered again (a reset), the device has none of its QPs.
	r := New(Config{Probes: true}, c.now)
	if _, err := restore(r, saved); err != nil {
		t.Fatal(err)
	}
	again := rdmanl.Device{Index: 7, Name: "rxe0", NodeGUID: dev.NodeGUID}
	r.Listed([]rdmanl.Device{again})
	r.Scan(dump(c.at(3*time.Minute), again, withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1)))
	if diff := cmp.Diff(Restored{QPs: 6, Kept: 1, Gone: 5}, r.Restored()); diff != "" {
		t.Errorf("Restored after a re-registration (-want +got):\n%s", diff)
	}
	c.at(4 * time.Minute)
	if diff := cmp.Diff(map[uint32]string{17: "never-connected-qp rxe0 1m0s", 30: "srq-destroy-without-last-wqe rxe0 3m56s"},
		ages(r.Evaluate(Query{MinAge: 5 * time.Second}))); diff != "" {
		t.Errorf("after a re-registration (-want +got):\n%s", diff)
	}
	if d := r.devs[again.Index]; d == nil || !d.emitsLastWQE {
		t.Errorf("device state %+v, want LAST_WQE_REACHED seen", d)
	}
}

// What one watcher saves, another restores to the same evaluations, and
// saves again byte for byte: states and their sources, owners, SRQs,
// kernel QPs and their ULPs, the probes' errors, LAST_WQE_REACHED and
// drains, creation sites, and the destroyed QPs still reported.
func TestRestoreRoundTrip(t *testing.T) {
	dev := rdmanl.Device{Index: 2, Name: "rxe0", NodeGUID: 0x0002c90300a1b2c3}
	other := rdmanl.Device{Index: 5, Name: "siw0"} // no GUID: found by name
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Listed([]rdmanl.Device{dev, other})
	kernel := qp(40, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 0)
	kernel.Owner.KernName = "rdma_cm"
	s := dump(c.at(0), dev, withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1),
		onSRQ(withPDN(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 43), 2), 7), kernel)
	s.Devices[0].Owners[42] = Owner{TGID: 41, Comm: "app", Cgroup: "/system.slice/app.service", ContainerID: strings.Repeat("ab", 32)}
	s.Devices[0].ULPs = map[uint32]string{40: "nvmet_rdma"}
	a.Scan(s)
	a.Scan(dump(c.at(time.Second), other, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 43)))
	a.Event(modify(c.at(2*time.Second), dev, 18, rdmanl.QPStateErr))
	a.Event(Event{Kind: EventDrainStarted, Time: c.at(3 * time.Second), DevIndex: dev.Index, DevName: dev.Name, QPN: 18, QPType: rdmanl.QPTypeRC, Drain: "ib_drain_qp"})
	a.Event(lastWQE(c.at(4*time.Second), dev, 17))
	created := create(c.at(5*time.Second), dev, 50, true)
	created.Site = Site{Call: "app!connect_peer+0x4c", Via: "rdma_create_qp", File: "/usr/bin/app", BuildID: "3f0e", Offset: 0x1a2c}
	a.Event(created)
	a.Event(modify(c.at(6*time.Second), dev, 50, rdmanl.QPStateErr))
	for qpn := range uint32(2) { // two QPs of one kernel stack
		created = create(c.at(5*time.Second), dev, 60+qpn, false)
		created.KernOwner, created.PID, created.TID = "nvmet_rdma", 0, 0
		created.Site = Site{Stack: []string{"nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]", "0xffffffffc0f00000"}}
		a.Event(created)
	}
	a.Event(Event{Kind: EventDrainStarted, Time: c.at(6 * time.Second), DevIndex: dev.Index, DevName: dev.Name, QPN: 50, QPType: rdmanl.QPTypeRC, Drain: "ib_drain_qp"})
	a.Event(Event{Kind: EventDrainEnded, Time: c.at(9 * time.Second), DevIndex: dev.Index, DevName: dev.Name, QPN: 50, QPType: rdmanl.QPTypeRC, Drain: "ib_drain_qp", Duration: 3 * time.Second})
	a.Event(ev(c.at(10*time.Second), EventQPDestroyed, dev, 50))
	a.CountQPs(dev.Index, dev.Name, c.at(11*time.Second), 4)
	c.at(time.Minute)
	saved := save(t, a)

	b := New(Config{Probes: true}, c.now)
	if _, err := restore(b, saved); err != nil {
		t.Fatal(err)
	}
	kernel60, kernel61 := qp(60, rdmanl.QPTypeRC, rdmanl.QPStateReset, 0), qp(61, rdmanl.QPTypeRC, rdmanl.QPStateReset, 0)
	kernel60.Owner.KernName, kernel61.Owner.KernName = "nvmet_rdma", "nvmet_rdma"
	last := dump(c.at(2*time.Minute), dev, withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1),
		onSRQ(withPDN(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43), 2), 7), kernel, kernel60, kernel61)
	last.Devices[0].Owners[42] = s.Devices[0].Owners[42]
	last.Devices[0].ULPs = s.Devices[0].ULPs
	for _, w := range []*Watcher{a, b} {
		w.Listed([]rdmanl.Device{dev, other})
		w.Scan(last)
		w.Scan(dump(c.at(2*time.Minute), other, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 43)))
	}
	c.at(3 * time.Minute)
	q := Query{MinAge: time.Second}
	if diff := cmp.Diff(a.Evaluate(q), b.Evaluate(q)); diff != "" {
		t.Errorf("the restored watcher's report (-saved +restored):\n%s", diff)
	}
	if len(a.Evaluate(q).Findings) < 4 {
		t.Errorf("findings %v: want the ones this test makes", ages(a.Evaluate(q)))
	}
	if again := save(t, b); !bytes.Equal(save(t, a), again) {
		t.Errorf("saved again:\n%s\nwant\n%s", again, save(t, a))
	}
	if n := strings.Count(string(saved), `{"site":`); n != 2 {
		t.Errorf("%d site records saved, want 2 (one a site):\n%s", n, saved)
	}
	for _, k := range []qpKey{{dev.Index, 50}, {dev.Index, 60}, {dev.Index, 61}} {
		if ha, hb := a.qps[k], b.qps[k]; ha == nil || hb == nil || ha.Site().IsZero() || !cmp.Equal(ha.Site(), hb.Site()) {
			t.Errorf("QP %d: site %+v restored as %+v", k.qpn, ha, hb)
		}
	}
}

// A SaveSnapshot writes the watcher as it was when it was taken, whatever
// the watcher did since: what the agent saves is one moment's, though it
// encodes it after it let the watcher go on. Since the snapshot: a QP
// moved to Error and its drain (begun before) ended, an SRQ QP got past
// its maxEvidence notes (which shifts them in place), a QP was created, a
// QP destroyed, the device's QP count sampled, a restored history taken
// up by a probe event.
func TestSaveSnapshotIsOneMoment(t *testing.T) {
	dev := rdmanl.Device{Index: 2, Name: "rxe0", NodeGUID: 0x0002c90300a1b2c3}
	other := rdmanl.Device{Index: 5, Name: "siw0"} // restored, not scanned yet
	c := &clock{t: t0}
	restored := New(Config{Probes: true}, c.now)
	restored.Listed([]rdmanl.Device{other})
	restored.Scan(dump(c.at(0), other, withPDN(qp(90, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), 1)))
	a := New(Config{Probes: true}, c.now)
	if _, err := restore(a, save(t, restored)); err != nil {
		t.Fatal(err)
	}
	a.Listed([]rdmanl.Device{dev, other})
	a.Scan(dump(c.at(time.Second), dev, withPDN(qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), 1),
		onSRQ(withPDN(qp(18, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), 1), 7)))
	a.Event(Event{Kind: EventDrainStarted, Time: c.at(2 * time.Second), DevIndex: dev.Index, DevName: dev.Name, QPN: 17, QPType: rdmanl.QPTypeRC, Drain: "ib_drain_qp"})
	for i := range maxEvidence {
		a.Event(modify(c.at(3*time.Second+time.Duration(i)*time.Millisecond), dev, 18, []rdmanl.QPState{rdmanl.QPStateErr, rdmanl.QPStateRTS}[i%2]))
	}
	a.CountQPs(dev.Index, dev.Name, c.at(4*time.Second), 3)
	want := save(t, a)
	snap := a.SaveSnapshot()

	a.Event(modify(c.at(5*time.Second), dev, 17, rdmanl.QPStateErr))
	a.Event(Event{Kind: EventDrainEnded, Time: c.at(6 * time.Second), DevIndex: dev.Index, DevName: dev.Name, QPN: 17, QPType: rdmanl.QPTypeRC, Drain: "ib_drain_qp", Duration: 4 * time.Second})
	for i := range 3 {
		a.Event(modify(c.at(7*time.Second+time.Duration(i)*time.Millisecond), dev, 18, []rdmanl.QPState{rdmanl.QPStateErr, rdmanl.QPStateRTS}[i%2]))
	}
	a.Event(create(c.at(8*time.Second), dev, 19, false))
	a.Event(ev(c.at(9*time.Second), EventQPDestroyed, dev, 18))
	a.Event(modify(c.at(10*time.Second), other, 90, rdmanl.QPStateRTR))
	a.CountQPs(dev.Index, dev.Name, c.at(11*time.Second), 4)
	if now := save(t, a); bytes.Equal(now, want) {
		t.Fatal("the watcher saves what it did before: this test changes nothing")
	}
	var b bytes.Buffer
	if n, err := snap.Put(json.NewEncoder(&b).Encode); n != 3 || n != snap.QPs() || err != nil {
		t.Errorf("Put: %d QPs (the snapshot says %d), %v; want 3", n, snap.QPs(), err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("the snapshot put (-as it was taken +put after changes):\n%s", diff)
	}
}

// A probe event about a restored QP before its device's first scan takes
// its history up, and the scan checks it; a QP the probes see created
// with a restored number is new.
func TestRestoredThroughEvents(t *testing.T) {
	dev := rdmanl.Device{Index: 0, Name: "rxe0", NodeGUID: 7}
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Scan(dump(c.at(0), dev, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42),
		qp(19, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
	saved := save(t, a)

	b := New(Config{Probes: true}, c.now)
	if _, err := restore(b, saved); err != nil {
		t.Fatal(err)
	}
	b.Event(modify(c.at(time.Minute), dev, 17, rdmanl.QPStateErr)) // before any listing
	b.Event(create(c.at(time.Minute), dev, 18, false))
	b.Event(modify(c.at(time.Minute), dev, 19, rdmanl.QPStateErr))
	b.Listed([]rdmanl.Device{dev})
	b.Scan(dump(c.at(2*time.Minute), dev, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42),
		qp(19, rdmanl.QPTypeUD, rdmanl.QPStateErr, 42))) // 19 is another QP after all
	if diff := cmp.Diff(Restored{QPs: 3, Kept: 1, New: 2}, b.Restored()); diff != "" {
		t.Errorf("Restored (-want +got):\n%s", diff)
	}
	for _, h := range b.histories() {
		first := map[uint32]time.Time{17: t0, 18: t0.Add(time.Minute), 19: t0.Add(2 * time.Minute)}[h.QPN]
		if !h.FirstSeen.Time().Equal(first) || h.restored {
			t.Errorf("QP %d first seen %v (restored %v), want %v", h.QPN, h.FirstSeen.Time(), h.restored, first)
		}
	}
}

// A probe event about a QP of another type than its restored history,
// before the device's first scan, is about another QP: the restored
// history is dropped, and the watcher saved then restores again.
func TestRestoredOtherType(t *testing.T) {
	dev := rdmanl.Device{Index: 0, Name: "rxe0", NodeGUID: 7}
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Scan(dump(c.at(0), dev, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
	b := New(Config{Probes: true}, c.now)
	if _, err := restore(b, save(t, a)); err != nil {
		t.Fatal(err)
	}
	b.Listed([]rdmanl.Device{dev})
	e := modify(c.at(time.Minute), dev, 17, rdmanl.QPStateErr)
	e.QPType = rdmanl.QPTypeUD
	b.Event(e)
	if diff := cmp.Diff(Restored{QPs: 1, New: 1}, b.Restored()); diff != "" {
		t.Errorf("Restored (-want +got):\n%s", diff)
	}
	if n, err := restore(New(Config{Probes: true}, c.now), save(t, b)); err != nil || n != 1 {
		t.Errorf("restoring what it saved: %d QPs, %v; want 1", n, err)
	}
}

// A listing finds restored devices by node GUID, or by name where the GUID
// was 0; what it does not list is gone, and its QPs with it.
func TestListedDropsWhatIsGone(t *testing.T) {
	byGUID := rdmanl.Device{Index: 0, Name: "mlx5_0", NodeGUID: 9}
	byName := rdmanl.Device{Index: 1, Name: "siw0"}
	c := &clock{t: t0}
	a := New(Config{}, c.now)
	a.Scan(scan(c.at(0), byGUID, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	a.Scan(scan(c.at(0), byName, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(4, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	saved := save(t, a)
	for _, tt := range []struct {
		name   string
		listed []rdmanl.Device
		want   Restored
	}{
		{"both, one renamed", []rdmanl.Device{{Index: 0, Name: "fab0", NodeGUID: 9}, byName}, Restored{QPs: 3, Waiting: 3}},
		{"one registered again", []rdmanl.Device{{Index: 4, Name: "mlx5_0", NodeGUID: 9}, byName}, Restored{QPs: 3, Gone: 1, Waiting: 2}},
		{"siw0 renamed: another device", []rdmanl.Device{byGUID, {Index: 1, Name: "siw1"}}, Restored{QPs: 3, Gone: 2, Waiting: 1}},
		{"another GUID", []rdmanl.Device{{Index: 0, Name: "mlx5_0", NodeGUID: 10}, byName}, Restored{QPs: 3, Gone: 1, Waiting: 2}},
		{"none", nil, Restored{QPs: 3, Gone: 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{}, c.now)
			if _, err := restore(b, saved); err != nil {
				t.Fatal(err)
			}
			b.Listed(tt.listed)
			if diff := cmp.Diff(tt.want, b.Restored()); diff != "" {
				t.Errorf("Restored (-want +got):\n%s", diff)
			}
		})
	}
}

// Records that are not what Save wrote are refused, and the watcher stays
// as it was: it starts empty.
func TestRestoreRefuses(t *testing.T) {
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(18, rdmanl.QPTypeRC, rdmanl.QPStateErr, 43)))
	lines := strings.SplitAfter(string(save(t, a)), "\n")
	lines = lines[:len(lines)-1] // "" after the last newline
	// The watcher, the device, then each owner before its first QP, and
	// the end.
	end, qp17 := len(lines)-1, 3
	if len(lines) != 7 || !strings.HasPrefix(lines[qp17], `{"qp":`) {
		t.Fatalf("line %d is not a QP's:\n%s", qp17, strings.Join(lines, ""))
	}
	replace := func(i int, line string) string {
		l := append([]string{}, lines...)
		l[i] = line
		return strings.Join(l, "")
	}
	tests := []struct {
		name, saved, want string
	}{
		{"empty", "", "record 1: EOF"},
		{"not JSON", "root:x:0:0:root:/root:/bin/bash\n", "record 1: invalid character"},
		{"cut at a line's end", strings.Join(lines[:end], ""), "EOF"},
		{"cut inside a line", strings.Join(lines, "")[:len(strings.Join(lines, ""))-10], "unexpected EOF"},
		{"no watcher first", strings.Join(lines[1:], ""), "want the watcher's record first"},
		{"a second watcher", replace(end, lines[0]), "a second watcher's record"},
		{"an empty record", replace(end, "{}\n"), "got 0"},
		{"two kinds", replace(end, `{"end":{"devices":1,"owners":2,"qps":2},"owner":{"id":9}}`+"\n"), "got 2"},
		{"a QP twice", replace(end, lines[qp17]+lines[end]), "given twice"},
		{"an unknown device", replace(qp17, strings.Replace(lines[qp17], `"device":1`, `"device":9`, 1)), "no record defined"},
		{"an unknown owner", replace(qp17, strings.Replace(lines[qp17], `"owner":1`, `"owner":9`, 1)), "owner 9"},
		{"an unknown site", replace(qp17, strings.Replace(lines[qp17], `"owner":1`, `"owner":1,"site":3`, 1)), "site 3, which no record"},
		{"an empty site", replace(qp17, `{"site":{"id":1}}`+"\n"), "names no site"},
		{"a site twice", replace(qp17, `{"site":{"id":1,"call":"a"}}`+"\n"+`{"site":{"id":1,"call":"b"}}`+"\n"), "site id 1 given twice"},
		{"an unknown type", replace(qp17, strings.Replace(lines[qp17], `"type":"RC"`, `"type":"RQ"`, 1)), `type "RQ"`},
		{"an unknown field", replace(qp17, strings.Replace(lines[qp17], `"lqpn"`, `"lqpns"`, 1)), "unknown field"},
		{"more after the end", strings.Join(lines, "") + lines[qp17], "want nothing after the end's record, got a record"},
		{"garbage after the end", strings.Join(lines, "") + "}\n", "want nothing after the end's record, got invalid character"},
		{"miscounted", replace(end, `{"end":{"devices":1,"owners":2,"qps":3}}`+"\n"), "the end counts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{}, c.now)
			n, err := restore(b, []byte(tt.saved))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "leakwatch: restore: record ") {
				t.Errorf("Restore = %d, %v; want an error with %q", n, err, tt.want)
			}
			if len(b.restoring) != 0 || len(b.qps) != 0 || !b.Started().Equal(t0) || b.Restored() != (Restored{}) {
				t.Errorf("the watcher changed: %d devices and %d QPs restored, started %v", len(b.restoring), len(b.qps), b.Started())
			}
		})
	}
	if _, err := restore(a, save(t, a)); !errors.Is(err, errRestoreInto) {
		t.Errorf("Restore into a watcher with histories: %v", err)
	}
}

// restored60k restores what a watcher tracking 60,000 QPs saved (see
// tracked60k) and returns the JSON's bytes per QP and the heap the
// restored watcher holds per QP.
func restored60k(t testing.TB) (saved []byte, perQP float64) {
	a, _, qps, _ := tracked60k(true, 8)
	saved = save(t, a)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	b := New(Config{Probes: true}, func() time.Time { return t0 })
	if n, err := restore(b, saved); err != nil || n != len(qps) {
		t.Fatalf("Restore: %d QPs, %v", n, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	perQP = float64(ms.HeapAlloc-before) / float64(len(qps))
	runtime.KeepAlive(b)
	runtime.KeepAlive(saved)
	return saved, perQP
}

// Restoring 60,000 QPs costs the heap tracking them does (at most 200
// bytes a QP, TestTrackedQPHeap): the records are decoded one at a time
// and the names and notes interned again.
func TestRestoredQPHeap(t *testing.T) {
	saved, perQP := restored60k(t)
	t.Logf("%d bytes saved for 60,000 QPs (%.0f a QP); %.0f bytes of heap a restored QP", len(saved), float64(len(saved))/60000, perQP)
	if perQP > 200 {
		t.Errorf("%.0f bytes of heap per restored QP, want at most 200", perQP)
	}
}

// BenchmarkSave times saving 60,000 QPs (bytes/qp: what a QP takes in
// the file); BenchmarkRestore restoring them.
func BenchmarkSave(b *testing.B) {
	w, _, qps, _ := tracked60k(true, 8)
	n := 0
	for b.Loop() {
		var cw countWriter
		if _, err := w.Save(json.NewEncoder(&cw).Encode); err != nil {
			b.Fatal(err)
		}
		n = int(cw)
	}
	b.ReportMetric(float64(n)/float64(len(qps)), "bytes/qp")
}

// BenchmarkSaveSnapshot times copying 60,000 QPs for a save, what the
// agent does with the history locked (BenchmarkSave is the copy, then the
// records made and encoded): snapshot-B/qp is what the copy holds a QP.
func BenchmarkSaveSnapshot(b *testing.B) {
	w, _, qps, _ := tracked60k(true, 8)
	var ms runtime.MemStats
	var perQP float64
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		s := w.SaveSnapshot()
		runtime.ReadMemStats(&ms)
		perQP = float64(ms.TotalAlloc-before) / float64(len(qps))
		if s.QPs() != len(qps) {
			b.Fatalf("%d QPs in the snapshot", s.QPs())
		}
	}
	b.ReportMetric(perQP, "snapshot-B/qp")
}

func BenchmarkRestore(b *testing.B) {
	saved, perQP := restored60k(b)
	for b.Loop() {
		w := New(Config{}, time.Now)
		if _, err := restore(w, saved); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perQP, "heap-B/qp")
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)

// Soft RoCE and soft iWARP on one netdev share its GUID: a saved siw0 is
// not the rxe0 listed after it went (its live QPs are gone, not waiting
// for rxe0's scan, and its destroyed QPs do not move to rxe0), and with
// both listed each saved device finds its own.
func TestRestoreSharedGUID(t *testing.T) {
	const guid = 0x021122fffe334455
	rxe := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: guid, Protocol: "roce"}
	siw := rdmanl.Device{Index: 2, Name: "siw0", NodeGUID: guid, Protocol: "iw"}
	c := &clock{t: t0}
	a := New(Config{Probes: true}, c.now)
	a.Listed([]rdmanl.Device{rxe, siw})
	a.Scan(scan(c.at(0), rxe, qp(17, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	a.Scan(scan(c.at(0), siw, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42), qp(4, rdmanl.QPTypeRC, rdmanl.QPStateInit, 42)))
	// siw0's SRQ QP 30, destroyed without the IB spec's sequence: the
	// destroy rules keep and report it.
	a.Event(create(c.at(2*time.Second), siw, 30, true))
	a.Event(modify(c.at(3*time.Second), siw, 30, rdmanl.QPStateRTS))
	a.Event(ev(c.at(4*time.Second), EventQPDestroyed, siw, 30))
	c.at(time.Minute)
	saved := save(t, a)
	for _, tt := range []struct {
		name   string
		listed []rdmanl.Device
		want   Restored
	}{
		{"both", []rdmanl.Device{rxe, siw}, Restored{QPs: 4, Kept: 1, Waiting: 3}},
		{"both, siw0 listed first", []rdmanl.Device{siw, rxe}, Restored{QPs: 4, Kept: 1, Waiting: 3}},
		{"rxe0 only", []rdmanl.Device{rxe}, Restored{QPs: 4, Gone: 3, Waiting: 1}},
		{"siw0 only", []rdmanl.Device{siw}, Restored{QPs: 4, Kept: 1, Gone: 1, Waiting: 2}},
		{"rxe0 renamed", []rdmanl.Device{{Index: 1, Name: "roce0", NodeGUID: guid, Protocol: "roce"}, siw}, Restored{QPs: 4, Kept: 1, Waiting: 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{}, c.now)
			if _, err := restore(b, saved); err != nil {
				t.Fatal(err)
			}
			b.Listed(tt.listed)
			if diff := cmp.Diff(tt.want, b.Restored()); diff != "" {
				t.Errorf("Restored (-want +got):\n%s", diff)
			}
			for k, h := range b.qps {
				if k.dev == rxe.Index && k.qpn != 17 {
					t.Errorf("rxe0 has a history of QP %d (%s), which only siw0 had", k.qpn, h.Device())
				}
			}
			for _, f := range b.Evaluate(Query{MinAge: 5 * time.Second}).Findings {
				if f.QPN == 30 && f.Device != "siw0" {
					t.Errorf("siw0's QP 30 reported on %s: %s", f.Device, f.Rule)
				}
			}
		})
	}
}
