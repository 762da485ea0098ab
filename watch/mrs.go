package watch

import (
	"context"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// MRMark is what a device's scanner remembers of its last MR dump: when
// it began, and the MRs the resource summary read before it counted. The
// zero MRMark is no dump yet.
type MRMark struct {
	at  time.Time
	mrs uint64
}

// MarkMRs is the mark of an MR dump beginning at at, after a resource
// summary sum.
func MarkMRs(sum rdmanl.Summary, at time.Time) MRMark {
	n, _ := summaryCount(sum, "mr")
	return MRMark{at: at, mrs: n}
}

// Due says whether a device whose resource summary, read at now, is sum
// is due for an MR dump, its last one being m: the first one, one when the
// summary counts another number of MRs than it did then, and one every
// every (the agent's reconcile) whatever the count, since MRs that
// replace as many others leave the count as it was. Between those there
// is none: each dumped MR may cost a firmware query on hardware, and a
// host has 100,000 MRs. A summary without an MR count (a kernel that does
// not report one) leaves the dumps to every.
func (m MRMark) Due(sum rdmanl.Summary, now time.Time, every time.Duration) bool {
	if m.at.IsZero() {
		return true
	}
	if n, ok := summaryCount(sum, "mr"); ok && n != m.mrs {
		return true
	}
	return now.Sub(m.at) >= every
}

// MRs is the number of MRs the summary read before m's dump counted.
func (m MRMark) MRs() uint64 { return m.mrs }

// summaryCount is the summary's count of the resource name ("mr", "qp"),
// and whether it has one.
func summaryCount(sum rdmanl.Summary, name string) (uint64, bool) {
	for _, c := range sum.Counts {
		if c.Name == name {
			return c.Current, true
		}
	}
	return 0, false
}

// UpdateMRs dumps dev's MRs into st (DumpMRs, State.ScanMRs) when they are
// due after its resource summary sum (last.Due with every), and returns the
// mark of that dump; last when none was due, or when the dump failed, with
// the dump's error (one matching rdmanl.ErrNoDevice when dev went away).
func (s Scanner) UpdateMRs(ctx context.Context, st *State, dev rdmanl.Device, sum rdmanl.Summary, last MRMark, every time.Duration) (MRMark, error) {
	now := s.Now()
	if !last.Due(sum, now, every) {
		return last, nil
	}
	d, err := s.DumpMRs(ctx, dev)
	if err != nil {
		return last, err
	}
	st.ScanMRs(d)
	return MarkMRs(sum, now), nil
}
