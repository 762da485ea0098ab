#!/bin/sh
# make test-lab: inside one lab guest per kernel, run every lab package's
# test binary (built on the host by `go test -c`), each in its package
# directory as `go test` would, and print go test's "ok"/"FAIL" line for
# it. One boot per kernel instead of one per package: under TCG a boot
# costs about as much as a package's tests.
#
# Usage: sh vmtest/labtests.sh LIST, LIST holding one "PKGDIR BINARY" line
# per package. VMTEST_RUN, when set, is passed as -test.run. Between packages
# the lab's devices are checked: a package that left rxe0 or siw0 missing
# is named, and the device is added again so the next package starts from
# the lab as /init made it.
set -u
list=$1
failed=
# restore adds rxe0 or siw0 again on its dummy netdev when a package
# left it missing.
restore() {
	for spec in "rxe0 rxe dummy0" "siw0 siw dummy1"; do
		set -- $spec
		[ -e /sys/class/infiniband/$1 ] && continue
		echo "labtests: $1 is missing after $2 ($prev); adding it again"
		ip link set "$3" up 2>/dev/null
		rdma link add "$1" type "$2" netdev "$3" || echo "labtests: cannot add $1 again"
	done
}
prev="the guest's start"
# cpustat prints the guest's CPU time so far, busy and all, in ticks
# (/proc/stat's cpu line: busy is all but idle and iowait).
cpustat() {
	read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
	echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
while read -r dir bin; do
	[ -n "$dir" ] || continue
	restore
	start=$(date +%s)
	set -- $(cpustat)
	busy0=$1 all0=$2
	(cd "$dir" && "$bin" -test.paniconexit0 -test.v=true -test.count=1 -test.timeout=30m ${VMTEST_RUN:+-test.run="$VMTEST_RUN"})
	status=$?
	secs=$(($(date +%s) - start))
	set -- $(cpustat)
	busy=$(( ($1 - busy0) * 100 / ($2 - all0 > 0 ? $2 - all0 : 1) ))
	# For the lab's time table (vmlab times): the package's time and how
	# busy it kept the guest's CPUs.
	printf 'labtime\t%s\t%ds\t%d%% busy\n' "$dir" "$secs" "$busy"
	if [ $status -eq 0 ]; then
		printf 'ok  \t%s\t%ds\n' "$dir" "$secs"
	else
		printf 'FAIL\t%s\t%ds\n' "$dir" "$secs"
		failed="$failed $dir"
	fi
	prev=$dir
done <"$list"
if [ -n "$failed" ]; then
	echo "labtests: failed:$failed"
	exit 1
fi
