package agent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// scanner dumps QPs and resolves their owners; one per netlink client.
type scanner struct {
	nl       Netlink
	procRoot string
	now      func() time.Time
	// zombies makes every scan look at the host's processes for zombie
	// contexts too (lookForZombies).
	zombies bool
	// facts are the devices' facts (max_qp, provider); nil: none.
	facts *factsCache
}

// scan dumps the QPs and counts the user contexts of each of devs (its
// resource summary, one request per device), and resolves the QP owners
// through /proc: process, command name, cgroup and container. A device
// that goes away during its scan is left out (its QPs are not taken as
// destroyed one by one); other errors end the scan. It returns the
// resource summaries it read too.
func (s scanner) scan(ctx context.Context, devs []rdmanl.Device) (leakwatch.Scan, []rdmanl.Summary, error) {
	procs, _ := owner.NewResolver(s.procRoot) // without /proc, owners have no comm
	sc := leakwatch.Scan{Started: s.now()}
	var sums []rdmanl.Summary
	for _, dev := range devs {
		sum, err := s.nl.Summary(ctx, dev)
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
		sc.Zombies = s.lookForZombies(ctx)
	}
	sc.Time = s.now()
	return sc, sums, nil
}

// lookForZombies looks at the host's processes for zombie contexts
// (zombie-uverbs-context). What fails is said in Zombies.Err, and the rule
// is skipped with it: the QP scan goes on.
func (s scanner) lookForZombies(ctx context.Context) *leakwatch.Zombies {
	z := &leakwatch.Zombies{Contexts: []leakwatch.ZombieContext{}}
	if s.procRoot == "" {
		z.Err = "no /proc to read"
		return z
	}
	hs, err := owner.Holders(s.procRoot, owner.ZombieFiles)
	if err == nil {
		var zs []owner.ZombieContext
		if zs, err = ZombieContexts(ctx, s.nl, hs, s.procRoot); err == nil {
			z.Unreadable = len(hs.Unreadable)
			for _, c := range zs {
				lz := leakwatch.ZombieContext{Owner: leakOwner(c.Process)}
				for _, f := range c.Files {
					lz.Files = append(lz.Files, fmt.Sprintf("fd %d %s", f.FD, f.Path))
				}
				z.Contexts = append(z.Contexts, lz)
			}
			return z
		}
	}
	z.Err = err.Error()
	return z
}

// ZombieContexts finds the zombie contexts (owner.ZombieContexts) in scan,
// a Holders scan whose filter keeps deleted uverbs nodes (owner.RDMAFiles,
// owner.ZombieFiles): the verbs contexts of every device nl lists are
// dumped, and only when some process holds such a node.
func ZombieContexts(ctx context.Context, nl Netlink, scan owner.HolderScan, procRoot string) ([]owner.ZombieContext, error) {
	if len(owner.ZombieContexts(scan, nil, nil)) == 0 {
		return []owner.ZombieContext{}, nil // no deleted uverbs node open: no dump needed
	}
	devs, err := nl.Devices(ctx)
	if err != nil {
		return nil, err
	}
	var owners []uint32
	for _, dev := range devs {
		for c, err := range nl.Contexts(ctx, dev, rdmanl.DumpOptions{}) {
			if err == nil {
				owners = append(owners, c.Owner.PID)
				continue
			}
			// The error ends the dump. A partial one keeps the entries
			// that decoded; a device gone since the listing has none.
			var pe *rdmanl.PartialError
			if !errors.As(err, &pe) && !errors.Is(err, rdmanl.ErrNoDevice) {
				return nil, err
			}
		}
	}
	procs, _ := owner.NewResolver(procRoot) // nil: owner ids taken as processes
	return owner.ZombieContexts(scan, owners, procs), nil
}

func (s scanner) scanDevice(ctx context.Context, dev rdmanl.Device, sum rdmanl.Summary, procs *owner.Resolver) (leakwatch.DeviceScan, error) {
	ds := leakwatch.DeviceScan{Device: dev, Owners: map[uint32]leakwatch.Owner{}}
	f, _ := s.facts.of(dev)
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
	unfilled := false // a QP in RESET with a port: the provider reports no state
	viaCM := false    // a kernel QP rdma_cm created for a ULP
	for qp, err := range s.nl.QPs(ctx, dev, rdmanl.DumpOptions{}) {
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
	if !unfilled && !viaCM {
		return ds, nil
	}
	ids, err := collect(s.nl.CMIDs(ctx, dev, rdmanl.DumpOptions{}))
	if err != nil {
		return ds, err
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
		srqs, err := collect(s.nl.SRQs(ctx, dev, rdmanl.DumpOptions{}))
		if err != nil {
			return ds, err
		}
		ds.ULPs = rdmanl.ULPs(ds.QPs, ids, srqs)
	}
	return ds, nil
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
