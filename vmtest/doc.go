// Package vmtest is the test side of the rdmatool lab: the helpers lab tests
// call inside a guest booted by vmtest/cmd/vmlab, and the kernel facts the
// tests hold each kernel of the matrix to.
//
// # The lab
//
// vmlab builds, for each kernel of the matrix (Debian bookworm's 6.1,
// bookworm-security's 6.12 and the newest 7.x from sid), an initramfs from
// Debian packages with ib_core, ib_uverbs, rdma_cm, rdma_rxe, siw and
// netdevsim modules built from linux-source, the NVMe-oF target and host
// modules (nvmet_rdma, nvme_rdma) with null_blk, rdma-core, perftest and
// iproute2's rdma. It boots it under QEMU (TCG unless a stock kernel can run
// on KVM) with no network: its one PCI NIC, an e1000e behind a PCI bridge
// (for the reset tests' unbind and function reset), has no backend, so its
// frames go nowhere. The guest's /init makes two dummy netdevs with fixed MAC addresses
// and on them rxe0 (soft RoCE) and siw0 (soft iWARP), mounts the module tree
// over 9p at the same path as on the host, and runs one command: with
// `go test -exec 'vmlab exec -kernel K'` that is a package's test binary.
//
// # Lab tests
//
// A lab test starts with Require. Outside the guest it skips with a message;
// inside, a missing device is a failure, since the lab always has both. Tests
// that depend on a kernel's behaviour ask Fact, which names the behaviour and
// holds what was measured on each kernel of the matrix. Product code never
// does that: it detects features by trying them.
//
// The C workloads in vmtest/workloads create the situations (QP pairs, SRQs,
// spec and non-spec teardown, churn); Workload runs one and reads its JSON
// lines. StartNVMeoF runs kernel ULPs instead: an nvmet_rdma target (with
// or without SRQs) exporting null_blk through configfs, and an nvme_rdma
// host connected to it through /dev/nvme-fabrics.
package vmtest
