package bpf

import (
	"strconv"
	"time"

	"github.com/rdmatool/rdmatool/internal/procmaps"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Kind says what an Event records.
type Kind uint8

// Event kinds. The values are part of the ring buffer ABI shared with the C
// programs (qp.c) and never change.
const (
	KindQPCreate         Kind = 1  // ib_create_qp_user / ib_create_qp_kernel returned
	KindQPModify         Kind = 2  // _ib_modify_qp returned
	KindQPDestroy        Kind = 3  // ib_destroy_qp_user entered (fields) and returned (Result)
	KindQPEvent          Kind = 4  // an async event was delivered for a QP
	KindDeviceEvent      Kind = 5  // ib_dispatch_event: port and device events
	KindDeviceRegister   Kind = 6  // a device was registered
	KindDeviceUnregister Kind = 7  // a device is being unregistered
	KindDeviceRename     Kind = 8  // a device was renamed
	KindDrainStart       Kind = 9  // ib_drain_qp / ib_drain_rq entered
	KindDrainEnd         Kind = 10 // ib_drain_qp / ib_drain_rq returned
)

var kindNames = []string{"", "qp_create", "qp_modify", "qp_destroy", "qp_event", "device_event",
	"device_register", "device_unregister", "device_rename", "drain_start", "drain_end"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// HasQP reports whether events of kind k are about one QP (creates,
// modifies, destroys, async QP events and drains): their QPN, QPType, OnSRQ
// and SRQN are set. Options.QPNs keeps only these kinds.
func (k Kind) HasQP() bool {
	switch k {
	case KindQPCreate, KindQPModify, KindQPDestroy, KindQPEvent, KindDrainStart, KindDrainEnd:
		return true
	}
	return false
}

// IBEvent is an async event type (enum ib_event_type).
type IBEvent uint32

// Async events leakwatch acts on.
const (
	IBEventQPFatal     IBEvent = 1  // IB_EVENT_QP_FATAL
	IBEventDeviceFatal IBEvent = 8  // IB_EVENT_DEVICE_FATAL
	IBEventQPLastWQE   IBEvent = 16 // IB_EVENT_QP_LAST_WQE_REACHED
)

var ibEventNames = []string{
	"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED", "PATH_MIG",
	"PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE",
	"SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER",
	"GID_CHANGE", "WQ_FATAL",
}

func (e IBEvent) String() string {
	if int(e) < len(ibEventNames) {
		return ibEventNames[e]
	}
	return "unknown(" + strconv.Itoa(int(e)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (e IBEvent) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// Event is one decoded ring buffer record. Which fields are set depends on
// Kind; the doc of each field says when.
type Event struct {
	Kind Kind
	// Time is when the probe fired (CLOCK_MONOTONIC converted to wall
	// time at decode): for modify, destroy and rename the time the call
	// began, for creates, registers and drain ends the time it returned.
	Time time.Time
	// DevIndex and DevName identify the ib_device (every kind).
	DevIndex uint32
	DevName  string
	// QPN, QPType and SRQ describe the QP (QP kinds, drains). SRQN is the
	// SRQ's restrack id, the number netlink reports, when OnSRQ.
	QPN    uint32
	QPType rdmanl.QPType
	OnSRQ  bool
	SRQN   uint32
	// NewState is the state a modify asked for, when HasState (the mask had
	// IB_QP_STATE).
	NewState rdmanl.QPState
	HasState bool
	// CurState is the QP's state as its provider saw it when a modify
	// began, when HasCurState: the provider told ib_modify_qp_is_ok (rxe,
	// mlx4, mlx5, hns and others do). ERR there, with the QP in another
	// state as far as the modifies went, is the provider's own move to
	// Error (a completion error, an access error as responder).
	CurState    rdmanl.QPState
	HasCurState bool
	// Result is the function's return: 0 or a negative errno (create,
	// modify, destroy, register, rename; the drains return nothing).
	Result int32
	// PID, TID and Comm are the calling task's (every kind but the async
	// QP and device events, which run in whatever context the provider
	// raised them). KernOwner is the kernel module that created a kernel QP
	// (ib_create_qp_kernel's caller, the restrack kern_name), on every QP
	// kind; it is empty for user QPs.
	PID, TID  uint32
	Comm      string
	KernOwner string
	// IBEvent is the async event type (QP and device events); Port the port
	// of a port event.
	IBEvent IBEvent
	Port    uint32
	// NewName is the device's name after a rename.
	NewName string
	// Probe is the kernel function whose probe recorded the event, such as
	// "ib_create_qp_kernel", "__ib_qp_event_handler" or "ib_drain_rq".
	Probe string
	// Duration is how long a drain took (drain end).
	Duration time.Duration
	// Via and ViaReturn are where a user QP was created (qp_create by
	// ib_create_qp_user, with Options.Sites): Via is the library function
	// the application called, the outermost of ibv_create_qp,
	// rdma_create_qp, rdma_create_qp_ex and rdma_create_ep in progress in
	// the creating thread (so a QP made by rdma_create_qp, which calls
	// ibv_create_qp, names rdma_create_qp), and ViaReturn the address in
	// process PID that call returns to: symbolize.User.CallSite(PID,
	// ViaReturn) names the call. Via is "" when no uprobe saw the call (see
	// the package documentation for when).
	Via       string
	ViaReturn uint64
	// ViaMapping is the mapping that held ViaReturn when the call began,
	// as the uprobe read it (zero when it could not: another thread held
	// the process's mmap lock, or the kernel lacks bpf_find_vma).
	ViaMapping procmaps.Ident
	// Stack is the kernel stack of a kernel QP create (qp_create by
	// ib_create_qp_kernel, with Options.Sites): return addresses,
	// innermost first, at most 32, the first ones in the probe's own BPF
	// program and trampoline under fentry. Nil when it was not captured.
	Stack []uint64
	// UserStack is, for a user QP create with Via, the return addresses of
	// the frames above the one that made the library call (its caller's
	// caller first), in process PID, as the frame pointers give them when
	// the call began: right in programs built with frame pointers, cut
	// short or wrong in others. Nil when it was not captured.
	UserStack []uint64
}
