// Command nlfloor is the floor that make bench holds rdmatool's QP and MR
// listings against: the least a program can do to read every QP (or MR)
// the kernel tracks. It dumps the RDMA devices, then each device's QPs
// (-res qp, RDMA_NLDEV_CMD_RES_QP_GET) or MRs (-res mr,
// RDMA_NLDEV_CMD_RES_MR_GET), with the same request attributes rdmatool
// sends (DEV_INDEX and DRIVER_DETAILS), reading every reply datagram into
// one 32 KiB buffer and throwing the bytes away. No attribute is decoded
// and nothing is printed, unless -v counts the datagrams, messages and
// bytes on stderr, and names the resource dumped.
//
//	nlfloor [-v] [-buf 32768] [-res qp|mr]
//
// The buffer size matters: the kernel sizes each dump reply from the largest
// recvmsg buffer the socket has been given (capped at 32 KiB), and restarts
// a resource dump from its first entry for every reply, so smaller reads
// mean more replies and more restarts.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// From include/uapi/rdma/rdma_netlink.h.
const (
	clientNLDev       = 5  // RDMA_NL_NLDEV
	cmdGet            = 1  // RDMA_NLDEV_CMD_GET
	cmdResQPGet       = 10 // RDMA_NLDEV_CMD_RES_QP_GET
	cmdResMRGet       = 13 // RDMA_NLDEV_CMD_RES_MR_GET
	attrDevIndex      = 1  // RDMA_NLDEV_ATTR_DEV_INDEX, u32
	attrDriverDetails = 97 // RDMA_NLDEV_ATTR_DRIVER_DETAILS, u8
)

const (
	nlmsgHdrLen = unix.NLMSG_HDRLEN
	nlaHdrLen   = unix.SizeofNlAttr
)

// counts is what -v reports.
type counts struct{ datagrams, messages, bytes int }

// resource is what -res dumps: its dump command and its name in -v's line.
type resource struct {
	cmd  uint16
	name string
}

// resources are -res's values.
var resources = map[string]resource{
	"qp": {cmdResQPGet, "QPs"},
	"mr": {cmdResMRGet, "MRs"},
}

func main() {
	verbose := flag.Bool("v", false, "count datagrams, messages and bytes on stderr")
	bufSize := flag.Int("buf", 32768, "recvmsg buffer size in bytes")
	res := flag.String("res", "qp", "the resource dumped: qp or mr")
	flag.Parse()
	r, ok := resources[*res]
	if !ok {
		fmt.Fprintf(os.Stderr, "nlfloor: -res %q: want qp or mr\n", *res)
		os.Exit(2)
	}
	if err := run(r, *bufSize, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "nlfloor:", err)
		os.Exit(1)
	}
}

func run(r resource, bufSize int, verbose bool) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return fmt.Errorf("open netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("bind netlink socket: %w", err)
	}
	buf := make([]byte, bufSize)
	var devs []uint32
	var total counts
	// The device dump's replies are the only ones this program decodes:
	// it needs their indexes to ask for each device's QPs or MRs.
	seq := uint32(1)
	err = dump(fd, buf, request(cmdGet, seq, nil), seq, &total, func(msg []byte) {
		if idx, ok := u32Attr(msg[nlmsgHdrLen:], attrDevIndex); ok {
			devs = append(devs, idx)
		}
	})
	if err != nil {
		return fmt.Errorf("dump devices: %w", err)
	}
	for _, idx := range devs {
		seq++
		attrs := binary.NativeEndian.AppendUint16(nil, nlaHdrLen+4)
		attrs = binary.NativeEndian.AppendUint16(attrs, attrDevIndex)
		attrs = binary.NativeEndian.AppendUint32(attrs, idx)
		attrs = binary.NativeEndian.AppendUint16(attrs, nlaHdrLen+1)
		attrs = binary.NativeEndian.AppendUint16(attrs, attrDriverDetails)
		attrs = append(attrs, 1, 0, 0, 0) // u8 and its padding
		if err := dump(fd, buf, request(r.cmd, seq, attrs), seq, &total, nil); err != nil {
			return fmt.Errorf("dump %s of device %d: %w", r.name, idx, err)
		}
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "nlfloor: %d devices, %d datagrams, %d messages, %d bytes (buffer %d, %s)\n",
			len(devs), total.datagrams, total.messages, total.bytes, bufSize, r.name)
	}
	return nil
}

// request builds one NLM_F_REQUEST|NLM_F_DUMP message.
func request(op uint16, seq uint32, attrs []byte) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(nlmsgHdrLen+len(attrs)))
	b = binary.NativeEndian.AppendUint16(b, clientNLDev<<10|op)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel fills it in
	return append(b, attrs...)
}

// dump sends req and reads its replies until NLMSG_DONE, calling each (if
// not nil) with every reply message.
func dump(fd int, buf, req []byte, seq uint32, c *counts, each func([]byte)) error {
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	for {
		n, _, flags, _, err := unix.Recvmsg(fd, buf, nil, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if flags&unix.MSG_TRUNC != 0 {
			return fmt.Errorf("reply truncated by the %d-byte buffer", len(buf))
		}
		c.datagrams++
		c.bytes += n
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			typ := binary.NativeEndian.Uint16(b[4:6])
			if l < nlmsgHdrLen || l > len(b) {
				return errors.New("malformed reply")
			}
			if binary.NativeEndian.Uint32(b[8:12]) != seq {
				return errors.New("reply to another request")
			}
			c.messages++
			switch typ {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if l >= nlmsgHdrLen+4 {
					if errno := int32(binary.NativeEndian.Uint32(b[nlmsgHdrLen:])); errno != 0 {
						return unix.Errno(-errno)
					}
				}
				return nil
			}
			if each != nil {
				each(b[:l])
			}
			b = b[min(len(b), (l+3)&^3):]
		}
	}
}

// u32Attr finds a top-level u32 attribute.
func u32Attr(b []byte, typ uint16) (uint32, bool) {
	for len(b) >= nlaHdrLen {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < nlaHdrLen || l > len(b) {
			return 0, false
		}
		if binary.NativeEndian.Uint16(b[2:4])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER) == typ && l >= nlaHdrLen+4 {
			return binary.NativeEndian.Uint32(b[nlaHdrLen:]), true
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return 0, false
}
