package main

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/rdmatool/rdmatool/watch"
)

// The agent's process collects at GOGC 25 and has no transparent huge
// pages (/proc/self/status "THP_enabled: 0", what an operator checks).
func TestTuneAgentMemory(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: the agent keeps it")
	}
	status := func() string {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Skip(err)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "THP_enabled:"); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Skip("no THP_enabled in /proc/self/status (kernel before 5.0)")
		return ""
	}
	if status() != "1" {
		t.Skip("transparent huge pages are already off for this process")
	}
	tuneAgentMemory(&watch.Deps{})
	gogc := debug.SetGCPercent(100)
	if gogc != 25 {
		t.Errorf("GOGC %d after tuneAgentMemory, want 25", gogc)
	}
	if got := status(); got != "0" {
		t.Errorf("THP_enabled: %s after tuneAgentMemory, want 0", got)
	}
}
