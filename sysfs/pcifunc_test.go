package sysfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ids gives the PCI function at dir its vendor and device ids.
func (s *sysTree) ids(dir, vendor, device string) {
	s.file(filepath.Join(dir, "vendor"), []byte(vendor+"\n"))
	s.file(filepath.Join(dir, "device"), []byte(device+"\n"))
}

// bind binds the PCI function at dir to driver.
func (s *sysTree) bind(dir, driver string) {
	s.dir(filepath.Join("bus/pci/drivers", driver))
	s.link(filepath.Join(dir, "driver"), filepath.Join("bus/pci/drivers", driver))
}

// netdev adds network interface name below the device at dir.
func (s *sysTree) netdev(dir, name string) {
	ndir := filepath.Join(dir, "net", name)
	s.dir(ndir)
	s.link(filepath.Join(ndir, "device"), dir)
	s.link(filepath.Join("class/net", name), ndir)
}

func TestReadPCIFunction(t *testing.T) {
	s := newSysTree(t)
	const root = "pci0000:00"
	// An HCA on a 6.x kernel: FLR first, then a bus reset.
	hca := s.pci(root, "0000:3b:00.0", fnOpts{})
	s.ids(hca, "0x15b3", "0x101b")
	s.bind(hca, "mlx5_core")
	s.file(filepath.Join(hca, "reset_method"), []byte("flr bus\n"))
	s.file(filepath.Join(hca, "reset"), nil)
	s.ib(hca, "mlx5_0")
	// Its sub-function: the function is the one it sits on.
	s.ib(s.sf(hca, "2", "88"), "mlx5_1")
	// A VF: its own address.
	vf := s.pci(root, "0000:3b:00.2", fnOpts{})
	s.ids(vf, "0x15b3", "0x101c")
	s.bind(vf, "mlx5_core")
	s.file(filepath.Join(vf, "reset_method"), []byte("flr\n"))
	s.file(filepath.Join(vf, "reset"), nil)
	s.vf(hca, vf, "0")
	s.ib(vf, "mlx5_2")
	// A NIC on a kernel older than 5.15: reset but no reset_method.
	nic := s.pci(root, "0000:00:03.0", fnOpts{})
	s.ids(nic, "0x8086", "0x10d3")
	s.bind(nic, "e1000e")
	s.file(filepath.Join(nic, "reset"), nil)
	s.netdev(nic, "eth0")
	// An unbound function with no reset at all (the kernel hides both).
	bare := s.pci(root, "0000:00:04.0", fnOpts{})
	s.ids(bare, "0x1af4", "0x1041")
	// A device on no PCI function, and a netdev on none.
	s.dir("devices/virtual/infiniband/rxe0")
	s.link("class/infiniband/rxe0", "devices/virtual/infiniband/rxe0")
	s.dir("devices/virtual/net/lo")
	s.link("class/net/lo", "devices/virtual/net/lo")

	hcaFn := PCIFunction{Addr: "0000:3b:00.0", Driver: "mlx5_core", VendorID: 0x15b3, DeviceID: 0x101b,
		ResetMethods: []string{"flr", "bus"}, HasResetMethod: true, Resettable: true}
	nicFn := PCIFunction{Addr: "0000:00:03.0", Driver: "e1000e", VendorID: 0x8086, DeviceID: 0x10d3, Resettable: true}
	tests := []struct {
		name   string
		read   func() (PCIFunction, error)
		want   PCIFunction
		notPCI bool
	}{
		{name: "HCA", read: func() (PCIFunction, error) { return ReadPCIFunction(s.root, "mlx5_0") }, want: hcaFn},
		{name: "SF", read: func() (PCIFunction, error) { return ReadPCIFunction(s.root, "mlx5_1") }, want: hcaFn},
		{name: "VF", read: func() (PCIFunction, error) { return ReadPCIFunction(s.root, "mlx5_2") },
			want: PCIFunction{Addr: "0000:3b:00.2", Driver: "mlx5_core", VendorID: 0x15b3, DeviceID: 0x101c,
				ResetMethods: []string{"flr"}, HasResetMethod: true, Resettable: true}},
		{name: "rxe", read: func() (PCIFunction, error) { return ReadPCIFunction(s.root, "rxe0") }, notPCI: true},
		{name: "no device", read: func() (PCIFunction, error) { return ReadPCIFunction(s.root, "nosuch0") }, notPCI: true},
		{name: "netdev", read: func() (PCIFunction, error) { return ReadNetdevPCIFunction(s.root, "eth0") }, want: nicFn},
		{name: "lo", read: func() (PCIFunction, error) { return ReadNetdevPCIFunction(s.root, "lo") }, notPCI: true},
		{name: "by address", read: func() (PCIFunction, error) { return readPCIFunctionAt(s.root, "0000:00:03.0") }, want: nicFn},
		{name: "unbound", read: func() (PCIFunction, error) { return readPCIFunctionAt(s.root, "0000:00:04.0") },
			want: PCIFunction{Addr: "0000:00:04.0", VendorID: 0x1af4, DeviceID: 0x1041}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.read()
			if tt.notPCI {
				if !errors.Is(err, ErrNotPCI) {
					t.Fatalf("got %+v, %v, want ErrNotPCI", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if !hcaFn.OffersReset("flr") || hcaFn.OffersReset("pm") {
		t.Errorf("OffersReset: flr %v pm %v, want true false", hcaFn.OffersReset("flr"), hcaFn.OffersReset("pm"))
	}

	if _, err := readPCIFunctionAt(s.root, "0000:99:00.0"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readPCIFunctionAt(absent) = %v, want fs.ErrNotExist", err)
	}
	if _, err := readPCIFunctionAt(s.root, "../../etc"); err == nil || !strings.Contains(err.Error(), "not a PCI address") {
		t.Errorf("readPCIFunctionAt(../../etc) = %v, want a refusal", err)
	}
	// A bad id is an error naming the file, not a zero id.
	s.file(filepath.Join(bare, "device"), []byte("garbage\n"))
	if _, err := readPCIFunctionAt(s.root, "0000:00:04.0"); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("bad device id: %v, want an error naming it", err)
	}

	for _, tt := range []struct {
		addr string
		want []string
	}{{"0000:00:03.0", []string{"eth0"}}, {"0000:00:04.0", []string{}}} {
		got, err := PCINetdevs(s.root, tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("PCINetdevs(%s) (-want +got):\n%s", tt.addr, diff)
		}
	}
}
