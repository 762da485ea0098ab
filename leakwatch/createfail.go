package leakwatch

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RuleQPCreateFailing is the rule ID for QP creates that keep failing on
// a device.
const RuleQPCreateFailing = "qp-create-failing"

// Config's defaults for qp-create-failing. Ten failures in five minutes:
// one failed create is often a consumer trying a size and retrying with a
// smaller one, or a burst at a limit that passes; a consumer whose
// reconnect loop keeps failing (every few seconds) reaches ten within a
// minute and stays there, and five minutes keeps a slower loop (one try
// every 30 s) in view.
const (
	DefaultCreateFailures      = 10
	DefaultCreateFailureWindow = 5 * time.Minute
)

// MaxCreateFailures bounds the failed creates a device keeps for
// qp-create-failing (the newest); a window holding more reports at least
// this many.
const MaxCreateFailures = 1024

// maxFailureSites bounds the creation sites a device's failure counts
// name (CreateFailures): later sites count as "other".
const maxFailureSites = 10

// OtherSite is the site that counts the failed creates of a device's
// sites beyond the first maxFailureSites, and in Tally the live QPs of
// sites beyond the topN.
const OtherSite = "other"

// createFailure is one create the provider refused.
type createFailure struct {
	at    Stamp
	errno int32 // positive
	site  siteHandle
}

// FailureCount counts a device's failed QP creates of one errno at one
// site since the watcher saw the device.
type FailureCount struct {
	// Errno is the errno's name ("ENOMEM", "errno 200" for one without);
	// Site the creation site (Site.String), "" for none known, OtherSite
	// for the sites beyond a device's first ten.
	Errno string
	Site  string
	Count uint64
}

// failureKey is what a FailureCount counts by.
type failureKey struct {
	errno int32
	site  string
}

// createFailed records a failed create on the device: kept in its ring
// of failures (O(1)) and counted.
func (d *deviceState) createFailed(at time.Time, errno int32, site siteHandle) {
	d.failures.push(createFailure{at: stampOf(at), errno: errno, site: site}, MaxCreateFailures)
	label := ""
	if site != (siteHandle{}) {
		label = siteOf(site).String()
		if !slices.Contains(d.failureSites, label) {
			if len(d.failureSites) < maxFailureSites {
				d.failureSites = append(d.failureSites, label)
			} else {
				label = OtherSite
			}
		}
	}
	if d.failed == nil {
		d.failed = map[failureKey]uint64{}
	}
	d.failed[failureKey{errno, label}]++
}

// DeviceFailures are a device's failed QP creates, counted.
type DeviceFailures struct {
	Index  uint32
	Name   string
	Counts []FailureCount // by errno, then site
}

