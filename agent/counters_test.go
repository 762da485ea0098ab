package agent

import (
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rename"
	"github.com/rdmatool/rdmatool/reset"
)

// The policy's and the renames' counters are there at 0 for each listed
// device before anything happened, so that increase() sees the first
// reset, failure or hourly limit; what counts adds to the same series.
func TestCountersStartAtZero(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dev := rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x0200_00ff_fe00_0101}
	guid := dev.NodeGUID.String()
	for _, tt := range []struct {
		name     string
		mode     string
		method   reset.Method
		renaming bool
		methods  []string // the resets' method labels there at 0
	}{
		{"observe", PolicyObserve, reset.MethodAuto, false, nil},
		{"reset relink", PolicyReset, reset.MethodRelink, false, []string{"relink"}},
		{"reset auto", PolicyReset, reset.MethodAuto, true, []string{"auto", "relink", "devlink-reload", "pci-reset", "unbind", "netdev-bounce"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(leakwatch.Config{}, func() time.Time { return t0 }, "test")
			st.pol.Mode, st.pol.Method = tt.mode, tt.method
			st.renaming = tt.renaming
			st.SetDevices([]rdmanl.Device{dev}, nil, t0)
			snap := st.snapshot()
			wantDecisions := 0
			if tt.mode == PolicyReset {
				wantDecisions = 6
			}
			if len(snap.decisions) != wantDecisions {
				t.Errorf("%d decision series, want %d: %v", len(snap.decisions), wantDecisions, snap.decisions)
			}
			for _, d := range []string{DecisionReset, DecisionHourlyLimit} {
				if n, ok := snap.decisions[decisionKey{"rxe0", guid, d}]; ok != (wantDecisions > 0) || n != 0 {
					t.Errorf("decision %s: %d, %v", d, n, ok)
				}
			}
			if len(snap.resets) != 3*len(tt.methods) {
				t.Errorf("%d reset series, want %d: %v", len(snap.resets), 3*len(tt.methods), snap.resets)
			}
			for _, m := range tt.methods {
				for _, r := range []string{reset.ResultDone, reset.ResultWaiting, reset.ResultFailed} {
					if n, ok := snap.resets[resetKey{"rxe0", guid, m, r}]; !ok || n != 0 {
						t.Errorf("reset %s %s: %d, %v; want there at 0", m, r, n, ok)
					}
				}
			}
			if got, want := len(snap.renames), map[bool]int{false: 0, true: 4}[tt.renaming]; got != want {
				t.Errorf("%d rename series, want %d", got, want)
			}
			if tt.mode != PolicyReset {
				return
			}
			// A reset and a decision count on the series that were at 0.
			st.resetDone(policyEvidence{Device: "rxe0", NodeGUID: guid}, reset.Report{Method: reset.MethodRelink, Result: reset.ResultFailed}, nil)
			st.policyDecided(policyDecision{policyEvidence: policyEvidence{Device: "rxe0", NodeGUID: guid}, Decision: DecisionHourlyLimit})
			st.renamed(rename.Result{From: "rxe0", To: "fab0", NodeGUID: dev.NodeGUID, Status: rename.StatusFailed})
			snap = st.snapshot()
			if n := snap.resets[resetKey{"rxe0", guid, "relink", reset.ResultFailed}]; n != 1 {
				t.Errorf("failed relink resets: %d, want 1", n)
			}
			if n := snap.decisions[decisionKey{"rxe0", guid, DecisionHourlyLimit}]; n != 1 {
				t.Errorf("hourly_limit decisions: %d, want 1", n)
			}
			if n := snap.renames[renameKey{"rxe0", guid, "failed"}]; tt.renaming && n != 1 {
				t.Errorf("failed renames: %d, want 1", n)
			}
		})
	}
}
