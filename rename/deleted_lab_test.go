package rename

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/vmtest"
)

// deletingKernel is the kernel, with a real DELLINK of a device sent just
// before the rename "from>to" reaches it: a device deleted in the middle of
// a rename, at a known step.
type deletingKernel struct {
	*rdmanl.Client
	t      *testing.T
	before string // "from>to"
	victim labNIC // the device deleted, by its NIC's node GUID
	sent   bool
}

func (k *deletingKernel) Rename(ctx context.Context, d rdmanl.Device, name string) error {
	if d.Name+">"+name == k.before && !k.sent {
		k.sent = true
		v, ok := byGUID(k.t, k.Client, k.victim.guid)
		if !ok {
			k.t.Fatalf("the device with node GUID %s is gone before the test deletes it", k.victim.guid)
		}
		if err := k.Client.LinkDelete(ctx, v); err != nil {
			k.t.Fatalf("delete %s before the rename %s: %v", v.Name, k.before, err)
		}
	}
	return k.Client.Rename(ctx, d, name)
}

// TestLabRenameDeviceDeleted deletes devices (rdma link delete, a DELLINK)
// in the middle of renames, on the real kernel: before a device's own
// rename, and in a swap while one device is under its temporary name or
// before the other moves. Each ends with an error that says the device is
// gone (matching rdmanl.ErrNoDevice), the survivor under its old name, no
// device under a temporary name, no device reported stranded, and the map
// file untouched. Then the CLI and the udev rule race DELLINKs: every run
// renames the device or says in one line that it is gone, never anything
// else.
func TestLabRenameDeviceDeleted(t *testing.T) {
	vmtest.Require(t, vmtest.RXE, vmtest.SIW)
	c := labClient(t)
	defer checkLabDevices(t, c)
	a, b := nic(12), nic(13)
	addNetdev(t, a)
	addNetdev(t, b)
	mapFile := filepath.Join(t.TempDir(), "names.conf")
	mapText := fmt.Sprintf("%s labdelb\n%s labdela\n", a.guid, b.guid) // a swap
	if err := os.WriteFile(mapFile, []byte(mapText), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{All: true, Policies: []Policy{PolicyMap}, MapFile: mapFile, MapMustExist: true, Force: true}
	// fresh makes the two devices anew: labdela on a, labdelb on b.
	fresh := func(t *testing.T) {
		t.Helper()
		for _, n := range []labNIC{a, b} {
			deleteLink(t, c, n)
		}
		addLink(t, c, a, "labdela", "rxe")
		addLink(t, c, b, "labdelb", "rxe")
	}
	tests := []struct {
		name     string
		before   string // the rename the DELLINK goes just before
		victim   labNIC
		wantErr  string // the error for the victim's rename
		survivor labNIC
		wantName string // the survivor's name afterwards
	}{
		{"in a swap, under its temporary name", "labdelb>labdela", a, "rename: labdela to labdelb: no such RDMA device", b, "labdelb"},
		{"in a swap, before it moves", "labdelb>labdela", b, "rename: labdelb to labdela: no such RDMA device", a, "labdela"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fresh(t)
			k := &deletingKernel{Client: c, t: t, before: tt.before, victim: tt.victim}
			rep, err := Run(t.Context(), k, opts)
			if !k.sent {
				t.Fatalf("the rename %s was never asked for: %v", tt.before, rep.Steps)
			}
			if !errors.Is(err, rdmanl.ErrNoDevice) || !errors.Is(err, os.ErrNotExist) {
				t.Errorf("error %v, want one matching rdmanl.ErrNoDevice and os.ErrNotExist", err)
			}
			var msgs []string
			for _, r := range rep.Renames {
				if !strings.HasPrefix(r.From, "labdel") {
					continue // the lab's rxe0 and siw0: not in the map
				}
				if r.Applied || r.Status != StatusFailed {
					t.Errorf("%s: status %s, applied %v; want failed, not applied", r.From, r.Status, r.Applied)
				}
				msgs = append(msgs, r.Error)
				if strings.Contains(r.Error, "wrong name") || strings.Contains(r.Error, "rdmatool-tmp") {
					t.Errorf("%s: %q: a deleted device reported as stranded", r.From, r.Error)
				}
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tt.wantErr) {
				t.Errorf("errors %q, want one to be %q", msgs, tt.wantErr)
			}
			if _, ok := byGUID(t, c, tt.victim.guid); ok {
				t.Errorf("the deleted device is listed again")
			}
			if d, ok := byGUID(t, c, tt.survivor.guid); !ok || d.Name != tt.wantName {
				t.Errorf("the other device is %q (present %v), want %s: the group was not undone", d.Name, ok, tt.wantName)
			}
			checkLabDevices(t, c)
		})
	}
	t.Run("before its own rename", func(t *testing.T) {
		fresh(t)
		one := Options{Devices: []string{"labdela"}, Policies: []Policy{PolicyGUID}, Force: true}
		k := &deletingKernel{Client: c, t: t, before: "labdela>rocex000000fffe000a0c", victim: a}
		rep, err := Run(t.Context(), k, one)
		want := "rename: labdela to rocex000000fffe000a0c: no such RDMA device"
		if !k.sent || err == nil || err.Error() != want || !errors.Is(err, rdmanl.ErrNoDevice) {
			t.Errorf("error %v (DELLINK sent %v), want %q matching rdmanl.ErrNoDevice", err, k.sent, want)
		}
		if len(rep.Renames) != 1 || rep.Renames[0].Status != StatusFailed || rep.Renames[0].Error != want {
			t.Errorf("report %+v, want one failed rename with that error", rep.Renames)
		}
		if d, _ := byGUID(t, c, b.guid); d.Name != "labdelb" {
			t.Errorf("the device not asked about is %s, want labdelb", d.Name)
		}
	})
	if got, err := os.ReadFile(mapFile); err != nil || string(got) != mapText {
		t.Errorf("the map file is %q, %v afterwards; want it unchanged", got, err)
	}

	// The CLI against a racing DELLINK: the DELLINK goes out from 0 to 1.5
	// times what a whole rename run takes here after rdmatool starts, so
	// runs land before its listing, between the listing and the rename, and
	// after the rename. The spread of delays is the point of the loop:
	// there is no event inside another process to wait for.
	bin := copyBin(t, filepath.Join(t.TempDir(), "rdmatool"))
	t.Run("the CLI racing a DELLINK", func(t *testing.T) {
		fresh(t)
		start := time.Now()
		if _, stderr, code := rdmatool(t, bin, "rename", "--policy", "guid", "--force", "--", "labdela"); code != 0 {
			t.Fatalf("rename without a DELLINK: exit %d: %s", code, stderr)
		}
		whole := time.Since(start)
		const rounds = 16
		outcomes := map[string]int{}
		for i := range rounds {
			delay := whole * time.Duration(i) * 3 / (2 * rounds)
			fresh(t)
			d, _ := byGUID(t, c, a.guid)
			args := []string{"rename", "--policy", "guid", "--force", "--", "labdela"}
			if i%2 == 1 {
				args = []string{"rename", "udev", "--policy", "guid", "--force", "--", "labdela"}
			}
			done := make(chan struct{})
			var stdout, stderr string
			var code int
			go func() {
				defer close(done)
				stdout, stderr, code = rdmatool(t, bin, args...)
			}()
			time.Sleep(delay)
			if err := c.LinkDelete(context.Background(), d); err != nil && !errors.Is(err, rdmanl.ErrNoDevice) {
				t.Errorf("delete: %v", err)
			}
			<-done
			switch {
			case code == 0 && stdout == "labdela -> rocex000000fffe000a0c (guid "+a.guid.String()+")\n" || code == 0 && args[1] == "udev" && stdout == "":
				outcomes["renamed, then deleted"]++
			case code == 2 && stderr == "rdmatool: rename: labdela to rocex000000fffe000a0c: no such RDMA device\n":
				outcomes["deleted at its rename"]++
			case code == 2 && strings.HasPrefix(stderr, "rdmatool: rdmanl: find device labdela: no such RDMA device") && strings.Count(stderr, "\n") == 1:
				outcomes["deleted before the listing"]++
			default:
				t.Errorf("%v with a DELLINK after %v: exit %d, stdout %q, stderr %q; want it renamed, or one line saying it is gone", args, delay, code, stdout, stderr)
			}
			checkLabDevices(t, c)
		}
		t.Logf("kernel %s: a rename run takes %v; with a DELLINK 0 to 1.5 times that after its start: %v", vmtest.Kernel(), whole.Round(time.Millisecond), outcomes)
	})

	t.Run("the udev rule racing a DELLINK", func(t *testing.T) {
		raw, err := os.ReadFile(packagedRule)
		if err != nil {
			t.Fatal(err)
		}
		u := startUdevd(t, "")
		installRule(t, ruleFile, forceRule(t, string(raw)))
		mark := u.mark()
		for range 10 {
			addLink(t, c, a, "labdela", "rxe")
			deleteLink(t, c, a)
		}
		run(t, "udevadm", "settle", "--timeout=60")
		log := u.logSince(mark, "rdmatool")
		if !strings.Contains(log, udevProgram) {
			t.Fatalf("udevd ran no %s for 10 added devices:\n%s", udevProgram, log)
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "panic") || strings.Contains(l, "goroutine ") {
				t.Errorf("udevd log: %s", l)
			}
			if strings.Contains(l, "(err)") && !strings.Contains(l, "no such RDMA device") {
				t.Errorf("rdmatool said something other than that the device is gone: %s", l)
			}
		}
		t.Logf("kernel %s: rdmatool's error lines under 10 add/delete pairs: %d", vmtest.Kernel(), strings.Count(log, "(err)"))
		// After the races, a device that stays gets its name.
		mark = u.mark()
		addLink(t, c, a, "labdela", "rxe")
		u.waitForName(t, c, mark, a, "rocex000000fffe000a0c")
		checkLabDevices(t, c)
	})
}
