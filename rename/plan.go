package rename

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// Step is one rename of a plan.
type Step struct {
	Index     uint32 `json:"index"` // the device's kernel index
	From      string `json:"from"`
	To        string `json:"to"`
	Temporary bool   `json:"temporary"` // To is a stopover a later step leaves
}

// ClashError is a rename to a name that another device holds and keeps.
type ClashError struct {
	Device string // the device that wanted the name
	Name   string
	Holder string // the device that has it
	Why    string // "keeps it", "wants the same name", ...
}

func (e *ClashError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("rename: %s to %s: %s", e.Device, e.Name, e.Why)
	}
	return fmt.Sprintf("rename: %s to %s: name held by %s, which %s", e.Device, e.Name, e.Holder, e.Why)
}

// Is makes a clash match os.ErrExist, as the kernel's EEXIST does.
func (e *ClashError) Is(target error) bool { return target == os.ErrExist }

// plan is an ordered set of renames. Each group is a chain or a cycle of
// renames that wait for each other's names; a group is applied, and rolled
// back, as a whole.
type plan struct {
	groups [][]Step
}

// steps returns every step in order.
func (p plan) steps() []Step {
	out := []Step{}
	for _, g := range p.groups {
		out = append(out, g...)
	}
	return out
}

// planRenames orders the renames in want (device index to new name; every
// new name differs from the device's current one) among devs, all the
// devices there are. A device waits for the device holding its new name to
// move away; a cycle of such waits (a swap) goes through a temporary name.
// A rename that cannot be done gets an error in failed instead of steps: its
// name is wanted by another device too, or held by a device that keeps it.
func planRenames(devs []rdmanl.Device, want map[uint32]string) (plan, map[uint32]error) {
	name := map[uint32]string{}   // current names by index
	holder := map[string]uint32{} // index by current name
	for _, d := range devs {
		name[d.Index] = d.Name
		holder[d.Name] = d.Index
	}
	failed := map[uint32]error{}
	var order []uint32 // the wanting devices, by index
	for i := range want {
		order = append(order, i)
	}
	slices.Sort(order)

	// Two devices wanting one name: neither gets it.
	wantedBy := map[string][]uint32{}
	for _, i := range order {
		wantedBy[want[i]] = append(wantedBy[want[i]], i)
	}
	for _, i := range order {
		if others := wantedBy[want[i]]; len(others) > 1 {
			other := others[0]
			if other == i {
				other = others[1]
			}
			failed[i] = &ClashError{Device: name[i], Name: want[i], Why: name[other] + " wants the same name"}
		}
	}
	// A name held by a device that does not move away blocks the rename;
	// then that device keeps its own name, which may block another.
	for changed := true; changed; {
		changed = false
		for _, i := range order {
			if failed[i] != nil {
				continue
			}
			h, held := holder[want[i]]
			if !held {
				continue
			}
			if _, moves := want[h]; !moves {
				failed[i] = &ClashError{Device: name[i], Name: want[i], Holder: name[h], Why: "keeps it"}
				changed = true
			} else if failed[h] != nil {
				failed[i] = &ClashError{Device: name[i], Name: want[i], Holder: name[h], Why: "cannot be renamed itself"}
				changed = true
			}
		}
	}

	// The rest form chains (the last one's name is free) and cycles. next
	// is the device holding the name a device wants; prev the device
	// wanting a device's name (names are wanted once, so there is one).
	moving := map[uint32]bool{}
	next := map[uint32]uint32{}
	prev := map[uint32]uint32{}
	for _, i := range order {
		if failed[i] != nil {
			continue
		}
		moving[i] = true
		if h, held := holder[want[i]]; held {
			next[i] = h
			prev[h] = i
		}
	}
	taken := map[string]bool{}
	for n := range holder {
		taken[n] = true
	}
	for _, n := range want {
		taken[n] = true
	}
	var p plan
	done := map[uint32]bool{}
	step := func(i uint32, from, to string, tmp bool) Step {
		return Step{Index: i, From: from, To: to, Temporary: tmp}
	}
	// Chains, from the device whose new name is free back to the first.
	for _, i := range order {
		if !moving[i] || done[i] {
			continue
		}
		if _, waits := next[i]; waits {
			continue
		}
		var g []Step
		for j, ok := i, true; ok; j, ok = prev[j] {
			g = append(g, step(j, name[j], want[j], false))
			done[j] = true
		}
		p.groups = append(p.groups, g)
	}
	// Cycles: the first device steps aside to a temporary name, the others
	// follow backwards along the cycle, and the first takes its new name.
	for _, i := range order {
		if !moving[i] || done[i] {
			continue
		}
		tmp := tempName(i, taken)
		taken[tmp] = true
		g := []Step{step(i, name[i], tmp, true)}
		done[i] = true
		for j := prev[i]; j != i; j = prev[j] {
			g = append(g, step(j, name[j], want[j], false))
			done[j] = true
		}
		g = append(g, step(i, tmp, want[i], false))
		p.groups = append(p.groups, g)
	}
	return p, failed
}

// tempName returns a valid name no device has or wants.
func tempName(index uint32, taken map[string]bool) string {
	base := "rdmatool-tmp" + strconv.FormatUint(uint64(index), 10)
	n := base
	for k := 2; taken[n]; k++ {
		n = base + "-" + strconv.Itoa(k)
	}
	return n
}
