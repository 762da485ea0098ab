#!/bin/sh
# make test-lab: inside a lab guest, run the test binaries (built on the
# host by `go test -c`) of the lab packages LIST names, each in its
# package directory as `go test` would, and print go test's "ok"/"FAIL"
# line for it (make test-lab boots a few guests a kernel, each with a list
# of packages: a boot takes seconds, a package minutes). VMTEST_SKIP, when set, is
# passed as -test.skip; VMTEST_ONLY, when set, runs only the tests it
# matches (make test-lab runs the tests of LAB_HEAVY so, in a guest of
# their own, and skips them in the others).
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
	run=${VMTEST_RUN:-}
	if [ -n "${VMTEST_ONLY:-}" ]; then
		# Only the tests VMTEST_ONLY names, of those VMTEST_RUN matches;
		# a package with none is passed over.
		names=$(cd "$dir" && "$bin" -test.list "$VMTEST_ONLY" | grep '^Test' | grep -E -- "${VMTEST_RUN:-.}" | tr '\n' '|')
		[ -n "$names" ] || continue
		run="^(${names%|})\$"
	fi
	restore
	start=$(date +%s)
	set -- $(cpustat)
	busy0=$1 all0=$2
	(cd "$dir" && "$bin" -test.paniconexit0 -test.v=true -test.count=1 -test.timeout=30m ${run:+-test.run="$run"} \
		${VMTEST_SKIP:+-test.skip="$VMTEST_SKIP"})
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
