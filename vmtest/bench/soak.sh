#!/bin/sh
# The agent's soak, inside the lab guest: the agent runs for SECONDS
# (default 600) under continuous QP churn on rxe0 and an rxe device added
# and deleted every 20 s. Every 10 s it samples the agent's resident memory
# (/proc) and, from its /metrics, the Go heap in use, the heap goal (twice
# the heap live after the last collection, with GOGC=100: the trend of what
# the agent keeps) and the goroutines. Prints one
# "sample" line each time, then the growth per hour of each from the first
# to the last third of the run, and the agent's view at the end.
# Heap profiles (pprof, RDMATOOL_HEAPPROFILE) of the agent at one third
# (heap-KERNEL.1) and at the end of the run (.2), and after it stopped
# (.exit), land in .lab/soak/: go tool pprof -base heap-K.1 bin heap-K.2.
#   vmlab run -kernel 6.12 -timeout 30m -- sh vmtest/bench/soak.sh 600
set -u
bin=.lab/bin
secs=${1:-600}
sock=/tmp/rdmatool-soak.sock
out=.lab/soak
metrics=127.0.0.1:10095
mkdir -p "$out"
prof=$out/heap-${VMTEST_KERNEL:-unknown}
rm -f "$prof".*
RDMATOOL_HEAPPROFILE=$prof $bin/rdmatool agent --socket "$sock" --interval 10s \
	--metrics-address "$metrics" 2>/tmp/soak-agent.err &
agent=$!
i=0
until $bin/rdmatool qp-leaks -j --agent-socket "$sock" >/dev/null 2>&1; do
	i=$((i + 1))
	if ! kill -0 "$agent" 2>/dev/null || [ $i -gt 300 ]; then
		echo "soak: the agent did not start"; cat /tmp/soak-agent.err; exit 2
	fi
	sleep 0.2
done
$bin/qpwork --dev rxe0 --churn-seconds "$secs" --quiet >/dev/null 2>&1 &
churn=$!
(
	end=$(($(date +%s) + secs))
	while [ "$(date +%s)" -lt "$end" ]; do
		rdma link add rxe9 type rxe netdev dummy0 2>/dev/null
		sleep 10
		rdma link delete rxe9 2>/dev/null
		sleep 10
	done
) &
links=$!

# metric NAME: the agent's current value of an unlabelled metric, or -1.
metric() {
	awk -v m="$1" '$1 == m { v = $2 } END { if (v == "") v = -1; printf "%.0f\n", v }' /tmp/soak-metrics
}

start=$(date +%s)
profiled=
: >/tmp/soak-samples
echo "soak: columns: seconds rss_kib heap_inuse_kib heap_goal_kib goroutines"
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	t=$(($(date +%s) - start))
	rss=$(awk '/^VmRSS/ {print $2}' /proc/$agent/status)
	wget -q -O /tmp/soak-metrics "http://$metrics/metrics" 2>/dev/null || : >/tmp/soak-metrics
	inuse=$(($(metric go_memstats_heap_inuse_bytes) / 1024))
	goal=$(($(metric go_memstats_next_gc_bytes) / 1024))
	gor=$(metric go_goroutines)
	echo "sample $t $rss $inuse $goal $gor" | tee -a /tmp/soak-samples
	if [ -z "$profiled" ] && [ "$t" -ge $((secs / 3)) ]; then
		kill -USR1 "$agent" && profiled=1
	fi
	sleep 10
done
wait $churn $links
kill -USR1 "$agent" # the second heap profile, before the agent stops
# Growth per hour of each column: the mean of the last third against the
# first third, and the least-squares slope over the last two thirds (after
# the agent's warm-up: histories of destroyed QPs stay a minute).
awk -v secs="$secs" '
	{ t[NR] = $2; for (c = 3; c <= 6; c++) v[NR, c] = $c }
	END {
		n = NR; k = int(n / 3); if (k < 1) k = 1
		split("rss_kib heap_inuse_kib heap_goal_kib goroutines", name, " ")
		for (c = 3; c <= 6; c++) {
			a = 0; b = 0; ta = 0; tb = 0
			for (i = 1; i <= k; i++) { a += v[i, c]; ta += t[i] }
			for (i = n - k + 1; i <= n; i++) { b += v[i, c]; tb += t[i] }
			a /= k; b /= k; ta /= k; tb /= k
			m = 0; st = 0; sv = 0; stt = 0; stv = 0
			for (i = k + 1; i <= n; i++) { m++; st += t[i]; sv += v[i, c]; stt += t[i] * t[i]; stv += t[i] * v[i, c] }
			slope = (m > 1 && m * stt != st * st) ? (m * stv - st * sv) / (m * stt - st * st) : 0
			printf "soak: %s: first third %.0f, last third %.0f: %+.0f per hour; slope after the first third %+.0f per hour (%d samples over %ds)\n",
				name[c - 2], a, b, (b - a) / (tb - ta) * 3600, slope * 3600, n, secs
		}
	}' /tmp/soak-samples

echo "soak: agent's report at the end:"
$bin/rdmatool qp-leaks --agent-socket "$sock" --min-age 4s | tail -n 1
kill -TERM "$agent"
wait "$agent"
echo "soak: agent exit status $?"
grep -c . /tmp/soak-agent.err | sed 's/^/soak: agent log lines: /'
ls "$prof".* 2>/dev/null | sed 's/^/soak: heap profile /'
