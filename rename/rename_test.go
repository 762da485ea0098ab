package rename

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/opfile"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// fakeKernel is a Renamer that keeps names the way ib_core does: unique,
// and EEXIST for a taken one. A rename leaves NAME_ASSIGN_TYPE as it is.
type fakeKernel struct {
	devs []rdmanl.Device
	fail map[string]error // "from>to": the error that rename returns
	// deleteFirst: "from>to": the index of a device deleted just before
	// that rename reaches the kernel, as by a racing DELLINK.
	deleteFirst map[string]uint32
	calls       []string // "from>to", in order
}

func (k *fakeKernel) Devices(context.Context) ([]rdmanl.Device, error) {
	return slices.Clone(k.devs), nil
}

func (k *fakeKernel) Rename(_ context.Context, d rdmanl.Device, name string) error {
	call := d.Name + ">" + name
	k.calls = append(k.calls, call)
	if del, ok := k.deleteFirst[call]; ok {
		k.devs = slices.DeleteFunc(k.devs, func(o rdmanl.Device) bool { return o.Index == del })
	}
	op := fmt.Sprintf("rename %s to %s", d.Name, name)
	i := slices.IndexFunc(k.devs, func(o rdmanl.Device) bool { return o.Index == d.Index })
	if i < 0 {
		return &rdmanl.Error{Op: op, Err: syscall.ENODEV}
	}
	if k.devs[i].Name != d.Name {
		return fmt.Errorf("fake kernel: device %d is %s, not %s", d.Index, k.devs[i].Name, d.Name)
	}
	if err := k.fail[call]; err != nil {
		return err
	}
	if slices.ContainsFunc(k.devs, func(o rdmanl.Device) bool { return o.Name == name && o.Index != d.Index }) {
		return &rdmanl.Error{Op: op, Err: syscall.EEXIST}
	}
	k.devs[i].Name = name
	return nil
}

func (k *fakeKernel) names() []string {
	var out []string
	for _, d := range k.devs {
		out = append(out, d.Name)
	}
	return out
}

// writeMap writes a map file into a temporary directory.
func writeMap(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "names.conf")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The lab's devices, and two HCAs.
var (
	labRXE  = rdmanl.Device{Index: 1, Name: "rxe0", NodeGUID: 0x000000fffe000101, Protocol: "roce"}
	labSIW  = rdmanl.Device{Index: 2, Name: "siw0", NodeGUID: 0x000000fffe000201, Protocol: "iw"}
	hcaA    = rdmanl.Device{Index: 3, Name: "mlx5_0", NodeGUID: 0x0002c90300a1b2c3, Protocol: "ib"}
	hcaB    = rdmanl.Device{Index: 4, Name: "mlx5_1", NodeGUID: 0x0002c90300a1b2c4, Protocol: "ib"}
	noGUID  = rdmanl.Device{Index: 5, Name: "rxe9", Protocol: "roce"}
	userSet = rdmanl.Device{Index: 6, Name: "mine", NodeGUID: 0x0002c90300a1b2c5, Protocol: "ib", HasNameAssign: true, NameAssignType: rdmanl.NameAssignUser}
)

const labMap = `
0002:c903:00a1:b2c3 fab0-hca0
0002:c903:00a1:b2c4 fab0-hca1
`

// brief is the part of a Result the table checks.
type brief struct {
	From, To, Policy, Status, Reason, Error string
}

func briefs(rs []Result) []brief {
	out := []brief{}
	for _, r := range rs {
		out = append(out, brief{r.From, r.To, string(r.Policy), string(r.Status), r.Reason, r.Error})
	}
	return out
}

