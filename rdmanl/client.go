package rdmanl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// maxDumpRetries bounds how often a dump the kernel flags as interrupted is
// restarted.
const maxDumpRetries = 3

// Client talks RDMA_NLDEV to the kernel. A Client runs one request at a
// time: finish or break out of a dump's iteration before the next call.
type Client struct {
	c *netlink.Conn
	// redial opens a fresh socket; stale says the current one may hold
	// replies of a request that ended early (a cancelled context in the
	// middle of a dump), which would be read as the next request's.
	redial func() (*netlink.Conn, error)
	stale  bool
}

// recvBufferSize is the recvmsg buffer every read uses. The kernel sizes
// each dump reply from the largest buffer the socket has been given, capped
// at 32 KiB (netlink_recvmsg and netlink_dump in net/netlink/af_netlink.c),
// and a resource dump restarts from its first entry for every reply, so a
// dump read with 32 KiB takes about an eighth of the restarts it takes when
// read with the 4 KiB replies netlink's default peek-then-read leaves it at.
// No reply on this socket is larger than the cap.
const recvBufferSize = 32 << 10

func dialConn() (*netlink.Conn, error) {
	return netlink.Dial(familyRDMA, &netlink.Config{Strict: true, MessageBufferSize: recvBufferSize})
}

// Dial opens a NETLINK_RDMA socket.
func Dial() (*Client, error) {
	c, err := dialConn()
	if err != nil {
		return nil, wrap("open netlink socket", err)
	}
	return &Client{c: c, redial: dialConn}, nil
}

// newClient wraps an existing connection (tests use nltest).
func newClient(c *netlink.Conn) *Client { return &Client{c: c} }

// New returns a client on a NETLINK_RDMA connection the caller opened (in
// another network namespace, say, or rdmanltest's replay of recorded
// replies). Unlike Dial's, a client made by New does not replace its socket
// after an interrupted request: such a request fails again.
func New(c *netlink.Conn) *Client { return newClient(c) }

// ready replaces a socket left out of step by an interrupted request.
func (c *Client) ready() error {
	if !c.stale {
		return nil
	}
	if c.redial == nil {
		return errors.New("netlink socket out of step after an interrupted request")
	}
	conn, err := c.redial()
	if err != nil {
		return err
	}
	c.c.Close()
	c.c, c.stale = conn, false
	return nil
}

// Close closes the socket.
func (c *Client) Close() error { return c.c.Close() }

func msgType(op uint16) netlink.HeaderType {
	return netlink.HeaderType(clientNLDev<<10 | op)
}

// withContext makes ctx's end unblock the socket.
func (c *Client) withContext(ctx context.Context) (stop func()) {
	_ = c.c.SetDeadline(time.Time{})
	cancel := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	return func() { cancel() }
}

// ctxErr prefers the context's error over the timeout it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// do sends a request (not a dump) and returns the replies.
func (c *Client) do(ctx context.Context, op uint16, flags netlink.HeaderFlags, attrs []byte) ([]netlink.Message, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	defer c.withContext(ctx)()
	msgs, err := c.c.Execute(netlink.Message{
		Header: netlink.Header{Type: msgType(op), Flags: netlink.Request | flags},
		Data:   attrs,
	})
	if err != nil && ctx.Err() != nil {
		c.stale = true
	}
	return msgs, ctxErr(ctx, err)
}

// dump sends a dump request and calls fn for each reply message until fn
// returns false. It reports whether the kernel flagged the dump as
// interrupted.
func (c *Client) dump(ctx context.Context, op uint16, attrs []byte, fn func(netlink.Message) bool) (interrupted bool, err error) {
	if err := c.ready(); err != nil {
		return false, err
	}
	defer c.withContext(ctx)()
	// Any error before the dump's end leaves its remaining replies queued.
	defer func() {
		if err != nil {
			c.stale = true
		}
	}()
	req, err := c.c.Send(netlink.Message{
		Header: netlink.Header{Type: msgType(op), Flags: netlink.Request | netlink.Dump},
		Data:   attrs,
	})
	if err != nil {
		return false, ctxErr(ctx, err)
	}
	for r := range readAhead(c.c) {
		m, err := r.m, r.err
		if err != nil {
			return interrupted, ctxErr(ctx, err)
		}
		if m.Header.Sequence != req.Header.Sequence {
			return interrupted, fmt.Errorf("reply sequence %d does not match request %d", m.Header.Sequence, req.Header.Sequence)
		}
		if m.Header.Flags&netlink.DumpInterrupted != 0 {
			interrupted = true
		}
		if m.Header.Type != msgType(op) {
			continue
		}
		if !fn(m) {
			// Stopped before the dump's end: the rest stays queued on
			// this socket, so the next request takes a new one.
			c.stale = true
			break
		}
	}
	return interrupted, nil
}

