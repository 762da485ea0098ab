package uverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DeviceAttr holds the device limits only the verbs provider reports
// (ibv_query_device): netlink and sysfs carry none of them.
type DeviceAttr struct {
	NodeGUID    uint64 // host order, as netlink reports it
	VendorID    uint32
	VendorPart  uint32
	MaxQP       uint32
	MaxQPWR     uint32
	MaxCQ       uint32
	MaxMR       uint32
	MaxPD       uint32
	MaxSRQ      uint32
	PhysPortCnt uint8
}

// ErrContext means the provider would not open a verbs context for a
// request carrying no provider data: some (mlx5) want their own request
// layout, which only their rdma-core provider library knows.
var ErrContext = errors.New("the provider wants provider-specific data to open a verbs context")

// The legacy write() ABI of ib_uverbs (include/uapi/rdma/ib_user_verbs.h):
// a header (command, in_words, out_words; words of 4 bytes, in_words
// counting the header), the command, whose first field is the address of
// the response buffer.
const (
	cmdGetContext  = 0
	cmdQueryDevice = 1

	cmdHdrSize       = 8
	cmdSize          = 8   // struct ib_uverbs_get_context / _query_device: the response address
	getContextResp   = 8   // struct ib_uverbs_get_context_resp: async_fd, num_comp_vectors
	queryDeviceResp  = 176 // struct ib_uverbs_query_device_resp
	providerRespRoom = 256 // room for the provider's part of the get-context answer (siw wants 8 bytes)
)

// QueryDevice opens the uverbs character device at path (a
// /dev/infiniband/uverbsN), opens a verbs context and queries the device,
// through the write() commands rdma-core's libibverbs sends, without cgo.
// The context exists only during the call: while it does, the calling
// process holds the device (a driver without disassociate makes its
// removal wait for the call). Opening the device needs read and write
// access to path (root, or the rdma group's udev rule).
//
// Written by hand: no Go library speaks the uverbs ABI, and libibverbs
// through cgo would tie the static binary to a C library.
func QueryDevice(path string) (DeviceAttr, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return DeviceAttr{}, &Error{Path: path, Op: "open", Err: err}
	}
	defer unix.Close(fd)

	ctxResp := make([]byte, getContextResp+providerRespRoom)
	if err := verbsCommand(fd, cmdGetContext, ctxResp); err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = ErrContext
		}
		return DeviceAttr{}, &Error{Path: path, Op: "open a verbs context", Err: err}
	}
	// The context came with an async event file; nothing reads it here.
	if async := int(binary.LittleEndian.Uint32(ctxResp[0:4])); async > 2 {
		unix.Close(async)
	}
	resp := make([]byte, queryDeviceResp)
	if err := verbsCommand(fd, cmdQueryDevice, resp); err != nil {
		return DeviceAttr{}, &Error{Path: path, Op: "query the device", Err: err}
	}
	a := decodeQueryDevice(resp)
	if a.PhysPortCnt == 0 {
		// Every RDMA device has a port: nothing answered (not a uverbs
		// device; /dev/null takes any write).
		return DeviceAttr{}, &Error{Path: path, Op: "query the device", Err: errors.New("no answer: not a uverbs device")}
	}
	return a, nil
}

// verbsCommand sends one legacy command whose only field is the response
// address, with resp as the response buffer.
func verbsCommand(fd int, command uint32, resp []byte) error {
	cmd := make([]byte, cmdHdrSize+cmdSize)
	ne := binary.NativeEndian
	ne.PutUint32(cmd[0:4], command)
	ne.PutUint16(cmd[4:6], uint16((cmdHdrSize+cmdSize)/4))
	ne.PutUint16(cmd[6:8], uint16(len(resp)/4))
	// The kernel writes the answer at this address: a heap buffer, which
	// the Go collector does not move, kept alive until write returns.
	ne.PutUint64(cmd[8:16], uint64(uintptr(unsafe.Pointer(&resp[0]))))
	n, err := unix.Write(fd, cmd)
	runtime.KeepAlive(resp)
	if err != nil {
		return err
	}
	if n != len(cmd) {
		return fmt.Errorf("the kernel took %d of %d bytes", n, len(cmd))
	}
	return nil
}

// decodeQueryDevice reads struct ib_uverbs_query_device_resp (native
// endian but for the big-endian GUIDs).
func decodeQueryDevice(b []byte) DeviceAttr {
	ne := binary.NativeEndian
	u32 := func(off int) uint32 { return ne.Uint32(b[off : off+4]) }
	return DeviceAttr{
		NodeGUID:    binary.BigEndian.Uint64(b[8:16]),
		VendorID:    u32(40),
		VendorPart:  u32(44),
		MaxQP:       u32(52),
		MaxQPWR:     u32(56),
		MaxCQ:       u32(72),
		MaxMR:       u32(80),
		MaxPD:       u32(84),
		MaxSRQ:      u32(156),
		PhysPortCnt: b[171],
	}
}

// Error is a failed verbs query.
type Error struct {
	Path string
	Op   string
	Err  error
}

func (e *Error) Error() string {
	return "uverbs: " + e.Path + ": " + e.Op + ": " + e.Err.Error()
}
func (e *Error) Unwrap() error { return e.Err }