func TestRun(t *testing.T) {
	eperm := func(op string) error { return &rdmanl.Error{Op: op, Err: syscall.EPERM} }
	tests := []struct {
		name      string
		devs      []rdmanl.Device
		opts      Options
		mapFile   string // content; "-" for none at all
		fail      map[string]error
		deletes   map[string]uint32 // fakeKernel.deleteFirst
		want      []brief
		wantNames []string // every device's name afterwards
		wantCalls []string
		wantErr   string
		wantIs    error
	}{
		{
			name: "guid names every device",
			devs: []rdmanl.Device{labRXE, labSIW},
			opts: Options{All: true, Policies: []Policy{PolicyGUID}},
			want: []brief{
				{"rxe0", "rocex000000fffe000101", "guid", "renamed", "guid 0000:00ff:fe00:0101", ""},
				{"siw0", "iwx000000fffe000201", "guid", "renamed", "guid 0000:00ff:fe00:0201", ""},
			},
			wantNames: []string{"rocex000000fffe000101", "iwx000000fffe000201"},
			wantCalls: []string{"rxe0>rocex000000fffe000101", "siw0>iwx000000fffe000201"},
		},
		{
			name:    "map first, guid for the rest",
			devs:    []rdmanl.Device{labRXE, hcaA},
			opts:    Options{All: true},
			mapFile: labMap,
			want: []brief{
				{"rxe0", "rocex000000fffe000101", "guid", "renamed", "guid 0000:00ff:fe00:0101", ""},
				{"mlx5_0", "fab0-hca0", "map", "renamed", "map MAP:2", ""},
			},
			wantNames: []string{"rocex000000fffe000101", "fab0-hca0"},
			wantCalls: []string{"rxe0>rocex000000fffe000101", "mlx5_0>fab0-hca0"},
		},
		{
			name:    "one device",
			devs:    []rdmanl.Device{labRXE, hcaA},
			opts:    Options{Devices: []string{"mlx5_0"}},
			mapFile: labMap,
			want: []brief{
				{"mlx5_0", "fab0-hca0", "map", "renamed", "map MAP:2", ""},
			},
			wantNames: []string{"rxe0", "fab0-hca0"},
			wantCalls: []string{"mlx5_0>fab0-hca0"},
		},
		{
			name:    "zero GUID is skipped",
			devs:    []rdmanl.Device{noGUID},
			opts:    Options{All: true},
			mapFile: labMap,
			want: []brief{
				{"rxe9", "rxe9", "", "skipped", "map: node GUID is zero; guid: node GUID is zero", ""},
			},
			wantNames: []string{"rxe9"},
		},
		{
			name:    "no entry in the map",
			devs:    []rdmanl.Device{labRXE},
			opts:    Options{All: true, Policies: []Policy{PolicyMap}},
			mapFile: labMap,
			want: []brief{
				{"rxe0", "rxe0", "", "skipped", "map: no entry for 0000:00ff:fe00:0101 in MAP", ""},
			},
			wantNames: []string{"rxe0"},
		},
		{
			name:    "missing default map file",
			devs:    []rdmanl.Device{labRXE},
			opts:    Options{All: true},
			mapFile: "-",
			want: []brief{
				{"rxe0", "rocex000000fffe000101", "guid", "renamed", "guid 0000:00ff:fe00:0101", ""},
			},
			wantNames: []string{"rocex000000fffe000101"},
			wantCalls: []string{"rxe0>rocex000000fffe000101"},
		},
		{
			name:      "missing map file the user named",
			devs:      []rdmanl.Device{labRXE},
			opts:      Options{All: true, MapMustExist: true},
			mapFile:   "-",
			want:      []brief{},
			wantNames: []string{"rxe0"},
			wantErr:   "rename: read map: open MAP: no such file or directory",
			wantIs:    os.ErrNotExist,
		},
		{
			name:      "invalid map file",
			devs:      []rdmanl.Device{labRXE},
			opts:      Options{All: true},
			mapFile:   "0002:c903:00a1:b2c3 fab0/hca0\n",
			want:      []brief{},
			wantNames: []string{"rxe0"},
			wantErr:   `rename: MAP:1: invalid name "fab0/hca0": contains '/'`,
			wantIs:    ErrInvalidName,
		},
		{
			name: "pci skips virtual devices",
			devs: []rdmanl.Device{labRXE},
			opts: Options{All: true, Policies: []Policy{PolicyPCI, PolicyGUID}, SysRoot: "testdata/no-sysfs"},
			want: []brief{
				{"rxe0", "rocex000000fffe000101", "guid", "renamed", "guid 0000:00ff:fe00:0101", ""},
			},
			wantNames: []string{"rocex000000fffe000101"},
			wantCalls: []string{"rxe0>rocex000000fffe000101"},
		},
		{
			name: "pci and keep",
			devs: []rdmanl.Device{labRXE},
			opts: Options{All: true, Policies: []Policy{PolicyPCI, PolicyKeep, PolicyGUID}, SysRoot: "testdata/no-sysfs"},
			want: []brief{
				{"rxe0", "rxe0", "keep", "unchanged", "keep", ""},
			},
			wantNames: []string{"rxe0"},
		},
		{
			name: "already named",
			devs: []rdmanl.Device{{Index: 1, Name: "rocex000000fffe000101", NodeGUID: labRXE.NodeGUID, Protocol: "roce",
				HasNameAssign: true, NameAssignType: rdmanl.NameAssignUser}},
			opts: Options{All: true, Policies: []Policy{PolicyGUID}},
			want: []brief{
				{"rocex000000fffe000101", "rocex000000fffe000101", "guid", "unchanged", "guid 0000:00ff:fe00:0101", ""},
			},
			wantNames: []string{"rocex000000fffe000101"},
		},
		{
			name: "a user-assigned name is kept",
			devs: []rdmanl.Device{userSet},
			opts: Options{All: true, Policies: []Policy{PolicyGUID}},
			want: []brief{
				{"mine", "ibx0002c90300a1b2c5", "guid", "skipped", "guid 0002:c903:00a1:b2c5; kept the name user space assigned (--force renames it)", ""},
			},
			wantNames: []string{"mine"},
		},
		{
			name: "--force renames a user-assigned name",
			devs: []rdmanl.Device{userSet},
			opts: Options{All: true, Policies: []Policy{PolicyGUID}, Force: true},
			want: []brief{
				{"mine", "ibx0002c90300a1b2c5", "guid", "renamed", "guid 0002:c903:00a1:b2c5", ""},
			},
			wantNames: []string{"ibx0002c90300a1b2c5"},
			wantCalls: []string{"mine>ibx0002c90300a1b2c5"},
		},
		{
			name:    "swap",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "renamed", "map MAP:1", ""},
				{"mlx5_1", "mlx5_0", "map", "renamed", "map MAP:2", ""},
			},
			wantNames: []string{"mlx5_1", "mlx5_0"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_1"},
		},
		{
			name:    "chain",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 fab0-hca1\n",
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "renamed", "map MAP:1", ""},
				{"mlx5_1", "fab0-hca1", "map", "renamed", "map MAP:2", ""},
			},
			wantNames: []string{"mlx5_1", "fab0-hca1"},
			wantCalls: []string{"mlx5_1>fab0-hca1", "mlx5_0>mlx5_1"},
		},
		{
			name:    "swap needs both devices selected",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{Devices: []string{"mlx5_0"}},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: name held by mlx5_1, which keeps it"},
			},
			wantNames: []string{"mlx5_0", "mlx5_1"},
			wantErr:   "rename: mlx5_0 to mlx5_1: name held by mlx5_1, which keeps it",
			wantIs:    os.ErrExist,
		},
		{
			name:    "clash with a device that keeps its name",
			devs:    []rdmanl.Device{labRXE, hcaA},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 rxe0\n0000:00ff:fe00:0101 rxe0-keep\n",
			// rxe0 is renamed away too here, so that works; see the next case.
			want: []brief{
				{"rxe0", "rxe0-keep", "map", "renamed", "map MAP:2", ""},
				{"mlx5_0", "rxe0", "map", "renamed", "map MAP:1", ""},
			},
			wantNames: []string{"rxe0-keep", "rxe0"},
			wantCalls: []string{"rxe0>rxe0-keep", "mlx5_0>rxe0"},
		},
		{
			name:    "clash with a device nobody renames",
			devs:    []rdmanl.Device{labRXE, hcaA, hcaB},
			opts:    Options{All: true, Policies: []Policy{PolicyMap}},
			mapFile: "0002:c903:00a1:b2c3 rxe0\n0002:c903:00a1:b2c4 fab0-hca1\n",
			want: []brief{
				{"rxe0", "rxe0", "", "skipped", "map: no entry for 0000:00ff:fe00:0101 in MAP", ""},
				{"mlx5_0", "rxe0", "map", "failed", "map MAP:1", "rename: mlx5_0 to rxe0: name held by rxe0, which keeps it"},
				{"mlx5_1", "fab0-hca1", "map", "renamed", "map MAP:2", ""},
			},
			wantNames: []string{"rxe0", "mlx5_0", "fab0-hca1"},
			wantCalls: []string{"mlx5_1>fab0-hca1"},
			wantErr:   "rename: mlx5_0 to rxe0: name held by rxe0, which keeps it",
			wantIs:    os.ErrExist,
		},
		{
			name:    "a failed swap is rolled back",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			fail:    map[string]error{"mlx5_1>mlx5_0": &rdmanl.Error{Op: "rename mlx5_1 to mlx5_0", Err: syscall.EBUSY, Message: "busy"}},
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: given up because renaming mlx5_1 to mlx5_0 failed: device or resource busy (kernel: busy)"},
				{"mlx5_1", "mlx5_0", "map", "failed", "map MAP:2", "rename: mlx5_1 to mlx5_0: device or resource busy (kernel: busy)"},
			},
			wantNames: []string{"mlx5_0", "mlx5_1"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_0"},
			wantErr:   "rename: mlx5_0 to mlx5_1: given up because renaming mlx5_1 to mlx5_0 failed: device or resource busy (kernel: busy) (and 1 more failed renames)",
		},
		{
			name:    "a failed rollback names the device it strands",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			fail: map[string]error{
				"mlx5_1>mlx5_0":        &rdmanl.Error{Op: "rename mlx5_1 to mlx5_0", Err: syscall.EBUSY},
				"rdmatool-tmp3>mlx5_0": &rdmanl.Error{Op: "rename rdmatool-tmp3 to mlx5_0", Err: syscall.EBUSY},
			},
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: given up because renaming mlx5_1 to mlx5_0 failed: device or resource busy; undoing the renames before it failed too (device or resource busy): rdmatool-tmp3 (was mlx5_0) left under the wrong name"},
				{"mlx5_1", "mlx5_0", "map", "failed", "map MAP:2", "rename: mlx5_1 to mlx5_0: device or resource busy; undoing the renames before it failed too (device or resource busy): rdmatool-tmp3 (was mlx5_0) left under the wrong name"},
			},
			wantNames: []string{"rdmatool-tmp3", "mlx5_1"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_0"},
			wantErr:   "(and 1 more failed renames)",
		},
		{
			name:      "the device is deleted before its rename",
			devs:      []rdmanl.Device{hcaA, hcaB},
			opts:      Options{All: true},
			mapFile:   labMap,
			deletes:   map[string]uint32{"mlx5_0>fab0-hca0": 3},
			want:      []brief{{"mlx5_0", "fab0-hca0", "map", "failed", "map MAP:2", "rename: mlx5_0 to fab0-hca0: no such device"}, {"mlx5_1", "fab0-hca1", "map", "renamed", "map MAP:3", ""}},
			wantNames: []string{"fab0-hca1"},
			wantCalls: []string{"mlx5_0>fab0-hca0", "mlx5_1>fab0-hca1"},
			wantErr:   "rename: mlx5_0 to fab0-hca0: no such device",
			wantIs:    rdmanl.ErrNoDevice,
		},
		{
			name:    "a device of a swap is deleted while under its temporary name",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			deletes: map[string]uint32{"mlx5_1>mlx5_0": 3},
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: no such device"},
				{"mlx5_1", "mlx5_0", "map", "failed", "map MAP:2", "rename: mlx5_1 to mlx5_0: given up because renaming mlx5_0 to mlx5_1 failed: no such device"},
			},
			wantNames: []string{"mlx5_1"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_1", "mlx5_0>mlx5_1", "rdmatool-tmp3>mlx5_0"},
			wantErr:   "rename: mlx5_0 to mlx5_1: no such device (and 1 more failed renames)",
			wantIs:    rdmanl.ErrNoDevice,
		},
		{
			name:    "the other device of a swap is deleted",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			deletes: map[string]uint32{"mlx5_1>mlx5_0": 4},
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: given up because renaming mlx5_1 to mlx5_0 failed: no such device"},
				{"mlx5_1", "mlx5_0", "map", "failed", "map MAP:2", "rename: mlx5_1 to mlx5_0: no such device"},
			},
			wantNames: []string{"mlx5_0"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_0"},
			wantErr:   "rename: mlx5_0 to mlx5_1: given up because renaming mlx5_1 to mlx5_0 failed: no such device (and 1 more failed renames)",
			wantIs:    rdmanl.ErrNoDevice,
		},
		{
			name:    "a device of a swap is deleted and the last step fails",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			deletes: map[string]uint32{"rdmatool-tmp3>mlx5_1": 4},
			fail:    map[string]error{"rdmatool-tmp3>mlx5_1": &rdmanl.Error{Op: "rename rdmatool-tmp3 to mlx5_1", Err: syscall.EBUSY}},
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "failed", "map MAP:1", "rename: mlx5_0 to mlx5_1: device or resource busy; mlx5_1 deleted meanwhile"},
				{"mlx5_1", "mlx5_0", "map", "failed", "map MAP:2", "rename: mlx5_1 to mlx5_0: given up because renaming mlx5_0 to mlx5_1 failed: device or resource busy; mlx5_1 deleted meanwhile"},
			},
			wantNames: []string{"mlx5_0"},
			wantCalls: []string{"mlx5_0>rdmatool-tmp3", "mlx5_1>mlx5_0", "rdmatool-tmp3>mlx5_1", "mlx5_0>mlx5_1", "rdmatool-tmp3>mlx5_0"},
			wantErr:   "(and 1 more failed renames)",
		},
		{
			name:    "the kernel says the name is taken",
			devs:    []rdmanl.Device{hcaA},
			opts:    Options{All: true},
			mapFile: labMap,
			fail:    map[string]error{"mlx5_0>fab0-hca0": &rdmanl.Error{Op: "rename mlx5_0 to fab0-hca0", Err: syscall.EEXIST}},
			want: []brief{
				{"mlx5_0", "fab0-hca0", "map", "failed", "map MAP:2", "rename: mlx5_0 to fab0-hca0: file exists"},
			},
			wantNames: []string{"mlx5_0"},
			wantCalls: []string{"mlx5_0>fab0-hca0"},
			wantErr:   "rename: mlx5_0 to fab0-hca0: file exists",
			wantIs:    os.ErrExist,
		},
		{
			name: "no CAP_NET_ADMIN",
			devs: []rdmanl.Device{labRXE},
			opts: Options{Devices: []string{"rxe0"}, Policies: []Policy{PolicyGUID}},
			fail: map[string]error{"rxe0>rocex000000fffe000101": eperm("rename rxe0 to rocex000000fffe000101")},
			want: []brief{
				{"rxe0", "rocex000000fffe000101", "guid", "failed", "guid 0000:00ff:fe00:0101", "rename: rxe0 to rocex000000fffe000101: operation not permitted"},
			},
			wantNames: []string{"rxe0"},
			wantCalls: []string{"rxe0>rocex000000fffe000101"},
			wantErr:   "rename: rxe0 to rocex000000fffe000101: operation not permitted",
			wantIs:    os.ErrPermission,
		},
		{
			name:    "dry run",
			devs:    []rdmanl.Device{hcaA, hcaB},
			opts:    Options{All: true, DryRun: true},
			mapFile: "0002:c903:00a1:b2c3 mlx5_1\n0002:c903:00a1:b2c4 mlx5_0\n",
			want: []brief{
				{"mlx5_0", "mlx5_1", "map", "planned", "map MAP:1", ""},
				{"mlx5_1", "mlx5_0", "map", "planned", "map MAP:2", ""},
			},
			wantNames: []string{"mlx5_0", "mlx5_1"},
		},
		{
			name:      "unknown device",
			devs:      []rdmanl.Device{labRXE},
			opts:      Options{Devices: []string{"mlx5_9"}},
			want:      []brief{},
			wantNames: []string{"rxe0"},
			wantErr:   "rdmanl: find device mlx5_9: no such RDMA device",
			wantIs:    rdmanl.ErrNoDevice,
		},
		{
			name:      "no device given",
			devs:      []rdmanl.Device{labRXE},
			want:      []brief{},
			wantNames: []string{"rxe0"},
			wantErr:   "rename: no device given",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &fakeKernel{devs: slices.Clone(tt.devs), fail: tt.fail, deleteFirst: tt.deletes}
			o := tt.opts
			if tt.mapFile != "" {
				o.MapFile = writeMap(t, tt.mapFile)
				if tt.mapFile == "-" {
					os.Remove(o.MapFile)
				}
			} else if slices.Contains(o.Policies, PolicyMap) || len(o.Policies) == 0 {
				o.MapFile = writeMap(t, "")
			}
			rep, err := Run(t.Context(), k, o)
			unMap := func(s string) string {
				if o.MapFile == "" {
					return s
				}
				return strings.ReplaceAll(s, o.MapFile, "MAP")
			}
			got := briefs(rep.Renames)
			for i := range got {
				got[i].Reason, got[i].Error = unMap(got[i].Reason), unMap(got[i].Error)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantNames, k.names()); diff != "" {
				t.Errorf("names afterwards (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, k.calls); diff != "" {
				t.Errorf("renames (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Run error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(unMap(err.Error()), tt.wantErr)):
				t.Errorf("Run error = %v, want %q", err, tt.wantErr)
			case tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Errorf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			for _, n := range k.names() {
				if strings.HasPrefix(n, "rdmatool-tmp") && !strings.Contains(tt.name, "strands") {
					t.Errorf("a device is left under the temporary name %s", n)
				}
			}
		})
	}
}

