#!/bin/sh
# make test-lab and test-system, when a guest failed: print "NAME LOG" for
# each guest run in DIR (vmlab jobs) whose LOG.status is not 0, or missing,
# NAME being the log's name without .log (KERNEL or KERNEL-GROUP), for
# vmtest/labfailures.sh.
#
# Usage: sh vmtest/labfailed.sh DIR
set -u
awk '{ print $1 }' "$1/jobs" | while read -r log; do
	[ "$(cat "$log.status" 2>/dev/null)" = 0 ] && continue
	echo "$(basename "$log" .log) $log"
done
