// Package lab builds and boots the rdmatool lab: stock Debian kernels with a
// real RDMA stack (ib_core, ib_uverbs, rdma_cm, rdma_rxe and siw and netdevsim
// modules built from Debian's linux-source) and Debian's rdma-core userspace,
// packed into an initramfs and booted under QEMU without a network: the one
// PCI NIC (e1000e, for the reset tests) has no backend.
//
// Everything comes from Debian packages fetched with apt-get download and
// unpacked with dpkg-deb -x; nothing is installed on the host except the
// tools the build runs (qemu, busybox-static, kmod, gcc). Downloads and build
// outputs live in a cache directory and are reused by later runs.
//
// # Guest protocol
//
// The guest's /init (init.sh) mounts the run directory shared over 9p, runs
// its cmd script with stdout and stderr on the second serial port, and ends
// the stream with a line "vmtest-exit-status: N" before powering off. Run
// strips that line and returns N. The first serial port carries the kernel
// console and is kept in console.log in the run directory.
//
// The package runs on the host only and needs root for nothing but apt-get.
package lab
