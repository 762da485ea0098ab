package leakwatch

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// RuleZombieUverbsContext reports a process that keeps the uverbs file of
// an unregistered device open with no verbs context on any current device.
const RuleZombieUverbsContext = "zombie-uverbs-context"

// ZombieContext is a process that holds the deleted uverbs node of a device
// that was unregistered (a reset, a driver unbind, a hot unplug) and has
// no verbs context on any current device: the driver disassociated its
// context and the application never reopened the device.
type ZombieContext struct {
	// Owner is the process: its PID, Comm, Cgroup and ContainerID (a
	// holder is a process, so its findings' TGID is PID).
	Owner
	// Files are the deleted nodes it holds, as "fd 3 /dev/infiniband/uverbs0".
	Files []string
}

// Zombies is what one look at the host found: the zombie contexts, or why
// the look failed.
type Zombies struct {
	Contexts []ZombieContext
	// Err says why the processes could not be looked at ("" when they
	// were); the rule is then skipped with it.
	Err string
	// Unreadable counts the processes whose open files could not be read
	// (no privilege): their zombies are not seen.
	Unreadable int
}

// zombieState is what the watcher knows of zombie contexts.
type zombieState struct {
	read       bool // a scan has looked at the host's processes
	err        string
	unreadable int
	contexts   []ZombieContext
	firstSeen  map[string]time.Time // by zombieKey
}

func zombieKey(z ZombieContext) string {
	return fmt.Sprintf("%d %s", z.PID, strings.Join(z.Files, ","))
}

// scanZombies takes the zombie contexts of a scan that looked for them.
func (w *Watcher) scanZombies(s Scan) {
	if s.Zombies == nil {
		return // this scan did not look: the last look stands
	}
	z := &w.zombies
	z.read, z.err, z.unreadable = true, s.Zombies.Err, s.Zombies.Unreadable
	if z.err != "" {
		return
	}
	seen := map[string]time.Time{}
	for _, c := range s.Zombies.Contexts {
		k := zombieKey(c)
		t, ok := z.firstSeen[k]
		if !ok {
			t = s.Time
		}
		seen[k] = t
	}
	z.contexts, z.firstSeen = slices.Clone(s.Zombies.Contexts), seen
}

// zombieFindings evaluates zombie-uverbs-context. Zombie contexts belong
// to no current device: a query for one device has none.
func (w *Watcher) zombieFindings(q Query, now time.Time) ([]Finding, *Skipped) {
	z := &w.zombies
	switch {
	case q.Device != "":
		return nil, nil
	case !z.read:
		return nil, &Skipped{Rule: RuleZombieUverbsContext, Reason: "no scan of the host's processes yet"}
	case z.err != "":
		return nil, &Skipped{Rule: RuleZombieUverbsContext, Reason: "cannot read the processes: " + z.err}
	}
	var fs []Finding
	for _, c := range z.contexts {
		since := z.firstSeen[zombieKey(c)]
		age := now.Sub(since)
		if age < q.MinAge {
			continue
		}
		owner := c.Owner
		owner.TGID = owner.PID
		fs = append(fs, Finding{
			Rule: RuleZombieUverbsContext, Severity: SeverityWarning, Owner: owner,
			AgeSeconds: math.Round(age.Seconds()*1000) / 1000,
			Evidence: []Evidence{{Time: since.UTC(), Source: "scan",
				What: "holds " + strings.Join(c.Files, ", ") + " (deleted); no verbs context on any device"}},
			Hint: "its device was unregistered (reset, unbind, unplug) and the driver disassociated the context; the process never reopened the device: " +
				"it must close the fd, free its verbs objects and open the device again on IB_EVENT_DEVICE_FATAL, or be restarted",
			Spec: "ib_uverbs disassociate: after device removal a context is left with no device; only ibv_close_device frees it",
		})
	}
	if z.unreadable > 0 {
		return fs, &Skipped{Rule: RuleZombieUverbsContext,
			Reason: fmt.Sprintf("evaluated only in part: the open files of %d processes could not be read (needs root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE)", z.unreadable)}
	}
	return fs, nil
}
