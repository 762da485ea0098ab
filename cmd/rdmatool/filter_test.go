package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// filterQPs is a device's QPs as the listing sees them: kernel GSI, user RC
// and UC QPs in various states, one on an SRQ.
func filterQPs() []qpRow {
	qps := []rdmanl.QP{
		{DevName: "rxe0", Port: 1, LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, SQPSN: 5, Owner: rdmanl.Owner{KernName: "ib_core"}},
		{DevName: "rxe0", Port: 1, LQPN: 5, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, RQPN: 6, PDN: 2, SQPSN: 100, Owner: rdmanl.Owner{PID: 1234}},
		{DevName: "rxe0", Port: 1, LQPN: 6, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, RQPN: 5, PDN: 2, SQPSN: 7, Owner: rdmanl.Owner{PID: 1234}},
		{DevName: "rxe0", Port: 1, LQPN: 7, Type: rdmanl.QPTypeUC, State: rdmanl.QPStateErr, PDN: 3, Owner: rdmanl.Owner{PID: 99}},
		{DevName: "rxe0", Port: 1, LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTR, PDN: 3, OnSRQ: true, SRQN: 0, Owner: rdmanl.Owner{PID: 99}},
		{DevName: "rxe0", Port: 0, LQPN: 18, Type: rdmanl.QPTypeUD, State: rdmanl.QPStateReset, PDN: 3},
	}
	rows := make([]qpRow, len(qps))
	for i, q := range qps {
		rows[i] = qpRowOf(q, nil, rdmanl.ULPIndex{})
	}
	return rows
}

func TestParseFilterMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		extra      []string
		want       []uint32 // lqpn of the rows that pass
		wantExtras map[string]string
	}{
		{name: "no filter", want: []uint32{1, 5, 6, 7, 17, 18}},
		{name: "number", args: []string{"lqpn", "17"}, want: []uint32{17}},
		{name: "hex number", args: []string{"lqpn", "0x11"}, want: []uint32{17}},
		{name: "range", args: []string{"lqpn", "0-6"}, want: []uint32{1, 5, 6}},
		{name: "range of one", args: []string{"lqpn", "7-7"}, want: []uint32{7}},
		{name: "list of numbers and ranges", args: []string{"lqpn", "1,5-7"}, want: []uint32{1, 5, 6, 7}},
		{name: "hex range", args: []string{"lqpn", "0x5-0x6"}, want: []uint32{5, 6}},
		{name: "no match", args: []string{"lqpn", "100-200"}, want: nil},
		{name: "pid 0 selects kernel and orphaned QPs", args: []string{"pid", "0"}, want: []uint32{1, 18}},
		{name: "word", args: []string{"state", "ERR"}, want: []uint32{6, 7}},
		{name: "list of words", args: []string{"type", "RC,UC"}, want: []uint32{5, 6, 7, 17}},
		{name: "words are exact", args: []string{"state", "err"}, want: nil},
		{name: "every term must hold", args: []string{"type", "RC", "state", "ERR"}, want: []uint32{6}},
		{name: "same field twice", args: []string{"lqpn", "0-10", "lqpn", "6-20"}, want: []uint32{6, 7}},
		{name: "iproute2 hyphen", args: []string{"sq-psn", "0-10"}, want: []uint32{1, 6, 7, 17, 18}},
		{name: "JSON underscore", args: []string{"sq_psn", "100"}, want: []uint32{5}},
		{name: "comm of a kernel QP", args: []string{"comm", "ib_core"}, want: []uint32{1}},
		{name: "kern-name", args: []string{"kern-name", "ib_core"}, want: []uint32{1}},
		{name: "boolean", args: []string{"srq", "true"}, want: []uint32{17}},
		{name: "SRQ number 0", args: []string{"srq", "true", "srqn", "0"}, want: []uint32{17}},
		{name: "port", args: []string{"port", "0"}, want: []uint32{18}},
		{
			name: "extras are returned, not matched", args: []string{"link", "rxe0/1", "lqpn", "5"}, extra: []string{"link", "dev"},
			want: []uint32{5}, wantExtras: map[string]string{"link": "rxe0/1"},
		},
		{
			name: "only extras", args: []string{"dev", "siw0"}, extra: []string{"link", "dev"},
			want: []uint32{1, 5, 6, 7, 17, 18}, wantExtras: map[string]string{"dev": "siw0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flt, extras, err := rowfilter.Parse(rowfilter.Spec{Row: qpRow{}, Selectors: tt.extra}, tt.args)
			if err != nil {
				t.Fatalf("rowfilter.Parse(%q): %v", tt.args, err)
			}
			var got []uint32
			for _, r := range filterQPs() {
				if flt.Match(r) {
					got = append(got, r.LQPN)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows passing %q (-want +got):\n%s", tt.args, diff)
			}
			if tt.wantExtras == nil {
				tt.wantExtras = map[string]string{}
			}
			if diff := cmp.Diff(tt.wantExtras, extras); diff != "" {
				t.Errorf("extras (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFilterOtherRows(t *testing.T) {
	t.Parallel()
	mr := mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 4, IOVA: 0xffffffffffff1234, Len: 1 << 40, PDN: 2}, nil)
	tests := []struct {
		name string
		row  any
		args []string
		want bool
	}{
		{"64-bit value in range", mr, []string{"iova", "0xffffffffffff0000-0xffffffffffffffff"}, true},
		{"64-bit value out of range", mr, []string{"iova", "0-0xffff"}, false},
		{"large length", mr, []string{"mrlen", "1099511627776"}, true},
		{"SRQ type", srqRowOf(rdmanl.SRQ{DevName: "rxe0", Type: 1}, nil), []string{"type", "XRC"}, true},
		{"cm_id state", cmIDRowOf(rdmanl.CMID{DevName: "rxe0", State: 8}, nil), []string{"state", "LISTEN"}, true},
		{"cm_id port space", cmIDRowOf(rdmanl.CMID{DevName: "rxe0", PS: 0x0106}, nil), []string{"ps", "TCP,UDP"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flt, _, err := rowfilter.Parse(rowfilter.Spec{Row: tt.row}, tt.args)
			if err != nil {
				t.Fatalf("rowfilter.Parse(%q): %v", tt.args, err)
			}
			if got := flt.Match(tt.row); got != tt.want {
				t.Errorf("match(%q) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		row     any
		args    []string
		extra   []string
		want    []string // substrings of the error
		wantNot []string
	}{
		{name: "backwards range", row: qpRow{}, args: []string{"lqpn", "7-3"}, want: []string{"lqpn", `bad range "7-3"`}},
		{name: "backwards range in a list", row: qpRow{}, args: []string{"lqpn", "1,7-3"}, want: []string{`bad range "7-3"`}},
		{name: "open range", row: qpRow{}, args: []string{"lqpn", "5-"}, want: []string{`bad range "5-"`}},
		{name: "not a number", row: qpRow{}, args: []string{"pid", "abc"}, want: []string{"pid", `"abc" is not a number or range`}},
		{name: "negative number", row: qpRow{}, args: []string{"pid", "-1"}, want: []string{`"-1" is not a number`}},
		{name: "empty list item", row: qpRow{}, args: []string{"lqpn", "1,,2"}, want: []string{`"1,,2" is not a number`}},
		{name: "too large", row: qpRow{}, args: []string{"lqpn", "0x1ffffffffffffffff"}, want: []string{"lqpn"}},
		{name: "beyond the field", row: qpRow{}, args: []string{"lqpn", "99999999999"}, want: []string{`filter lqpn: "99999999999" is out of range (at most 4294967295)`}},
		{name: "range beyond the field", row: qpRow{}, args: []string{"lqpn", "1-4294967296"}, want: []string{`"1-4294967296" is out of range`}},
		{
			name: "a word twice, no value in both", row: qpRow{}, args: []string{"state", "ERR", "state", "INIT"},
			want: []string{`state "ERR" and state "INIT" select nothing together`, "(state A,B)"},
		},
		{name: "a number twice, no value in both", row: qpRow{}, args: []string{"lqpn", "29", "lqpn", "30"}, want: []string{`lqpn "29" and lqpn "30" select nothing`}},
		{
			name: "the third of a field against the first", row: qpRow{}, args: []string{"lqpn", "1-5", "lqpn", "3-9", "lqpn", "6-7"},
			want: []string{`lqpn "1-5" and lqpn "6-7" select nothing`},
		},
		{name: "odd argument count", row: qpRow{}, args: []string{"lqpn", "17", "state"}, want: []string{`filter "state" has no value`}},
		{name: "name only", row: qpRow{}, args: []string{"lqpn"}, want: []string{`filter "lqpn" has no value`}},
		{
			name: "unknown filter lists valid names", row: qpRow{}, args: []string{"bogus", "1"}, extra: []string{"link", "dev"},
			want:    []string{`unknown filter "bogus"`, "valid:", " lqpn ", " sq-psn ", " rq-psn ", " path-mig-state ", " kern-name ", " state ", " type ", " link", " dev"},
			wantNot: []string{"sq_psn", "SRQText", "Link", "srq_text"},
		},
		{
			name: "text-only fields are not filters", row: qpRow{}, args: []string{"link", "rxe0/1"},
			want: []string{`unknown filter "link"`},
		},
		{
			name: "SRQ lqpn is not a filter", row: srqRow{}, args: []string{"lqpn", "17"}, extra: []string{"dev", "link"},
			want: []string{`unknown filter "lqpn"`}, wantNot: []string{"qp-ranges", " lqpn"},
		},
		{name: "unknown filter keeps the user's spelling", row: cqRow{}, args: []string{"poll-context", "DIRECT"}, want: []string{`unknown filter "poll-context"`, "poll-ctx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := rowfilter.Parse(rowfilter.Spec{Row: tt.row, Selectors: tt.extra}, tt.args)
			if err == nil {
				t.Fatalf("rowfilter.Parse(%q) succeeded, want an error", tt.args)
			}
			msg := err.Error() + " " // so the last name ends in a space too
			for _, s := range tt.want {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			for _, s := range tt.wantNot {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains %q", err, s)
				}
			}
		})
	}
}
