package bpf

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// -update rewrites the golden files: in the lab it records ring buffer
// records from the running kernel into testdata/records_*.bin; on the host
// it rewrites the decoded testdata/*.golden.json from them.
var update = flag.Bool("update", false, "rewrite golden files")

// encodeRecord is decode's inverse, for tests: the record the programs
// would write for ev, with ts as its monotonic time.
func encodeRecord(ev Event, ts uint64) []byte {
	b := make([]byte, recordSize)
	le := binary.LittleEndian
	le.PutUint64(b[offTS:], ts)
	le.PutUint64(b[offDuration:], uint64(ev.Duration))
	if ev.Via != "" {
		b[offFlags] |= flagUserSite
		le.PutUint64(b[offUserRet:], ev.ViaReturn)
		for _, f := range libFuncs {
			if f.name == ev.Via {
				b[offUserFn] = f.id
			}
		}
	}
	b[offKind] = byte(ev.Kind)
	for i := range probeSpecs {
		if probeSpecs[i].function == ev.Probe {
			b[offProbe] = probeSpecs[i].id
		}
	}
	b[offQPType] = byte(ev.QPType)
	if ev.OnSRQ {
		b[offFlags] |= flagOnSRQ
	}
	if ev.HasState {
		b[offFlags] |= flagHasState
	}
	if ev.HasCurState {
		b[offFlags] |= flagCurState
		b[offCurState] = byte(ev.CurState)
	}
	le.PutUint32(b[offDevIndex:], ev.DevIndex)
	le.PutUint32(b[offQPN:], ev.QPN)
	le.PutUint32(b[offSRQN:], ev.SRQN)
	le.PutUint32(b[offResult:], uint32(ev.Result))
	le.PutUint32(b[offPID:], ev.PID)
	le.PutUint32(b[offTID:], ev.TID)
	le.PutUint32(b[offIBEvent:], uint32(ev.IBEvent))
	le.PutUint32(b[offPort:], ev.Port)
	b[offNewState] = byte(ev.NewState)
	copy(b[offComm:offComm+commLen], ev.Comm)
	copy(b[offDevName:offDevName+nameLen], ev.DevName)
	str := ev.KernOwner
	if ev.Kind == KindDeviceRename {
		str = ev.NewName
	}
	copy(b[offStr:offStr+nameLen], str)
	if ev.Via != "" && ev.ViaMapping != (procmaps.Ident{}) {
		b[offFlags] |= flagUserVMA
		le.PutUint64(b[offVMAStart:], ev.ViaMapping.Start)
		le.PutUint64(b[offVMAPgoff:], ev.ViaMapping.Offset/pageSize)
		le.PutUint64(b[offVMAIno:], ev.ViaMapping.Ino)
		le.PutUint32(b[offVMADev:], ev.ViaMapping.Dev)
	}
	return b
}

