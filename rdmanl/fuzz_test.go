package rdmanl

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
)

// Fuzz targets for every decoder, seeded with the lab recordings. Kernel
// input must never panic a decoder.

func seedMessages(f *testing.F, pattern string) {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	for _, file := range files {
		for _, m := range readRecorded(f, file) {
			f.Add(m.Data)
		}
	}
}

func FuzzDecodeDevice(f *testing.F) {
	seedMessages(f, "dev-dump_*.nlmsg")
	f.Fuzz(func(t *testing.T, b []byte) { decodeDevice(b) })
}

func FuzzDecodePort(f *testing.F) {
	seedMessages(f, "port-dump_*.nlmsg")
	f.Fuzz(func(t *testing.T, b []byte) { decodePort(b) })
}

func FuzzDecodeSummaryAndSystem(f *testing.F) {
	seedMessages(f, "res-summary_*.nlmsg")
	seedMessages(f, "sys-get_*.nlmsg")
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeSummary(b)
		decodeSystem(b)
		decodeMonitor(b)
	})
}

// FuzzResDump feeds one dump message through the whole streaming path of
// every resource type: message, table, entries, owner and driver tables.
func FuzzResDump(f *testing.F) {
	for _, p := range []string{"qp-dump_*", "srq-dump_*", "cq-dump_*", "mr-dump_*", "pd-dump_*", "ctx-dump_*", "cm_id-dump_*"} {
		seedMessages(f, p+".nlmsg")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
			m := netlink.Message{Header: netlink.Header{Type: req[0].Header.Type}, Data: b}
			return dumpReply([]netlink.Message{m}, req[0].Header.Sequence)
		})
		c := newClient(conn)
		defer c.Close()
		ctx, dev := context.Background(), Device{Name: "fuzz0"}
		for range c.QPs(ctx, dev, DumpOptions{}) {
		}
		for range c.CQs(ctx, dev, DumpOptions{}) {
		}
		for range c.MRs(ctx, dev, DumpOptions{}) {
		}
		for range c.PDs(ctx, dev, DumpOptions{}) {
		}
		for range c.Contexts(ctx, dev, DumpOptions{}) {
		}
		for range c.CMIDs(ctx, dev, DumpOptions{}) {
		}
		for range c.SRQs(ctx, dev, DumpOptions{}) {
		}
	})
}
