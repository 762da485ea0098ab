package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/cmd/rdmatool/internal/rowfilter"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// qpKernel answers the dumps of a QP listing from its tables, by device
// name, and counts the dumps it is asked for ("SRQs of siw0"). Its QP dump
// joins SRQs as rdmanl's does: with the SRQs the caller passes
// (DumpOptions.SRQs), else from an SRQ dump of its own, which counts
// (TestQPsJoinTheCallersSRQs holds rdmanl to this). srqErr ends a device's
// SRQ dump, after its SRQs, with an error.
type qpKernel struct {
	qps    map[string][]rdmanl.QP
	srqs   map[string][]rdmanl.SRQ
	ids    map[string][]rdmanl.CMID
	srqErr map[string]error
	dumps  map[string]int
}

func fakeDump[T any](k *qpKernel, what string, dev rdmanl.Device, vs []T, end error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		k.dumps[what+" of "+dev.Name]++
		for _, v := range vs {
			if !yield(v, nil) {
				return
			}
		}
		if end != nil {
			var zero T
			yield(zero, end)
		}
	}
}

func (k *qpKernel) CMIDs(_ context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.CMID, error] {
	return fakeDump(k, "CM IDs", dev, k.ids[dev.Name], nil)
}

func (k *qpKernel) SRQs(_ context.Context, dev rdmanl.Device, _ rdmanl.DumpOptions) iter.Seq2[rdmanl.SRQ, error] {
	return fakeDump(k, "SRQs", dev, k.srqs[dev.Name], k.srqErr[dev.Name])
}

func (k *qpKernel) QPs(ctx context.Context, dev rdmanl.Device, opts rdmanl.DumpOptions) iter.Seq2[rdmanl.QP, error] {
	var srqs []rdmanl.SRQ
	switch {
	case opts.NoSRQJoin:
	case opts.SRQs != nil:
		srqs = *opts.SRQs
	default:
		for s, err := range k.SRQs(ctx, dev, rdmanl.DumpOptions{}) {
			if err == nil {
				srqs = append(srqs, s)
			}
		}
	}
	qps := make([]rdmanl.QP, 0, len(k.qps[dev.Name]))
	for _, q := range k.qps[dev.Name] {
		q.DevIndex, q.DevName = dev.Index, dev.Name
		for _, s := range srqs {
			if s.HasQP(q.LQPN) {
				q.OnSRQ, q.SRQN = true, s.SRQN
				break
			}
		}
		qps = append(qps, q)
	}
	return fakeDump(k, "QPs", dev, qps, nil)
}

// warnings records the messages logged at Warn.
type warnings []string

func (w *warnings) Warn(msg string, _ ...any) { *w = append(*w, msg) }

// `res qp` dumps each device's rdma_cm IDs, SRQs and QPs once: the SRQs
// name the ULPs and give each QP its SRQ. An SRQ dump that skipped
// malformed entries still joins what it decoded, and names no ULP; one
// that failed otherwise ends the listing.
func TestListQPsDumpsOnce(t *testing.T) {
	t.Parallel()
	rxe := rdmanl.Device{Index: 0, Name: "rxe0"}
	siw := rdmanl.Device{Index: 1, Name: "siw0"}
	rdmaCM := rdmanl.Owner{KernName: "rdma_cm"}
	kernel := func() *qpKernel {
		return &qpKernel{
			qps: map[string][]rdmanl.QP{
				"rxe0": {{Port: 1, LQPN: 17, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, Owner: rdmanl.Owner{PID: 1234}}},
				"siw0": {
					{Port: 1, LQPN: 2, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, Owner: rdmaCM},
					{Port: 1, LQPN: 5, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, Owner: rdmaCM},
					{Port: 1, LQPN: 7, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, Owner: rdmanl.Owner{PID: 77}},
				},
			},
			srqs: map[string][]rdmanl.SRQ{"siw0": {
				{SRQN: 0, QPs: []rdmanl.QPRange{{Min: 7, Max: 7}}, Owner: rdmanl.Owner{PID: 77}},
				{SRQN: 1, QPs: []rdmanl.QPRange{{Min: 2, Max: 2}}, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}},
			}},
			ids: map[string][]rdmanl.CMID{"siw0": {{LQPN: 5, Owner: rdmanl.Owner{KernName: "nvme_rdma"}}}},
		}
	}
	once := map[string]int{
		"CM IDs of rxe0": 1, "SRQs of rxe0": 1, "QPs of rxe0": 1,
		"CM IDs of siw0": 1, "SRQs of siw0": 1, "QPs of siw0": 1,
	}
	// row is what the test reads of a JSON row.
	type row struct {
		IfName string `json:"ifname"`
		LQPN   uint32 `json:"lqpn"`
		SRQ    bool   `json:"srq"`
		SRQN   uint32 `json:"srqn"`
		ULP    string `json:"ulp"`
	}
	partial := &rdmanl.PartialError{Op: "dump SRQs of siw0", Skipped: 1, First: errors.New("entry without SRQN")}
	gone := &rdmanl.Error{Op: "dump SRQs of siw0", Err: rdmanl.ErrNoDevice}
	tests := []struct {
		name         string
		srqErr       error
		wantRows     []row
		wantDumps    map[string]int
		wantWarnings warnings
		wantErr      error
	}{
		{
			name: "every dump read",
			wantRows: []row{
				{IfName: "rxe0", LQPN: 17},
				{IfName: "siw0", LQPN: 2, SRQ: true, SRQN: 1, ULP: "nvmet_rdma"},
				{IfName: "siw0", LQPN: 5, ULP: "nvme_rdma"},
				{IfName: "siw0", LQPN: 7, SRQ: true, SRQN: 0},
			},
			wantDumps: once,
		},
		{
			name:   "SRQ dump skipped malformed entries",
			srqErr: partial,
			wantRows: []row{
				{IfName: "rxe0", LQPN: 17},
				{IfName: "siw0", LQPN: 2, SRQ: true, SRQN: 1},
				{IfName: "siw0", LQPN: 5},
				{IfName: "siw0", LQPN: 7, SRQ: true, SRQN: 0},
			},
			wantDumps:    once,
			wantWarnings: warnings{"no ULP names: cannot read the SRQs"},
		},
		{
			name:         "device gone during its SRQ dump",
			srqErr:       gone,
			wantRows:     []row{{IfName: "rxe0", LQPN: 17}},
			wantDumps:    map[string]int{"CM IDs of rxe0": 1, "SRQs of rxe0": 1, "QPs of rxe0": 1, "CM IDs of siw0": 1, "SRQs of siw0": 1},
			wantWarnings: warnings{"no ULP names: cannot read the SRQs"},
			wantErr:      rdmanl.ErrNoDevice,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := kernel()
			k.dumps = map[string]int{}
			k.srqErr = map[string]error{"siw0": tt.srqErr}
			var out bytes.Buffer
			var warned warnings
			lw := newListWriter(&out, &globals{json: true})
			err := listQPs(t.Context(), k, rowfilter.Filter{}, []rdmanl.Device{rxe, siw}, rdmanl.DumpOptions{}, nil, true, lw, &warned)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("listQPs: %v, want %v", err, tt.wantErr)
			}
			if err := lw.close(); err != nil {
				t.Fatal(err)
			}
			var got []row
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if diff := cmp.Diff(tt.wantRows, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDumps, k.dumps); diff != "" {
				t.Errorf("dumps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, warned); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}