func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	const ts = 5_000_000_123 // 5 s after boot
	at := time.Unix(0, epoch+ts).UTC()
	name64 := strings.Repeat("n", nameLen) // fills the field: no NUL
	tests := []struct {
		name string
		ev   Event
	}{
		{"user QP create on an SRQ", Event{Kind: KindQPCreate, DevIndex: 1, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC,
			OnSRQ: true, SRQN: 3, PID: 4242, TID: 4243, Comm: "qpwork", Probe: "ib_create_qp_user"}},
		{"kernel QP create", Event{Kind: KindQPCreate, DevIndex: 2, DevName: "trcrxe", QPN: 1, QPType: rdmanl.QPTypeGSI,
			PID: 300, TID: 300, Comm: "rdma", KernOwner: "ib_core", Probe: "ib_create_qp_kernel"}},
		{"failed create", Event{Kind: KindQPCreate, Result: -12, PID: 1, TID: 1, Comm: "init", Probe: "ib_create_qp_user"}},
		{"user QP create with its site", Event{Kind: KindQPCreate, DevName: "rxe0", QPN: 18, QPType: rdmanl.QPTypeRC, PID: 4242,
			TID: 4242, Comm: "qpwork", Probe: "ib_create_qp_user", Via: "rdma_create_qp", ViaReturn: 0x5566_7788_99aa}},
		{"user QP create with its site and mapping", Event{Kind: KindQPCreate, DevName: "rxe0", QPN: 19, QPType: rdmanl.QPTypeRC, PID: 4242,
			TID: 4242, Comm: "qpwork", Probe: "ib_create_qp_user", Via: "ibv_create_qp", ViaReturn: 0x5566_7788_99aa,
			ViaMapping: procmaps.Ident{Start: 0x5566_7788_0000, Offset: 3 * pageSize, Ino: 9986068, Dev: 0xfe << 20}}},
		{"failed create with its site", Event{Kind: KindQPCreate, DevIndex: 1, DevName: "rxe0", QPType: rdmanl.QPTypeRC, Result: -22,
			PID: 4242, TID: 4242, Comm: "qpwork", Probe: "ib_create_qp_user", Via: "ibv_create_qp", ViaReturn: 0x401234}},
		{"modify to ERR", Event{Kind: KindQPModify, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, NewState: rdmanl.QPStateErr,
			HasState: true, PID: 4242, TID: 4242, Comm: "qpwork", Probe: "_ib_modify_qp"}},
		{"modify that found the QP in Error", Event{Kind: KindQPModify, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC,
			NewState: rdmanl.QPStateErr, HasState: true, CurState: rdmanl.QPStateErr, HasCurState: true, Probe: "_ib_modify_qp"}},
		{"modify without a state", Event{Kind: KindQPModify, DevName: "siw0", QPN: 2, QPType: rdmanl.QPTypeRC, Result: -22,
			Probe: "_ib_modify_qp"}},
		{"LAST_WQE_REACHED", Event{Kind: KindQPEvent, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true,
			IBEvent: IBEventQPLastWQE, Probe: "__ib_qp_event_handler"}},
		{"port event", Event{Kind: KindDeviceEvent, DevIndex: 4, DevName: "mlx5_0", IBEvent: 10, Port: 2, Probe: "ib_dispatch_event"}},
		{"rename", Event{Kind: KindDeviceRename, DevIndex: 4, DevName: "mlx5_0", NewName: "fab0-hca0", Comm: "rdma", Probe: "ib_device_rename"}},
		{"long names", Event{Kind: KindDeviceRename, DevName: name64, NewName: name64, Comm: "0123456789abcdef", Probe: "ib_device_rename"}},
		{"drain end", Event{Kind: KindDrainEnd, DevName: "rxe0", QPN: 20, QPType: rdmanl.QPTypeRC, OnSRQ: true,
			Duration: 60 * time.Second, Probe: "ib_drain_qp"}},
		{"unknown values keep their numbers", Event{Kind: 42, IBEvent: 77, NewState: 9, QPType: 200, Probe: "unknown(0)"}},
	}
	d := &decoder{epoch: epoch}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.ev
			want.Time = at
			var got Event
			if err := d.decode(encodeRecord(want, ts), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeShortRecord(t *testing.T) {
	t.Parallel()
	var d decoder
	var ev Event
	for _, n := range []int{0, 1, recordSize - 1} {
		if err := d.decode(make([]byte, n), &ev); err == nil {
			t.Errorf("decode of %d bytes: no error", n)
		}
	}
	// A longer record (a newer object) decodes what this layout knows.
	rec := append(encodeRecord(Event{Kind: KindQPCreate, QPN: 9}, 0), 1, 2, 3)
	if err := d.decode(rec, &ev); err != nil || ev.QPN != 9 {
		t.Errorf("decode of a longer record = %+v, %v", ev, err)
	}
}

// TestDecodeCurStateFlag: the provider's state byte is read only with its
// flag; without it the byte is another record's leftover, not a state.
func TestDecodeCurStateFlag(t *testing.T) {
	t.Parallel()
	rec := encodeRecord(Event{Kind: KindQPModify, QPN: 9, Probe: "_ib_modify_qp"}, 0)
	rec[offCurState] = byte(rdmanl.QPStateErr)
	var d decoder
	var ev Event
	if err := d.decode(rec, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.HasCurState || ev.CurState != 0 {
		t.Errorf("no flag: CurState = %v, HasCurState = %v; want none", ev.CurState, ev.HasCurState)
	}
	rec[offFlags] |= flagCurState
	if err := d.decode(rec, &ev); err != nil {
		t.Fatal(err)
	}
	if !ev.HasCurState || ev.CurState != rdmanl.QPStateErr {
		t.Errorf("with the flag: CurState = %v, HasCurState = %v; want ERR", ev.CurState, ev.HasCurState)
	}
}

// TestDecodeStackID: a QP create's stack id, a kernel QP's or the user
// stack of the library call, is read from where the port of a device event
// is, and only with one of their flags; flagStackGen1 says it is in the
// second generation's map.
func TestDecodeStackID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		flags    byte
		field    uint32
		wantID   int32
		wantGen  int
		wantPort uint32
		wantUser bool
	}{
		{"stack id 0", flagKStack, 0, 0, 0, 0, false},
		{"stack id 977", flagKStack, 977, 977, 0, 0, false},
		{"stack id 977 of generation 1", flagKStack | flagStackGen1, 977, 977, 1, 0, false},
		{"user stack id 31", flagUStack, 31, 31, 0, 0, true},
		{"user stack id 31 of generation 1", flagUStack | flagStackGen1, 31, 31, 1, 0, true},
		{"no stack: the field is the port", 0, 2, -1, 0, 2, false},
		{"no stack, generation flag alone", flagStackGen1, 2, -1, 0, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := encodeRecord(Event{Kind: KindQPCreate, Probe: "ib_create_qp_kernel", KernOwner: "nvmet_rdma"}, 1)
			rec[offFlags] |= tt.flags
			binary.LittleEndian.PutUint32(rec[offKStackID:], tt.field)
			d := &decoder{stackID: 5, stackGen: 1 - tt.wantGen, userStack: !tt.wantUser}
			var ev Event
			if err := d.decode(rec, &ev); err != nil {
				t.Fatal(err)
			}
			if d.stackID != tt.wantID || d.stackGen != tt.wantGen || ev.Port != tt.wantPort || d.userStack != tt.wantUser {
				t.Errorf("stack id %d of generation %d (user %v), port %d; want %d of %d (%v), %d",
					d.stackID, d.stackGen, d.userStack, ev.Port, tt.wantID, tt.wantGen, tt.wantUser, tt.wantPort)
			}
		})
	}
}