// reply is one message readAhead received, or the error that ended it.
type reply struct {
	m   netlink.Message
	err error
}

// readAhead yields the replies to the request just sent, received by a
// goroutine of their own one reply ahead of the caller. The kernel builds
// each dump reply inside the recvmsg that returns the one before it
// (netlink_recvmsg calls netlink_dump), so while the caller decodes one
// reply, the goroutine's recvmsg takes the next and the kernel builds the
// one after it on another CPU: a dump takes about the longer of the two,
// not their sum. The goroutine holds at most one reply the caller has not
// taken (the channel is unbuffered), so a dump held between two replies
// is at most two replies behind the kernel's state. The goroutine has
// ended when the iteration returns, whether it ran to the dump's end or
// stopped early (the dump is then read to its end and discarded, as
// netlink.Conn.ReceiveIter does); a socket deadline (withContext) ends a
// receive that blocks.
func readAhead(conn *netlink.Conn) iter.Seq[reply] {
	return func(yield func(reply) bool) {
		replies := make(chan reply)
		quit := make(chan struct{})
		go func() {
			defer close(replies)
			for m, err := range conn.ReceiveIter() {
				select {
				case replies <- reply{m, err}:
				case <-quit:
					return
				}
			}
		}()
		defer func() {
			close(quit)
			for range replies {
			}
		}()
		for r := range replies {
			if !yield(r) {
				return
			}
		}
	}
}

func encode(fn func(*netlink.AttributeEncoder)) []byte {
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, _ := ae.Encode() // only fails on oversized attributes, which we never build
	return b
}

// Devices lists the RDMA devices in the caller's network namespace.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	var devs []Device
	var decodeErr error
	_, err := c.dump(ctx, cmdGet, nil, func(m netlink.Message) bool {
		d, err := decodeDevice(m.Data)
		if err != nil {
			decodeErr = err
			return true
		}
		if !slices.ContainsFunc(devs, func(o Device) bool { return o.Index == d.Index }) {
			devs = append(devs, d)
		}
		return true
	})
	if err != nil {
		return nil, wrap("list devices", err)
	}
	if decodeErr != nil && len(devs) == 0 {
		return nil, wrap("list devices", decodeErr)
	}
	return devs, nil
}

// Device returns the device called name, or an error matching ErrNoDevice.
func (c *Client) Device(ctx context.Context, name string) (Device, error) {
	devs, err := c.Devices(ctx)
	if err != nil {
		return Device{}, err
	}
	return FindDevice(devs, name)
}

// FindDevice returns the device of devs called name, or an error matching
// ErrNoDevice that names it.
func FindDevice(devs []Device, name string) (Device, error) {
	for _, d := range devs {
		if d.Name == name {
			return d, nil
		}
	}
	return Device{}, &Error{Op: "find device " + name, Err: ErrNoDevice}
}

// Ports lists the ports of dev.
func (c *Client) Ports(ctx context.Context, dev Device) ([]Port, error) {
	var ports []Port
	var decodeErr error
	attrs := encode(func(ae *netlink.AttributeEncoder) { ae.Uint32(attrDevIndex, dev.Index) })
	_, err := c.dump(ctx, cmdPortGet, attrs, func(m netlink.Message) bool {
		p, err := decodePort(m.Data)
		if err != nil {
			decodeErr = err
			return true
		}
		if !slices.ContainsFunc(ports, func(o Port) bool { return o.Index == p.Index }) {
			ports = append(ports, p)
		}
		return true
	})
	if err != nil {
		return nil, wrap("list ports of "+dev.Name, err)
	}
	if decodeErr != nil {
		return ports, &PartialError{Op: "list ports of " + dev.Name, Skipped: 1, First: decodeErr}
	}
	return ports, nil
}

