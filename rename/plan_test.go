package rename

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// devices makes devices with indexes 1, 2, ... and the given names.
func devices(names ...string) []rdmanl.Device {
	devs := make([]rdmanl.Device, len(names))
	for i, n := range names {
		devs[i] = rdmanl.Device{Index: uint32(i + 1), Name: n, NodeGUID: rdmanl.GUID(0x100 + i + 1), Protocol: "roce"}
	}
	return devs
}

func TestPlanRenames(t *testing.T) {
	tests := []struct {
		name       string
		devs       []rdmanl.Device
		want       map[uint32]string
		wantGroups [][]Step
		wantFailed map[uint32]string
	}{
		{
			name:       "free names",
			devs:       devices("mlx5_0", "mlx5_1"),
			want:       map[uint32]string{1: "a", 2: "b"},
			wantGroups: [][]Step{{{1, "mlx5_0", "a", false}}, {{2, "mlx5_1", "b", false}}},
		},
		{
			name:       "swap through a temporary name",
			devs:       devices("a", "b"),
			want:       map[uint32]string{1: "b", 2: "a"},
			wantGroups: [][]Step{{{1, "a", "rdmatool-tmp1", true}, {2, "b", "a", false}, {1, "rdmatool-tmp1", "b", false}}},
		},
		{
			name: "three-way rotation",
			devs: devices("a", "b", "c"),
			want: map[uint32]string{1: "b", 2: "c", 3: "a"},
			wantGroups: [][]Step{{
				{1, "a", "rdmatool-tmp1", true}, {3, "c", "a", false}, {2, "b", "c", false}, {1, "rdmatool-tmp1", "b", false},
			}},
		},
		{
			name:       "chain: the device whose name is free goes first",
			devs:       devices("a", "b", "c"),
			want:       map[uint32]string{1: "b", 2: "c", 3: "d"},
			wantGroups: [][]Step{{{3, "c", "d", false}, {2, "b", "c", false}, {1, "a", "b", false}}},
		},
		{
			name:       "clash with a device that keeps its name",
			devs:       devices("mlx5_0", "fab0"),
			want:       map[uint32]string{1: "fab0"},
			wantFailed: map[uint32]string{1: "rename: mlx5_0 to fab0: name held by fab0, which keeps it"},
		},
		{
			name: "a blocked rename blocks the chain behind it",
			devs: devices("a", "b", "c"),
			want: map[uint32]string{1: "b", 2: "c"}, // c stays
			wantFailed: map[uint32]string{
				2: "rename: b to c: name held by c, which keeps it",
				1: "rename: a to b: name held by b, which cannot be renamed itself",
			},
		},
		{
			name: "two devices want one name",
			devs: devices("a", "b", "c"),
			want: map[uint32]string{1: "x", 2: "x", 3: "y"},
			wantFailed: map[uint32]string{
				1: "rename: a to x: b wants the same name",
				2: "rename: b to x: a wants the same name",
			},
			wantGroups: [][]Step{{{3, "c", "y", false}}},
		},
		{
			name:       "the temporary name is taken",
			devs:       devices("a", "b", "rdmatool-tmp1", "rdmatool-tmp1-2"),
			want:       map[uint32]string{1: "b", 2: "a", 3: "rdmatool-tmp1-3"},
			wantGroups: [][]Step{{{3, "rdmatool-tmp1", "rdmatool-tmp1-3", false}}, {{1, "a", "rdmatool-tmp1-4", true}, {2, "b", "a", false}, {1, "rdmatool-tmp1-4", "b", false}}},
		},
		{
			name:       "swap next to a chain",
			devs:       devices("a", "b", "c"),
			want:       map[uint32]string{1: "b", 2: "a", 3: "d"},
			wantGroups: [][]Step{{{3, "c", "d", false}}, {{1, "a", "rdmatool-tmp1", true}, {2, "b", "a", false}, {1, "rdmatool-tmp1", "b", false}}},
		},
		{
			name: "nothing to do",
			devs: devices("a"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, failed := planRenames(tt.devs, tt.want)
			if diff := cmp.Diff(tt.wantGroups, p.groups); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			got := map[uint32]string{}
			for i, err := range failed {
				got[i] = err.Error()
				if !errors.Is(err, os.ErrExist) {
					t.Errorf("failure of %d does not match os.ErrExist: %v", i, err)
				}
			}
			if tt.wantFailed == nil {
				tt.wantFailed = map[uint32]string{}
			}
			if diff := cmp.Diff(tt.wantFailed, got); diff != "" {
				t.Errorf("failed (-want +got):\n%s", diff)
			}
			checkPlan(t, tt.devs, tt.want, failed, p)
		})
	}
}

// checkPlan replays a plan: every step must find its name free and its
// device under its From name, no device may end under a temporary name, and
// every rename that did not fail must be done.
func checkPlan(t *testing.T, devs []rdmanl.Device, want map[uint32]string, failed map[uint32]error, p plan) {
	t.Helper()
	names := map[uint32]string{}
	holder := map[string]uint32{}
	for _, d := range devs {
		names[d.Index] = d.Name
		holder[d.Name] = d.Index
	}
	for _, s := range p.steps() {
		if names[s.Index] != s.From {
			t.Fatalf("step %+v: device %d is called %s", s, s.Index, names[s.Index])
		}
		if h, taken := holder[s.To]; taken {
			t.Fatalf("step %+v: %s is still held by device %d", s, s.To, h)
		}
		delete(holder, s.From)
		holder[s.To] = s.Index
		names[s.Index] = s.To
	}
	for _, d := range devs {
		w, ok := want[d.Index]
		switch {
		case ok && failed[d.Index] == nil:
			if names[d.Index] != w {
				t.Errorf("device %d ends as %s, want %s", d.Index, names[d.Index], w)
			}
		case names[d.Index] != d.Name:
			t.Errorf("device %d ends as %s, want its old name %s", d.Index, names[d.Index], d.Name)
		}
	}
}
