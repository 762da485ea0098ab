package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite the tables in testdata/*.md")

// The logs in testdata are in qp-dump.sh's format: qp-dump-6.1.log as it
// prints it now, qp-dump-6.12-before-mrs.log as it did before the MR
// part (no "mr-" lines, the floor's line without its resource).
const (
	newLog = "testdata/qp-dump-6.1.log"
	oldLog = "testdata/qp-dump-6.12-before-mrs.log"
)

// TestTables holds the tables of each log to testdata/NAME.md. The one of
// the log from before the MR part is what the report printed for it then.
func TestTables(t *testing.T) {
	logs, err := filepath.Glob("testdata/*.log")
	if err != nil || len(logs) < 2 {
		t.Fatalf("logs in testdata: %v, %v", logs, err)
	}
	for _, path := range logs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			k, err := parseLog(path)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			printTables(&b, Report{Date: "2026-11-27", Commit: "test", Kernels: []KernelRun{k}})
			golden := strings.TrimSuffix(path, ".log") + ".md"
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("tables of %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

func TestParseMRs(t *testing.T) {
	k, err := parseLog(newLog)
	if err != nil {
		t.Fatal(err)
	}
	timing := func(runs int, minS, median, maxS float64, rss int) Timing {
		return Timing{Runs: runs, MinSeconds: minS, MedianSeconds: median, MaxSeconds: maxS, MaxRSSKiB: rss}
	}
	wantMRs := []MRSize{
		{MRs: 10000, QPs: 60000, FloorDatagrams: 27, FloorBytes: 850000, Timings: map[string]Timing{
			"floor":         timing(5, 0.110, 0.118, 0.130, 5940),
			"rdmatool":      timing(5, 0.150, 0.161, 0.190, 19800),
			"rdmatool-text": timing(5, 0.200, 0.214, 0.230, 23100),
			"iproute2":      timing(5, 1.210, 1.302, 1.400, 5200),
		}},
		{MRs: 100000, QPs: 60000, FloorDatagrams: 262, FloorBytes: 8500000, Timings: map[string]Timing{
			"floor":         timing(3, 7.801, 8.020, 8.311, 5940),
			"rdmatool":      timing(3, 8.950, 9.104, 9.420, 26100),
			"rdmatool-text": timing(3, 9.300, 9.512, 9.901, 41000),
			"iproute2":      timing(1, 128.440, 128.440, 128.440, 5200),
		}},
	}
	if diff := cmp.Diff(wantMRs, k.MRSizes); diff != "" {
		t.Errorf("MR sizes (-want +got):\n%s", diff)
	}
	wantAgent := &AgentMRs{
		QPs: 60000, MRs: 100000,
		CatchUpSeconds: 14, CatchUpCPUSeconds: 9.12, CatchUpMRDumps: 1, CatchUpScans: 1,
		RSSKiB: 38912, HWMKiB: 88277,
		IdleSeconds: 30, IdleCPU: 0.027, IdleRSSKiB: 39012, IdleMRDumps: 0, IdleScans: 0, ReconcileSeconds: 300,
	}
	if diff := cmp.Diff(wantAgent, k.AgentMRs, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("agent with MRs (-want +got):\n%s", diff)
	}
	// The MR lines leave the QP sizes alone: no size of 10,000 or
	// 100,000 QPs, and the QP floor's replies are its own.
	var qps []int
	for _, s := range k.Sizes {
		qps = append(qps, s.QPs)
	}
	if diff := cmp.Diff([]int{30000, 60000}, qps); diff != "" {
		t.Errorf("QP sizes (-want +got):\n%s", diff)
	}
	if got := k.Sizes[1].FloorDatagrams; got != 161 {
		t.Errorf("floor replies at 60000 QPs = %d, want 161", got)
	}
	if a, b := k.Sizes[0].AgentIdleQPDumps, k.Sizes[1].AgentIdleQPDumps; a != 0 || b != 1 {
		t.Errorf("QP dumps at idle: %d at 30000 QPs, %d at 60000, want 0 and 1", a, b)
	}
}

func TestParseBeforeMRs(t *testing.T) {
	k, err := parseLog(oldLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.MRSizes) != 0 || k.AgentMRs != nil {
		t.Errorf("MR sizes %v, agent with MRs %v; want none", k.MRSizes, k.AgentMRs)
	}
	if len(k.Sizes) != 2 || k.Sizes[0].FloorDatagrams != 83 || k.Sizes[1].FloorDatagrams != 161 {
		t.Errorf("QP sizes %+v, want 30000 and 60000 with 83 and 161 floor replies", k.Sizes)
	}
	for _, s := range k.Sizes {
		if s.AgentIdleQPDumps != -1 {
			t.Errorf("%d QPs: %d QP dumps at idle from a log that does not count them, want -1", s.QPs, s.AgentIdleQPDumps)
		}
	}
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	if got := string(fields["mr_sizes"]); got != "[]" {
		t.Errorf(`"mr_sizes" = %s, want []`, got)
	}
	if _, ok := fields["agent_mrs"]; ok {
		t.Errorf(`"agent_mrs" present without MRs: %s`, fields["agent_mrs"])
	}
}

func TestGrowth(t *testing.T) {
	sizes := []MRSize{
		{MRs: 10000, Timings: map[string]Timing{"floor": {MedianSeconds: 1}}},
		{MRs: 100000, Timings: map[string]Timing{"floor": {MedianSeconds: 100}, "rdmatool": {MedianSeconds: 3}}},
	}
	tests := []struct {
		label, want string
	}{
		{"floor", "2.00"}, // 100 times the time for 10 times the MRs
		{"rdmatool", "–"}, // one size only
		{"iproute2", "–"}, // none
	}
	for _, tt := range tests {
		if got := growth(sizes, tt.label); got != tt.want {
			t.Errorf("growth(%s) = %s, want %s", tt.label, got, tt.want)
		}
	}
	if !math.IsNaN(sizes[0].median("rdmatool")) {
		t.Errorf("median of a label not measured = %v, want NaN", sizes[0].median("rdmatool"))
	}
}