// Summaries counts the tracked resources of every device.
func (c *Client) Summaries(ctx context.Context) ([]Summary, error) {
	var out []Summary
	var decodeErr error
	_, err := c.dump(ctx, cmdResGet, nil, func(m netlink.Message) bool {
		s, err := decodeSummary(m.Data)
		if err != nil {
			decodeErr = err
			return true
		}
		out = append(out, s)
		return true
	})
	if err != nil {
		return nil, wrap("summarize resources", err)
	}
	if decodeErr != nil {
		return out, &PartialError{Op: "summarize resources", Skipped: 1, First: decodeErr}
	}
	return out, nil
}

// Summary counts the resources in use on one device: one request and one
// reply (the kernel's RES_GET doit), where Summaries dumps every device's.
// A device that is gone gives an error matching ErrNoDevice.
func (c *Client) Summary(ctx context.Context, dev Device) (Summary, error) {
	attrs := encode(func(ae *netlink.AttributeEncoder) { ae.Uint32(attrDevIndex, dev.Index) })
	msgs, err := c.do(ctx, cmdResGet, 0, attrs)
	op := "summarize resources of " + dev.Name
	if errors.Is(err, unix.EINVAL) {
		// The kernel's RES_GET doit answers EINVAL for an index no
		// device has (the request itself always carries one).
		return Summary{}, &Error{Op: op, Err: ErrNoDevice}
	}
	if err != nil {
		return Summary{}, wrap(op, err)
	}
	if len(msgs) != 1 {
		return Summary{}, &Error{Op: op, Err: fmt.Errorf("%d replies, want 1", len(msgs))}
	}
	s, err := decodeSummary(msgs[0].Data)
	if err != nil {
		return Summary{}, &Error{Op: op, Err: err}
	}
	if s.DevIndex != dev.Index {
		return Summary{}, &Error{Op: op, Err: fmt.Errorf("the reply is about device %d", s.DevIndex)}
	}
	return s, nil
}

// DumpOptions tune a resource dump.
type DumpOptions struct {
	// Port asks the kernel for one port's resources only (QPs and CM IDs);
	// 0 means all.
	Port uint32
	// Raw uses the *_GET_RAW command and fills the entries' Raw field with
	// the provider's raw context (needs CAP_NET_ADMIN and provider support).
	Raw bool
	// NoSRQJoin skips the SRQ dump that fills QP.SRQN.
	NoSRQJoin bool
	// SRQs, when not nil, points at the device's SRQs as the caller
	// dumped them (for NewULPIndex too): the QP dump fills QP.SRQN from
	// them and makes no SRQ dump of its own.
	SRQs *[]SRQ
}

// entryCodec describes one resource dump.
type entryCodec[T any] struct {
	what          string // "QPs"
	op, rawOp     uint16
	table, entry  uint16
	decode        func(entry []byte) (T, error)
	key           func(*T) uint32 // identity within the device
	setDev        func(*T, uint32, string)
	portFiltering bool
}

// withDecoder adapts a decoder of an entry's attributes to its bytes.
func withDecoder[T any](decode func(*netlink.AttributeDecoder) (T, error)) func([]byte) (T, error) {
	return func(b []byte) (T, error) {
		ad, err := netlink.NewAttributeDecoder(b)
		if err != nil {
			var zero T
			return zero, err
		}
		return decode(ad)
	}
}

