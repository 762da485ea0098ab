package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// textProbe exercises every textLine tag.
type textProbe struct {
	Lead     string         `json:"-" txt:"lead"`
	Hidden   uint32         `json:"hidden" txt:"-"`
	LQPN     uint32         `json:"lqpn"`
	RQPN     uint32         `json:"rqpn" txt:"nz"`
	Comm     string         `json:"comm" txt:"nz"`
	SQPSN    uint32         `json:"sq_psn" txt:"d"`
	State    rdmanl.QPState `json:"state"`
	Ranges   []qpRange      `json:"qp_ranges"`
	Names    []string       `json:"names"`
	Internal string         `json:"-"`
	Untagged string
}

func TestTextLineTags(t *testing.T) {
	t.Parallel()
	full := textProbe{
		Lead: "dev rxe0", Hidden: 9, LQPN: 17, RQPN: 18, Comm: "ib_send_bw", SQPSN: 4660, State: rdmanl.QPStateErr,
		Ranges: []qpRange{{17, 18}, {20, 20}}, Names: []string{"a", "b"}, Internal: "x", Untagged: "y",
	}
	tests := []struct {
		name    string
		v       any
		details bool
		want    string
	}{
		{
			name: "all fields set",
			v:    full,
			want: "dev rxe0 lqpn 17 rqpn 18 comm ib_send_bw state ERR qp-ranges 17-18,20 names a,b",
		},
		{
			name: "details", v: full, details: true,
			want: "dev rxe0 lqpn 17 rqpn 18 comm ib_send_bw sq-psn 4660 state ERR qp-ranges 17-18,20 names a,b",
		},
		{
			name: "zero values hidden where tagged nz, empty lead and lists left out",
			v:    textProbe{State: rdmanl.QPStateReset}, details: true,
			want: "lqpn 0 sq-psn 0 state RESET",
		},
		{name: "pointer to a row", v: &full, want: "dev rxe0 lqpn 17 rqpn 18 comm ib_send_bw state ERR qp-ranges 17-18,20 names a,b"},
		{name: "unknown enum keeps its number", v: textProbe{State: 9}, want: "lqpn 0 state unknown(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, textLine(tt.v, tt.details)); diff != "" {
				t.Errorf("textLine() (-want +got):\n%s", diff)
			}
		})
	}
}

const (
	bugEmptyValue = `an empty txt:"d" string prints its name without a value ("path-mig-state " for UD QPs, "name-assign-type " before 6.11)`
	bugKernelComm = `a kernel owner prints "comm ib_core" (CQ, MR, PD, ctx, SRQ, cm_id add "kern-name ib_core"); STYLE.md wants "comm [ib_core]"`
)

