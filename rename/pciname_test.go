package rename

import (
	"testing"

	"github.com/rdmatool/rdmatool/sysfs"
)

func TestPCIName(t *testing.T) {
	tests := []struct {
		name     string
		protocol string
		loc      sysfs.PCILocation
		want     string
	}{
		// The examples of rdma-core's kernel-boot/rdma_rename.c.
		{"rdma-core NAME_PCI", "ib", sysfs.PCILocation{Bus: 0, Slot: 12, Func: 4}, "ibp0s12f4"},
		{"rdma-core SF", "roce", sysfs.PCILocation{Bus: 0xc1, Multifunction: true, IsSF: true, SFNum: 88}, "rocep193s0f0S88"},
		{"rdma-core VF-SF", "roce", sysfs.PCILocation{Bus: 0xc1, Multifunction: true, IsVF: true, IsSF: true, SFNum: 99}, "rocep193s0f0v0S99"},

		{"single function", "ib", sysfs.PCILocation{Bus: 0x3b}, "ibp59s0"},
		{"multifunction, function 0", "ib", sysfs.PCILocation{Bus: 0x3b, Multifunction: true}, "ibp59s0f0"},
		{"function 1", "roce", sysfs.PCILocation{Bus: 0x3b, Func: 1}, "rocep59s0f1"},
		{"domain", "ib", sysfs.PCILocation{Domain: 1, Bus: 2, Slot: 3}, "ibP1p2s3"},
		{"VF", "roce", sysfs.PCILocation{Bus: 0x3b, Func: 0, Multifunction: true, IsVF: true, VF: 7}, "rocep59s0f0v7"},
		// rdma_rename prints "v" only with "f": a VF of a single-function
		// PF at function 0 gets its PF's name.
		{"VF of a single-function PF", "roce", sysfs.PCILocation{Bus: 0x3b, IsVF: true, VF: 3}, "rocep59s0"},
		{"no protocol", "", sysfs.PCILocation{Bus: 1}, "rdmap1s0"},
		{"mlx5_0 in sysfs's fixture", "ib", sysfs.PCILocation{Addr: "0000:3b:00.0", Bus: 0x3b}, "ibp59s0"},
		{"mlx5_1 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:5e:00.0", Bus: 0x5e, Multifunction: true}, "rocep94s0f0"},
		{"mlx5_2 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:5e:00.1", Bus: 0x5e, Func: 1, Multifunction: true}, "rocep94s0f1"},
		{"mlx5_3 in sysfs's fixture", "ib", sysfs.PCILocation{Addr: "0002:00:0c.4", Domain: 2, Slot: 12, Func: 4}, "ibP2p0s12f4"},
		{"mlx5_4 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:af:00.0", Bus: 0xaf, Multifunction: true}, "rocep175s0f0"},
		{"mlx5_5 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:af:00.0", Bus: 0xaf, Multifunction: true, IsVF: true, VF: 1}, "rocep175s0f0v1"},
		{"mlx5_6 in sysfs's fixture", "ib", sysfs.PCILocation{Addr: "0000:d8:01.2", Bus: 0xd8, Slot: 1, Func: 10}, "ibp216s1f10"},
		{"mlx5_7 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:c1:00.0", Bus: 0xc1, Multifunction: true, IsSF: true, SFNum: 88}, "rocep193s0f0S88"},
		{"mlx5_8 in sysfs's fixture", "roce", sysfs.PCILocation{Addr: "0000:c1:00.0", Bus: 0xc1, Multifunction: true, IsVF: true, VF: 0, IsSF: true, SFNum: 99}, "rocep193s0f0v0S99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pciPolicyName(tt.protocol, tt.loc); got != tt.want {
				t.Errorf("pciPolicyName(%q, %+v) = %q, want %q", tt.protocol, tt.loc, got, tt.want)
			}
		})
	}
}
