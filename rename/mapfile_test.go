package rename

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/opfile"
)

func TestLoadMap(t *testing.T) {
	m, err := loadMap(t.Context(), "testdata/names.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := &Map{File: "testdata/names.conf", Entries: []MapEntry{
		{GUID: 0x0002c90300a1b2c3, Name: "fab0-hca0", Line: 4},
		{GUID: 0x0002c90300a1b2c4, Name: "fab0-hca1", Line: 5},
		{GUID: 0x0002c90300a1b2c5, Name: "fab1-hca0", Line: 6},
		{GUID: 0x000000fffe000a01, Name: "lab#1", Line: 7},
	}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Fatalf("loadMap (-want +got):\n%s", diff)
	}
	if e, ok := m.Lookup(0x0002c90300a1b2c4); !ok || e.Name != "fab0-hca1" {
		t.Errorf("Lookup = %v, %v, want fab0-hca1", e, ok)
	}
	if _, ok := m.Lookup(0x1); ok {
		t.Error("Lookup of an unknown GUID found an entry")
	}
}

func TestLoadMapMissing(t *testing.T) {
	_, err := loadMap(t.Context(), filepath.Join(t.TempDir(), "names.conf"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "rename: read map: open ") {
		t.Fatalf("loadMap(missing) = %v, want a rename: read map error matching fs.ErrNotExist", err)
	}
}

// TestLoadMapNotRegular checks that a map file that is not a regular file
// is refused at once: a named pipe with no writer must not block.
func TestLoadMapNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "names.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "names.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tests := []struct {
		name string
		path string
		want string
	}{
		{"socket", sock, "rename: read map " + sock + ": not a regular file (a socket)"},
		{"named pipe", fifo, "rename: read map " + fifo + ": not a regular file (a named pipe)"},
		{"directory", dir, "rename: read map " + dir + ": not a regular file (a directory)"},
		{"character device", "/dev/null", "rename: read map /dev/null: not a regular file (a character device)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := loadMap(t.Context(), tt.path)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("loadMap(%s) still blocks after 10s", tt.path)
				// Open the pipe's other end so that loadMap returns.
				if w, werr := os.OpenFile(tt.path, os.O_WRONLY, 0); werr == nil {
					w.Close()
				}
				err = <-done
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, opfile.ErrNotRegular) {
				t.Errorf("loadMap(%s) = %v, want %q", tt.path, err, tt.want)
			}
		})
	}
}

// TestLoadMapTooLarge checks that a map file over 1 MiB is refused, and one
// of exactly 1 MiB read.
func TestLoadMapTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "names.conf")
	if err := os.WriteFile(path, []byte(strings.Repeat("#\n", maxMapSize/2)), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := loadMap(t.Context(), path); err != nil || len(m.Entries) != 0 {
		t.Errorf("loadMap(1 MiB of comments) = %+v, %v, want an empty map", m, err)
	}
	if err := os.WriteFile(path, []byte(strings.Repeat("#\n", maxMapSize/2+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "rename: read map " + path + ": larger than 1048576 bytes"
	if _, err := loadMap(t.Context(), path); err == nil || err.Error() != want || !errors.Is(err, opfile.ErrTooLarge) {
		t.Errorf("loadMap(over 1 MiB) = %v, want %q", err, want)
	}
}

// TestLoadMapSymlink checks that a symbolic link to a map file is read
// (only what it points to must be a regular file).
func TestLoadMapSymlink(t *testing.T) {
	target, err := filepath.Abs("testdata/names.conf")
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "names.conf")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	m, err := loadMap(t.Context(), link)
	if err != nil || len(m.Entries) != 4 {
		t.Fatalf("loadMap(symlink to names.conf) = %+v, %v, want its 4 entries", m, err)
	}
}

// TestLoadMapErrors checks that every bad line is reported with its file
// and line.
func TestLoadMapErrors(t *testing.T) {
	_, err := loadMap(t.Context(), "testdata/bad.conf")
	var me *MapError
	if !errors.As(err, &me) {
		t.Fatalf("loadMap(bad.conf) = %v, want a *MapError", err)
	}
	var got []string
	for _, l := range me.Lines {
		got = append(got, me.File+":"+strconv.Itoa(l.Line)+": "+l.Err.Error())
	}
	want := []string{
		`testdata/bad.conf:2: want "GUID NAME", found 1 fields`,
		`testdata/bad.conf:3: want "GUID NAME", found 3 fields`,
		`testdata/bad.conf:4: invalid GUID "0002:c903:00a1": want 0002:c903:00a1:b2c3, 0x0002c90300a1b2c3 or 0002c90300a1b2c3`,
		`testdata/bad.conf:5: GUID 0000:0000:0000:0000 is zero: devices without a node GUID cannot be named by it`,
		`testdata/bad.conf:6: invalid name "a/b": contains '/'`,
		`testdata/bad.conf:8: GUID 0002:c903:00a1:b2c3 already named "fab0-hca0" at line 7`,
		`testdata/bad.conf:9: name "fab0-hca0" already given to 0002:c903:00a1:b2c3 at line 7`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bad lines (-want +got):\n%s", diff)
	}
	const msg = `rename: testdata/bad.conf:2: want "GUID NAME", found 1 fields (and 6 more bad lines)`
	if err.Error() != msg {
		t.Errorf("error = %q, want %q", err, msg)
	}
	if !errors.Is(err, ErrInvalidName) {
		t.Error("errors.Is(err, ErrInvalidName) = false for a map with an invalid name")
	}
}

// TestParseMapLongValues: what an error quotes of a line is cut, so a
// name or GUID of a megabyte gives a line of a few dozen bytes (issue 24:
// the journal got the megabyte).
func TestParseMapLongValues(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 1<<20)
	for _, line := range []string{"0002:c903:00a1:b2c3 " + long, long + " fab0", "0002:c903:00a1:b2c3 a\x1b[2J" + long} {
		_, err := parseMap([]byte(line+"\n"), "names.conf")
		if err == nil {
			t.Fatalf("parseMap(%.40q...) succeeded", line)
		}
		if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "(1048576 bytes)") && !strings.Contains(msg, "bytes)") {
			t.Errorf("parseMap(%.40q...): error of %d bytes, want it cut: %.300s", line, len(msg), msg)
		}
	}
}

