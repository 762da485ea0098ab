package bpf

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var jsonT0 = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// TestEventJSONSchema locks the JSON API of a trace line: names, order
// and values. A renamed or removed field is a breaking change.
func TestEventJSONSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{
			"modify to ERR",
			Event{Kind: KindQPModify, Time: jsonT0, DevIndex: 1, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true,
				SRQN: 3, NewState: rdmanl.QPStateErr, HasState: true, PID: 272, TID: 273, Comm: "qpwork", Probe: "_ib_modify_qp"},
			`{"kind":"qp_modify","time":"2026-01-02T03:04:05.123456789Z","device":"rxe0","dev_index":1,"qpn":17,` +
				`"qp_type":"RC","srq":true,"srqn":3,"new_state":"ERR","cur_state":"","result":0,"pid":272,"tid":273,"comm":"qpwork",` +
				`"kern_owner":"","event":"","event_code":0,"port":0,"new_name":"","probe":"_ib_modify_qp","duration_seconds":0}`,
		},
		{
			"port event: no QP type, the event named and numbered",
			Event{Kind: KindDeviceEvent, Time: jsonT0.Truncate(time.Second), DevName: "siw0", QPType: rdmanl.QPTypeRC,
				IBEvent: 10, Port: 1, Probe: "ib_dispatch_event"},
			`{"kind":"device_event","time":"2026-01-02T03:04:05Z","device":"siw0","dev_index":0,"qpn":0,` +
				`"qp_type":"","srq":false,"srqn":0,"new_state":"","cur_state":"","result":0,"pid":0,"tid":0,"comm":"",` +
				`"kern_owner":"","event":"PORT_ERR","event_code":10,"port":1,"new_name":"","probe":"ib_dispatch_event","duration_seconds":0}`,
		},
		{
			"drain end of a kernel QP: no event on other kinds",
			Event{Kind: KindDrainEnd, Time: jsonT0, DevName: "rxe0", QPN: 20, QPType: rdmanl.QPTypeRC, IBEvent: 16,
				Duration: 60*time.Second + 1500*time.Microsecond, PID: 5, TID: 5, Comm: "kworker/0:1", KernOwner: "nvme_rdma",
				Probe: "ib_drain_qp"},
			`{"kind":"drain_end","time":"2026-01-02T03:04:05.123456789Z","device":"rxe0","dev_index":0,"qpn":20,` +
				`"qp_type":"RC","srq":false,"srqn":0,"new_state":"","cur_state":"","result":0,"pid":5,"tid":5,"comm":"kworker/0:1",` +
				`"kern_owner":"nvme_rdma","event":"","event_code":0,"port":0,"new_name":"","probe":"ib_drain_qp","duration_seconds":60.0015}`,
		},
		{
			"rename",
			Event{Kind: KindDeviceRename, Time: jsonT0, DevIndex: 2, DevName: "trcrxe", NewName: "fab0-hca0", Result: -17,
				PID: 9, TID: 9, Comm: "rdma", Probe: "ib_device_rename"},
			`{"kind":"device_rename","time":"2026-01-02T03:04:05.123456789Z","device":"trcrxe","dev_index":2,"qpn":0,` +
				`"qp_type":"","srq":false,"srqn":0,"new_state":"","cur_state":"","result":-17,"pid":9,"tid":9,"comm":"rdma",` +
				`"kern_owner":"","event":"","event_code":0,"port":0,"new_name":"fab0-hca0","probe":"ib_device_rename","duration_seconds":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, string(tt.ev.AppendJSON(nil))); diff != "" {
				t.Errorf("AppendJSON (-want +got):\n%s", diff)
			}
			var got EventJSON
			if err := json.Unmarshal([]byte(tt.want), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.ev.jsonObject(), got); diff != "" {
				t.Errorf("jsonObject() against the line decoded (-jsonObject() +decoded):\n%s", diff)
			}
		})
	}
}

// TestAppendJSON holds AppendJSON to encoding/json's rendering of jsonObject(),
// byte for byte: on every recorded lab event, on odd names, and on random
// events.
func TestAppendJSON(t *testing.T) {
	t.Parallel()
	odd := []Event{
		{Kind: KindDeviceRegister, Time: jsonT0, DevIndex: 3, DevName: `odd "name"\<&>`, Comm: "tab\there", Probe: "ib_register_device"},
		{Kind: KindQPModify, Time: jsonT0, DevName: "rxe0", QPN: 5, QPType: 200, NewState: 9, HasState: true, Comm: "bad\xffutf8",
			Probe: "_ib_modify_qp"},
		{Kind: KindQPEvent, Time: jsonT0, DevName: "line\u2028sep\u2029", IBEvent: 99, Comm: "\x00\x1f\x7f", KernOwner: "é"},
		{Kind: KindDrainEnd, Time: jsonT0, Duration: 300 * time.Nanosecond, Probe: "ib_drain_rq"},
		{Kind: KindDrainEnd, Time: jsonT0, Duration: math.MaxInt64, Result: math.MinInt32},
		{Kind: KindDrainEnd, Time: jsonT0, Duration: -time.Second, PID: math.MaxUint32, QPN: math.MaxUint32},
		{Kind: 42, Time: time.Unix(0, 0)},
		{Kind: 0, Time: time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC)},
		{Kind: KindQPCreate, Time: jsonT0.In(time.FixedZone("CET", 3600)), DevName: "rxe0"},
		{},
	}
	var evs []Event
	evs = append(evs, odd...)
	for _, raw := range recordings(t) {
		d := &decoder{epoch: jsonT0.UnixNano()}
		for off := 0; off+recordSize <= len(raw); off += recordSize {
			var ev Event
			if err := d.decode(raw[off:off+recordSize], &ev); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		evs = append(evs, randomEvent(rng))
	}
	const prefix = "earlier output\n"
	for _, ev := range evs {
		want, err := json.Marshal(ev.jsonObject())
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.AppendJSON([]byte(prefix)); string(got) != prefix+string(want) {
			t.Fatalf("AppendJSON of %+v:\n got %s\nwant %s", ev, got, want)
		}
	}
}

// randomEvent makes an event of any kind, with names that need escaping
// now and then.
func randomEvent(rng *rand.Rand) Event {
	pieces := []string{"", "rxe0", "qpwork", `"`, `\`, "<", ">", "&", "\t", "\n", "\x00", "\x7f", "\xff", "é", "\u2028",
		"\u2029", "\ufffd", "kworker/0:1", " "}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	durations := []time.Duration{0, 1, 999, time.Microsecond, time.Millisecond + 1, time.Second, 60*time.Second + 1500*time.Microsecond,
		time.Duration(rng.Int64()), -time.Duration(rng.Int64N(1 << 40)), math.MaxInt64, math.MinInt64}
	return Event{
		Kind:      Kind(rng.IntN(13)),
		Time:      time.Unix(rng.Int64N(1<<35)-1<<34, rng.Int64N(1e9)),
		DevIndex:  rng.Uint32(),
		DevName:   str(),
		QPN:       rng.Uint32(),
		QPType:    rdmanl.QPType(rng.IntN(256)),
		OnSRQ:     rng.IntN(2) == 0,
		SRQN:      rng.Uint32(),
		NewState:  rdmanl.QPState(rng.IntN(256)),
		HasState:  rng.IntN(2) == 0,
		Result:    int32(rng.Uint32()),
		PID:       rng.Uint32(),
		TID:       rng.Uint32(),
		Comm:      str(),
		KernOwner: str(),
		IBEvent:   IBEvent(rng.IntN(30)),
		Port:      rng.Uint32(),
		NewName:   str(),
		Probe:     str(),
		Duration:  durations[rng.IntN(len(durations))],
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add(uint8(KindQPModify), int64(1767323045123456789), "rxe0", "qpwork", "", "", "_ib_modify_qp", int64(0), uint8(2), uint8(5), uint32(16))
	f.Add(uint8(KindDeviceRename), int64(0), `odd "name"\<&>`, "bad\xffutf8", "é", "\u2028", "", int64(-1), uint8(200), uint8(9), uint32(99))
	f.Fuzz(func(t *testing.T, kind uint8, ns int64, devName, comm, kernOwner, newName, probe string, duration int64,
		qpType, newState uint8, ibEvent uint32) {
		ev := Event{Kind: Kind(kind), Time: time.Unix(0, ns), DevName: devName, Comm: comm, KernOwner: kernOwner, NewName: newName,
			Probe: probe, Duration: time.Duration(duration), QPType: rdmanl.QPType(qpType), NewState: rdmanl.QPState(newState),
			HasState: newState%2 == 0, IBEvent: IBEvent(ibEvent), QPN: ibEvent, Result: int32(ibEvent)}
		want, err := json.Marshal(ev.jsonObject())
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.AppendJSON(nil); string(got) != string(want) {
			t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	})
}

func TestKindHas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind           Kind
		qp, asyncEvent bool
	}{
		{KindQPCreate, true, false},
		{KindQPModify, true, false},
		{KindQPDestroy, true, false},
		{KindQPEvent, true, true},
		{KindDeviceEvent, false, true},
		{KindDeviceRegister, false, false},
		{KindDeviceUnregister, false, false},
		{KindDeviceRename, false, false},
		{KindDrainStart, true, false},
		{KindDrainEnd, true, false},
		{Kind(0), false, false},
		{Kind(42), false, false},
	}
	for _, tt := range tests {
		if got := tt.kind.HasQP(); got != tt.qp {
			t.Errorf("%s.HasQP() = %t, want %t", tt.kind, got, tt.qp)
		}
		if got := tt.kind.HasIBEvent(); got != tt.asyncEvent {
			t.Errorf("%s.HasIBEvent() = %t, want %t", tt.kind, got, tt.asyncEvent)
		}
	}
}

