#!/bin/sh
# The agent's soak, inside the lab guest: the agent runs for SECONDS
# (default 600) under continuous QP churn on rxe0 and an rxe device added
# and deleted every 20 s, and its resident memory is sampled every 10 s.
# Prints "rss SECONDS KIB" lines, then the growth per hour from the first
# to the last third of the run, and the agent's view at the end.
#   vmlab run -kernel 6.12 -timeout 30m -- sh vmtest/bench/soak.sh 600
set -u
bin=.lab/bin
secs=${1:-600}
sock=/tmp/rdmatool-soak.sock
$bin/rdmatool agent --socket "$sock" --interval 10s 2>/tmp/soak-agent.err &
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
start=$(date +%s)
: >/tmp/soak-rss
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	t=$(($(date +%s) - start))
	rss=$(awk '/^VmRSS/ {print $2}' /proc/$agent/status)
	echo "rss $t $rss" | tee -a /tmp/soak-rss
	sleep 10
done
wait $churn $links
awk -v secs="$secs" '
	{ t[NR] = $2; r[NR] = $3 }
	END {
		n = NR; k = int(n / 3); if (k < 1) k = 1
		for (i = 1; i <= k; i++) { a += r[i]; ta += t[i] }
		for (i = n - k + 1; i <= n; i++) { b += r[i]; tb += t[i] }
		a /= k; b /= k; ta /= k; tb /= k
		printf "soak: %d samples over %ds; RSS first third %.0f KiB, last third %.0f KiB: %+.0f KiB per hour\n", n, secs, a, b, (b - a) / (tb - ta) * 3600
	}' /tmp/soak-rss

echo "soak: agent's report at the end:"
$bin/rdmatool qp-leaks --agent-socket "$sock" --min-age 4s | tail -n 1
kill -TERM "$agent"
wait "$agent"
echo "soak: agent exit status $?"
grep -c . /tmp/soak-agent.err | sed 's/^/soak: agent log lines: /'