// TestRunApplyAgain checks that a second run changes nothing.
func TestRunApplyAgain(t *testing.T) {
	k := &fakeKernel{devs: []rdmanl.Device{labRXE, labSIW, hcaA}}
	o := Options{All: true, MapFile: writeMap(t, labMap)}
	if _, err := Run(t.Context(), k, o); err != nil {
		t.Fatal(err)
	}
	calls := len(k.calls)
	rep, err := Run(t.Context(), k, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Renames {
		if r.Status != StatusUnchanged {
			t.Errorf("second run: %s %s", r.From, r.Status)
		}
	}
	if len(k.calls) != calls {
		t.Errorf("second run renamed: %v", k.calls[calls:])
	}
}

// TestReportJSON locks the JSON field names, which are API.
func TestReportJSON(t *testing.T) {
	k := &fakeKernel{devs: []rdmanl.Device{labRXE, noGUID, hcaA, hcaB}}
	o := Options{All: true, MapFile: "testdata/names.conf", DryRun: true}
	rep, err := Run(t.Context(), k, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const golden = "testdata/report.golden.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("report JSON (-want +got):\n%s", diff)
	}
	// An empty report still has its lists.
	empty, _ := json.Marshal(Report{Renames: []Result{}, Steps: []Step{}})
	if !strings.Contains(string(empty), `"renames":[]`) || !strings.Contains(string(empty), `"steps":[]`) {
		t.Errorf("empty report: %s", empty)
	}
}

// TestPrepare checks what Prepare refuses; it makes no kernel call, so a
// caller can report these before it opens netlink.
func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.conf")
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" for none
	}{
		{"good map", Options{All: true, MapFile: "testdata/names.conf", MapMustExist: true}, ""},
		{"bad map", Options{All: true, MapFile: "testdata/bad.conf", DryRun: true},
			`rename: testdata/bad.conf:2: want "GUID NAME", found 1 fields (and 6 more bad lines)`},
		{"named pipe as the map", Options{All: true, MapFile: fifo}, "rename: read map " + fifo + ": not a regular file (a named pipe)"},
		{"named map missing", Options{All: true, MapFile: missing, MapMustExist: true},
			"rename: read map: open " + missing + ": no such file or directory"},
		{"default map missing", Options{All: true, MapFile: missing}, ""},
		{"bad map, map policy unused", Options{All: true, MapFile: "testdata/bad.conf", Policies: []Policy{PolicyGUID}}, ""},
		{"no device", Options{MapFile: missing}, "rename: no device given"},
		{"empty device name", Options{Devices: []string{"rxe0", ""}, MapFile: missing}, "rename: empty device name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Prepare(t.Context(), tt.opts)
			if tt.wantErr == "" {
				if err != nil || j == nil {
					t.Fatalf("Prepare() = %v, %v, want a job", j, err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || j != nil {
				t.Fatalf("Prepare() = %v, %v, want nil and %q", j, err, tt.wantErr)
			}
		})
	}
}

// TestJobUsesMapOfPrepare checks that Job.Run names devices from the map
// file as Prepare read it, not as it is when the job runs.
func TestJobUsesMapOfPrepare(t *testing.T) {
	path := writeMap(t, labMap)
	j, err := Prepare(t.Context(), Options{All: true, MapFile: path, Policies: []Policy{PolicyMap}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("0002:c903:00a1:b2c3 changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := j.Run(t.Context(), &fakeKernel{devs: []rdmanl.Device{hcaA}})
	if err != nil {
		t.Fatal(err)
	}
	want := []brief{{"mlx5_0", "fab0-hca0", "map", "planned", "map " + path + ":2", ""}}
	if diff := cmp.Diff(want, briefs(rep.Renames)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// A map file whose read hangs (NFS, a FUSE file system that never
// answers) does not hold Prepare past its context's end: rename and the
// udev program stop on SIGINT and SIGTERM (their contexts) while it reads.
func TestPrepareStopsWhileTheMapHangs(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	defer func(f func(context.Context, string, int64) ([]byte, error)) { readFile = f }(readFile)
	readFile = func(ctx context.Context, path string, maxSize int64) ([]byte, error) {
		return opfile.Await(ctx, func() ([]byte, error) {
			<-release // a read blocked in the kernel
			return nil, nil
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Prepare(ctx, Options{All: true, MapFile: "/hung/names.conf", Policies: []Policy{PolicyMap}, MapMustExist: true})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Prepare while the map's read hangs: %v, want the context's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prepare still reading the map 10s after its context ended")
	}
}
