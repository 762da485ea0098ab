#!/usr/bin/busybox sh
# /init of the rdmatool system guest's initramfs. It loads what mounting the
# root needs (virtio_blk, ext4, 9p), mounts the root disk, the kernel's
# modules and the host's shares into it, and hands over to systemd. The
# root's vmtest.service runs the host's command (system-run.sh).
export PATH=/usr/sbin:/usr/bin:/opt/busybox
/usr/bin/busybox --install -s /opt/busybox

out=/dev/ttyS1
die() {
	echo "vmtest-init: $*" >/dev/console
	echo "vmtest-init: $*" >$out
	echo "vmtest-exit-status: 125" >$out
	sync
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

read -r kernel release </etc/vmtest/kernel
for m in $(cat /etc/vmtest/modules); do
	modprobe "$m" || die "modprobe $m failed"
done
n=0
until [ -b /dev/vda ]; do
	n=$((n + 1))
	[ $n -gt 100 ] && die "no root disk /dev/vda"
	sleep 0.1
done
mkdir -p /newroot
mount -t ext4 -o rw /dev/vda /newroot || die "cannot mount the root disk"
mkdir -p /newroot/etc/vmtest
cp /etc/vmtest/kernel /newroot/etc/vmtest/kernel

# The kernel's whole module tree (siw.ko and netdevsim.ko in extra/), read
# only; then the run share and the host's shares at their host paths.
opts=trans=virtio,version=9p2000.L,msize=524288
mods=/newroot/usr/lib/modules/$release
mkdir -p "$mods"
mount -t 9p -o $opts,ro vmtest_modules "$mods" || die "cannot mount the kernel's modules"
mkdir -p /newroot/vmtest
mount -t 9p -o $opts vmtest_run /newroot/vmtest || die "cannot mount the run share"
while read -r tag path; do
	mkdir -p "/newroot$path"
	mount -t 9p -o $opts "$tag" "/newroot$path" || die "cannot mount $path"
done </newroot/vmtest/mounts

mount --move /dev /newroot/dev
umount /sys /proc
exec switch_root /newroot /lib/systemd/systemd
