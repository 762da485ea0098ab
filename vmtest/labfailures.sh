#!/bin/sh
# make test-lab, when a kernel failed: from each failed kernel's log (go
# test -v output of every lab package), print the tests that failed and
# the last lines each of them logged, so the end of the run (all a CI
# report may keep) names the failure and its message. A guest that failed
# without a failed test (it did not boot, timed out, or its kernel
# panicked) gets the last lines of its log instead.
#
# Usage: sh vmtest/labfailures.sh KERNEL LOG [KERNEL LOG ...]
set -u
while [ $# -ge 2 ]; do
	kernel=$1 log=$2
	shift 2
	echo "== failures on kernel $kernel (whole log: $log)"
	awk -v kernel="$kernel" '
	{ sub(/\r$/, ""); tail[NR % 15] = $0 }
	# A test'"'"'s output follows the "=== RUN/CONT/NAME" line naming it.
	/^=== (RUN|CONT|NAME) / { cur = $3; next }
	/^ *--- FAIL: / {
		name = $3
		printf "%s: --- FAIL: %s %s\n", kernel, name, $4
		printed++
		n = count[name]
		for (i = (n > 6 ? n - 6 : 0); i < n; i++) print "    " lines[name, i]
		next
	}
	/^ *--- (PASS|SKIP): / { next }
	/^panic: |^FAIL\t|^labtests: |^vmlab: / && !/^vmlab: [^ ]+ [^ ]+ .*guest: [0-9]/ { print kernel ": " $0; printed++; next }
	cur != "" && /^ +[^ ]+\.go:[0-9]+: / {
		sub(/^ +/, "")
		lines[cur, count[cur]++] = $0
	}
	END {
		if (printed) exit
		print kernel ": no failed test in the log; its last lines:"
		for (i = (NR > 15 ? NR - 14 : 1); i <= NR; i++) print "    " tail[i % 15]
	}
	' "$log"
done
