package leakwatch

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// A device's counters (its failed creates by errno and site, its QPs'
// entries into Error by cause) continue across its registrations under one
// name: a reset, a driver restart or a soft RoCE link deleted and added
// again registers the device anew, at another index, and the counts its
// gone registration held pass to the new one when it takes the name. So a
// Prometheus counter of the device never goes backwards while the watcher
// lives. A name that stays away longer than retireCounts (or beyond the
// maxRetired most recently gone) is forgotten: its counters begin at 0 if
// it comes back, which Prometheus reads as a counter reset.
const (
	retireCounts = time.Hour
	maxRetired   = 64
)

// retiredCounts are the counters of a gone device that no history refers
// to any more, kept under its name.
type retiredCounts struct {
	at           Stamp
	failed       map[failureKey]uint64
	failureSites []string
	errors       [numCauses]uint64
}

// counted says whether d counted anything.
func (d *deviceState) counted() bool {
	return len(d.failed) > 0 || d.errors != [numCauses]uint64{}
}

// takeCounts adds the counters of from to d's and zeroes from's.
func (d *deviceState) takeCounts(failed map[failureKey]uint64, sites []string, errors [numCauses]uint64) {
	for k, n := range failed {
		if d.failed == nil {
			d.failed = map[failureKey]uint64{}
		}
		d.failed[k] += n
	}
	for _, s := range sites {
		if !slices.Contains(d.failureSites, s) && len(d.failureSites) < maxFailureSites {
			d.failureSites = append(d.failureSites, s)
		}
	}
	for c, n := range errors {
		d.errors[c] += n
	}
}

// named is called when dev (at index) takes name: it takes up the
// counters of a gone registration of that name, whether its state is
// still kept (its histories are) or only its counters.
func (w *Watcher) named(index uint32, dev *deviceState, name string) {
	for i, d := range w.devs {
		if i != index && d.gone && d.name == name && d.counted() {
			dev.takeCounts(d.failed, d.failureSites, d.errors)
			d.failed, d.failureSites, d.errors = nil, nil, [numCauses]uint64{}
		}
	}
	if r, ok := w.retired[name]; ok {
		dev.takeCounts(r.failed, r.failureSites, r.errors)
		delete(w.retired, name)
	}
}

// retire keeps the counters of d, a gone device the watcher forgets at
// now, under its name.
func (w *Watcher) retire(d *deviceState, now time.Time) {
	if d.name != "" && d.counted() {
		if w.retired == nil {
			w.retired = map[string]*retiredCounts{}
		}
		r := w.retired[d.name]
		if r == nil {
			r = &retiredCounts{}
			w.retired[d.name] = r
		}
		dev := deviceState{failed: r.failed, failureSites: r.failureSites, errors: r.errors}
		dev.takeCounts(d.failed, d.failureSites, d.errors)
		r.at, r.failed, r.failureSites, r.errors = stampOf(now), dev.failed, dev.failureSites, dev.errors
	}
}

// pruneRetired forgets the counters retired longer than retireCounts
// before now, and the oldest beyond maxRetired.
func (w *Watcher) pruneRetired(now time.Time) {
	since := stampOf(now.Add(-retireCounts))
	for name, r := range w.retired {
		if r.at < since {
			delete(w.retired, name)
		}
	}
	if len(w.retired) > maxRetired {
		names := slices.SortedFunc(maps.Keys(w.retired), func(a, b string) int {
			return cmp.Compare(w.retired[a].at, w.retired[b].at)
		})
		for _, name := range names[:len(names)-maxRetired] {
			delete(w.retired, name)
		}
	}
}

// RetiredNames are the names of gone devices the watcher keeps counters
// of (at most 64, none kept more than an hour after its registration was
// forgotten), sorted: what the agent's metrics report of it.
func (w *Watcher) RetiredNames() []string { return slices.Sorted(maps.Keys(w.retired)) }

// UnattributedCreateFailures counts the failed QP creates whose device the
// probes did not see (the probe on the create's entry missed it): counted
// on no device.
func (w *Watcher) UnattributedCreateFailures() uint64 { return w.unattributed }
