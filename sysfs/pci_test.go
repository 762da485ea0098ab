package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sysTree builds a fake sysfs below a temporary root, with relative links
// the way the kernel makes them.
type sysTree struct {
	t    *testing.T
	root string
}

func newSysTree(t *testing.T) *sysTree { return &sysTree{t: t, root: t.TempDir()} }

func (s *sysTree) file(rel string, content []byte) {
	s.t.Helper()
	p := filepath.Join(s.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, content, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sysTree) dir(rel string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Join(s.root, rel), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// link makes rel a relative symlink to target (both below the root).
func (s *sysTree) link(rel, target string) {
	s.t.Helper()
	p := filepath.Join(s.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	// Like the kernel's kernfs_get_target_path, which always ends in the
	// target's own name, even when it is an ancestor ("../../../0000:3b:00.0").
	t := filepath.Join(s.root, target)
	r, err := filepath.Rel(filepath.Dir(p), filepath.Dir(t))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(r, filepath.Base(t)), p); err != nil {
		s.t.Fatal(err)
	}
}

type fnOpts struct {
	multifunction bool
	ari           bool
}

// pci adds a PCI function at devices/<parent>/<addr> and returns its path.
func (s *sysTree) pci(parent, addr string, o fnOpts) string {
	dir := filepath.Join("devices", parent, addr)
	config := make([]byte, 256)
	if o.multifunction {
		config[0x0e] = 0x80
	}
	s.file(filepath.Join(dir, "config"), config)
	ari := "0\n"
	if o.ari {
		ari = "1\n"
	}
	s.file(filepath.Join(dir, "ari_enabled"), []byte(ari))
	s.dir("bus/pci/devices")
	s.link(filepath.Join(dir, "subsystem"), "bus/pci")
	s.link(filepath.Join("bus/pci/devices", addr), dir)
	return dir
}

// ib adds an RDMA device below the device at dir.
func (s *sysTree) ib(dir, name string) {
	ibdir := filepath.Join(dir, "infiniband", name)
	s.dir(ibdir)
	s.link(filepath.Join(ibdir, "device"), dir)
	s.link(filepath.Join("class/infiniband", name), ibdir)
}

// vf makes vf the virtual function number n of pf.
func (s *sysTree) vf(pf, vf string, n string) {
	s.link(filepath.Join(vf, "physfn"), pf)
	s.link(filepath.Join(pf, "virtfn"+n), vf)
}

// sf adds a sub-function below the PCI function at dir and returns its path.
func (s *sysTree) sf(dir, id, sfnum string) string {
	sf := filepath.Join(dir, "mlx5_core.sf."+id)
	s.file(filepath.Join(sf, "sfnum"), []byte(sfnum+"\n"))
	s.dir("bus/auxiliary")
	s.link(filepath.Join(sf, "subsystem"), "bus/auxiliary")
	return sf
}

func TestReadPCILocation(t *testing.T) {
	s := newSysTree(t)
	const root = "pci0000:00"
	// A single-function HCA.
	s.ib(s.pci(root, "0000:3b:00.0", fnOpts{}), "mlx5_0")
	// A dual-port HCA: two functions of a multi-function device.
	s.ib(s.pci(root, "0000:5e:00.0", fnOpts{multifunction: true}), "mlx5_1")
	s.ib(s.pci(root, "0000:5e:00.1", fnOpts{multifunction: true}), "mlx5_2")
	// rdma-core's example, in PCI domain 2.
	s.ib(s.pci("pci0002:00", "0002:00:0c.4", fnOpts{}), "mlx5_3")
	// SR-IOV: a PF and two VFs, the second one's function is 0000:af:00.3.
	pf := s.pci(root, "0000:af:00.0", fnOpts{multifunction: true})
	vf1 := s.pci(root, "0000:af:00.2", fnOpts{})
	vf2 := s.pci(root, "0000:af:00.3", fnOpts{})
	s.vf(pf, vf1, "0")
	s.vf(pf, vf2, "1")
	s.ib(pf, "mlx5_4")
	s.ib(vf2, "mlx5_5")
	// ARI: device 01 function 2 is function 10.
	s.ib(s.pci(root, "0000:d8:01.2", fnOpts{ari: true}), "mlx5_6")
	// Sub-functions, on the PF and on a VF (rdma-core's examples).
	pfSF := s.pci(root, "0000:c1:00.0", fnOpts{multifunction: true})
	vfSF := s.pci(root, "0000:c1:00.4", fnOpts{})
	s.vf(pfSF, vfSF, "0")
	s.ib(s.sf(pfSF, "2", "88"), "mlx5_7")
	s.ib(s.sf(vfSF, "3", "99"), "mlx5_8")
	// Devices on no PCI function.
	s.dir("devices/virtual/infiniband/rxe0")
	s.link("class/infiniband/rxe0", "devices/virtual/infiniband/rxe0")
	plat := "devices/platform/hns0"
	s.dir("bus/platform")
	s.link(filepath.Join(plat, "subsystem"), "bus/platform")
	s.ib(plat, "hns_0")
	aux := "devices/" + root + "/0000:3b:00.0/irdma.aux.0"
	s.link(filepath.Join(aux, "subsystem"), "bus/auxiliary")
	s.ib(aux, "irdma0")

	tests := []struct {
		dev    string
		want   PCILocation
		notPCI bool
	}{
		{dev: "mlx5_0", want: PCILocation{Addr: "0000:3b:00.0", Bus: 0x3b}},
		{dev: "mlx5_1", want: PCILocation{Addr: "0000:5e:00.0", Bus: 0x5e, Multifunction: true}},
		{dev: "mlx5_2", want: PCILocation{Addr: "0000:5e:00.1", Bus: 0x5e, Func: 1, Multifunction: true}},
		{dev: "mlx5_3", want: PCILocation{Addr: "0002:00:0c.4", Domain: 2, Slot: 12, Func: 4}},
		{dev: "mlx5_4", want: PCILocation{Addr: "0000:af:00.0", Bus: 0xaf, Multifunction: true}},
		{dev: "mlx5_5", want: PCILocation{Addr: "0000:af:00.0", Bus: 0xaf, Multifunction: true, IsVF: true, VF: 1}},
		{dev: "mlx5_6", want: PCILocation{Addr: "0000:d8:01.2", Bus: 0xd8, Slot: 1, Func: 10}},
		{dev: "mlx5_7", want: PCILocation{Addr: "0000:c1:00.0", Bus: 0xc1, Multifunction: true, IsSF: true, SFNum: 88}},
		{dev: "mlx5_8", want: PCILocation{Addr: "0000:c1:00.0", Bus: 0xc1, Multifunction: true, IsVF: true, VF: 0, IsSF: true, SFNum: 99}},
		{dev: "rxe0", notPCI: true},
		{dev: "hns_0", notPCI: true},
		{dev: "irdma0", notPCI: true}, // auxiliary, but no sfnum
		{dev: "nosuch0", notPCI: true},
	}
	for _, tt := range tests {
		t.Run(tt.dev, func(t *testing.T) {
			got, err := ReadPCILocation(s.root, tt.dev)
			if tt.notPCI {
				if !errors.Is(err, ErrNotPCI) {
					t.Fatalf("ReadPCILocation(%s) = %+v, %v, want ErrNotPCI", tt.dev, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadPCILocation(%s) (-want +got):\n%s", tt.dev, diff)
			}
		})
	}
}

// FuzzParsePCIAddr: a link target in /sys parses to an address that
// prints back as it was read, or is refused.
func FuzzParsePCIAddr(f *testing.F) {
	for _, s := range []string{"0000:3b:00.0", "0002:00:0c.4", "0000:d8:01.2", "pci0000:00", "0000:3b:00", "ffff:ff:1f.7", "0000:3b:00.99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fn, ok := parsePCIAddr(s)
		if ok && fn.addr != s {
			t.Errorf("parsePCIAddr(%q).addr = %q", s, fn.addr)
		}
	})
}
