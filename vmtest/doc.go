// Package vmtest is the test side of the rdmatool lab: the helpers lab tests
// call inside a guest booted by vmtest/cmd/vmlab, and the kernel facts the
// tests hold each kernel of the matrix to.
//
// # The lab
//
// vmlab builds an initramfs for each kernel of the matrix and boots it
// under QEMU with rxe0 and siw0 up; with `go test -exec 'vmlab exec -kernel
// K'` the one command the guest runs is a package's test binary.
// docs/lab.md says what the guests hold and how they boot.
//
// # Lab tests
//
// A lab test starts with Require. Outside the guest it skips with a message;
// inside, a missing device is a failure, since the lab always has both. Tests
// that depend on a kernel's behaviour ask Fact, which names the behaviour and
// holds what was measured on each kernel of the matrix. Product code never
// does that: it detects features by trying them.
//
// # System tests
//
// `vmlab run -system` boots the system guest instead: a Debian root with
// systemd, udev and rdma-core, for tests of what an operator installs. A
// system test starts with RequireSystem; Reboot reboots the guest and runs
// the test again, Boot telling it which boot it is in
// (vmtest/systemtests.sh). LabFile finds what the Makefile built for the
// tests (the .deb, the image).
//
// The C workloads in vmtest/workloads create the situations (QP pairs, SRQs,
// spec and non-spec teardown, churn, refused creates, reconnect loops with
// stale R_Keys); Workload runs one and reads its JSON lines (StartWorkloadAs
// as another user, StartWorkloadWrapped under a wrapper such as unshare).
// Binary holds the creation sites rdmatool reports to an executable: its
// build ID, the function at an offset and the call instruction there
// (CheckCall), and the calls above a site (CheckCallsAbove). StartNVMeoF
// runs kernel ULPs instead: an nvmet_rdma target (with or without SRQs)
// exporting null_blk through configfs, and an nvme_rdma host connected to
// it through /dev/nvme-fabrics.
package vmtest
