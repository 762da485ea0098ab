package lab

import "fmt"

// Kernel is one entry of the lab's kernel matrix: a Debian kernel named by
// the meta packages that track its newest point release, so a rebuild after
// Debian ships a new point release picks it up without a code change.
type Kernel struct {
	// Name is the matrix name used by make, tests and expectations ("6.1").
	Name string
	// Suite is the Debian suite to fetch from; empty means the host's own
	// apt sources, anything else a temporary source list in the cache.
	Suite string
	// ImageMeta and HeadersMeta are the meta packages that depend on the
	// versioned linux-image and linux-headers packages.
	ImageMeta, HeadersMeta string
}

// Matrix is every kernel the lab knows, oldest first. It is never written.
var Matrix = []Kernel{
	{Name: "6.1", ImageMeta: "linux-image-amd64", HeadersMeta: "linux-headers-amd64"},
	{Name: "6.12", ImageMeta: "linux-image-6.12-amd64", HeadersMeta: "linux-headers-6.12-amd64"},
	{Name: "7.x", Suite: "sid", ImageMeta: "linux-image-amd64", HeadersMeta: "linux-headers-amd64"},
}

// LookupKernel finds a matrix entry by name.
func LookupKernel(name string) (Kernel, error) {
	for _, k := range Matrix {
		if k.Name == name {
			return k, nil
		}
	}
	names := make([]string, len(Matrix))
	for i, k := range Matrix {
		names[i] = k.Name
	}
	return Kernel{}, fmt.Errorf("lab: unknown kernel %q (have %v)", name, names)
}

// guestModules are loaded by /init in this order. Optional ones may be
// missing or built in on some kernels (crc32 became a library in 6.14).
var guestModules = []struct {
	name     string
	optional bool
}{
	{"virtio_pci", true}, {"9pnet_virtio", false}, {"9p", false},
	{"dummy", false}, {"veth", true},
	// rxe's link add fails with ENOENT unless a crc32 shash is registered,
	// and modules.dep does not say so on 6.1.
	{"crc32_generic", true}, {"crc32_pclmul", true}, {"crc32c_generic", true}, {"libcrc32c", true},
	{"ib_core", false}, {"ib_uverbs", false}, {"ib_umad", true},
	{"ib_cm", false}, {"iw_cm", false}, {"rdma_cm", false}, {"rdma_ucm", false},
	{"rdma_rxe", false}, {"siw", false},
	// NVMe-oF over RDMA (vmtest.StartNVMeoF): a null block device, the
	// host and the target. configfs is built in on Debian.
	{"configfs", true}, {"null_blk", false}, {"nvme_core", false}, {"nvme_fabrics", false},
	{"nvme_rdma", false}, {"nvmet", false}, {"nvmet_rdma", false},
	// The emulated PCI NIC the reset tests unbind and reset (qemu.go).
	{"e1000e", false},
	// Compiled from linux-source like siw (siw.go); its devlink reload
	// re-creates its ports. Optional: where it does not build, the reset
	// tests show devlink reload's refusal instead.
	{"netdevsim", true},
}

// onDemandModules are shipped in the guest beside guestModules but not
// loaded by /init: a test modprobes them. RDS over RDMA
// (vmtest.StartRDSWork): once loaded, rds_rdma listens on every device and
// holds a PD on each, which the other tests do not expect. A RAM disk and
// ext4 (which mounts busybox mke2fs's ext2) for a file system a test can
// freeze (FIFREEZE: TestLabSlowStateDisk); the guest's tmpfs cannot be.
var onDemandModules = []string{"rds", "rds_rdma", "brd", "ext4"}
