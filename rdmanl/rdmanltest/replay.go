package rdmanltest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Kernel constants the replay routes by (include/uapi/rdma/rdma_netlink.h).
const (
	clientNLDev  = 5 // RDMA_NL_NLDEV: the upper bits of a message type
	attrDevIndex = 1 // RDMA_NLDEV_ATTR_DEV_INDEX, u32
)

// Replay returns a client whose requests are answered from the recordings
// of one lab kernel ("6.1", "6.12", "7.x") in dir: the files named
// WHAT_KERNEL.nlmsg and WHAT_KERNEL_PROVIDER.nlmsg. A request is answered
// with every recorded message of its type, and when it names a device
// (RDMA_NLDEV_ATTR_DEV_INDEX) only with that device's: a dump ends with
// NLMSG_DONE (with no entries when nothing was recorded), a single get gets
// the messages alone, and fails the test when there are none. The client is
// closed when the test ends.
func Replay(tb testing.TB, dir, kernel string) *rdmanl.Client {
	tb.Helper()
	byType := map[netlink.HeaderType][]netlink.Message{}
	var files []string
	for _, pattern := range []string{"*_" + kernel + ".nlmsg", "*_" + kernel + "_*.nlmsg"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	if len(files) == 0 {
		tb.Fatalf("rdmanltest: no recordings of kernel %s in %s", kernel, dir)
	}
	for _, f := range files {
		msgs, err := readRecorded(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range msgs {
			byType[m.Header.Type] = append(byType[m.Header.Type], m)
		}
	}
	conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
		if len(req) != 1 {
			return nil, fmt.Errorf("rdmanltest: %d request messages, want 1", len(req))
		}
		m := req[0]
		if uint16(m.Header.Type)>>10 != clientNLDev {
			return nil, fmt.Errorf("rdmanltest: request of type %#x is not RDMA_NL_NLDEV's", m.Header.Type)
		}
		// A type no file holds, or a device with none of it, is an empty
		// table: the kernel's answer is a dump with no entries.
		recorded := byType[m.Header.Type]
		if idx, ok := devIndex(m.Data); ok {
			recorded = slices.DeleteFunc(slices.Clone(recorded), func(r netlink.Message) bool {
				i, ok := devIndex(r.Data)
				return !ok || i != idx
			})
		}
		if len(recorded) == 0 && m.Header.Flags&netlink.Dump == 0 {
			tb.Errorf("rdmanltest: no recording answers a get of type %#x (op %d) on kernel %s", m.Header.Type, m.Header.Type&0x3ff, kernel)
		}
		out := make([]netlink.Message, 0, len(recorded)+1)
		for _, r := range recorded {
			r.Header.Sequence = m.Header.Sequence
			r.Header.PID = 0 // the recording guest's port id; nltest replies to pid 0
			r.Header.Flags &^= netlink.Multi
			out = append(out, r)
		}
		if m.Header.Flags&netlink.Dump != 0 {
			out = append(out, netlink.Message{Header: netlink.Header{Type: netlink.Done, Sequence: m.Header.Sequence}, Data: make([]byte, 4)})
			for i := range out {
				out[i].Header.Flags |= netlink.Multi
			}
		}
		return out, nil
	})
	c := rdmanl.New(conn)
	tb.Cleanup(func() { c.Close() })
	return c
}

// devIndex is the device index a request or reply names, if it names one.
func devIndex(attrs []byte) (uint32, bool) {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return 0, false
	}
	for ad.Next() {
		if ad.Type() == attrDevIndex {
			return ad.Uint32(), true
		}
	}
	return 0, false
}

// readRecorded reads back-to-back netlink messages, headers included, as
// rdmanl's TestLabRecord writes them.
func readRecorded(path string) ([]netlink.Message, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var msgs []netlink.Message
	for len(b) > 0 {
		if len(b) < 16 {
			return nil, fmt.Errorf("rdmanltest: %s: %d bytes left after the last message", path, len(b))
		}
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		if n < 16 || n > len(b) {
			return nil, fmt.Errorf("rdmanltest: %s: message length %d with %d bytes left", path, n, len(b))
		}
		var m netlink.Message
		if err := m.UnmarshalBinary(b[:n]); err != nil {
			return nil, fmt.Errorf("rdmanltest: %s: %w", path, err)
		}
		msgs = append(msgs, m)
		b = b[min((n+3)&^3, len(b)):]
	}
	return msgs, nil
}

// Kernels are the lab kernels with recordings.
var Kernels = []string{"6.1", "6.12", "7.x"}
