package leakwatch

import (
	"cmp"
	"iter"
	"slices"
)

// ring keeps the newest entries of a list that grows by one at a time,
// oldest first, at most a capacity the caller gives at each push (the
// same at every push: a constant of the list). A push is O(1): when the
// ring is full it overwrites the oldest entry in place, where a slice that
// shifts its entries down costs their whole length. Its memory grows with
// its entries up to the capacity and stays there. The zero ring is empty
// and ready to use.
type ring[T any] struct {
	buf []T
	// oldest is the index in buf of the oldest entry: 0 until buf has
	// the capacity's entries, then the next to be overwritten.
	oldest int
}

// push adds v as the newest entry; when the ring holds capacity entries
// already, v takes the oldest's place.
func (r *ring[T]) push(v T, capacity int) {
	if len(r.buf) < capacity {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.oldest] = v
	if r.oldest++; r.oldest == len(r.buf) {
		r.oldest = 0
	}
}

// len is how many entries the ring holds.
func (r *ring[T]) len() int { return len(r.buf) }

// full says whether the ring holds capacity entries: the next push
// overwrites the oldest, and the oldest may have overwritten others.
func (r *ring[T]) full(capacity int) bool { return len(r.buf) >= capacity }

// at is a pointer to the i-th oldest entry (0 the oldest, len()-1 the
// newest), valid until the next push.
func (r *ring[T]) at(i int) *T {
	i += r.oldest
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return &r.buf[i]
}

// from yields the entries from the i-th oldest to the newest, oldest
// first, with their index; the ring must not be pushed to meanwhile.
func (r *ring[T]) from(i int) iter.Seq2[int, *T] {
	return func(yield func(int, *T) bool) {
		for ; i < len(r.buf); i++ {
			if !yield(i, r.at(i)) {
				return
			}
		}
	}
}

// search is the index of the oldest entry for which cmp(entry) >= 0,
// len() if none, where the entries are in order of cmp (as
// slices.BinarySearchFunc over the entries oldest first, with cmp
// comparing an entry with the target): O(log n), no copy.
func (r *ring[T]) search(cmp func(*T) int) int {
	lo, hi := 0, len(r.buf)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if cmp(r.at(m)) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// window copies the entries from the i-th oldest to the newest, oldest
// first, into a new slice.
func (r *ring[T]) window(i int) []T {
	out := make([]T, 0, max(len(r.buf)-i, 0))
	for _, e := range r.from(i) {
		out = append(out, *e)
	}
	return out
}

// DeviceLists are how many entries a device's bounded event lists hold.
type DeviceLists struct {
	Index uint32
	Name  string
	// QPErrors are the failures into Error kept for qp-error-storm (at
	// most MaxQPErrors), CreateFailures the failed QP creates kept for
	// qp-create-failing (at most MaxCreateFailures).
	QPErrors, CreateFailures int
}

// Lists are the lengths of each device's event lists, for every device
// the watcher knows, sorted by device index.
func (w *Watcher) Lists() []DeviceLists {
	out := make([]DeviceLists, 0, len(w.devs))
	for index, d := range w.devs {
		out = append(out, DeviceLists{Index: index, Name: d.name, QPErrors: d.qpErrors.len(), CreateFailures: d.failures.len()})
	}
	slices.SortFunc(out, func(a, b DeviceLists) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