func TestTextLineRows(t *testing.T) {
	t.Parallel()
	userRC := rdmanl.QP{
		DevIndex: 0, DevName: "rxe0", Port: 1, LQPN: 17, RQPN: 18, HasRQPN: true, RQPSN: 100, SQPSN: 200,
		PathMigState: 0, HasPathMig: true, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, PDN: 2,
		Owner: rdmanl.Owner{PID: 1234},
	}
	onSRQ := userRC
	onSRQ.OnSRQ, onSRQ.SRQN = true, 0
	ud := rdmanl.QP{DevName: "siw0", DevIndex: 1, Port: 1, LQPN: 3, Type: rdmanl.QPTypeUD, State: rdmanl.QPStateRTS, PDN: 1, Owner: rdmanl.Owner{PID: 77}}
	gsi := rdmanl.QP{DevName: "rxe0", Port: 1, LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, Owner: rdmanl.Owner{KernName: "ib_core"}}
	target := rdmanl.QP{DevName: "siw0", Port: 1, LQPN: 20, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, OnSRQ: true, SRQN: 1, Owner: rdmanl.Owner{KernName: "rdma_cm"}}
	nvmet := rdmanl.NewULPIndex(nil, []rdmanl.SRQ{{SRQN: 1, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}}})
	unbound := rdmanl.QP{DevName: "rxe0", LQPN: 19, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateReset, PDN: 2, OnSRQ: true, SRQN: 3, Owner: rdmanl.Owner{PID: 1234}}
	dev := rdmanl.Device{
		Index: 0, Name: "rxe0", Ports: 1, CapFlags: 0x1000, NodeGUID: 0x020000fffe000101, SysImageGUID: 0x020000fffe000101,
		NodeType: 1, Protocol: "roce", HasNameAssign: true, NameAssignType: rdmanl.NameAssignUser,
	}
	devOld := dev
	devOld.HasNameAssign = false
	port := rdmanl.Port{DevIndex: 0, DevName: "rxe0", Index: 1, State: rdmanl.PortStateActive, PhysState: 5, NetdevIndex: 3, NetdevName: "dummy0"}
	tests := []struct {
		name    string
		row     any
		details bool
		want    string
		bug     string
	}{
		{
			name: "QP on an SRQ, details", row: qpRowOf(onSRQ, nil, rdmanl.ULPIndex{}), details: true,
			want: "link rxe0/1 lqpn 17 rqpn 18 type RC state RTS rq-psn 100 sq-psn 200 path-mig-state MIGRATED pdn 2 srqn 0 pid 1234",
		},
		{
			name: "QP without a port, on an SRQ, details", row: qpRowOf(unbound, nil, rdmanl.ULPIndex{}), details: true,
			want: "link rxe0/- lqpn 19 type RC state RESET rq-psn 0 sq-psn 0 pdn 2 srqn 3 pid 1234",
			bug:  bugEmptyValue,
		},
		{
			name: "QP on an SRQ", row: qpRowOf(onSRQ, nil, rdmanl.ULPIndex{}),
			want: "link rxe0/1 lqpn 17 rqpn 18 type RC state RTS pdn 2 srqn 0 pid 1234",
		},
		{
			name: "user RC QP", row: qpRowOf(userRC, nil, rdmanl.ULPIndex{}),
			want: "link rxe0/1 lqpn 17 rqpn 18 type RC state RTS pdn 2 pid 1234",
		},
		{
			name: "user RC QP, details", row: qpRowOf(userRC, nil, rdmanl.ULPIndex{}), details: true,
			want: "link rxe0/1 lqpn 17 rqpn 18 type RC state RTS rq-psn 100 sq-psn 200 path-mig-state MIGRATED pdn 2 pid 1234",
		},
		{
			name: "UD QP has no path migration state, details", row: qpRowOf(ud, nil, rdmanl.ULPIndex{}), details: true,
			want: "link siw0/1 lqpn 3 type UD state RTS rq-psn 0 sq-psn 0 pdn 1 pid 77",
			bug:  bugEmptyValue,
		},
		{
			name: "kernel QP of rdma_cm for a ULP", row: qpRowOf(target, nil, nvmet),
			want: "link siw0/1 lqpn 20 type RC state ERR srqn 1 comm [rdma_cm] ulp nvmet_rdma",
		},
		{
			name: "kernel QP", row: qpRowOf(gsi, nil, rdmanl.ULPIndex{}),
			want: "link rxe0/1 lqpn 1 type GSI state RTS comm [ib_core]",
			bug:  bugKernelComm,
		},
		{
			name: "SRQ, details", details: true,
			row:  srqRowOf(rdmanl.SRQ{DevName: "rxe0", SRQN: 0, PDN: 3, QPs: []rdmanl.QPRange{{Min: 17, Max: 18}, {Min: 20, Max: 20}}, Owner: rdmanl.Owner{PID: 1234}}, nil),
			want: "dev rxe0 srqn 0 type BASIC pdn 3 lqpn 17-18,20 qps 3 pid 1234",
		},
		{
			name: "XRC SRQ without QPs",
			row:  srqRowOf(rdmanl.SRQ{DevName: "rxe0", SRQN: 1, Type: 1, PDN: 3, CQN: 4, HasCQ: true, Owner: rdmanl.Owner{PID: 1234}}, nil),
			want: "dev rxe0 srqn 1 type XRC pdn 3 cqn 4 pid 1234",
		},
		{
			name: "device, details", row: devRowOf(dev), details: true,
			want: "0: rxe0: node-type ca node-guid 0200:00ff:fe00:0101 sys-image-guid 0200:00ff:fe00:0101 protocol roce ports 1 caps 4096 name-assign-type user",
		},
		{
			name: "device",
			row:  devRowOf(dev),
			want: "0: rxe0: node-type ca node-guid 0200:00ff:fe00:0101 sys-image-guid 0200:00ff:fe00:0101 protocol roce",
		},
		{
			name: "device before 6.11, details", row: devRowOf(devOld), details: true,
			want: "0: rxe0: node-type ca node-guid 0200:00ff:fe00:0101 sys-image-guid 0200:00ff:fe00:0101 protocol roce ports 1 caps 4096",
			bug:  bugEmptyValue,
		},
		{
			name: "port, details", row: linkRowOf(port), details: true,
			want: "link rxe0/1 state ACTIVE physical-state LINK_UP netdev dummy0 netdev-index 3 caps 0",
		},
		{
			name: "port", row: linkRowOf(port),
			want: "link rxe0/1 state ACTIVE physical-state LINK_UP netdev dummy0",
		},
		{
			name: "MR with keys, details", details: true,
			row:  mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 4, RKey: 0x1a2b, LKey: 0x1a2c, HasKeys: true, IOVA: 0x7f0000001000, Len: 4096, PDN: 2, Owner: rdmanl.Owner{PID: 1234}}, nil),
			want: "dev rxe0 mrn 4 rkey-hex 0x1a2b lkey-hex 0x1a2c iova-hex 0x7f0000001000 mrlen 4096 pdn 2 pid 1234",
		},
		{
			name: "MR without keys, details", details: true,
			row:  mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 4, IOVA: 0x7f0000001000, Len: 4096, PDN: 2, Owner: rdmanl.Owner{PID: 1234}}, nil),
			want: "dev rxe0 mrn 4 iova-hex 0x7f0000001000 mrlen 4096 pdn 2 pid 1234",
		},
		{
			name: "kernel CQ, details", details: true,
			row:  cqRowOf(rdmanl.CQ{DevName: "rxe0", CQN: 0, CQE: 128, Users: 2, HasPoll: true, PollCtx: 1, Owner: rdmanl.Owner{KernName: "ib_core"}}, nil),
			want: "dev rxe0 cqn 0 cqe 128 users 2 poll-ctx SOFTIRQ adaptive-moderation false comm [ib_core]",
			bug:  bugKernelComm,
		},
		{
			name: "cm_id, details", details: true,
			row: cmIDRowOf(rdmanl.CMID{
				DevName: "rxe0", Port: 1, CMIDN: 2, LQPN: 17, HasQP: true, PS: 0x0106, Type: rdmanl.QPTypeRC, State: 5,
				SrcAddr: netip.MustParseAddrPort("192.0.2.1:7471"), DstAddr: netip.MustParseAddrPort("192.0.2.1:39000"),
				Owner: rdmanl.Owner{PID: 1234},
			}, nil),
			want: "link rxe0/1 cm-idn 2 lqpn 17 qp-type RC state CONNECT ps TCP src-addr 192.0.2.1 src-port 7471 dst-addr 192.0.2.1 dst-port 39000 pid 1234",
		},
		{
			name: "summary, details", details: true,
			row: summaryRowOf(rdmanl.Summary{DevIndex: 1, DevName: "siw0", Counts: []rdmanl.ResourceCount{
				{Name: "pd", Current: 1}, {Name: "cq", Current: 2}, {Name: "qp", Current: 3}, {Name: "cm_id", Current: 4},
				{Name: "mr", Current: 5}, {Name: "ctx", Current: 6}, {Name: "srq", Current: 7}, {Name: "counter", Current: 8},
			}}),
			want: "1: siw0: pd 1 cq 2 qp 3 cm-id 4 mr 5 ctx 6 srq 7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, textLine(tt.row, tt.details)); diff != "" {
				t.Errorf("textLine() (-want +got):\n%s", diff)
			}
		})
	}
}

