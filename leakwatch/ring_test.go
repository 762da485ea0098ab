package leakwatch

import (
	"cmp"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
)

// entries is r's entries, oldest first.
func entries(r *ring[int]) []int {
	out := []int{}
	for _, v := range r.from(0) {
		out = append(out, *v)
	}
	return out
}

// A ring keeps the newest entries up to its capacity, oldest first,
// through any number of wraparounds; search finds the oldest entry at or
// after a value as slices.BinarySearch does over them.
func TestRing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		pushed   int // 1, 2, ... pushed
		want     []int
	}{
		{"empty", 4, 0, []int{}},
		{"one", 4, 1, []int{1}},
		{"below capacity", 4, 3, []int{1, 2, 3}},
		{"at capacity", 4, 4, []int{1, 2, 3, 4}},
		{"one over", 4, 5, []int{2, 3, 4, 5}},
		{"wrapped once", 4, 8, []int{5, 6, 7, 8}},
		{"wrapped, midway", 4, 10, []int{7, 8, 9, 10}},
		{"capacity 1", 1, 7, []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r ring[int]
			for v := 1; v <= tt.pushed; v++ {
				r.push(v, tt.capacity)
			}
			if diff := gocmp.Diff(tt.want, entries(&r)); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if r.len() != len(tt.want) || r.full(tt.capacity) != (tt.pushed >= tt.capacity) {
				t.Errorf("len %d, full %v after %d pushes of %d", r.len(), r.full(tt.capacity), tt.pushed, tt.capacity)
			}
			if len(tt.want) > 0 && (*r.at(0) != tt.want[0] || *r.at(r.len() - 1) != tt.want[len(tt.want)-1]) {
				t.Errorf("at(0) %d, at(len-1) %d, want %v", *r.at(0), *r.at(r.len() - 1), tt.want)
			}
			for target := 0; target <= tt.pushed+1; target++ {
				want, _ := slices.BinarySearch(tt.want, target)
				if got := r.search(func(v *int) int { return cmp.Compare(*v, target) }); got != want {
					t.Errorf("search(%d) = %d, want %d", target, got, want)
				}
			}
			for i := range len(tt.want) + 1 {
				if diff := gocmp.Diff(tt.want[i:], r.window(i)); diff != "" {
					t.Errorf("window(%d) (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// A ring is what a slice of the newest entries is, for any capacity and
// any run of pushes, ascending values with repeats: the same entries,
// the same search.
func FuzzRing(f *testing.F) {
	f.Add(uint8(4), []byte{1, 0, 2, 3, 3, 0, 9})
	f.Add(uint8(1), []byte{5, 5})
	f.Add(uint8(16), []byte{})
	f.Fuzz(func(t *testing.T, capacity uint8, steps []byte) {
		if capacity == 0 {
			return
		}
		var r ring[int]
		var slice []int
		v := 0
		for _, s := range steps {
			v += int(s % 3) // ascending, with repeats
			r.push(v, int(capacity))
			slice = append(slice, v)
			if len(slice) > int(capacity) {
				slice = slice[1:]
			}
		}
		if diff := gocmp.Diff(append([]int{}, slice...), entries(&r)); diff != "" {
			t.Fatalf("entries (-slice +ring):\n%s", diff)
		}
		for target := -1; target <= v+1; target++ {
			want, _ := slices.BinarySearch(slice, target)
			if got := r.search(func(e *int) int { return cmp.Compare(*e, target) }); got != want {
				t.Fatalf("search(%d) = %d, want %d (%v)", target, got, want, slice)
			}
		}
	})
}

// Lists gives every device's list lengths, sorted by index: the failures
// kept for qp-error-storm (no teardown among them) and the failed
// creates, each at most its bound.
func TestLists(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), siw))
	w.Scan(scan(c.at(0), rxe))
	cycle(w, c.at(time.Second), 10, 42, "QP_ACCESS_ERR") // one failure, one teardown
	cycle(w, c.at(2*time.Second), 12, 42, "")            // two teardowns
	for i := range MaxCreateFailures + 5 {
		w.Event(failed(c.at(3*time.Second+time.Duration(i)*time.Millisecond), 12, ""))
	}
	want := []DeviceLists{{Index: rxe.Index, Name: "rxe0", QPErrors: 1, CreateFailures: MaxCreateFailures}, {Index: siw.Index, Name: "siw0"}}
	if diff := gocmp.Diff(want, w.Lists()); diff != "" {
		t.Errorf("Lists (-want +got):\n%s", diff)
	}
}
