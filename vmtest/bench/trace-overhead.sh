#!/bin/sh
# make bench: inside the lab guest, QP create/modify/destroy cycles per second
# on rxe0 (qpwork --churn-seconds) without probes and with
# `rdmatool trace -j >/dev/null` attached, fentry and then --kprobes,
# alternating in the same run; the ratio is of the medians. Then the time
# the probes spend in the kernel per cycle (kernel.bpf_stats_enabled), and
# the events lost under the highest churn qpwork makes (one churner per
# CPU), counted by the tracer and against the cycles the churners report.
# Usage: trace-overhead.sh [SECONDS] [ROUNDS]
set -eu
secs=${1:-10}
rounds=${2:-3}
bin=.lab/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# churn runs qpwork's churn on rxe0 and prints its cycles per second.
churn() {
	$bin/qpwork --dev rxe0 --churn-seconds "$1" >"$tmp/churn.out"
	sed -n 's/.*"event":"churn".*"cycles_per_sec":\([0-9.]*\).*/\1/p' "$tmp/churn.out"
}

# start_trace OUT FLAGS... starts rdmatool trace -j and waits until its
# probes are attached; stop_trace interrupts it, waits, and shows any loss.
start_trace() {
	out=$1
	shift
	rm -f "$tmp/trace.err" # not the last run's "attached"
	$bin/rdmatool trace -j "$@" >"$out" 2>"$tmp/trace.err" &
	trace_pid=$!
	i=0
	until grep -qs "attached" "$tmp/trace.err"; do
		if ! kill -0 "$trace_pid" 2>/dev/null || [ $i -gt 600 ]; then
			cat "$tmp/trace.err"
			exit 1
		fi
		i=$((i + 1))
		sleep 0.1
	done
}
stop_trace() {
	kill -INT "$trace_pid"
	wait "$trace_pid" || true
	if grep -q "events lost" "$tmp/trace.err"; then
		echo "tracer reported lost events:"
		grep "events lost" "$tmp/trace.err"
	fi
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "== kernel $VMTEST_KERNEL ($VMTEST_RELEASE): rxe0 churn, ${secs}s per run, $rounds rounds, $(nproc) CPUs"
: >"$tmp/base"
: >"$tmp/fentry"
: >"$tmp/kprobe"
r=1
while [ "$r" -le "$rounds" ]; do
	base=$(churn "$secs")
	start_trace /dev/null
	fentry=$(churn "$secs")
	stop_trace
	start_trace /dev/null --kprobes
	kprobe=$(churn "$secs")
	stop_trace
	echo "round $r: no probes $base cycles/s, fentry $fentry, kprobes $kprobe"
	echo "$base" >>"$tmp/base"
	echo "$fentry" >>"$tmp/fentry"
	echo "$kprobe" >>"$tmp/kprobe"
	r=$((r + 1))
done
b=$(median <"$tmp/base")
f=$(median <"$tmp/fentry")
k=$(median <"$tmp/kprobe")
echo "$b $f $k" | awk '{printf "median cycles/s: no probes %s, fentry %s (%.1f%%), kprobes %s (%.1f%%); target >= 97%%\n", $1, $2, 100*$2/$1, $3, 100*$3/$1}'

# Time spent in the probes' programs per cycle, from the kernel's own
# accounting (which itself adds a little).
echo 1 >/proc/sys/kernel/bpf_stats_enabled
for flags in "" "--kprobes"; do
	start_trace /dev/null $flags
	n=2000
	$bin/qpwork --dev rxe0 --churn "$n" >"$tmp/churn.out"
	took=$(sed -n 's/.*"event":"churn".*"seconds":\([0-9.]*\).*/\1/p' "$tmp/churn.out")
	ns=0
	for fd in /proc/"$trace_pid"/fdinfo/*; do
		t=$(sed -n 's/^run_time_ns:[[:space:]]*//p' "$fd" 2>/dev/null || true)
		[ -n "$t" ] && ns=$((ns + t))
	done
	stop_trace
	echo "${flags:-fentry} $ns $n $took" | awk '{printf "in-kernel probe time (%s): %.1f us per cycle, %.1f%% of the %.0f us a cycle took\n", $1, $2/$3/1000, 100*$2/($4*1e9), $4*1e6/$3}'
done
echo 0 >/proc/sys/kernel/bpf_stats_enabled

# The highest churn: one churner per CPU, all traced, every event kept;
# fentry, then kprobes.
n=$(nproc)
for flags in "" "--kprobes"; do
	start_trace "$tmp/trace.jsonl" $flags
	rm -f "$tmp"/hc.*
	i=0
	while [ "$i" -lt "$n" ]; do
		$bin/qpwork --dev rxe0 --churn-seconds "$secs" >"$tmp/hc.$i" &
		i=$((i + 1))
	done
	wait_churn=0
	while [ "$(cat "$tmp"/hc.* | grep -c '"event":"churn"')" -lt "$n" ]; do
		wait_churn=$((wait_churn + 1))
		if [ "$wait_churn" -gt $((secs * 20 + 600)) ]; then
			cat "$tmp"/hc.*
			exit 1
		fi
		sleep 0.1
	done
	stop_trace
	cycles=$(cat "$tmp"/hc.* | sed -n 's/.*"event":"churn","cycles":\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s}')
	pids=$(cat "$tmp"/hc.* | sed -n 's/.*"event":"churn_start","pid":\([0-9]*\).*/\1/p')
	seen=0
	for p in $pids; do
		c=$(grep -c "\"pid\":$p," "$tmp/trace.jsonl" || true)
		seen=$((seen + c))
	done
	# Each cycle (states rts on RoCE) is create, INIT, RTR, RTS, ERR, destroy.
	echo "highest churn (${flags:-fentry}): $n churners, $cycles cycles, $seen of $((cycles * 6)) events traced; $(tail -n 1 "$tmp/trace.jsonl")"
done