// listRows are three QPs as `rdmatool res qp -j` lists them.
func listRows() []qpRow {
	return []qpRow{
		qpRowOf(rdmanl.QP{DevName: "rxe0", Port: 1, LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, Owner: rdmanl.Owner{KernName: "ib_core"}}, nil, rdmanl.ULPIndex{}),
		qpRowOf(rdmanl.QP{DevName: "rxe0", Port: 1, LQPN: 17, RQPN: 18, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, PDN: 2, HasPathMig: true, Owner: rdmanl.Owner{PID: 1234}}, nil, rdmanl.ULPIndex{}),
		qpRowOf(rdmanl.QP{DevIndex: 1, DevName: "siw0", Port: 1, LQPN: 0x12345, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, PDN: 3, OnSRQ: true, SRQN: 0, Owner: rdmanl.Owner{PID: 99}}, nil, rdmanl.ULPIndex{}),
	}
}

// jsonOnly clears the fields that only the text form prints.
func jsonOnly(rows []qpRow) []qpRow {
	out := make([]qpRow, len(rows))
	for i, r := range rows {
		r.Link, r.SRQText, r.CommText = "", "", ""
		out[i] = r
	}
	return out
}

// writeList writes rows through a listWriter and returns the output.
func writeList[T any](t *testing.T, g *globals, rows []T) string {
	t.Helper()
	var out bytes.Buffer
	lw := newListWriter(&out, g)
	for _, r := range rows {
		if err := lw.row(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := lw.close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// decodeList decodes a listing as a jq user or the agent would: one array,
// numbers kept whole, nothing after it.
func decodeList(t *testing.T, out string) []qpRow {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var got []qpRow
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode listing: %v\n%s", err, out)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("listing holds more than one JSON value (next: %s, %v):\n%s", extra, err, out)
	}
	return got
}

func TestListWriterJSON(t *testing.T) {
	t.Parallel()
	rows := listRows()
	tests := []struct {
		name string
		g    globals
		rows []qpRow
		want string // byte for byte
	}{
		{name: "empty", g: globals{json: true}, want: "[]\n"},
		{name: "empty, pretty", g: globals{json: true, pretty: true}, want: "[]\n"},
		{name: "one row", g: globals{json: true}, rows: rows[:1], want: mustJSON(t, jsonOnly(rows[:1]), false)},
		{name: "three rows", g: globals{json: true}, rows: rows, want: mustJSON(t, jsonOnly(rows), false)},
		{name: "three rows, pretty", g: globals{json: true, pretty: true}, rows: rows, want: mustJSON(t, jsonOnly(rows), true)},
		{name: "details change nothing", g: globals{json: true, details: true}, rows: rows, want: mustJSON(t, jsonOnly(rows), false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := writeList(t, &tt.g, tt.rows)
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("listing (-want +got):\n%s", diff)
			}
			if !json.Valid([]byte(out)) {
				t.Errorf("listing is not valid JSON:\n%s", out)
			}
			got := decodeList(t, out)
			want := jsonOnly(tt.rows)
			if len(want) == 0 {
				want = []qpRow{} // [] decodes to an empty slice, not nil
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded rows (-want +got):\n%s", diff)
			}
		})
	}
}

// mustJSON renders v as one array, the way jq -c (or jq with pretty) does.
func mustJSON(t *testing.T, v any, pretty bool) string {
	t.Helper()
	var b []byte
	var err error
	if pretty {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestListWriterPrettyShape(t *testing.T) {
	t.Parallel()
	out := writeList(t, &globals{json: true, pretty: true}, listRows()[:2])
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "[" || lines[len(lines)-1] != "]" {
		t.Errorf("pretty listing does not open and close the array on lines of their own:\n%s", out)
	}
	if !slices.Contains(lines, "  {") || !slices.Contains(lines, "  },") || !slices.Contains(lines, `    "lqpn": 17,`) {
		t.Errorf("pretty listing is not indented by two spaces per level:\n%s", out)
	}
}

func TestListWriterText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		g    globals
		rows []srqRow
		want string
	}{
		{name: "empty", g: globals{}, want: ""},
		{
			name: "one line per row", g: globals{details: true},
			rows: []srqRow{
				srqRowOf(rdmanl.SRQ{DevName: "rxe0", SRQN: 0, PDN: 3, QPs: []rdmanl.QPRange{{Min: 17, Max: 17}}, Owner: rdmanl.Owner{PID: 5}}, nil),
				srqRowOf(rdmanl.SRQ{DevName: "siw0", SRQN: 1, PDN: 4, Owner: rdmanl.Owner{PID: 6}}, nil),
			},
			want: "dev rxe0 srqn 0 type BASIC pdn 3 lqpn 17 qps 1 pid 5\ndev siw0 srqn 1 type BASIC pdn 4 qps 0 pid 6\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, writeList(t, &tt.g, tt.rows)); diff != "" {
				t.Errorf("listing (-want +got):\n%s", diff)
			}
		})
	}
}

