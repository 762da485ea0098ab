package bpf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTraceJSONLab holds the lines `rdmatool trace -j` prints for every
// recorded probe event to the bytes in testdata/trace_*.golden.jsonl
// (rewritten by go test -update), with wall time taken as 2026-11-26 00:00
// UTC at boot: a change meant to change no output must leave them be.
func TestTraceJSONLab(t *testing.T) {
	t.Parallel()
	recs := recordings(t)
	if len(recs) == 0 {
		t.Fatal("no recordings in testdata")
	}
	boot := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	for name, raw := range recs {
		t.Run(name, func(t *testing.T) {
			d := &decoder{epoch: boot.UnixNano()}
			var got []byte
			for off := 0; off+recordSize <= len(raw); off += recordSize {
				var ev Event
				if err := d.decode(raw[off:off+recordSize], &ev); err != nil {
					t.Fatal(err)
				}
				got = append(ev.AppendJSON(got), '\n')
			}
			path := filepath.Join("testdata", "trace_"+strings.TrimPrefix(name, "records_")+".golden.jsonl")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}
