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
}

// scan dumps the QPs and counts the user contexts of each of devs, and
// resolves the QP owners through /proc: process, command name, cgroup and
// container. A device that goes away during its dump is left out of the
// scan (its QPs are not taken as destroyed one by one); other errors end
// the scan.
func (s scanner) scan(ctx context.Context, devs []rdmanl.Device) (leakwatch.Scan, error) {
	procs, _ := owner.NewResolver(s.procRoot) // without /proc, owners have no comm
	sc := leakwatch.Scan{Started: s.now()}
	sums, err := s.nl.Summaries(ctx)
	if err != nil {
		return sc, err
	}
	for _, dev := range devs {
		ds, err := s.scanDevice(ctx, dev, sums, procs)
		if errors.Is(err, rdmanl.ErrNoDevice) {
			continue
		}
		if err != nil {
			return sc, err
		}
		sc.Devices = append(sc.Devices, ds)
	}
	sc.Time = s.now()
	return sc, nil
}

func (s scanner) scanDevice(ctx context.Context, dev rdmanl.Device, sums []rdmanl.Summary, procs *owner.Resolver) (leakwatch.DeviceScan, error) {
	ds := leakwatch.DeviceScan{Device: dev, Owners: map[uint32]leakwatch.Process{}}
	for _, sum := range sums {
		if sum.DevIndex != dev.Index {
			continue
		}
		for _, cnt := range sum.Counts {
			if cnt.Name == "ctx" {
				ds.Contexts = cnt.Current
			}
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
					ds.Owners[pid] = leakwatch.Process{TGID: p.PID, Comm: p.Comm, Cgroup: p.Cgroup, ContainerID: p.ContainerID}
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