// TestEventJSONTags: every EventJSON field has a json tag in snake_case
// and none is omitted when empty (documented fields are always present).
func TestEventJSONTags(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[EventJSON]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "" || strings.Contains(tag, ",") || strings.ToLower(tag) != tag || strings.Contains(tag, "-") {
			t.Errorf("field %s: json tag %q, want a plain snake_case name", f.Name, tag)
		}
	}
}

func TestAppendTime(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{jsonT0, jsonT0.Truncate(time.Second), jsonT0.Truncate(time.Millisecond), time.Unix(0, 0),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), jsonT0.In(time.FixedZone("CET", 3600))}
	for range 1000 {
		times = append(times, time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)))
	}
	for _, tm := range times {
		if got, want := string(Event{Time: tm}.AppendTime(nil)), tm.UTC().Format(time.RFC3339Nano); got != want {
			t.Errorf("AppendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

// TestAppendJSONAllocs: an event with plain names is written without
// allocating, into a buffer with room.
func TestAppendJSONAllocs(t *testing.T) {
	ev := Event{Kind: KindQPModify, Time: jsonT0, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, NewState: rdmanl.QPStateErr,
		HasState: true, PID: 272, TID: 273, Comm: "qpwork", Probe: "_ib_modify_qp", Duration: 1500 * time.Microsecond}
	b := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { b = ev.AppendJSON(b[:0]) }); n != 0 {
		t.Errorf("AppendJSON: %v allocations per event, want 0", n)
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	evs := []Event{
		{Kind: KindQPCreate, Time: jsonT0, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true, SRQN: 3,
			PID: 272, TID: 272, Comm: "qpwork", Probe: "ib_create_qp_user"},
		{Kind: KindQPModify, Time: jsonT0.Add(time.Millisecond), DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC,
			NewState: rdmanl.QPStateErr, HasState: true, PID: 272, TID: 273, Comm: "qpwork", Probe: "_ib_modify_qp"},
		{Kind: KindQPEvent, Time: jsonT0.Add(2 * time.Millisecond), DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC,
			IBEvent: IBEventQPLastWQE, Probe: "__ib_qp_event_handler"},
		{Kind: KindDrainEnd, Time: jsonT0, DevName: "rxe0", QPN: 20, QPType: rdmanl.QPTypeRC, Duration: 1500 * time.Microsecond,
			PID: 5, TID: 5, Comm: "kworker/0:1", KernOwner: "nvme_rdma", Probe: "ib_drain_qp"},
	}
	var line []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		line = evs[i%len(evs)].AppendJSON(line[:0])
	}
}
