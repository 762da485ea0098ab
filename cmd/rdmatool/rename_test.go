package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/spf13/cobra"
)

// TestRunRenameChecksMapFirst runs rename with a bad map file or bad
// arguments: the error is the one about what the user typed, also on a
// host without RDMA (this test's host may have none), where opening
// netlink fails.
func TestRunRenameChecksMapFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.conf")
	if err := os.WriteFile(broken, []byte("# names\n0002:c903:00a1:b2c3 fab0/hca0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.conf")
	brokenErr := "rdmatool: rename: " + broken + `:2: invalid name "fab0/hca0": contains '/'` + "\n"
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"all, dry run", []string{"rename", "--all", "--dry-run", "--map", broken}, brokenErr},
		{"all, dry run, JSON", []string{"rename", "--all", "--dry-run", "--map", broken, "-j"}, brokenErr},
		{"one device", []string{"rename", "rxe0", "--map", broken}, brokenErr},
		{"udev", []string{"rename", "udev", "--map", broken, "--", "rxe0"}, brokenErr},
		{"named pipe", []string{"rename", "--all", "--dry-run", "--map", fifo},
			"rdmatool: rename: read map " + fifo + ": not a regular file (a named pipe)\n"},
		{"missing map", []string{"rename", "--all", "--dry-run", "--map", missing},
			"rdmatool: rename: read map: open " + missing + ": no such file or directory\n"},
		{"unknown policy", []string{"rename", "--all", "--dry-run", "--policy", "map,bogus"},
			"rdmatool: rename: unknown policy \"bogus\" (want map, guid, pci or keep)\n"},
		{"empty device name", []string{"rename", "--dry-run", "--map", missing, ""}, "rdmatool: rename: empty device name\n"},
		{"no device", []string{"rename", "--dry-run"}, "rdmatool: rename: name one device or use --all\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 2 || stdout != "" {
				t.Errorf("rdmatool %q: exit %d, stdout %q; want 2 and nothing", tt.args, code, stdout)
			}
			if diff := cmp.Diff(tt.wantStderr, stderr); diff != "" {
				t.Errorf("rdmatool %q: stderr (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

// fakeKernel is a renameConn over a list of devices: renames change their
// names.
type fakeKernel struct {
	devs   []rdmanl.Device
	calls  []string // "from>to"
	closed bool
}

func (k *fakeKernel) Devices(context.Context) ([]rdmanl.Device, error) {
	return slices.Clone(k.devs), nil
}

func (k *fakeKernel) Rename(_ context.Context, d rdmanl.Device, name string) error {
	k.calls = append(k.calls, d.Name+">"+name)
	for i := range k.devs {
		if k.devs[i].Index == d.Index {
			k.devs[i].Name = name
			return nil
		}
	}
	return &rdmanl.Error{Op: "rename " + d.Name, Err: syscall.ENODEV}
}

func (k *fakeKernel) Close() error {
	k.closed = true
	return nil
}

// labDevices are devices with names that look like flags or hold
// characters a command line treats specially; the kernel accepts them all
// (it refuses only empty names, and '%' in rdma link add). Their node
// GUIDs give the guid policy's names rocex0000000000000001 and on.
func labDevices() []rdmanl.Device {
	var devs []rdmanl.Device
	for i, name := range []string{"rxe0", "-labdash", "lab space", "--force", "-j", "udev", `lab"dq`, `lab\bs`, "lab$k", "lab'q", "labq"} {
		devs = append(devs, rdmanl.Device{Index: uint32(i + 1), Name: name, NodeGUID: rdmanl.GUID(i + 1), Protocol: "roce"})
	}
	return devs
}

// guidName is the guid policy's name for a device of labDevices.
func guidName(t *testing.T, name string) string {
	t.Helper()
	i := slices.IndexFunc(labDevices(), func(d rdmanl.Device) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("no lab device %q", name)
	}
	return fmt.Sprintf("rocex%016x", i+1)
}

// runRename runs rdmatool's rename command on a fake kernel the way main
// does, and says whether the kernel connection was opened.
func runRename(t *testing.T, k *fakeKernel, args ...string) (code int, stdout, stderr string, dialed bool) {
	t.Helper()
	g := &globals{}
	root := &cobra.Command{Use: "rdmatool", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newRenameCmdDial(g, func() (renameConn, error) {
		dialed = true
		return k, nil
	}))
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = exitCode(t.Context(), root.ExecuteContext(t.Context()), &errOut)
	if dialed && !k.closed {
		t.Errorf("rdmatool %q did not close the kernel connection", args)
	}
	return code, out.String(), errOut.String(), dialed
}

// TestRenameArgs checks how rename and rename udev read device names that
// look like flags: after "--" they are names.
func TestRenameArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		want       int
		wantCalls  []string
		wantStdout string
		wantStderr string // "" for none
	}{
		{
			name: "udev, a name with a leading dash after --", args: []string{"rename", "udev", "--policy", "guid", "--", "-labdash"},
			wantCalls: []string{"-labdash>" + guidName(t, "-labdash")},
		},
		{
			name: "udev, a name that is a flag after --", args: []string{"rename", "udev", "--policy", "guid", "--", "--force"},
			wantCalls: []string{"--force>" + guidName(t, "--force")},
		},
		{
			name: "udev, a name with a space", args: []string{"rename", "udev", "--policy", "guid", "--", "lab space"},
			wantCalls: []string{"lab space>" + guidName(t, "lab space")},
		},
		{
			name: "udev, a device called udev", args: []string{"rename", "udev", "--policy", "guid", "--", "udev"},
			wantCalls: []string{"udev>" + guidName(t, "udev")},
		},
		{
			name: "udev, a name with a leading dash without --", args: []string{"rename", "udev", "--policy", "guid", "-labdash"},
			want: 2, wantStderr: "rdmatool: unknown shorthand flag: 'l' in -labdash\n",
		},
		{
			name: "udev, a name with a space split in two", args: []string{"rename", "udev", "--policy", "guid", "lab", "space"},
			want: 2, wantStderr: "rdmatool: accepts 1 arg(s), received 2\n",
		},
		{
			name: "udev, a flag after --", args: []string{"rename", "udev", "--", "-labdash", "--policy", "guid"},
			want: 2, wantStderr: "rdmatool: accepts 1 arg(s), received 3\n",
		},
		{
			name: "rename, a name with a leading dash after --", args: []string{"rename", "--policy", "guid", "--dry-run", "--", "-labdash"},
			wantStdout: "-labdash -> " + guidName(t, "-labdash") + " (guid 0000:0000:0000:0002; dry run)\n",
		},
		{
			name: "rename, a device called udev after --", args: []string{"rename", "--policy", "guid", "--dry-run", "--", "udev"},
			wantStdout: "udev -> " + guidName(t, "udev") + " (guid 0000:0000:0000:0006; dry run)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := &fakeKernel{devs: labDevices()}
			code, stdout, stderr, dialed := runRename(t, k, tt.args...)
			if code != tt.want {
				t.Errorf("rdmatool %q: exit %d, want %d (stderr %q)", tt.args, code, tt.want, stderr)
			}
			if diff := cmp.Diff(tt.wantCalls, k.calls); diff != "" {
				t.Errorf("renames (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStderr, stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if tt.want != 0 && dialed {
				t.Errorf("rdmatool %q opened the kernel connection for bad arguments", tt.args)
			}
		})
	}
}

// TestRenameChecksBeforeDial checks that bad input is reported before the
// kernel connection is opened, whatever the host has.
func TestRenameChecksBeforeDial(t *testing.T) {
	t.Parallel()
	broken := filepath.Join(t.TempDir(), "broken.conf")
	if err := os.WriteFile(broken, []byte("0002:c903:00a1:b2c3 a\u202eb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"rename", "--all", "--dry-run", "--map", broken},
		{"rename", "udev", "--map", broken, "--", "rxe0"},
	} {
		code, stdout, stderr, dialed := runRename(t, &fakeKernel{devs: labDevices()}, args...)
		want := "rdmatool: rename: " + broken + `:1: invalid name "a\u202eb": contains the invisible format character U+202E` + "\n"
		if code != 2 || stdout != "" || stderr != want || dialed {
			t.Errorf("rdmatool %q: exit %d, stdout %q, stderr %q, kernel asked: %v; want 2, nothing, %q, false", args, code, stdout, stderr, dialed, want)
		}
	}
}
