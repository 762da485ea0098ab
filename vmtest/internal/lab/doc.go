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
// # The system guest
//
// SystemRoot builds a Debian root disk with mmdebstrap (systemd, udev,
// rdma-core, podman) and System a small initramfs per kernel that mounts
// it, the kernel's whole module tree over 9p and the shares, and starts
// systemd; RunSpec.System boots it. Its vmtest.service runs the cmd script
// with the same output protocol (system-run.sh); a command that creates
// the run share's "reboot" file reboots the guest instead, and Run boots
// the run's disk overlay again with the boot count in the share's "boot".
//
// The package runs on the host only and needs root for nothing but
// apt-get and mmdebstrap.
package lab
