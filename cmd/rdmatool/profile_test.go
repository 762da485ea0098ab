package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A profile's file is a regular file: a link at its path is refused and
// its target left as it was, a pipe is refused without blocking.
func TestCreateProfile(t *testing.T) {
	dir := t.TempDir()
	target, link, fifo, ok := filepath.Join(dir, "target"), filepath.Join(dir, "link"), filepath.Join(dir, "fifo"), filepath.Join(dir, "cpu.pprof")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := createProfile(link); err == nil {
		f.Close()
		t.Error("a link at the profile's path was followed")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target is now %q, want it as it was", b)
	}
	if f, err := createProfile(fifo); err == nil {
		f.Close()
		t.Error("a pipe at the profile's path was taken")
	}
	f, err := createProfile(ok)
	if err != nil {
		t.Fatalf("a new profile: %v", err)
	}
	f.Close()
}
