package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmatool/rdmatool/cmd/internal/udevrename"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// kernel is a udevrename.Conn over a list of devices: renames change their
// names.
type kernel struct {
	devs  []rdmanl.Device
	calls []string // "from>to"
}

func (k *kernel) Devices(context.Context) ([]rdmanl.Device, error) { return slices.Clone(k.devs), nil }

func (k *kernel) Rename(_ context.Context, d rdmanl.Device, name string) error {
	k.calls = append(k.calls, d.Name+">"+name)
	for i := range k.devs {
		if k.devs[i].Index == d.Index {
			k.devs[i].Name = name
			return nil
		}
	}
	return &rdmanl.Error{Op: "rename " + d.Name, Err: syscall.ENODEV}
}

func (k *kernel) Close() error { return nil }

// What the packaged rule runs, as `rdmatool rename udev` does it: the
// device gets its GUID name and nothing is printed; every refusal is one
// line and exit 2, made before the kernel is asked when it can be.
func TestRun(t *testing.T) {
	t.Parallel()
	mapFile := filepath.Join(t.TempDir(), "names.conf")
	for _, tt := range []struct {
		name      string
		args      []string
		devpath   string
		wantCalls []string
		wantErr   string // "" for exit 0 and no output
		dials     bool
	}{
		{"guid", []string{"--policy", "guid", "--", "rxe0"}, "/devices/virtual/infiniband/rxe0", []string{"rxe0>rocex000000fffe000101"}, "", true},
		{"already named", []string{"--policy", "guid", "--", "rocex000000fffe000201"}, "", nil, "", true},
		{"another device than the event's", []string{"--", "rxe0"}, "/devices/virtual/infiniband/rxe1", nil,
			`rename: the udev event is for device "rxe1" (DEVPATH=/devices/virtual/infiniband/rxe1), not "rxe0" (the command names another device than the event's: the rule must pass '%k')`, false},
		{"named map missing", []string{"--map", mapFile, "--", "rxe0"}, "", nil, "rename: read map: open " + mapFile + ": no such file or directory", false},
		{"empty map", []string{"--map", "", "--", "rxe0"}, "", nil, `--map "": want a path`, false},
		{"bad policy", []string{"--policy", "nope", "--", "rxe0"}, "", nil, `rename: unknown policy "nope" (want map, guid, pci or keep)`, false},
		{"no device", []string{"--"}, "", nil, "want one device name after the flags, got 0 arguments", false},
		{"two devices", []string{"--", "rxe0", "rxe1"}, "", nil, "want one device name after the flags, got 2 arguments", false},
		{"unknown flag", []string{"--all", "--", "rxe0"}, "", nil, "flag provided but not defined: -all", false},
		{"a control character", []string{"--policy", "\x1b[2J", "--", "rxe0"}, "", nil, `rename: unknown policy "\x1b[2J" (want map, guid, pci or keep)`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &kernel{devs: []rdmanl.Device{
				{Index: 1, Name: "rxe0", NodeGUID: 0x0000_00ff_fe00_0101, Protocol: "roce"},
				{Index: 2, Name: "rocex000000fffe000201", NodeGUID: 0x0000_00ff_fe00_0201, Protocol: "roce"},
			}}
			dialed := false
			var stderr strings.Builder
			code := run(tt.args, tt.devpath, &stderr, func() (udevrename.Conn, error) { dialed = true; return k, nil })
			wantCode, wantStderr := 0, ""
			if tt.wantErr != "" {
				wantCode, wantStderr = 2, "rdmatool-udev-rename: "+tt.wantErr+"\n"
			}
			if code != wantCode || stderr.String() != wantStderr {
				t.Errorf("rdmatool-udev-rename %q: exit %d, stderr %q; want %d, %q", tt.args, code, stderr.String(), wantCode, wantStderr)
			}
			if dialed != tt.dials {
				t.Errorf("netlink opened: %v, want %v", dialed, tt.dials)
			}
			if !slices.Equal(k.calls, tt.wantCalls) {
				t.Errorf("renames %q, want %q", k.calls, tt.wantCalls)
			}
		})
	}
}

// The program links what a rename needs and nothing that makes every
// start slower: no cobra, Prometheus, eBPF, YAML or protobuf.
func TestLinksLittle(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		for _, banned := range []string{"github.com/spf13/", "github.com/prometheus/client_golang", "github.com/cilium/", "go.yaml.in/", "google.golang.org/protobuf", "net/http"} {
			if strings.HasPrefix(p.ImportPath, banned) {
				t.Errorf("rdmatool-udev-rename links %s", p.ImportPath)
			}
		}
	}
}
