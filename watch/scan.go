package watch

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/usage"
)

// Scanner dumps QPs and resolves their owners; one per netlink client.
type Scanner struct {
	NL Netlink
	// ProcRoot is where owners are resolved (normally /proc; "": not).
	ProcRoot string
	Now      func() time.Time
	// Facts are the devices' facts (max_qp, provider); nil: none.
	Facts *FactsCache
	// zombies makes every scan look at the host's processes for zombie
	// contexts too (LookForZombies), as checkOnce's do; the agent looks
	// once a minute, not per device.
	zombies bool
}

// Scan dumps the QPs and counts the user contexts of each of devs (its
// resource summary, one request per device), and resolves the QP owners
// through /proc: process, command name, cgroup and container. Where the
// summary counts rdma_cm IDs it dumps them too: they name the QPs'
// peers, the ULP of the QPs rdma_cm made for a kernel module, and, where
// the provider reports no QP state, which QPs are connected. A device
// that goes away during its scan is left out (its QPs are not taken as
// destroyed one by one); other errors end the scan. It returns the
// resource summaries it read too.
func (s Scanner) Scan(ctx context.Context, devs []rdmanl.Device) (leakwatch.Scan, []rdmanl.Summary, error) {
	procs, _ := owner.NewResolver(s.ProcRoot) // without /proc, owners have no comm
	sc := leakwatch.Scan{Started: s.Now()}
	var sums []rdmanl.Summary
	for _, dev := range devs {
		sum, err := s.NL.Summary(ctx, dev)
		if errors.Is(err, rdmanl.ErrNoDevice) {
			continue
		}
		if err != nil {
			return sc, nil, err
		}
		sums = append(sums, sum)
		ds, err := s.scanDevice(ctx, dev, sum, procs)
		if errors.Is(err, rdmanl.ErrNoDevice) {
			continue
		}
		if err != nil {
			return sc, nil, err
		}
		sc.Devices = append(sc.Devices, ds)
	}
	if s.zombies {
		sc.Zombies = s.LookForZombies(ctx, nil)
	}
	sc.Time = s.Now()
	return sc, sums, nil
}

// LookForZombies looks at the host's processes for zombie contexts
// (zombie-uverbs-context, usage.Zombies); host is every device, as the
// caller just listed them (nil: the look lists them when it needs to).
// What fails is said in Zombies.Err, and the rule is skipped with it: the
// QP scan goes on.
func (s Scanner) LookForZombies(ctx context.Context, host []rdmanl.Device) *leakwatch.Zombies {
	z := &leakwatch.Zombies{Contexts: []leakwatch.ZombieContext{}}
	if s.ProcRoot == "" {
		z.Err = "no /proc to read"
		return z
	}
	u, err := usage.Zombies(ctx, s.NL, host, s.ProcRoot)
	if err != nil {
		z.Err = err.Error()
		return z
	}
	z.Unreadable = len(u.Unreadable)
	for _, c := range u.Zombies {
		lz := leakwatch.ZombieContext{Owner: leakOwner(c.Process)}
		for _, f := range c.Files {
			lz.Files = append(lz.Files, fmt.Sprintf("fd %d %s", f.FD, f.Path))
		}
		z.Contexts = append(z.Contexts, lz)
	}
	return z
}

