#!/bin/sh
# The agent's soak, inside the lab guest: an accelerated week of a busy,
# hostile host in SECONDS (default 3600). The agent runs with its probes,
# a state file saved every minute and a reset policy on a device of its
# own, while:
# - QP churn runs on rxe0 the whole time (qpwork --churn-seconds);
# - short-lived processes start one after another, each creating and
#   destroying one QP on rxe0 (a new process, a new user stack: thousands
#   in an hour), every tenth of them under a name that is not UTF-8;
# - rxe9 is added and deleted every 20 s (a device registered again under
#   its name);
# - every 3 minutes 10 QPs are held in Error on rxe8 for a minute, and the
#   policy resets rxe8 (relink: the device registered again once they are
#   gone);
# - every 2 minutes a reconnect storm (stale R_Keys, qp-error-storm) and
#   refused creates (qp-create-failing) on rxe0.
# Every 10 s it scrapes /metrics and checks the scrape whole: status 200,
# every family that every scrape of the first minute had present, no series twice, no error
# counted by the handler; and samples the agent's resident memory, the Go
# heap in use and its goal, the goroutines, the probes' stack map
# occupancy and the watcher's per-device list entries. Prints a "sample"
# line each time, the growth per hour of each from the first to the last
# third of the run and the slope after the first third, the checks'
# failures, and the agent's view at the end; exits 1 when a scrape was not
# whole. Heap profiles (RDMATOOL_HEAPPROFILE) at one third (heap-KERNEL.1),
# at the end (.2) and after the agent stopped (.exit) land in .lab/soak/.
#   vmlab run -kernel 6.12 -timeout 90m -- sh vmtest/bench/soak.sh 3600
set -u
bin=.lab/bin
secs=${1:-3600}
dir=/tmp/soak
sock=$dir/agent.sock
out=.lab/soak
metrics=127.0.0.1:10095
mkdir -p "$out" "$dir"
prof=$out/heap-${VMTEST_KERNEL:-unknown}
rm -f "$prof".*

# rxe8: the policy's device, on a netdev of its own.
ip link add name soaknet0 address 02:00:00:00:09:01 type dummy
ip link set soaknet0 up
rdma link add rxe8 type rxe netdev soaknet0
cat >$dir/agent.yaml <<EOF
max_qp:
  rxe8: 40
policy:
  mode: reset
  qp_use: 0.2
  stale_qps: 5
  for: 3s
  cooldown: 2m
  max_per_hour: 30
  method: relink
  grace: 0s
  timeout: 90s
state_file: $dir/state.json
state_interval: 1m
EOF
RDMATOOL_HEAPPROFILE=$prof $bin/rdmatool agent --config $dir/agent.yaml --socket "$sock" --interval 10s \
	--metrics-address "$metrics" 2>$dir/agent.err &
agent=$!
i=0
until $bin/rdmatool qp-leaks -j --agent-socket "$sock" >/dev/null 2>&1; do
	i=$((i + 1))
	if ! kill -0 "$agent" 2>/dev/null || [ $i -gt 300 ]; then
		echo "soak: the agent did not start"; cat $dir/agent.err; exit 2
	fi
	sleep 0.2
done
end=$(($(date +%s) + secs))
$bin/qpwork --dev rxe0 --churn-seconds "$secs" --quiet >/dev/null 2>&1 &
churn=$!
(
	while [ "$(date +%s)" -lt "$end" ]; do
		rdma link add rxe9 type rxe netdev dummy0 2>/dev/null
		sleep 10
		rdma link delete rxe9 2>/dev/null
		sleep 10
	done
) &
links=$!
# Short-lived processes; every tenth named "q\377p\376work".
hostile=$(printf 'q\377p\376work')
cp $bin/qpwork "$dir/$hostile"
(
	n=0
	while [ "$(date +%s)" -lt "$end" ]; do
		n=$((n + 1))
		prog=$bin/qpwork
		[ $((n % 10)) -eq 0 ] && prog="$dir/$hostile"
		"$prog" --dev rxe0 --qps 1 --quiet >/dev/null 2>&1
		echo $n >$dir/processes
	done
) &
procs=$!
(
	while [ "$(date +%s)" -lt "$end" ]; do
		# Held a minute: the policy decides within two intervals of the
		# findings' min age (20 s held were too short at --interval 10s:
		# no reset in the soak of 2026-12-07), and the reset waits for it.
		$bin/qpwork --dev rxe8 --qps 10 --to ERR --hold 60 --quiet >/dev/null 2>&1
		sleep 120
	done
) &
resets=$!
(
	while [ "$(date +%s)" -lt "$end" ]; do
		$bin/qpwork --dev rxe0 --reconnect 6 --connect cm --addr 192.0.2.1 --rkey keep --mrs dereg --quiet >/dev/null 2>&1
		$bin/qpwork --dev rxe0 --oversized 4 --quiet >/dev/null 2>&1
		sleep 120
	done
) &
storms=$!

# sum NAME: the sum of every series of family NAME in the last scrape, or -1.
sum() {
	awk -v m="$1" '{ n = $1; sub(/\{.*/, "", n) } n == m { v += $NF; seen = 1 } END { if (!seen) v = -1; printf "%.0f\n", v }' $dir/metrics
}
families() {
	awk '$1 == "#" && $2 == "TYPE" { print $3 }' $dir/metrics | sort
}

