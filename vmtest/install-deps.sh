#!/usr/bin/env bash
# Installs what building rdmatool and running the lab needs on Debian
# bookworm: QEMU, the tools that assemble the guest, the C toolchain for the
# workloads and siw.ko, the packaging checks (lintian, debootstrap,
# promtool), the system guest's root (mmdebstrap, qemu-img), and the Go
# modules. Installs only what is missing.
set -euo pipefail

pkgs=(
	qemu-system-x86 # the lab's VM (TCG)
	busybox-static  # guest shell (also fetched as a .deb for the guest)
	kmod            # depmod for the guest's module tree
	xz-utils zstd   # compressed kernel modules and the linux-source tarball
	gcc make libc6-dev libelf-dev bc flex bison # out-of-tree siw.ko
	libibverbs-dev librdmacm-dev # the C workloads
	clang llvm libbpf-dev # eBPF programs (bpf2go)
	strace # cmd/rdmatool's test that commands which do not trace make no bpf() call
	lintian # make deb, make test-deb
	debootstrap # the Debian root test-deb installs the package into
	mmdebstrap # the system guest's Debian root (make lab)
	qemu-utils # qemu-img: each system guest run boots an overlay of that root
	e2fsprogs  # mkfs.ext4 -d makes the root disk
	prometheus # promtool: make test-monitoring checks the alert rules
	git ca-certificates
)
missing=()
for p in "${pkgs[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: missing packages (run as root to install): ${missing[*]}" >&2
		exit 2
	fi
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# apt-get download and apt-cache need package lists; a fresh machine has none.
if [ -z "$(ls -A /var/lib/apt/lists/ 2>/dev/null | grep -v -e lock -e partial)" ]; then
	apt-get update -qq
fi
go mod download
