#!/bin/sh
# make test-system: inside one system guest per kernel (vmlab run -system),
# run the TestSystem* tests of every package in LIST, one test at a time,
# each in its package directory as `go test` would, and print an
# "ok"/"FAIL" line for each.
#
# Usage: sh vmtest/systemtests.sh LIST [ARG...], LIST holding one
# "PKGDIR BINARY" line per package; ARGs go to every test binary (e.g.
# -update). VMTEST_RUN, when set, is a regexp the test names must match.
#
# A test may reboot the guest (vmtest.Reboot): it creates
# $VMTEST_REBOOT_FILE and ends; this script then stops, the guest reboots
# from the same disk and runs it again, and it goes on where it was: the
# tests done so far, and the reboots each test asked for, are kept in the
# run share ($VMTEST_RUN_DIR), and the test runs again with
# VMTEST_TEST_BOOT one higher.
set -u
list=$1
shift
state=${VMTEST_RUN_DIR:?not in a system guest}/systemtests
mkdir -p "$state"
touch "$state/done" "$state/rebooted" "$state/failed"
while read -r dir bin; do
	[ -n "$dir" ] || continue
	for t in $("$bin" -test.list '^TestSystem' | grep '^TestSystem' | grep -E -- "${VMTEST_RUN:-.}"); do
		grep -qx "$dir $t" "$state/done" && continue
		boot=$(($(grep -cx "$dir $t" "$state/rebooted") + 1))
		start=$(date +%s)
		(cd "$dir" && VMTEST_TEST_BOOT=$boot "$bin" -test.paniconexit0 -test.v=true -test.count=1 \
			-test.timeout=20m -test.run="^$t\$" "$@")
		status=$?
		secs=$(($(date +%s) - start))
		if [ -e "$VMTEST_REBOOT_FILE" ]; then
			echo "$dir $t" >>"$state/rebooted"
			printf 'reboot\t%s %s\t%ds (boot %d)\n' "$dir" "$t" "$secs" "$boot"
			exit 0
		fi
		echo "$dir $t" >>"$state/done"
		if [ $status -eq 0 ]; then
			printf 'ok  \t%s %s\t%ds\n' "$dir" "$t" "$secs"
		else
			printf 'FAIL\t%s %s\t%ds\n' "$dir" "$t" "$secs"
			echo "$dir $t" >>"$state/failed"
		fi
	done
done <"$list"
if [ -s "$state/failed" ]; then
	echo "systemtests: failed: $(tr '\n' ' ' <"$state/failed")"
	exit 1
fi
