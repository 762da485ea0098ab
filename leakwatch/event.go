package leakwatch

import (
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
)

// EventKind says what an Event records.
type EventKind uint8

// Event kinds: the QP lifecycle and the device changes the histories
// follow. Whoever observes the kernel (the agent, from the eBPF probes)
// converts its records into these.
const (
	EventQPCreated          EventKind = iota + 1 // a QP was created (or its creation failed: Result)
	EventQPModified                              // a modify returned; NewState when HasState
	EventQPAsync                                 // an async event was delivered for a QP
	EventQPDestroyed                             // a destroy returned (or failed: Result)
	EventDeviceUnregistered                      // the device is going away with all its QPs
	EventDeviceRenamed                           // the device is now called NewName
	EventDrainStarted                            // ib_drain_qp or ib_drain_rq began for a QP (Drain)
	EventDrainEnded                              // that drain returned after Duration
)

// Event is one observation of the kernel, in time order. Which fields are
// set depends on Kind.
type Event struct {
	Kind EventKind
	// Time is when it happened (for a modify or destroy: when the call
	// began).
	Time time.Time
	// DevIndex and DevName identify the device (every kind).
	DevIndex uint32
	DevName  string
	// QPN, QPType, OnSRQ and SRQN describe the QP (QP kinds).
	QPN    uint32
	QPType rdmanl.QPType
	OnSRQ  bool
	SRQN   uint32
	// NewState is the state a modify moved the QP to, when HasState.
	NewState rdmanl.QPState
	HasState bool
	// CurState is the QP's state as its provider saw it when a modify
	// began, when HasCurState (not every provider says).
	CurState    rdmanl.QPState
	HasCurState bool
	// Result is 0 or the negative errno a create, modify or destroy
	// returned.
	Result int32
	// PID (the process), TID (the thread the kernel records as the owner)
	// and Comm are the creating task's (created); KernOwner is the module
	// that created a kernel QP, "" for user QPs.
	PID, TID  uint32
	Comm      string
	KernOwner string
	// Site is where the QP was created (created, a failed create too;
	// none when not known).
	Site Site
	// Async names the async event (EventQPAsync), such as "QP_FATAL";
	// LastWQE says it is LAST_WQE_REACHED.
	Async   string
	LastWQE bool
	// NewName is the device's name after a rename.
	NewName string
	// Drain is the drain function ("ib_drain_qp", "ib_drain_rq") and
	// Duration how long it took (EventDrainEnded; 0 when unknown).
	Drain    string
	Duration time.Duration
}
