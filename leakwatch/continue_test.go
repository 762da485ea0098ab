package leakwatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// counts sums a device's failed creates and Error entries by name, as the
// agent's metrics do.
func counts(w *Watcher, name string) (failures, errors uint64) {
	for _, d := range w.CreateFailures() {
		if d.Name == name {
			for _, c := range d.Counts {
				failures += c.Count
			}
		}
	}
	for _, d := range w.QPErrors() {
		if d.Name == name {
			for _, c := range d.Counts {
				errors += c.Count
			}
		}
	}
	return failures, errors
}

// A device registered again under its name continues its counters, while
// its gone registration's state is kept and after it is forgotten; a name
// away longer than an hour begins again, and a refused create of no known
// device is counted on none.
func TestCountersContinue(t *testing.T) {
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	reg := func(index uint32) rdmanl.Device { d := rxe; d.Index = index; return d }
	// Each registration: two refused creates, one QP into Error.
	use := func(dev rdmanl.Device, at time.Duration) {
		for range 2 {
			e := failed(c.at(at), 12, "")
			e.DevIndex, e.DevName = dev.Index, dev.Name
			w.Event(e)
		}
		w.Event(create(c.at(at), dev, 40, false))
		w.Event(modify(c.at(at), dev, 40, rdmanl.QPStateErr))
	}
	check := func(when string, wantF, wantE uint64) {
		t.Helper()
		if f, e := counts(w, rxe.Name); f != wantF || e != wantE {
			t.Errorf("%s: %d failures, %d Error entries on %s; want %d, %d", when, f, e, rxe.Name, wantF, wantE)
		}
	}
	use(reg(1), 0)
	check("first registration", 2, 1)

	// Gone with a QP history still kept: the new registration takes the
	// counts from the gone one's state.
	w.DeviceGone(1, c.at(time.Second))
	use(reg(2), 2*time.Second)
	check("registered again", 4, 2)

	// Gone, and forgotten (its QP's retention passed): its counters wait
	// under its name.
	w.DeviceGone(2, c.at(3*time.Second))
	w.expire(c.at(time.Hour / 2))
	if _, ok := w.devs[2]; ok {
		t.Fatal("the gone registration is still kept after its QP's retention")
	}
	if diff := cmp.Diff([]string{rxe.Name}, w.RetiredNames()); diff != "" {
		t.Errorf("RetiredNames (-want +got):\n%s", diff)
	}
	use(reg(3), time.Hour/2+time.Second)
	check("registered a third time", 6, 3)
	if n := len(w.RetiredNames()); n != 0 {
		t.Errorf("%d names retired with the device back", n)
	}

	// Away for over an hour: forgotten.
	w.DeviceGone(3, c.at(time.Hour))
	w.expire(c.at(2 * time.Hour))
	w.expire(c.at(3*time.Hour + time.Second))
	use(reg(4), 3*time.Hour+2*time.Second)
	check("back after over an hour", 2, 1)

	// A refused create whose device the probes missed.
	w.Event(Event{Kind: EventQPCreated, Time: c.at(4 * time.Hour), Result: -12})
	if n := w.UnattributedCreateFailures(); n != 1 {
		t.Errorf("UnattributedCreateFailures = %d, want 1", n)
	}
	for _, d := range w.CreateFailures() {
		if d.Name == "" {
			t.Errorf("failures counted on a device named \"\": %+v", d)
		}
	}
}
