package main

import (
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// BenchmarkQPListingJSON is `res qp -j`'s work per QP after the netlink
// decode: row (without the text words, as -j builds it), filter (none),
// JSON.
func BenchmarkQPListingJSON(b *testing.B) {
	procs, _ := owner.NewResolver("/proc")
	qps := make([]rdmanl.QP, 1000)
	for i := range qps {
		qps[i] = rdmanl.QP{DevIndex: 1, DevName: "rxe0", Port: 1, LQPN: uint32(17 + i), RQPN: uint32(1000 + i),
			HasRQPN: true, RQPSN: 123456, SQPSN: 654321, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS,
			PDN: 3, Owner: rdmanl.Owner{PID: uint32(os.Getpid())}, OnSRQ: i%2 == 0, SRQN: 1}
	}
	lw := newListWriter(io.Discard, &globals{json: true})
	var flt rowfilter.Filter
	b.ReportAllocs()
	b.ResetTimer()
	var row qpRow // as listRes: one row value, passed by address
	for i := range b.N {
		row = qpRowData(qps[i%len(qps)], procs, rdmanl.ULPIndex{})
		if !flt.Match(&row) {
			b.Fatal("no filter matched nothing")
		}
		if err := lw.row(&row); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListingJSON is each other listing's work per row after the
// netlink decode (row, JSON), as BenchmarkQPListingJSON is the QP
// listing's: one row value reused, passed by address, as listRes does.
func BenchmarkListingJSON(b *testing.B) {
	procs, _ := owner.NewResolver("/proc")
	self := rdmanl.Owner{PID: uint32(os.Getpid())}
	b.Run("cq", benchRows(func(i int) cqRow {
		return cqRowOf(rdmanl.CQ{DevIndex: 1, DevName: "rxe0", CQN: uint32(i), CQE: 256, Users: 2, Owner: self}, procs)
	}))
	b.Run("mr", benchRows(func(i int) mrRow {
		return mrRowOf(rdmanl.MR{DevIndex: 1, DevName: "rxe0", MRN: uint32(i), RKey: 0x1a2b, LKey: 0x1a2c, HasKeys: true,
			IOVA: 0x7f0000001000, Len: 1 << 20, PDN: 3, Owner: self}, procs)
	}))
	b.Run("pd", benchRows(func(i int) pdRow {
		return pdRowOf(rdmanl.PD{DevIndex: 1, DevName: "rxe0", PDN: uint32(i), Users: 4, CtxN: 1, Owner: self}, procs)
	}))
	b.Run("ctx", benchRows(func(i int) ctxRow {
		return ctxRowOf(rdmanl.Context{DevIndex: 1, DevName: "rxe0", CtxN: uint32(i), Owner: self}, procs)
	}))
	b.Run("cm_id", benchRows(func(i int) cmIDRow {
		return cmIDRowOf(rdmanl.CMID{DevIndex: 1, DevName: "rxe0", Port: 1, CMIDN: uint32(i), LQPN: uint32(17 + i), HasQP: true,
			PS: 0x0106, Type: rdmanl.QPTypeRC, State: 5, SrcAddr: netip.MustParseAddrPort("192.0.2.1:7471"),
			DstAddr: netip.MustParseAddrPort("192.0.2.2:39000"), Owner: self}, procs)
	}))
	b.Run("srq", benchRows(func(i int) srqRow {
		return srqRowOf(rdmanl.SRQ{DevIndex: 1, DevName: "rxe0", SRQN: uint32(i), PDN: 3,
			QPs: []rdmanl.QPRange{{Min: 17, Max: 18}, {Min: 20, Max: 20}}, Owner: self}, procs)
	}))
	b.Run("dev", benchRows(func(i int) devRow {
		return devRowOf(rdmanl.Device{Index: uint32(i), Name: "rxe0", Ports: 1, NodeGUID: 0x020000fffe000101,
			SysImageGUID: 0x020000fffe000101, NodeType: 1, Protocol: "roce"})
	}))
	b.Run("link", benchRows(func(i int) linkRow {
		return linkRowOf(rdmanl.Port{DevIndex: uint32(i), DevName: "rxe0", Index: 1, State: rdmanl.PortStateActive, PhysState: 5,
			NetdevIndex: 3, NetdevName: "dummy0"})
	}))
	b.Run("summary", benchRows(func(i int) summaryRow {
		return summaryRowOf(rdmanl.Summary{DevIndex: uint32(i), DevName: "rxe0", Counts: []rdmanl.ResourceCount{
			{Name: "pd", Current: 1}, {Name: "cq", Current: 2}, {Name: "qp", Current: 3}}})
	}))
}

// benchRows benchmarks a JSON listing of the rows rowOf makes.
func benchRows[R any](rowOf func(i int) R) func(b *testing.B) {
	return func(b *testing.B) {
		lw := newListWriter(io.Discard, &globals{json: true})
		var row R
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			row = rowOf(i % 1000)
			if err := lw.row(&row); err != nil {
				b.Fatal(err)
			}
		}
	}
}
