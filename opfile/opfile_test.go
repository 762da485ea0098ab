package opfile

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte("interval: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full.yaml")
	if err := os.WriteFile(full, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want string
	}{
		{"regular file", file, "interval: 10s\n"},
		{"symbolic link to a regular file", link, "interval: 10s\n"},
		{"exactly the cap", full, strings.Repeat("\x00", 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Read(tt.path, 64)
			if err != nil || string(b) != tt.want {
				t.Errorf("Read(%s) = %q, %v, want %q", tt.path, b, err, tt.want)
			}
		})
	}
}

// TestReadRefuses checks that what is not a regular file, or is larger than
// the cap, is refused at once with an error naming the file: a named pipe
// with no writer must not block, and /dev/zero must not be read.
func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "agent.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 65), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tests := []struct {
		name   string
		path   string
		want   string
		reason error
	}{
		{"named pipe", fifo, "opfile: " + fifo + ": not a regular file (a named pipe)", ErrNotRegular},
		{"symbolic link to /dev/zero", zero, "opfile: " + zero + ": not a regular file (a character device)", ErrNotRegular},
		{"character device", "/dev/null", "opfile: /dev/null: not a regular file (a character device)", ErrNotRegular},
		{"socket", sock, "opfile: " + sock + ": not a regular file (a socket)", ErrNotRegular},
		{"directory", dir, "opfile: " + dir + ": not a regular file (a directory)", ErrNotRegular},
		{"larger than the cap", big, "opfile: " + big + ": larger than 64 bytes", ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Read(tt.path, 64)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("Read(%s) still blocks after 10s", tt.path)
				// Open the pipe's other end so that Read returns.
				if w, werr := os.OpenFile(tt.path, os.O_WRONLY, 0); werr == nil {
					w.Close()
				}
				err = <-done
			}
			var oe *Error
			if err == nil || err.Error() != tt.want || !errors.As(err, &oe) || oe.Path != tt.path || !errors.Is(err, tt.reason) {
				t.Errorf("Read(%s) = %v, want %q matching %v", tt.path, err, tt.want, tt.reason)
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	_, err := Read(path, 64)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != path {
		t.Errorf("Read(missing) = %v, want the *fs.PathError of %s matching fs.ErrNotExist", err, path)
	}
}

// Open refuses what Read refuses, and without following links a link to
// a regular file as well; a file that grows past the cap while it is read
// fails the read that passes it.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.json")
	if err := os.WriteFile(file, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		follow bool
		want   string // the error; "" for the content
		reason error
	}{
		{"regular file", file, false, "", nil},
		{"a link, followed", link, true, "", nil},
		{"a link, not followed", link, false, "opfile: " + link + ": not a regular file (a symbolic link)", ErrNotRegular},
		{"named pipe", fifo, false, "opfile: " + fifo + ": not a regular file (a named pipe)", ErrNotRegular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Open(tt.path, 16, tt.follow)
			if tt.want != "" {
				if err == nil || err.Error() != tt.want || !errors.Is(err, tt.reason) {
					t.Errorf("Open(%s, follow %v) = %v, want %q", tt.path, tt.follow, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if b, err := io.ReadAll(f); string(b) != "0123456789" || err != nil {
				t.Errorf("read %q, %v", b, err)
			}
		})
	}

	// Opened at 10 bytes under a cap of 16, the file grows to 20.
	f, err := Open(file, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.WriteString("0123456789")
	a.Close()
	b, err := io.ReadAll(f)
	if len(b) != 16 || !errors.Is(err, ErrTooLarge) || err.Error() != "opfile: "+file+": larger than 16 bytes" {
		t.Errorf("read %d bytes of a file grown past the cap, %v; want 16 and ErrTooLarge", len(b), err)
	}
}

// A read that never returns (as on a hung NFS mount) must not keep the
// caller: Await gives up when the context ends, and otherwise returns
// what the read gave.
func TestAwaitStopsWaiting(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Await(ctx, func() ([]byte, error) { <-stuck; return nil, nil })
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Await = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Await still waits for a stuck read after its context ended")
	}

	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("interval: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadContext(context.Background(), file, 100)
	if err != nil || string(b) != "interval: 10s\n" {
		t.Errorf("ReadContext = %q, %v", b, err)
	}
	if _, err := ReadContext(context.Background(), filepath.Join(t.TempDir(), "none"), 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadContext of a missing file = %v, want fs.ErrNotExist", err)
	}
}
