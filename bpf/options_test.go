package bpf

import (
	"errors"
	"testing"
)

func TestOptionsMatch(t *testing.T) {
	t.Parallel()
	create := Event{Kind: KindQPCreate, DevName: "rxe0", QPN: 17, PID: 100}
	drain := Event{Kind: KindDrainEnd, DevName: "rxe0", QPN: 18, PID: 0}
	port := Event{Kind: KindDeviceEvent, DevName: "rxe0", Port: 1}
	rename := Event{Kind: KindDeviceRename, DevName: "rxe0", NewName: "fab0", PID: 7}
	tests := []struct {
		name string
		opts Options
		ev   Event
		want bool
	}{
		{"no filters", Options{}, create, true},
		{"device", Options{Device: "rxe0"}, create, true},
		{"other device", Options{Device: "siw0"}, create, false},
		{"rename by its old name", Options{Device: "rxe0"}, rename, true},
		{"rename by its new name", Options{Device: "fab0"}, rename, true},
		{"rename of another device", Options{Device: "siw0"}, rename, false},
		{"qpn", Options{QPNs: []uint32{17}}, create, true},
		{"qpn list", Options{QPNs: []uint32{5, 18}}, drain, true},
		{"other qpn", Options{QPNs: []uint32{18}}, create, false},
		{"qpn drops device events", Options{QPNs: []uint32{0}}, port, false},
		{"qpn drops renames", Options{QPNs: []uint32{0}}, rename, false},
		{"pid", Options{PIDs: []uint32{100}}, create, true},
		{"other pid", Options{PIDs: []uint32{101}}, create, false},
		{"pid drops async events", Options{PIDs: []uint32{100}}, port, false},
		{"all match", Options{Device: "rxe0", QPNs: []uint32{17}, PIDs: []uint32{100}}, create, true},
		{"one fails", Options{Device: "rxe0", QPNs: []uint32{17}, PIDs: []uint32{1}}, create, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.opts.match(&tt.ev); got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOptionsBufferBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      int
		want    int
		wantErr bool
	}{
		{0, 4 << 20, false},
		{4096, 4096, false},
		{1 << 24, 1 << 24, false},
		{2048, 0, true},
		{3 << 20, 0, true},
		{-4096, 0, true},
	}
	for _, tt := range tests {
		got, err := Options{BufferBytes: tt.in}.bufferBytes()
		if got != tt.want || (err != nil) != tt.wantErr || err != nil && !errors.Is(err, errBufferSize) {
			t.Errorf("bufferBytes(%d) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestStatsTotal(t *testing.T) {
	t.Parallel()
	if got := (Stats{Lost: 1, Missed: 2, Unmatched: 3, Malformed: 4}).Total(); got != 10 {
		t.Errorf("Total = %d, want 10", got)
	}
}
