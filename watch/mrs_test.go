package watch

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/rdmanl/rdmanltest"
)

func summaryOf(counts ...rdmanl.ResourceCount) rdmanl.Summary {
	return rdmanl.Summary{DevIndex: rxe.Index, DevName: rxe.Name, Counts: counts}
}

func TestMRMarkDue(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	mrs := func(n uint64) rdmanl.Summary {
		return summaryOf(rdmanl.ResourceCount{Name: "qp", Current: 9}, rdmanl.ResourceCount{Name: "mr", Current: n})
	}
	marked := MarkMRs(mrs(5), t0)
	tests := []struct {
		name string
		last MRMark
		sum  rdmanl.Summary
		now  time.Duration
		want bool
	}{
		{"no dump yet", MRMark{}, mrs(5), 0, true},
		{"the same count", marked, mrs(5), time.Second, false},
		{"the same count, QPs changed", marked, summaryOf(rdmanl.ResourceCount{Name: "qp", Current: 10}, rdmanl.ResourceCount{Name: "mr", Current: 5}), time.Second, false},
		{"the same count until every", marked, mrs(5), 5*time.Minute - time.Nanosecond, false},
		{"the same count at every", marked, mrs(5), 5 * time.Minute, true},
		{"one more", marked, mrs(6), time.Second, true},
		{"one less", marked, mrs(4), time.Second, true},
		{"no MR count in the summary", marked, summaryOf(rdmanl.ResourceCount{Name: "qp", Current: 9}), time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.last.Due(tt.sum, t0.Add(tt.now), 5*time.Minute); got != tt.want {
				t.Errorf("Due = %v, want %v", got, tt.want)
			}
		})
	}
}

// UpdateMRs dumps a device's MRs the first time, then only when the
// summary counts another number of them, or every period; what it dumps
// is counted by owner into the state. A device gone during the dump
// keeps its mark.
func TestUpdateMRs(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	host := rdmanltest.NewHost(rxe)
	mr := func(mrn, pid uint32) rdmanl.MR {
		return rdmanl.MR{MRN: mrn, Len: 4096, Owner: rdmanl.Owner{PID: pid}}
	}
	host.SetMRs(rxe.Index, mr(1, 42), mr(2, 42), mr(3, 43))
	st := NewState(leakwatch.Config{}, clock)
	st.SetDevices([]rdmanl.Device{rxe}, nil, now)
	nl := host.Dial()
	defer nl.Close()
	sc := Scanner{NL: nl, Now: clock}
	var mark MRMark
	update := func() {
		t.Helper()
		sum, err := nl.Summary(t.Context(), rxe)
		if err != nil {
			t.Fatal(err)
		}
		if mark, err = sc.UpdateMRs(t.Context(), st, rxe, sum, mark, time.Minute); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	update()
	for range 10 {
		update()
	}
	if n := host.MRDumps("rxe0"); n != 1 {
		t.Errorf("%d MR dumps over 11 intervals with the count unchanged, want 1", n)
	}
	host.SetMRs(rxe.Index, mr(1, 42), mr(2, 42), mr(3, 43), mr(4, 42))
	update()
	update()
	if n := host.MRDumps("rxe0"); n != 2 {
		t.Errorf("%d MR dumps after one change, want 2", n)
	}
	// One MR replaced by another: the count stays, the next dump comes
	// after the period.
	host.SetMRs(rxe.Index, mr(1, 42), mr(2, 42), mr(3, 43), mr(5, 43))
	for range 60 {
		update()
	}
	if n := host.MRDumps("rxe0"); n != 3 {
		t.Errorf("%d MR dumps a minute after an unchanged count, want 3", n)
	}
	got := st.MRTally(10)
	want := []leakwatch.DeviceMRs{{Index: rxe.Index, Name: "rxe0", At: got[0].At, MRs: 4, Bytes: 4 * 4096,
		Owners: []leakwatch.OwnerMRs{{Owner: leakwatch.Owner{PID: 42}, MRs: 2, Bytes: 8192}, {Owner: leakwatch.Owner{PID: 43}, MRs: 2, Bytes: 8192}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MRTally (-want +got):\n%s", diff)
	}
	if n := st.Snapshot().Scans["rxe0"].MRDumps; n != 3 {
		t.Errorf("the state counted %d MR dumps, want 3", n)
	}
	// The device goes: the dump fails as gone, the mark stays.
	host.SetMRs(rxe.Index, mr(1, 42))
	host.Set(nil, nil)
	before := mark
	mark, err := sc.UpdateMRs(t.Context(), st, rxe, summaryOf(rdmanl.ResourceCount{Name: "mr", Current: 1}), mark, time.Minute)
	if !errors.Is(err, rdmanl.ErrNoDevice) || mark != before {
		t.Errorf("UpdateMRs of a gone device: %v, mark %v, want ErrNoDevice and %v", err, mark, before)
	}
}
