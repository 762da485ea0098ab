package main

import (
	"io"
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
