package rdmanl

import (
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
)

// -update rewrites the golden files: in the lab it records netlink replies
// from the running kernel into testdata/*.nlmsg; on the host it rewrites the
// decoded testdata/*.golden.json from them.
var update = flag.Bool("update", false, "rewrite golden files")

// writeRecorded stores reply messages as they came off the socket: each one
// a complete netlink message (header included), back to back, without the
// NLMSG_DONE that ends a dump.
func writeRecorded(t *testing.T, path string, msgs []netlink.Message) {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordedName names a recording by what, kernel and provider:
// "qp-dump_6.12_rxe.nlmsg", "dev-dump_6.1.nlmsg".
func recordedName(what, kernel, provider string) string {
	name := what + "_" + kernel
	if provider != "" {
		name += "_" + provider
	}
	return name + ".nlmsg"
}

// readRecorded reads a file written by writeRecorded.
func readRecorded(t testing.TB, path string) []netlink.Message {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := splitMessages(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return msgs
}

// splitMessages parses back-to-back netlink messages.
func splitMessages(b []byte) ([]netlink.Message, error) {
	var msgs []netlink.Message
	for len(b) >= 16 {
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		if n < 16 || n > len(b) {
			return nil, errShortMessage
		}
		var m netlink.Message
		if err := m.UnmarshalBinary(b[:n]); err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
		aligned := (n + 3) &^ 3
		if aligned > len(b) {
			aligned = len(b)
		}
		b = b[aligned:]
	}
	return msgs, nil
}

type shortMessageError struct{}

func (shortMessageError) Error() string { return "truncated netlink message" }

var errShortMessage error = shortMessageError{}

// withSeq stamps the request's sequence number onto recorded replies.
func withSeq(msgs []netlink.Message, seq uint32) []netlink.Message {
	out := make([]netlink.Message, len(msgs))
	for i, m := range msgs {
		m.Header.Sequence = seq
		m.Header.PID = 0 // the recording guest's port id; nltest replies to pid 0
		m.Header.Flags &^= netlink.Multi
		out[i] = m
	}
	return out
}

// dumpReply is a dump's answer: msgs with NLM_F_MULTI, then NLMSG_DONE.
func dumpReply(msgs []netlink.Message, seq uint32) ([]netlink.Message, error) {
	out := withSeq(msgs, seq)
	out = append(out, netlink.Message{Header: netlink.Header{Type: netlink.Done, Sequence: seq}, Data: make([]byte, 4)})
	for i := range out {
		out[i].Header.Flags |= netlink.Multi
	}
	return out, nil
}

// replay answers requests from recorded files, chosen by request type and
// the request's device index; it fails the test on any other request.
type replay map[replayKey]string

type replayKey struct {
	op       uint16
	devIndex uint32 // 0 when the request names no device
}

func (r replay) client(t *testing.T) *Client { return r.counting(t, nil) }

// counting is client, counting the requests it answers by key when
// requests is not nil.
func (r replay) counting(t *testing.T, requests map[replayKey]int) *Client {
	t.Helper()
	conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
		if len(req) != 1 {
			t.Fatalf("got %d request messages, want 1", len(req))
		}
		m := req[0]
		if m.Header.Flags&netlink.Request == 0 {
			t.Fatalf("request without NLM_F_REQUEST: %+v", m.Header)
		}
		key := replayKey{op: uint16(m.Header.Type) & 0x3ff}
		if uint16(m.Header.Type)>>10 != clientNLDev {
			t.Fatalf("request for client %d, want RDMA_NL_NLDEV", uint16(m.Header.Type)>>10)
		}
		if ad, err := netlink.NewAttributeDecoder(m.Data); err == nil {
			for ad.Next() {
				if ad.Type() == attrDevIndex {
					key.devIndex = ad.Uint32()
				}
			}
		}
		path, ok := r[key]
		if !ok {
			t.Fatalf("unexpected request %+v", key)
		}
		if requests != nil {
			requests[key]++
		}
		if m.Header.Flags&netlink.Dump != 0 {
			return dumpReply(readRecorded(t, path), m.Header.Sequence)
		}
		return withSeq(readRecorded(t, path), m.Header.Sequence), nil
	})
	c := newClient(conn)
	t.Cleanup(func() { c.Close() })
	return c
}