// CreateFailures counts each device's failed QP creates by errno and
// creation site, for as long as the watcher knows the device: counts
// whose label sets stay bounded (a device's first ten sites have their
// own, the rest are OtherSite), which only grow. Sorted by device index.
func (w *Watcher) CreateFailures() []DeviceFailures {
	var out []DeviceFailures
	for index, d := range w.devs {
		if len(d.failed) == 0 {
			continue
		}
		df := DeviceFailures{Index: index, Name: d.name}
		for k, n := range d.failed {
			df.Counts = append(df.Counts, FailureCount{Errno: ErrnoName(k.errno), Site: k.site, Count: n})
		}
		slices.SortFunc(df.Counts, func(a, b FailureCount) int { return cmp.Or(cmp.Compare(a.Errno, b.Errno), cmp.Compare(a.Site, b.Site)) })
		out = append(out, df)
	}
	slices.SortFunc(out, func(a, b DeviceFailures) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// errnoNames are the names of the errnos a QP create can return, as
// Linux numbers them on every architecture rdmatool runs on
// (include/uapi/asm-generic/errno-base.h, errno.h).
var errnoNames = map[int32]string{
	1: "EPERM", 2: "ENOENT", 4: "EINTR", 5: "EIO", 6: "ENXIO", 7: "E2BIG", 9: "EBADF", 11: "EAGAIN", 12: "ENOMEM",
	13: "EACCES", 14: "EFAULT", 16: "EBUSY", 17: "EEXIST", 19: "ENODEV", 22: "EINVAL", 23: "ENFILE", 24: "EMFILE",
	28: "ENOSPC", 34: "ERANGE", 38: "ENOSYS", 75: "EOVERFLOW", 95: "EOPNOTSUPP", 110: "ETIMEDOUT", 125: "ECANCELED",
}

// ErrnoName names an errno (positive, or negative as the kernel returns
// it): "ENOMEM", or "errno N" for one the table does not name.
func ErrnoName(errno int32) string {
	if errno < 0 {
		errno = -errno
	}
	if name, ok := errnoNames[errno]; ok {
		return name
	}
	return "errno " + strconv.Itoa(int(errno))
}

// qpCreateFailing reports a device on which at least cfg.CreateFailures
// QP creates failed within cfg.CreateFailureWindow before now: the
// count, the rate, the errnos and the sites of the failures, the most
// frequent site as the finding's.
func qpCreateFailing(dev *deviceState, now time.Time, cfg ruleConfig) (Finding, bool) {
	since := stampOf(now.Add(-cfg.CreateFailureWindow))
	i := dev.failures.search(func(f *createFailure) int { return cmp.Compare(f.at, since) })
	n := dev.failures.len() - i
	if n == 0 || n < cfg.CreateFailures {
		return Finding{}, false
	}
	errnos, sites := map[int32]int{}, map[siteHandle]int{}
	for _, f := range dev.failures.from(i) {
		errnos[f.errno]++
		sites[f.site]++
	}
	count := strconv.Itoa(n)
	if i == 0 && dev.failures.full(MaxCreateFailures) {
		count = "at least " + count
	}
	first := dev.failures.at(i).at.Time()
	span := now.Sub(first)
	f := Finding{
		Rule: RuleQPCreateFailing, Severity: SeverityError, Device: dev.name, Count: uint64(n),
		AgeSeconds: math.Round(span.Seconds()*1000) / 1000,
		Spec:       "a device refuses QP creates it cannot serve (ENOMEM, EINVAL, limits of the provider) long before max_qp",
	}
	rate := float64(n) / cfg.CreateFailureWindow.Minutes()
	byErrno := make([]string, 0, len(errnos))
	order := slices.Sorted(maps.Keys(errnos))
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(errnos[b], errnos[a]) }) // the most frequent first
	for _, e := range order {
		byErrno = append(byErrno, fmt.Sprintf("%s %d", ErrnoName(e), errnos[e]))
	}
	type siteCount struct {
		site siteHandle
		n    int
	}
	var bySite []siteCount
	for s, n := range sites {
		bySite = append(bySite, siteCount{s, n})
	}
	slices.SortFunc(bySite, func(a, b siteCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(siteOf(a.site).String(), siteOf(b.site).String()))
	})
	f.setSite(siteOf(bySite[0].site))
	f.Evidence = append(f.Evidence, Evidence{Time: first, Source: "probe",
		What: fmt.Sprintf("%s QP creates failed in %s (%.1f a minute): %s", count, cfg.CreateFailureWindow, rate, strings.Join(byErrno, ", "))})
	for _, s := range bySite[:min(len(bySite), 5)] {
		where := siteOf(s.site).String()
		if where == "" {
			where = "no site known"
		}
		f.Evidence = append(f.Evidence, Evidence{Time: now.UTC(), Source: "probe", What: fmt.Sprintf("%d at %s", s.n, where)})
	}
	last := dev.failures.at(dev.failures.len() - 1)
	f.Evidence = append(f.Evidence, Evidence{Time: last.at.Time(), Source: "probe", What: "last failure: " + ErrnoName(last.errno)})
	f.Hint = fmt.Sprintf("%s QP creates failed (%s) within %s: the device refuses what the consumer asks (a queue over max_qp_wr, "+
		"memory or provider limits) before max_qp: find the caller at the site and check the sizes it asks for against the device's limits (ibv_devinfo -v: max_qp_wr, max_sge)", count, strings.Join(byErrno, ", "), cfg.CreateFailureWindow)
	return f, true
}