// TestListWriterStreams checks that a listing larger than the writer's
// buffer reaches the output before it is closed, so a big dump is never
// held in memory.
func TestListWriterStreams(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	lw := newListWriter(&out, &globals{json: true})
	row := listRows()[1]
	n := 0
	for out.Len() == 0 {
		if n > 100000 {
			t.Fatalf("nothing written after %d rows", n)
		}
		if err := lw.row(row); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := lw.close(); err != nil {
		t.Fatal(err)
	}
	rows := decodeList(t, out.String())
	if len(rows) != n {
		t.Errorf("decoded %d rows, wrote %d", len(rows), n)
	}
}

// fillRandom sets every exported field of a flat struct to a random value;
// strings mix plain ASCII with what JSON must escape.
func fillRandom(rv reflect.Value, rnd *rand.Rand) {
	words := []string{"", "rxe0", "comm app", "<", ">", "&", "\x7f", "quo\"te\\", "tab\there\n", "ünï", "\u2028", "bad\xffutf8", "\x00\x1f"}
	for i := range rv.NumField() {
		f := rv.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(words[rnd.IntN(len(words))] + words[rnd.IntN(len(words))])
		case reflect.Bool:
			f.SetBool(rnd.IntN(2) == 1)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(rnd.Uint64() >> rnd.UintN(64))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(rnd.Uint64()) >> rnd.UintN(64))
		}
	}
}

