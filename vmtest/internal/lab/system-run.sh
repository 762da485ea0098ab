#!/bin/sh
# /usr/local/sbin/vmtest-run of the rdmatool system guest, started by
# vmtest.service once systemd has reached multi-user.target. It sets up the
# lab's RDMA devices as the initramfs guest's /init does, runs the host's
# command from the run share (/vmtest) with its output on the second serial
# port and reports its exit status; then it powers off, or reboots when the
# command asked for it by creating $VMTEST_REBOOT_FILE (the host boots the
# same disk again and the command runs again, VMTEST_BOOT one higher).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
out=/dev/ttyS1
status=125
say() { echo "vmtest-run: $*" >/dev/console; }
die() {
	say "$*"
	echo "vmtest-run: $*" >$out
	echo "$status" >/vmtest/exit-status
	echo "vmtest-exit-status: $status" >$out
	sync
	systemctl poweroff --force --force
}
stty -F $out raw -echo 2>/dev/null

read -r kernel release </etc/vmtest/kernel
boot=$(cat /vmtest/boot 2>/dev/null || echo 1)
export VMTEST_GUEST=system VMTEST_KERNEL="$kernel" VMTEST_RELEASE="$release" VMTEST_BOOT="$boot"
export VMTEST_RUN_DIR=/vmtest VMTEST_REBOOT_FILE=/vmtest/reboot
export HOME=/root TMPDIR=/tmp LANG=C.UTF-8

for m in dummy rdma_rxe siw ib_uverbs rdma_ucm; do
	modprobe "$m" || die "modprobe $m failed"
done
# rxe's link add fails with ENOENT unless a crc32 shash is registered.
for m in crc32_generic crc32_pclmul; do modprobe -q "$m"; done

# The lab's devices, as on the initramfs guest (fixed MAC addresses, so
# fixed node GUIDs). They are made on every boot, as an operator's unit
# would make soft RDMA devices.
ip link show dummy0 >/dev/null 2>&1 && ip link del dummy0
ip link add name dummy0 address 02:00:00:00:01:01 type dummy || die "cannot add dummy0"
ip link add name dummy1 address 02:00:00:00:02:01 type dummy || die "cannot add dummy1"
ip link set dummy0 up
ip link set dummy1 up
ip addr add 192.0.2.1/24 dev dummy0
ip addr add 198.51.100.1/24 dev dummy1
rdma link add rxe0 type rxe netdev dummy0 || die "rdma link add rxe0 failed"
rdma link add siw0 type siw netdev dummy1 || die "rdma link add siw0 failed"
udevadm settle --timeout=60
# Wait for every RDMA device's port, whatever udev named it.
n=0
while grep -L ACTIVE /sys/class/infiniband/*/ports/1/state 2>/dev/null | grep -q .; do
	n=$((n + 1))
	[ $n -gt 100 ] && die "a port did not become ACTIVE: $(grep -L ACTIVE /sys/class/infiniband/*/ports/1/state)"
	sleep 0.1
done
say "system guest ready: kernel $kernel ($release), boot $boot"

echo vmtest-command-start >$out
sh /vmtest/cmd >$out 2>&1 </dev/null
status=$?
if [ -e "$VMTEST_REBOOT_FILE" ]; then
	say "rebooting, as the command asked"
	sync
	systemctl reboot
	exit 0
fi
echo "$status" >/vmtest/exit-status
echo "vmtest-exit-status: $status" >$out
sync
systemctl poweroff --force --force
