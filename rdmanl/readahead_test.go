package rdmanl

import (
	"context"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"go.uber.org/goleak"
)

// stepSocket answers a dump one datagram per receive, as the kernel does,
// and says on received how many datagrams have been received so far. A
// receive after the last datagram blocks until the socket is closed (a
// dump that never ends), which only a test that reads too far reaches.
type stepSocket struct {
	mu       sync.Mutex
	pending  []netlink.Message
	received chan int
	served   int
	closed   chan struct{}
	once     sync.Once
}

func newStepSocket() *stepSocket {
	return &stepSocket{received: make(chan int, 64), closed: make(chan struct{})}
}

func (s *stepSocket) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *stepSocket) Send(m netlink.Message) error { return s.SendMessages([]netlink.Message{m}) }

// SendMessages answers a QP dump with msgs datagrams of one QP each (QPNs
// 1 to 3), then the end of the dump.
func (s *stepSocket) SendMessages(req []netlink.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var msgs []netlink.Message
	for qpn := uint32(1); qpn <= 3; qpn++ {
		msgs = append(msgs, qpMessage(qpEntry(qpn, 3)))
	}
	s.pending, _ = dumpReply(msgs, req[0].Header.Sequence)
	return nil
}

func (s *stepSocket) Receive() ([]netlink.Message, error) {
	var out []netlink.Message
	for m, err := range s.ReceiveIter() {
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (s *stepSocket) ReceiveIter() iter.Seq2[netlink.Message, error] {
	return func(yield func(netlink.Message, error) bool) {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			<-s.closed
			yield(netlink.Message{}, context.Canceled)
			return
		}
		m := s.pending[0]
		s.pending = s.pending[1:]
		s.served++
		served := s.served
		s.mu.Unlock()
		s.received <- served
		yield(m, nil)
	}
}

// TestDumpReadsAhead: while the caller handles one dump reply, the next
// has been received already (on a kernel, the recvmsg that returns it is
// the one that builds the reply after it), so the kernel's work and the
// decoding overlap.
func TestDumpReadsAhead(t *testing.T) {
	defer goleak.VerifyNone(t)
	sock := newStepSocket()
	c := newClient(netlink.NewConn(sock, 1))
	defer c.Close()
	var got []uint32
	for qp, err := range c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{NoSRQJoin: true}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, qp.LQPN)
		if qp.LQPN != 1 {
			continue
		}
		// Handling the first reply: the second must come in meanwhile.
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case n := <-sock.received:
				if n >= 2 {
					break wait
				}
			case <-deadline:
				t.Fatal("the second reply was not received while the first was being handled")
			}
		}
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("QPs %v, want 1, 2, 3 in order", got)
	}
}

// TestDumpStoppedEarly: a caller that stops after the first QP leaves no
// goroutine behind, and the client takes the next request.
func TestDumpStoppedEarly(t *testing.T) {
	defer goleak.VerifyNone(t)
	sock := newStepSocket()
	c := newClient(netlink.NewConn(sock, 1))
	defer c.Close()
	for qp, err := range c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{NoSRQJoin: true}) {
		if err != nil || qp.LQPN != 1 {
			t.Fatalf("first QP %d, %v; want 1", qp.LQPN, err)
		}
		break
	}
}