// TestJSONRowsAsEncodingJSON: a JSON listing writes every row type byte
// for byte as encoding/json does, whether a row writes itself (the
// resource rows, passed by address as listRes does) or not, and whatever
// its fields hold.
func TestJSONRowsAsEncodingJSON(t *testing.T) {
	tests := []struct {
		zero          any
		appendsItsOwn bool
	}{
		{devRow{}, false}, {linkRow{}, false}, {qpRow{}, true}, {cqRow{}, true}, {mrRow{}, true}, {pdRow{}, true},
		{ctxRow{}, true}, {srqRow{}, false}, {cmIDRow{}, true}, {summaryRow{}, false},
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tt := range tests {
		rt := reflect.TypeOf(tt.zero)
		t.Run(rt.Name(), func(t *testing.T) {
			if _, ok := reflect.New(rt).Interface().(jsonAppender); ok != tt.appendsItsOwn {
				t.Fatalf("*%s writes its own JSON: %t, want %t", rt, ok, tt.appendsItsOwn)
			}
			var want []any
			var buf bytes.Buffer
			lw := newListWriter(&buf, &globals{json: true})
			for i := range 300 {
				rv := reflect.New(rt)
				fillRandom(rv.Elem(), rnd)
				want = append(want, rv.Interface())
				row := rv.Interface()
				if i%3 == 0 {
					row = rv.Elem().Interface() // a row passed by value: encoding/json writes it
				}
				if err := lw.row(row); err != nil {
					t.Fatal(err)
				}
			}
			if err := lw.close(); err != nil {
				t.Fatal(err)
			}
			exp, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, exp) {
				t.Errorf("listing differs from encoding/json:\n got %.300s\nwant %.300s", got, exp)
			}
		})
	}
}

// TestJSONRowsAllocs: a row that writes its own JSON goes into the listing
// without allocating, whatever its strings need escaped.
func TestJSONRowsAllocs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, row := range []jsonAppender{&qpRow{}, &cqRow{}, &mrRow{}, &pdRow{}, &ctxRow{}, &cmIDRow{}} {
		fillRandom(reflect.ValueOf(row).Elem(), rnd)
		lw := newListWriter(io.Discard, &globals{json: true})
		if n := testing.AllocsPerRun(100, func() {
			if err := lw.row(row); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%T: %v allocations a row, want 0", row, n)
		}
	}
}
