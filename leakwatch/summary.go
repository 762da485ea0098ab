package leakwatch

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Group is the findings of one rule on one device for one owner, counted:
// what an operator reads first when thousands of QPs leak the same way.
type Group struct {
	Device   string   `json:"device"`
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// The owner, as the findings name it: process (TGID, else the thread
	// PID), command, kernel module, cgroup and container.
	PID         uint32 `json:"pid"`
	Comm        string `json:"comm"`
	KernName    string `json:"kern_name"`
	Cgroup      string `json:"cgroup"`
	ContainerID string `json:"container_id"`
	Count       int    `json:"count"`
	// QPNs are the group's QP numbers as ranges, "17-40,45".
	QPNs string `json:"qpns"`
	// MaxAgeSeconds is the oldest finding's age.
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	Hint          string  `json:"hint"`
}

type groupKey struct {
	device, rule                  string
	pid                           uint32
	comm, kern, cgroup, container string
}

// Summarize groups findings by device, rule and owner, most severe and
// largest first.
func Summarize(fs []Finding) []Group {
	idx := map[groupKey]int{}
	groups := []Group{}
	qpns := map[int][]uint32{}
	for _, f := range fs {
		pid := f.TGID
		if pid == 0 {
			pid = f.PID
		}
		k := groupKey{f.Device, f.Rule, pid, f.Comm, f.KernName, f.Cgroup, f.ContainerID}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, Group{Device: f.Device, Rule: f.Rule, Severity: f.Severity, PID: pid, Comm: f.Comm,
				KernName: f.KernName, Cgroup: f.Cgroup, ContainerID: f.ContainerID, Hint: f.Hint})
		}
		g := &groups[i]
		g.Count++
		g.MaxAgeSeconds = max(g.MaxAgeSeconds, f.AgeSeconds)
		if severityRank(f.Severity) > severityRank(g.Severity) {
			g.Severity = f.Severity
		}
		if f.Rule != RuleQPExhaustion {
			qpns[i] = append(qpns[i], f.QPN)
		}
	}
	for i := range groups {
		groups[i].QPNs = ranges(qpns[i])
	}
	slices.SortStableFunc(groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(severityRank(b.Severity), severityRank(a.Severity)), cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.Device, b.Device), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.PID, b.PID))
	})
	return groups
}

func severityRank(s Severity) int {
	switch s {
	case SeverityCritical:
		return 3
	case SeverityError:
		return 2
	case SeverityWarning:
		return 1
	}
	return 0
}

// ranges writes QP numbers as sorted ranges: 17,18,19,21 -> "17-19,21".
func ranges(ns []uint32) string {
	slices.Sort(ns)
	ns = slices.Compact(ns)
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(ns[i]), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(ns[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// limitFindings keeps at most limit findings (0: all), the most severe
// first, in fs's order; it returns how many it left out.
func limitFindings(fs []Finding, limit int) ([]Finding, int) {
	if limit <= 0 || len(fs) <= limit {
		return fs, 0
	}
	order := make([]int, len(fs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(severityRank(fs[b].Severity), severityRank(fs[a].Severity))
	})
	keep := order[:limit]
	slices.Sort(keep)
	out := make([]Finding, 0, limit)
	for _, i := range keep {
		out = append(out, fs[i])
	}
	return out, len(fs) - limit
}