start=$(date +%s)
profiled=
bad=0
: >$dir/samples
echo "soak: columns: seconds rss_kib heap_inuse_kib heap_goal_kib goroutines stacks list_entries processes resets whole"
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	t=$(($(date +%s) - start))
	rss=$(awk '/^VmRSS/ {print $2}' /proc/$agent/status)
	whole=1
	if ! wget -q -O $dir/metrics "http://$metrics/metrics" 2>/dev/null; then
		whole=0; : >$dir/metrics
		echo "soak: $t s: the scrape failed"
	fi
	families >$dir/families
	# The families every scrape of the first minute had are the base: each
	# later scrape must have them all.
	samples=$(grep -c . $dir/samples)
	if [ "$samples" -eq 0 ]; then
		cp $dir/families $dir/base
	elif [ "$samples" -lt 6 ]; then
		awk 'NR == FNR { have[$1] = 1; next } $1 in have' $dir/families $dir/base >$dir/base.new
		mv $dir/base.new $dir/base
	fi
	missing=$(awk 'NR == FNR { have[$1] = 1; next } !($1 in have)' $dir/families $dir/base | tr '\n' ' ')
	twice=$(grep -v '^#' $dir/metrics | sed 's/ [^ ]*$//' | sort | uniq -d | head -3 | tr '\n' ' ')
	errors=$(sum promhttp_metric_handler_errors_total)
	if [ -n "$missing" ] || [ -n "$twice" ] || [ "$errors" -gt 0 ]; then
		whole=0
		echo "soak: $t s: scrape not whole: missing [$missing] twice [$twice] handler errors $errors"
	fi
	[ $whole -eq 1 ] || bad=$((bad + 1))
	inuse=$(($(sum go_memstats_heap_inuse_bytes) / 1024))
	goal=$(($(sum go_memstats_next_gc_bytes) / 1024))
	gor=$(sum go_goroutines)
	stacks=$(sum rdmatool_probe_stacks)
	lists=$(sum rdmatool_watcher_list_entries)
	nproc=$(cat $dir/processes 2>/dev/null || echo 0)
	nreset=$(sum rdmatool_resets_total)
	echo "sample $t $rss $inuse $goal $gor $stacks $lists $nproc $nreset $whole" | tee -a $dir/samples
	if [ -z "$profiled" ] && [ "$t" -ge $((secs / 3)) ]; then
		kill -USR1 "$agent" && profiled=1
	fi
	sleep 10
done
kill $procs $resets $storms 2>/dev/null
wait $churn $links $procs $resets $storms 2>/dev/null
kill -USR1 "$agent" # the second heap profile, before the agent stops
# Growth per hour of each column: the mean of the last third against the
# first third, and the least-squares slope over the last two thirds (after
# the agent's warm-up: histories of destroyed QPs stay a minute).
awk -v secs="$secs" '
	{ t[NR] = $2; for (c = 3; c <= 8; c++) v[NR, c] = $c }
	END {
		n = NR; k = int(n / 3); if (k < 1) k = 1
		split("rss_kib heap_inuse_kib heap_goal_kib goroutines stacks list_entries", name, " ")
		for (c = 3; c <= 8; c++) {
			a = 0; b = 0; ta = 0; tb = 0
			for (i = 1; i <= k; i++) { a += v[i, c]; ta += t[i] }
			for (i = n - k + 1; i <= n; i++) { b += v[i, c]; tb += t[i] }
			a /= k; b /= k; ta /= k; tb /= k
			m = 0; st = 0; sv = 0; stt = 0; stv = 0
			for (i = k + 1; i <= n; i++) { m++; st += t[i]; sv += v[i, c]; stt += t[i] * t[i]; stv += t[i] * v[i, c] }
			slope = (m > 1 && m * stt != st * st) ? (m * stv - st * sv) / (m * stt - st * st) : 0
			max = 0; for (i = 1; i <= n; i++) if (v[i, c] > max) max = v[i, c]
			printf "soak: %s: first third %.0f, last third %.0f, max %.0f: %+.0f per hour; slope after the first third %+.0f per hour (%d samples over %ds)\n",
				name[c - 2], a, b, max, (b - a) / (tb - ta) * 3600, slope * 3600, n, secs
		}
	}' $dir/samples
echo "soak: processes started: $(cat $dir/processes 2>/dev/null || echo 0); policy resets: $(sum rdmatool_resets_total); stacks refused: $(sum rdmatool_probe_stacks_refused_total); events lost: $(sum rdmatool_probe_events_lost_total)"
echo "soak: state saves: $(grep -c 'history saved' $dir/agent.err) logged; $(grep 'rdmatool_state_saves_total' $dir/metrics | tr '\n' ' ')"
echo "soak: scrapes not whole: $bad"
echo "soak: agent's report at the end:"
$bin/rdmatool qp-leaks --agent-socket "$sock" --min-age 4s | tail -n 1
kill -TERM "$agent"
wait "$agent"
echo "soak: agent exit status $?"
grep -c . $dir/agent.err | sed 's/^/soak: agent log lines: /'
ls "$prof".* 2>/dev/null | sed 's/^/soak: heap profile /'
rdma link delete rxe8 2>/dev/null
[ $bad -eq 0 ]
