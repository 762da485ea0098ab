package rdmanl

import (
	"path/filepath"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
)

// Benchmarks of the dump read path after the socket: message iteration,
// decoding, duplicate dropping and the SRQ join, with nltest standing in
// for the kernel. make bench reports them with allocations per op; ns/qp is
// the cost of one QP.

// benchClient answers QP dumps with qps and SRQ dumps with srqs.
func benchClient(b *testing.B, qps, srqs []netlink.Message) *Client {
	b.Helper()
	conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
		if uint16(req[0].Header.Type)&0x3ff == cmdResSRQGet {
			return dumpReply(srqs, req[0].Header.Sequence)
		}
		return dumpReply(qps, req[0].Header.Sequence)
	})
	c := newClient(conn)
	b.Cleanup(func() { c.Close() })
	return c
}

// syntheticQPDump builds a dump of n RC QPs in messages of perMsg entries,
// about what a 32 KiB reply holds.
func syntheticQPDump(n, perMsg int) []netlink.Message {
	var msgs []netlink.Message
	for first := 0; first < n; first += perMsg {
		var entries [][]netlink.Attribute
		for q := first; q < min(n, first+perMsg); q++ {
			entries = append(entries, qpEntry(uint32(q+17), 2,
				netlink.Attribute{Type: attrPortIndex, Data: le32(1)},
				netlink.Attribute{Type: attrResPDN, Data: le32(3)},
				netlink.Attribute{Type: attrResSQPSN, Data: le32(0)},
			))
		}
		msgs = append(msgs, qpMessage(entries...))
	}
	return msgs
}

func BenchmarkQPDump(b *testing.B) {
	tests := []struct {
		name string
		qps  func(testing.TB) []netlink.Message
	}{
		{"recorded-6.12-rxe", func(tb testing.TB) []netlink.Message {
			return readRecorded(tb, filepath.Join("testdata", recordedName("qp-dump", "6.12", "rxe")))
		}},
		{"synthetic-30k", func(testing.TB) []netlink.Message { return syntheticQPDump(30000, 360) }},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			c := benchClient(b, tt.qps(b), nil)
			n := 0
			for b.Loop() {
				n = 0
				for _, err := range c.QPs(b.Context(), Device{Name: "rxe0"}, DumpOptions{}) {
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/qp")
		})
	}
}