// resDump streams one device's entries of a resource type. Entries are
// yielded as their message is decoded, never collected first. The kernel
// restarts dumps by position, so an entry can repeat while resources churn:
// repeats are dropped. A dump the kernel flags as interrupted is restarted.
func resDump[T any](ctx context.Context, c *Client, dev Device, opts DumpOptions, codec entryCodec[T], finish func(*T)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		op := codec.op
		if opts.Raw {
			if codec.rawOp == 0 {
				var zero T
				yield(zero, &Error{Op: "dump raw " + codec.what + " of " + dev.Name, Err: ErrNotSupported})
				return
			}
			op = codec.rawOp
		}
		what := "dump " + codec.what + " of " + dev.Name
		attrs := encode(func(ae *netlink.AttributeEncoder) {
			ae.Uint32(attrDevIndex, dev.Index)
			if opts.Port != 0 && codec.portFiltering {
				ae.Uint32(attrPortIndex, opts.Port)
			}
			// Include driver-internal resources where the kernel hides them
			// by default; older kernels ignore the attribute.
			ae.Uint8(attrDriverDetails, 1)
		})
		var seen keySet
		skipped := 0
		var firstErr error
		stopped := false
		// entry decodes one table entry into v, one allocation for the
		// whole dump rather than one per entry (the codec's functions take
		// a pointer); it reports false when the consumer stopped.
		v := new(T)
		entry := func(b []byte, devIndex uint32, devName string) bool {
			var err error
			*v, err = codec.decode(b)
			if err != nil { // a malformed entry is skipped, not the table
				skipped++
				firstErr = cmpErr(firstErr, err)
				return true
			}
			if !seen.add(codec.key(v)) {
				return true
			}
			codec.setDev(v, devIndex, devName)
			if finish != nil {
				finish(v)
			}
			return yield(*v, nil)
		}
		for attempt := 0; ; attempt++ {
			interrupted, err := c.dump(ctx, op, attrs, func(m netlink.Message) bool {
				// The message and its table are walked in place: an
				// AttributeDecoder would copy the whole table, then each
				// entry, before the entry's own decoder copies its fields.
				var devIndex uint32
				var devName string
				err := walkAttrs(m.Data, func(typ uint16, b []byte) bool {
					switch typ {
					case attrDevIndex:
						if len(b) != 4 {
							skipped++
							firstErr = cmpErr(firstErr, errMalformedAttr)
							return true
						}
						devIndex = binary.NativeEndian.Uint32(b)
					case attrDevName:
						devName = string(bytes.TrimRight(b, "\x00"))
					case codec.table:
						err := walkAttrs(b, func(typ uint16, b []byte) bool {
							if typ == codec.entry && !entry(b, devIndex, devName) {
								stopped = true
							}
							return !stopped
						})
						if err != nil {
							skipped++
							firstErr = cmpErr(firstErr, err)
						}
					}
					return !stopped
				})
				if err != nil {
					skipped++
					firstErr = cmpErr(firstErr, err)
				}
				return !stopped
			})
			if stopped {
				return
			}
			if err != nil {
				var zero T
				yield(zero, c.goneOr(ctx, dev, what, err))
				return
			}
			if !interrupted {
				break
			}
			if attempt == maxDumpRetries {
				var zero T
				yield(zero, &Error{Op: what, Err: ErrDumpInterrupted})
				return
			}
		}
		if skipped > 0 {
			var zero T
			yield(zero, &PartialError{Op: what, Skipped: skipped, First: firstErr})
		}
	}
}

// keySet holds the keys a dump has yielded, sorted. The kernel walks a
// device's resources in ID order, so keys come ascending and are appended;
// only a repeat or a restarted dump needs the binary search.
type keySet []uint32

// add reports whether k is new, and adds it.
func (s *keySet) add(k uint32) bool {
	if n := len(*s); n == 0 || k > (*s)[n-1] {
		*s = append(*s, k)
		return true
	}
	i, found := slices.BinarySearch(*s, k)
	if found {
		return false
	}
	*s = slices.Insert(*s, i, k)
	return true
}

var errMalformedAttr = errors.New("malformed netlink attribute")

