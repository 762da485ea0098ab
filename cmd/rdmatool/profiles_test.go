package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCPUWindows profiles between SIGUSR2s: the first window's profile
// appears whole when the second signal ends it, and a window still open
// when the run ends is written then.
func TestCPUWindows(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "idle")
	stop := cpuWindows(prefix)
	signal := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
	}
	appears := func(path string) bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(path); err == nil {
				return true
			}
		}
		return false
	}
	signal()
	if !appears(prefix + ".1.part") {
		t.Fatal("no profile being written after the first SIGUSR2")
	}
	signal()
	if !appears(prefix + ".1") {
		t.Fatal("no profile after the second SIGUSR2")
	}
	signal()
	if !appears(prefix + ".2.part") {
		t.Fatal("no second window after the third SIGUSR2")
	}
	stop()
	if _, err := os.Stat(prefix + ".2"); err != nil {
		t.Errorf("the window open at the end: %v", err)
	}
	b, err := os.ReadFile(prefix + ".1")
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile 1 is not a gzipped pprof profile: %v %.8x", err, b)
	}
}