// TestDecodeReusesStrings checks that repeating names do not allocate.
func TestDecodeReusesStrings(t *testing.T) {
	rec := encodeRecord(Event{Kind: KindQPModify, DevName: "rxe0", Comm: "qpwork", KernOwner: "ib_core", Probe: "_ib_modify_qp"}, 1)
	d := &decoder{}
	var ev Event
	if err := d.decode(rec, &ev); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { d.decode(rec, &ev) }); n != 0 {
		t.Errorf("decode allocates %v times per record of repeated names, want 0", n)
	}
}

// recordings are the raw ring buffer records TestLabRecord captured on each
// lab kernel: 200-byte records back to back.
func recordings(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "records_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".bin")] = b
	}
	return out
}

// goldenEvent is an Event as the golden files show it: times as monotonic
// offsets, so that recordings decode the same on every run.
type goldenEvent struct {
	Event
	Time time.Duration
}

// TestGoldenLab decodes every recording and compares it with the decoded
// golden file next to it (rewritten by go test -update).
func TestGoldenLab(t *testing.T) {
	t.Parallel()
	recs := recordings(t)
	if len(recs) == 0 {
		t.Fatal("no recordings in testdata (TestLabRecord -update records them)")
	}
	for name, raw := range recs {
		t.Run(name, func(t *testing.T) {
			if len(raw)%recordSize != 0 {
				t.Fatalf("%d bytes is not a whole number of %d-byte records", len(raw), recordSize)
			}
			d := &decoder{}
			var got []goldenEvent
			for off := 0; off < len(raw); off += recordSize {
				var ev Event
				if err := d.decode(raw[off:off+recordSize], &ev); err != nil {
					t.Fatal(err)
				}
				got = append(got, goldenEvent{Event: ev, Time: time.Duration(ev.Time.UnixNano())})
			}
			path := filepath.Join("testdata", "decoded_"+strings.TrimPrefix(name, "records_")+".golden.json")
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			if *update {
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(b)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, raw := range recordings(f) {
		for off := 0; off+recordSize <= len(raw); off += recordSize {
			f.Add(raw[off : off+recordSize])
		}
	}
	f.Add(encodeRecord(Event{Kind: KindDeviceRename, DevName: "a", NewName: "b"}, 1))
	f.Fuzz(func(t *testing.T, rec []byte) {
		d := &decoder{epoch: 1}
		var ev Event
		if err := d.decode(rec, &ev); err != nil {
			if len(rec) >= recordSize {
				t.Fatalf("decode of %d bytes: %v", len(rec), err)
			}
			return
		}
		// Decoding is stable, and what the encoder writes back decodes
		// the same: no field is lost or misplaced.
		again := encodeRecord(ev, binary.LittleEndian.Uint64(rec[offTS:]))
		var ev2 Event
		if err := d.decode(again, &ev2); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(ev.Probe, "unknown(") {
			ev2.Probe = ev.Probe // the encoder cannot write unknown ids back
		}
		if strings.HasPrefix(ev.Via, "unknown(") {
			ev2.Via = ev.Via
		}
		if diff := cmp.Diff(ev, ev2); diff != "" {
			t.Fatalf("re-encoded record decodes differently (-first +second):\n%s", diff)
		}
	})
}