// walkAttrs calls fn with the type (flag bits masked, as
// AttributeDecoder.Type does) and payload of each attribute in b, until fn
// returns false. Payloads are slices of b, not copies.
func walkAttrs(b []byte, fn func(typ uint16, payload []byte) bool) error {
	const hdrLen, typeMask = 4, 0x3fff // sizeof(struct nlattr); ~(NLA_F_NESTED|NLA_F_NET_BYTEORDER)
	for len(b) > 0 {
		if len(b) < hdrLen {
			return errMalformedAttr
		}
		l := int(binary.NativeEndian.Uint16(b))
		if l < hdrLen || l > len(b) {
			return errMalformedAttr
		}
		if !fn(binary.NativeEndian.Uint16(b[2:])&typeMask, b[hdrLen:l]) {
			return nil
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// QPs streams the queue pairs of dev. Each QP's SRQN is filled in from an
// SRQ dump made first (QP entries carry no SRQ number), or from opts.SRQs
// when the caller has them, unless opts.NoSRQJoin. An error ends the
// sequence, except a *PartialError, which comes last and means malformed
// entries were skipped.
func (c *Client) QPs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[QP, error] {
	return func(yield func(QP, error) bool) {
		var srqs []SRQ
		switch {
		case opts.NoSRQJoin:
		case opts.SRQs != nil:
			srqs = *opts.SRQs
		default:
			for s, err := range c.SRQs(ctx, dev, DumpOptions{}) {
				if err != nil {
					if SRQJoinable(err) {
						break // what decoded, or no join, rather than no QPs
					}
					yield(QP{}, err)
					return
				}
				srqs = append(srqs, s)
			}
		}
		join := func(qp *QP) {
			for _, s := range srqs {
				if s.HasQP(qp.LQPN) {
					qp.SRQN, qp.OnSRQ = s.SRQN, true
					return
				}
			}
		}
		codec := entryCodec[QP]{
			what: "QPs", op: cmdResQPGet, rawOp: cmdResQPGetRaw, table: attrResQP, entry: attrResQPEntry,
			decode: decodeQP, portFiltering: true,
			key:    func(q *QP) uint32 { return q.LQPN },
			setDev: func(q *QP, i uint32, n string) { q.DevIndex, q.DevName = i, n },
		}
		for qp, err := range resDump(ctx, c, dev, opts, codec, join) {
			if !yield(qp, err) {
				return
			}
		}
	}
}

// SRQJoinable reports whether an SRQ dump that ended with err still
// serves a QP dump's join, as the SRQ dump QPs makes itself does: after a
// *PartialError the join has the SRQs that decoded, after ErrNotSupported
// (a kernel without SRQ dumps) none. Any other error fails the QP dump.
func SRQJoinable(err error) bool {
	var pe *PartialError
	return errors.As(err, &pe) || errors.Is(err, ErrNotSupported)
}

// CQs streams the completion queues of dev.
func (c *Client) CQs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[CQ, error] {
	return resDump(ctx, c, dev, opts, entryCodec[CQ]{
		what: "CQs", op: cmdResCQGet, rawOp: cmdResCQGetRaw, table: attrResCQ, entry: attrResCQEntry,
		decode: withDecoder(decodeCQ),
		key:    func(v *CQ) uint32 { return v.CQN },
		setDev: func(v *CQ, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// MRs streams the memory regions of dev. Keys are present only with
// CAP_NET_ADMIN.
func (c *Client) MRs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[MR, error] {
	return resDump(ctx, c, dev, opts, entryCodec[MR]{
		what: "MRs", op: cmdResMRGet, rawOp: cmdResMRGetRaw, table: attrResMR, entry: attrResMREntry,
		decode: withDecoder(decodeMR),
		key:    func(v *MR) uint32 { return v.MRN },
		setDev: func(v *MR, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// PDs streams the protection domains of dev.
func (c *Client) PDs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[PD, error] {
	return resDump(ctx, c, dev, opts, entryCodec[PD]{
		what: "PDs", op: cmdResPDGet, table: attrResPD, entry: attrResPDEntry,
		decode: withDecoder(decodePD),
		key:    func(v *PD) uint32 { return v.PDN },
		setDev: func(v *PD, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// Contexts streams the user verbs contexts of dev.
func (c *Client) Contexts(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[Context, error] {
	return resDump(ctx, c, dev, opts, entryCodec[Context]{
		what: "contexts", op: cmdResCtxGet, table: attrResCtx, entry: attrResCtxEntry,
		decode: withDecoder(decodeCtx),
		key:    func(v *Context) uint32 { return v.CtxN },
		setDev: func(v *Context, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// SRQs streams the shared receive queues of dev with their attached QPs.
func (c *Client) SRQs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[SRQ, error] {
	return resDump(ctx, c, dev, opts, entryCodec[SRQ]{
		what: "SRQs", op: cmdResSRQGet, rawOp: cmdResSRQGetRaw, table: attrResSRQ, entry: attrResSRQEntry,
		decode: withDecoder(decodeSRQ),
		key:    func(v *SRQ) uint32 { return v.SRQN },
		setDev: func(v *SRQ, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// CMIDs streams the rdma_cm IDs of dev.
func (c *Client) CMIDs(ctx context.Context, dev Device, opts DumpOptions) iter.Seq2[CMID, error] {
	return resDump(ctx, c, dev, opts, entryCodec[CMID]{
		what: "CM IDs", op: cmdResCMIDGet, table: attrResCMID, entry: attrResCMIDEntry,
		decode: withDecoder(decodeCMID), portFiltering: true,
		key:    func(v *CMID) uint32 { return v.CMIDN },
		setDev: func(v *CMID, i uint32, n string) { v.DevIndex, v.DevName = i, n },
	}, nil)
}

// Rename renames dev. The kernel's answer is checked: a taken name is an
// error matching os.ErrExist, a device that is gone one matching
// ErrNoDevice.
func (c *Client) Rename(ctx context.Context, dev Device, name string) error {
	attrs := encode(func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrDevIndex, dev.Index)
		ae.String(attrDevName, name)
	})
	if _, err := c.do(ctx, cmdSet, netlink.Acknowledge, attrs); err != nil {
		return c.goneOr(ctx, dev, fmt.Sprintf("rename %s to %s", dev.Name, name), err)
	}
	return nil
}

// goneOr wraps err, the kernel's answer to a request about dev, and makes
// it ErrNoDevice when dev is gone: the SET and DELLINK doits and the
// resource dumps (also when the device goes between two messages of a
// dump) answer EINVAL, not ENODEV, for an index no registered device has
// (ib_device_get_by_index fails for a device deleted or being
// unregistered), so an EINVAL is looked into with a device listing.
func (c *Client) goneOr(ctx context.Context, dev Device, op string, err error) error {
	if errors.Is(err, unix.EINVAL) {
		devs, lerr := c.Devices(ctx)
		if lerr == nil && !slices.ContainsFunc(devs, func(d Device) bool { return d.Index == dev.Index }) {
			return &Error{Op: op, Err: ErrNoDevice}
		}
	}
	return wrap(op, err)
}

// LinkAdd creates a software RDMA device (linkType "rxe" or "siw") called
// name on the netdev.
func (c *Client) LinkAdd(ctx context.Context, name, linkType, netdev string) error {
	attrs := encode(func(ae *netlink.AttributeEncoder) {
		ae.String(attrDevName, name)
		ae.String(attrLinkType, linkType)
		ae.String(attrNdevName, netdev)
	})
	if _, err := c.do(ctx, cmdNewLink, netlink.Acknowledge, attrs); err != nil {
		return wrap(fmt.Sprintf("add %s link %s on %s", linkType, name, netdev), err)
	}
	return nil
}

// LinkDelete removes a software RDMA device; a device that is gone gives
// an error matching ErrNoDevice.
func (c *Client) LinkDelete(ctx context.Context, dev Device) error {
	attrs := encode(func(ae *netlink.AttributeEncoder) { ae.Uint32(attrDevIndex, dev.Index) })
	if _, err := c.do(ctx, cmdDelLink, netlink.Acknowledge, attrs); err != nil {
		return c.goneOr(ctx, dev, "delete link "+dev.Name, err)
	}
	return nil
}

// system returns the RDMA subsystem settings. No command shows them; the
// decoder is held to the lab's recordings (TestGoldenLab).
func (c *Client) system(ctx context.Context) (systemSettings, error) {
	msgs, err := c.do(ctx, cmdSysGet, 0, nil)
	if err != nil {
		return systemSettings{}, wrap("get system settings", err)
	}
	for _, m := range msgs {
		if m.Header.Type == msgType(cmdSysGet) {
			s, err := decodeSystem(m.Data)
			if err != nil {
				return systemSettings{}, wrap("get system settings", err)
			}
			return s, nil
		}
	}
	return systemSettings{}, wrap("get system settings", errors.New("no reply"))
}

// OpJoinMonitor is the Op of the Error Monitor yields when the kernel has
// no RDMA monitor group (before 6.12) or refuses to let the caller join.
const OpJoinMonitor = "join the RDMA monitor group"

// Monitor joins the RDMA notify multicast group (6.12+; needs
// CAP_NET_ADMIN) and yields device events until ctx ends. Use a Client for
// nothing else while monitoring.
func (c *Client) Monitor(ctx context.Context) iter.Seq2[MonitorEvent, error] {
	return func(yield func(MonitorEvent, error) bool) {
		if err := c.c.JoinGroup(groupNotify); err != nil {
			yield(MonitorEvent{}, wrap(OpJoinMonitor, err))
			return
		}
		defer c.c.LeaveGroup(groupNotify)
		defer c.withContext(ctx)()
		for {
			msgs, err := c.c.Receive()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				yield(MonitorEvent{}, wrap("receive monitor events", err))
				return
			}
			for _, m := range msgs {
				if m.Header.Type != msgType(cmdMonitor) {
					continue
				}
				e, err := decodeMonitor(m.Data)
				if err != nil {
					err = wrap("decode monitor event", err)
				}
				if !yield(e, err) {
					return
				}
			}
		}
	}
}