func (s Scanner) scanDevice(ctx context.Context, dev rdmanl.Device, sum rdmanl.Summary, procs *owner.Resolver) (leakwatch.DeviceScan, error) {
	ds := leakwatch.DeviceScan{Device: dev, Owners: map[uint32]leakwatch.Owner{}}
	f, _ := s.Facts.Of(dev)
	ds.MaxQP, ds.LastWQE, ds.LastWQESource = f.MaxQP, f.LastWQE, f.LastWQESource
	for _, cnt := range sum.Counts {
		switch cnt.Name {
		case "ctx":
			ds.Contexts = cnt.Current
		case "qp":
			// Room for the QPs the summary counted and a few created
			// since: at 60,000 QPs, append's doubling would hold up to
			// three times the listing's 10 MB while it grows. (A count
			// past a million, whatever the kernel says, grows as it comes.)
			n := min(cnt.Current, 1<<20)
			ds.QPs = make([]rdmanl.QP, 0, n+n/16+16)
		}
	}
	// The SRQs, dumped once, fill in the QPs' SRQ numbers and name the
	// ULPs of the QPs rdma_cm created.
	var srqs []rdmanl.SRQ
	for srq, err := range s.NL.SRQs(ctx, dev, rdmanl.DumpOptions{}) {
		switch {
		case err == nil:
			srqs = append(srqs, srq)
		case rdmanl.SRQJoinable(err):
		case errors.Is(err, rdmanl.ErrNoDevice):
			// "agent: ...": the reports' scan_error has always read so.
			return ds, fmt.Errorf("agent: scan %s: %w", dev.Name, err)
		default:
			return ds, err
		}
	}
	unfilled := false // a QP in RESET with a port: the provider reports no state
	viaCM := false    // a kernel QP rdma_cm created for a ULP
	for qp, err := range s.NL.QPs(ctx, dev, rdmanl.DumpOptions{SRQs: &srqs}) {
		if err != nil {
			var pe *rdmanl.PartialError
			if errors.As(err, &pe) {
				continue // the entries that decoded are in
			}
			if errors.Is(err, rdmanl.ErrNoDevice) {
				return ds, fmt.Errorf("agent: scan %s: %w", dev.Name, err)
			}
			return ds, err
		}
		ds.QPs = append(ds.QPs, qp)
		unfilled = unfilled || (qp.State == rdmanl.QPStateReset && qp.Port != 0)
		viaCM = viaCM || qp.Owner.KernName == "rdma_cm"
		if pid := qp.Owner.PID; pid != 0 {
			if _, done := ds.Owners[pid]; !done {
				if p, ok := procs.Lookup(pid); ok {
					ds.Owners[pid] = leakOwner(p)
				}
			}
		}
	}
	// The rdma_cm IDs name the QPs' peers, where the summary counts some
	// (or counts none of them at all).
	cmIDs, counted := summaryCount(sum, "cm_id")
	if !unfilled && !viaCM && counted && cmIDs == 0 {
		return ds, nil
	}
	ids, err := collect(s.NL.CMIDs(ctx, dev, rdmanl.DumpOptions{}))
	if err != nil {
		return ds, err
	}
	if peers := rdmanl.Peers(ids); len(peers) > 0 {
		ds.Peers = peers
	}
	if unfilled {
		// Where the provider does not report QP states (siw before
		// 6.2), a connected rdma_cm ID says its QP is connected.
		ds.CMConnected = map[uint32]bool{}
		for _, id := range ids {
			if id.LQPN != 0 && id.State == rdmanl.CMStateConnect {
				ds.CMConnected[id.LQPN] = true
			}
		}
	}
	if viaCM {
		// Netlink names rdma_cm as the owner of the QPs it creates for
		// kernel ULPs; their rdma_cm IDs and SRQs name the ULP.
		ds.ULPs = rdmanl.ULPs(ds.QPs, ids, srqs)
	}
	return ds, nil
}

// DumpMRs dumps dev's MRs, counting them by owner as they come
// (leakwatch.MRDump: a dump of 100,000 MRs is never held whole), and
// names their owners' processes through /proc. Each MR the dump lists
// may cost the provider a query of its own (a firmware command on
// hardware): the agent dumps a device's MRs only when its resource
// summary says their number changed, and every reconcile (MRMark). A
// device that goes away during the dump gives an error matching
// rdmanl.ErrNoDevice; entries that do not decode are left out.
func (s Scanner) DumpMRs(ctx context.Context, dev rdmanl.Device) (*leakwatch.MRDump, error) {
	procs, _ := owner.NewResolver(s.ProcRoot) // without /proc, owners have no comm
	d := &leakwatch.MRDump{Device: dev, Owners: map[uint32]leakwatch.Owner{}}
	for mr, err := range s.NL.MRs(ctx, dev, rdmanl.DumpOptions{}) {
		if err != nil {
			var pe *rdmanl.PartialError
			if errors.As(err, &pe) {
				continue // the entries that decoded are in
			}
			return nil, err
		}
		d.Add(mr)
		if pid := mr.Owner.PID; pid != 0 {
			if _, done := d.Owners[pid]; !done {
				if p, ok := procs.Lookup(pid); ok {
					d.Owners[pid] = leakOwner(p)
				}
			}
		}
	}
	d.Time = s.Now()
	return d, nil
}

// collect gathers a dump, skipping the entries of a partial answer that
// did not decode.
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			var pe *rdmanl.PartialError
			if errors.As(err, &pe) {
				continue
			}
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// leakOwner is what leakwatch keeps of an owner /proc resolved.
func leakOwner(p owner.Process) leakwatch.Owner {
	return leakwatch.Owner{PID: p.TID, TGID: p.PID, Comm: p.Comm, Cgroup: p.Cgroup, ContainerID: p.ContainerID}
}