func TestParseMap(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []MapEntry
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"comments only", "# a\n   # b\n\n", nil, ""},
		{"crlf", "0002:c903:00a1:b2c3 a\r\n0002c90300a1b2c4 b\r\n", []MapEntry{
			{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 1}, {GUID: 0x0002c90300a1b2c4, Name: "b", Line: 2},
		}, ""},
		{"no final newline", "0002:c903:00a1:b2c3 a", []MapEntry{{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 1}}, ""},
		{"comment right after the name", "0002:c903:00a1:b2c3 a #x", []MapEntry{{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 1}}, ""},
		{"comment after a carriage return", "0002:c903:00a1:b2c3 a\r#x\n", []MapEntry{{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 1}}, ""},
		{"a comment is no name, whatever the whitespace before it", "0002:c903:00a1:b2c3\r#\n0002:c903:00a1:b2c4\v#x\n0002:c903:00a1:b2c5\u00a0#x\n", nil,
			`rename: f.conf:1: want "GUID NAME", found 1 fields (and 2 more bad lines)`},
		{"same GUID in two forms", "0002:c903:00a1:b2c3 a\n0x0002c90300a1b2c3 b\n", nil,
			`rename: f.conf:2: GUID 0002:c903:00a1:b2c3 already named "a" at line 1`},
		{"name too long", "0002:c903:00a1:b2c3 " + strings.Repeat("n", 64), nil,
			`rename: f.conf:1: invalid name "` + strings.Repeat("n", 64) + `": 64 bytes long, the kernel keeps at most 63`},
		{"percent", "0002:c903:00a1:b2c3 ib%d", nil, `rename: f.conf:1: invalid name "ib%d": contains '%' (the kernel reads it as a name pattern)`},
		{"dot dot", "0002:c903:00a1:b2c3 ..", nil, `rename: f.conf:1: invalid name "..": reserved by sysfs`},
		{"control character", "0002:c903:00a1:b2c3 a\x01", nil, `rename: f.conf:1: invalid name "a\x01": contains a control character`},
		{"name first", "fab0 0002:c903:00a1:b2c3", nil,
			`rename: f.conf:1: invalid GUID "fab0": want 0002:c903:00a1:b2c3, 0x0002c90300a1b2c3 or 0002c90300a1b2c3`},
		{"byte order mark", "\ufeff0002:c903:00a1:b2c3 a\n", []MapEntry{{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 1}}, ""},
		{"byte order mark before a comment", "\ufeff# names\n0002:c903:00a1:b2c3 a\n", []MapEntry{{GUID: 0x0002c90300a1b2c3, Name: "a", Line: 2}}, ""},
		{"byte order mark on the second line", "# names\n\ufeff0002:c903:00a1:b2c3 a\n", nil,
			`rename: f.conf:2: invalid GUID "\ufeff0002:c903:00a1:b2c3": want 0002:c903:00a1:b2c3, 0x0002c90300a1b2c3 or 0002c90300a1b2c3`},
		{"right-to-left override in a name", "0002:c903:00a1:b2c3 fab0\u202e0akh\n", nil,
			`rename: f.conf:1: invalid name "fab0\u202e0akh": contains the invisible format character U+202E`},
		{"zero-width space in a name", "0002:c903:00a1:b2c3 fab0-hca0\u200b\n", nil,
			`rename: f.conf:1: invalid name "fab0-hca0\u200b": contains the invisible format character U+200B`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseMap([]byte(tt.in), "f.conf")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("parseMap error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, m.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}
