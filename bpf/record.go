package bpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/rdmatool/rdmatool/internal/procmaps"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// The ring buffer record, struct qp_event in qp.c, read at fixed offsets.
// Only little-endian targets are built (bpf2go -target amd64,arm64), so the
// byte order is fixed too. TestRecordLayout compares these offsets with the
// struct bpf2go generated from the object's BTF.
const (
	recordSize = 200

	offTS        = 0   // u64, CLOCK_MONOTONIC ns
	offDuration  = 8   // u64 ns
	offUserRet   = 8   // u64, instead of the duration when flagUserSite
	offKind      = 16  // u8
	offProbe     = 17  // u8
	offQPType    = 18  // u8
	offFlags     = 19  // u8
	offDevIndex  = 20  // u32
	offQPN       = 24  // u32
	offSRQN      = 28  // u32
	offResult    = 32  // s32
	offPID       = 36  // u32
	offTID       = 40  // u32
	offIBEvent   = 44  // u32
	offPort      = 48  // u32
	offKStackID  = 48  // s32, instead of the port when flagKStack or flagUStack
	offNewState  = 52  // u8
	offUserFn    = 53  // u8: libFuncs id, when flagUserSite
	offCurState  = 54  // u8, when flagCurState
	offComm      = 56  // char[16]
	offDevName   = 72  // char[64]
	offStr       = 136 // char[64]: kernel owner, or the new name of a rename
	offVMAStart  = 136 // u64, instead of the string when flagUserVMA
	offVMAPgoff  = 144 // u64, in pages
	offVMAIno    = 152 // u64
	offVMADev    = 160 // u32, the kernel's dev_t
	commLen      = 16
	nameLen      = 64
	stackDepth   = 32 // STACK_DEPTH: frames in a kernel stack
	flagOnSRQ    = 1 << 0
	flagHasState = 1 << 1
	flagUserSite = 1 << 2
	flagKStack   = 1 << 3
	flagUStack   = 1 << 4 // the stack id is the library call's user stack
	flagCurState = 1 << 5
	// flagStackGen1: the stack id is in stacks1, the second generation's
	// map (else in stacks0).
	flagStackGen1 = 1 << 6
	// flagUserVMA: with flagUserSite, the string's bytes hold the mapping
	// of the call's return address (struct user_vma).
	flagUserVMA = 1 << 7
)

// pageSize turns the probe's vm_pgoff into bytes.
var pageSize = uint64(os.Getpagesize())

// decoder turns records into Events.
type decoder struct {
	// epoch is CLOCK_REALTIME minus CLOCK_MONOTONIC in nanoseconds, which
	// turns the probe's timestamp into wall time.
	epoch int64
	// The last string of each field: device names, comms and owners repeat
	// from record to record, so they are reused instead of allocated.
	lastDev, lastComm, lastStr string
	// stackID is the stack id of the last record decoded (a kernel QP
	// create's kernel stack, or with userStack a user QP create's user
	// stack), -1 when it has none, and stackGen the generation whose map
	// holds it (0 or 1): the Tracer looks it up. ts is the record's time
	// as the probe read it (CLOCK_MONOTONIC ns).
	stackID   int32
	stackGen  int
	userStack bool
	ts        uint64
}

// decode decodes one record into ev, overwriting every field, and sets
// d.stackID, d.stackGen, d.userStack and d.ts. Values a newer kernel or object might add (kinds, events,
// probes, library functions) are kept as numbers, never an error; only a
// record shorter than the layout is.
func (d *decoder) decode(rec []byte, ev *Event) error {
	if len(rec) < recordSize {
		return fmt.Errorf("bpf: decode record: %d bytes, want at least %d", len(rec), recordSize)
	}
	le := binary.LittleEndian
	flags := rec[offFlags]
	*ev = Event{
		Kind:     Kind(rec[offKind]),
		Time:     time.Unix(0, d.epoch+int64(le.Uint64(rec[offTS:]))).UTC(),
		DevIndex: le.Uint32(rec[offDevIndex:]),
		DevName:  cString(rec[offDevName:offDevName+nameLen], &d.lastDev),
		QPN:      le.Uint32(rec[offQPN:]),
		QPType:   rdmanl.QPType(rec[offQPType]),
		OnSRQ:    flags&flagOnSRQ != 0,
		SRQN:     le.Uint32(rec[offSRQN:]),
		NewState: rdmanl.QPState(rec[offNewState]),
		HasState: flags&flagHasState != 0,
		Result:   int32(le.Uint32(rec[offResult:])),
		PID:      le.Uint32(rec[offPID:]),
		TID:      le.Uint32(rec[offTID:]),
		Comm:     cString(rec[offComm:offComm+commLen], &d.lastComm),
		IBEvent:  IBEvent(le.Uint32(rec[offIBEvent:])),
		Port:     le.Uint32(rec[offPort:]),
		Probe:    probeName(rec[offProbe]),
		Duration: time.Duration(le.Uint64(rec[offDuration:])),
	}
	if flags&flagCurState != 0 {
		ev.CurState, ev.HasCurState = rdmanl.QPState(rec[offCurState]), true
	}
	if flags&flagUserSite != 0 {
		ev.Duration = 0
		ev.ViaReturn = le.Uint64(rec[offUserRet:])
		ev.Via = libFuncName(rec[offUserFn])
	}
	d.ts = le.Uint64(rec[offTS:])
	d.stackID, d.stackGen, d.userStack = -1, 0, false
	if flags&(flagKStack|flagUStack) != 0 {
		ev.Port = 0
		d.stackID = int32(le.Uint32(rec[offKStackID:]))
		d.userStack = flags&flagUStack != 0
		if flags&flagStackGen1 != 0 {
			d.stackGen = 1
		}
	}
	if flags&(flagUserSite|flagUserVMA) == flagUserSite|flagUserVMA {
		ev.ViaMapping = procmaps.Ident{
			Start:  le.Uint64(rec[offVMAStart:]),
			Offset: le.Uint64(rec[offVMAPgoff:]) * pageSize,
			Ino:    le.Uint64(rec[offVMAIno:]),
			Dev:    le.Uint32(rec[offVMADev:]),
		}
		return nil
	}
	str := cString(rec[offStr:offStr+nameLen], &d.lastStr)
	if ev.Kind == KindDeviceRename {
		ev.NewName = str
	} else {
		ev.KernOwner = str
	}
	return nil
}

// cString returns the C string in b: up to its first NUL, or all of b when
// a name fills the field. When it equals *last, *last is returned and
// nothing is allocated; otherwise it becomes *last.
func cString(b []byte, last *string) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if string(b) == *last { // compared without a copy
		return *last
	}
	*last = string(b)
	return *last
}
