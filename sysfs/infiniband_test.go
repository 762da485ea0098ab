package sysfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	procsysfs "github.com/prometheus/procfs/sysfs"
)

// testdata/sys is a sysfs tree as the lab's 6.12 guest shows rxe0 and siw0
// (no device link, no board_id or hca_type, an empty fw_ver, hw_counters on
// rxe only, the netdev in gid_attrs/ndevs/0), plus a two-port InfiniBand
// HCA on PCI, mlx5_0, with an IPoIB netdev per port and broken files: a
// hw counter that reads "garbage", a PMA counter that reads "N/A (no PMA)"
// and a port 2 rate procfs cannot parse.
const testSys = "testdata/sys"

func TestReadDevices(t *testing.T) {
	t.Parallel()
	devs, err := readDevices(testSys)
	if err != nil {
		t.Fatal(err)
	}
	active := func(n uint32, rate uint64, link, netdev string) Port {
		return Port{Port: n, State: "ACTIVE", StateID: 4, PhysState: "LinkUp", PhysStateID: 5,
			RateBytesPerSecond: rate, LinkLayer: link, Netdev: netdev,
			Counters: map[string]uint64{}, HWCounters: map[string]uint64{}}
	}
	rxe := active(1, 312500000, "Ethernet", "dummy0")
	rxe.HWCounters = map[string]uint64{"sent_pkts": 10, "rcvd_pkts": 12, "duplicate_request": 0}
	mlx1 := active(1, 12500000000, "InfiniBand", "ib0")
	mlx1.Counters = map[string]uint64{"symbol_error": 0, "port_xmit_data": 1000}
	mlx1.HWCounters = map[string]uint64{"out_of_buffer": 3}
	mlx2 := active(2, 0, "InfiniBand", "ib1") // its rate is skipped
	mlx2.Counters = map[string]uint64{"symbol_error": 0, "port_xmit_data": 1000}
	mlx2.HWCounters = map[string]uint64{"out_of_buffer": 3}
	want := []Device{
		{Name: "mlx5_0", NodeGUID: "248a:0703:0049:d4f0", FirmwareVersion: "20.31.1014", BoardID: "MT_0000000010", HCAType: "MT4123",
			Ports: []Port{mlx1, mlx2},
			Skipped: []Skipped{
				{Path: "ports/2/rate"},
				{Path: "ports/1/counters/port_rcv_errors"},
				{Path: "ports/1/hw_counters/np_cnp_sent"},
			}},
		{Name: "rxe0", NodeGUID: "0000:00ff:fe00:0101", Ports: []Port{rxe}, Skipped: []Skipped{}},
		{Name: "siw0", NodeGUID: "0000:00ff:fe00:0201", Ports: []Port{active(1, 312500000, "Ethernet", "dummy1")}, Skipped: []Skipped{}},
	}
	opts := cmp.Options{
		cmpopts.IgnoreFields(Skipped{}, "Err"),
		cmpopts.SortSlices(func(a, b Skipped) bool { return a.Path < b.Path }),
	}
	if diff := cmp.Diff(want, devs, opts); diff != "" {
		t.Errorf("readDevices (-want +got):\n%s", diff)
	}
	for _, d := range devs {
		for _, s := range d.Skipped {
			if s.Err == nil {
				t.Errorf("%s: skipped %s without an error", d.Name, s.Path)
			}
		}
	}
}

// procfs itself fails mlx5_0 as a whole on its one bad counter: what
// ReadDevice's attribute-by-attribute reading is there for.
func TestProcfsFailsWholeDevice(t *testing.T) {
	t.Parallel()
	pfs, err := procsysfs.NewFS(testSys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pfs.InfiniBandDevice("mlx5_0"); err == nil {
		t.Fatal("procfs read mlx5_0 with its broken counter and rate: the fallback is not exercised")
	}
	if _, err := pfs.InfiniBandDevice("rxe0"); err != nil {
		t.Fatalf("procfs cannot read rxe0: %v", err)
	}
}

// The fallback reads a good device exactly as procfs does.
func TestFallbackMatchesProcfs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"rxe0", "siw0"} {
		viaProcfs := Device{Name: name}
		if err := fromProcfs(&viaProcfs, testSys); err != nil {
			t.Fatal(err)
		}
		direct := Device{Name: name}
		if err := readAttrs(&direct, filepath.Join(testSys, "class", "infiniband", name)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(viaProcfs, direct); diff != "" {
			t.Errorf("%s: procfs (-) and the fallback (+) differ:\n%s", name, diff)
		}
	}
}

func TestReadDeviceMissing(t *testing.T) {
	t.Parallel()
	if _, err := ReadDevice(testSys, "nope0"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDevice(nope0) = %v, want fs.ErrNotExist", err)
	}
	devs, err := readDevices(t.TempDir()) // no class/infiniband: no devices
	if err != nil || len(devs) != 0 {
		t.Errorf("readDevices(empty) = %v, %v; want none", devs, err)
	}
}

func TestParseAttrs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		rate    uint64
		rateErr bool
	}{
		{"2.5 Gb/sec (1X SDR)", 312500000, false},
		{"100 Gb/sec (4X EDR)", 12500000000, false},
		{"400 Gb/sec (4X NDR)", 50000000000, false},
		{"fast", 0, true},
		{"", 0, true},
		{"-1 Gb/sec", 0, true},
	}
	for _, tt := range tests {
		got, err := parseRateAttr(tt.in)
		if got != tt.rate || (err != nil) != tt.rateErr {
			t.Errorf("parseRateAttr(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.rate, tt.rateErr)
		}
	}
	for in, want := range map[string]struct {
		id   uint32
		name string
		ok   bool
	}{
		"4: ACTIVE":   {4, "ACTIVE", true},
		"5: LinkUp":   {5, "LinkUp", true},
		"1:DOWN":      {1, "DOWN", true},
		"ACTIVE":      {0, "", false},
		"x: y":        {0, "", false},
		"99999999999": {0, "", false},
	} {
		id, name, err := parseStateAttr(in)
		if id != want.id || name != want.name || (err == nil) != want.ok {
			t.Errorf("parseStateAttr(%q) = %d, %q, %v; want %d, %q, ok %v", in, id, name, err, want.id, want.name, want.ok)
		}
	}
}

func TestReadUverbs(t *testing.T) {
	t.Parallel()
	got, err := ReadUverbs(testSys)
	if err != nil {
		t.Fatal(err)
	}
	want := []Uverbs{
		{Name: "uverbs0", Device: "rxe0", Dev: "231:192"},
		{Name: "uverbs1", Device: "siw0", Dev: "231:193"},
		{Name: "uverbs2", Device: "mlx5_0", Dev: "231:194"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadUverbs (-want +got):\n%s", diff)
	}
	if cm, err := ReadRDMACMDev(testSys); cm != "10:260" || err != nil {
		t.Errorf("ReadRDMACMDev = %q, %v; want 10:260", cm, err)
	}
	if u, err := ReadUverbs(t.TempDir()); err != nil || len(u) != 0 {
		t.Errorf("ReadUverbs without ib_uverbs = %v, %v; want none", u, err)
	}
	if _, err := ReadRDMACMDev(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadRDMACMDev without rdma_ucm = %v, want fs.ErrNotExist", err)
	}
}
