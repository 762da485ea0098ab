#!/usr/bin/busybox sh
# /init of the rdmatool lab guest. It sets up the RDMA stack the same way on
# every kernel, runs the host's command from the 9p run share with its output
# on the second serial port, reports the exit status and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/opt/busybox
/usr/bin/busybox --install -s /opt/busybox

out=/dev/ttyS1
status=125
say() { echo "vmtest-init: $*" >/dev/console; }
die() {
	say "$*"
	echo "vmtest-init: $*" >$out
	echo "vmtest-exit-status: $status" >$out
	[ -d /run/vmtest ] && echo "$status" >/run/vmtest/exit-status
	sync
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
hostname vmtest
stty -F $out raw -echo 2>/dev/null

read -r kernel release </etc/vmtest/kernel
export VMTEST_GUEST=1 VMTEST_KERNEL="$kernel" VMTEST_RELEASE="$release"
export HOME=/root TMPDIR=/tmp

for m in $(cat /etc/vmtest/modules); do
	modprobe "$m" || die "modprobe $m failed"
done

opts=trans=virtio,version=9p2000.L,msize=524288
mkdir -p /run/vmtest
mount -t 9p -o $opts vmtest_run /run/vmtest || die "cannot mount the run share"
while read -r tag path; do
	mkdir -p "$path"
	mount -t 9p -o $opts "$tag" "$path" || die "cannot mount $path"
done </run/vmtest/mounts

# Fixed MAC addresses: rxe and siw derive their node GUIDs from them, so
# names and GUIDs are the same on every boot. 192.0.2.0/24 and
# 198.51.100.0/24 are documentation ranges; the guest has no network card.
ip link set lo up
ip link del dummy0 2>/dev/null # the dummy module makes one by default
ip link add name dummy0 address 02:00:00:00:01:01 type dummy || die "cannot add dummy0"
ip link add name dummy1 address 02:00:00:00:02:01 type dummy || die "cannot add dummy1"
ip link set dummy0 up
ip link set dummy1 up
ip addr add 192.0.2.1/24 dev dummy0
ip addr add 198.51.100.1/24 dev dummy1
rdma link add rxe0 type rxe netdev dummy0 || die "rdma link add rxe0 failed"
rdma link add siw0 type siw netdev dummy1 || die "rdma link add siw0 failed"
for dev in rxe0 siw0; do
	n=0
	until grep -q ACTIVE /sys/class/infiniband/$dev/ports/1/state 2>/dev/null; do
		n=$((n + 1))
		[ $n -gt 100 ] && die "$dev port 1 did not become ACTIVE"
		sleep 0.1
	done
done
say "lab ready: kernel $kernel ($release)"

echo vmtest-command-start >$out
sh /run/vmtest/cmd >$out 2>&1 </dev/null
status=$?
echo "$status" >/run/vmtest/exit-status
echo "vmtest-exit-status: $status" >$out
sync
poweroff -f
