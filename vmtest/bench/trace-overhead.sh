#!/bin/sh
# make bench: inside the lab guest, what the QP lifecycle probes cost.
#
# Guest time: make bench boots this guest with QEMU -icount (VMTEST_ICOUNT),
# where guest time is the number of instructions executed, on one vCPU
# (vmlab's default under icount). Plain TCG on a shared two-core host varies
# +-20% from run to run, far more than the effect measured here; under
# icount the same run repeats within 0.5%. The price: one timeline, so
# whatever the reader does is charged to the workload.
#
# Measured, alternating in each round, qpwork's QP create/modify/destroy
# cycles per second on rxe0:
#   no probes;
#   probes only: `rdmatool trace` attached and stopped (SIGSTOP) for the
#     run, so events wait in a 64 MiB ring and are read afterwards: the cost
#     the workload pays on a host where the reader has a CPU of its own;
#   probes + reader: `rdmatool trace -j >/dev/null` reading as it goes, on
#     the same timeline (the single-CPU worst case);
# each with fentry and with --kprobes; and probes only with fentry and
# --no-sites: without the creation-site uprobes on libibverbs and librdmacm
# (two traps per ibv_create_qp) and the kernel stack of each create, so the
# difference is what the sites cost a create. Then the time each program spends in
# the kernel (kernel.bpf_stats_enabled), and the events lost under the
# highest churn qpwork makes (one churner per CPU).
# Usage: trace-overhead.sh [SECONDS] [ROUNDS]
set -eu
secs=${1:-4}
rounds=${2:-3}
bin=.lab/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# churn runs qpwork's churn on rxe0 for $1 seconds; it prints cycles per
# second and leaves the cycle count in $tmp/cycles.
churn() {
	$bin/qpwork --dev rxe0 --churn-seconds "$1" >"$tmp/churn.out"
	sed -n 's/.*"event":"churn","cycles":\([0-9]*\).*/\1/p' "$tmp/churn.out" >"$tmp/cycles"
	sed -n 's/.*"event":"churn".*"cycles_per_sec":\([0-9.]*\).*/\1/p' "$tmp/churn.out"
}

# start_trace OUT FLAGS... starts rdmatool trace -j and waits until its
# probes are attached; stop_trace interrupts it and waits.
start_trace() {
	out=$1
	shift
	rm -f "$tmp/trace.err" # not the last run's "attached"
	$bin/rdmatool trace -j --buffer-mib 64 "$@" >"$out" 2>"$tmp/trace.err" &
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
	kill -CONT "$trace_pid"
	kill -INT "$trace_pid"
	wait "$trace_pid" || true
}

# cpu_ticks PID: user+system clock ticks the process used so far.
# (USER_HZ, the unit of /proc/PID/stat, is 100 on Linux.)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# probes_only FLAGS: cycles/s with the probes attached and the reader
# stopped; checks afterwards that every event of the run was kept.
probes_only() {
	start_trace "$tmp/held.jsonl" "$@"
	kill -STOP "$trace_pid"
	rate=$(churn "$secs")
	stop_trace
	events=$(sed -n 's/.*"kind":"summary","events":\([0-9]*\).*/\1/p' "$tmp/held.jsonl")
	want=$(($(cat "$tmp/cycles") * 6))
	if [ "$events" -lt "$want" ]; then
		echo "probes-only run kept $events events, want at least $want: $(tail -n 1 "$tmp/held.jsonl")" >&2
		exit 1
	fi
	echo "$rate"
}

# with_reader FLAGS: cycles/s with the reader running; its CPU share goes
# to $tmp/reader.
with_reader() {
	start_trace /dev/null "$@"
	t0=$(cpu_ticks "$trace_pid")
	rate=$(churn "$secs")
	t1=$(cpu_ticks "$trace_pid")
	stop_trace
	echo "$t1 $t0 100 $secs" | awk '{printf "%.1f\n", 100 * ($1 - $2) / $3 / $4}' >>"$tmp/reader"
	echo "$rate"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

clock="plain TCG wall time (noisy: set VMTEST_ICOUNT)"
[ "${VMTEST_ICOUNT:-0}" -gt 0 ] && clock="instruction-counted guest time (icount shift=$VMTEST_ICOUNT)"
echo "== kernel $VMTEST_KERNEL ($VMTEST_RELEASE): rxe0 churn, ${secs}s per run, $rounds rounds, $(nproc) CPUs, $clock"
# A first run warms the page cache and QEMU's translation cache; it is
# not counted.
churn 2 >/dev/null
for f in base fentry nosites kprobe fentry_live kprobe_live; do : >"$tmp/$f"; done
: >"$tmp/reader"
r=1
while [ "$r" -le "$rounds" ]; do
	base=$(churn "$secs")
	fentry=$(probes_only)
	nosites=$(probes_only --no-sites)
	kprobe=$(probes_only --kprobes)
	fentry_live=$(with_reader)
	kprobe_live=$(with_reader --kprobes)
	echo "round $r cycles/s: no probes $base; probes only: fentry $fentry, fentry --no-sites $nosites, kprobes $kprobe; probes + reader: fentry $fentry_live, kprobes $kprobe_live"
	for f in base fentry nosites kprobe fentry_live kprobe_live; do
		eval "echo \$$f" >>"$tmp/$f"
	done
	r=$((r + 1))
done
b=$(median <"$tmp/base")
for f in fentry nosites kprobe fentry_live kprobe_live; do
	eval "m_$f=$(median <"$tmp/$f")"
done
echo "$b $m_fentry $m_kprobe $m_fentry_live $m_kprobe_live $(median <"$tmp/reader") $m_nosites" | awk '{
	printf "median cycles/s: no probes %s\n", $1
	printf "  probes only (reader on its own CPU): fentry %s (%.1f%%), kprobes %s (%.1f%%); target >= 97%%\n", $2, 100*$2/$1, $3, 100*$3/$1
	printf "  probes + reader on the same CPU:     fentry %s (%.1f%%), kprobes %s (%.1f%%); the reader used %s%% of a CPU\n", $4, 100*$4/$1, $5, 100*$5/$1, $6
	printf "  probes only, creation sites: fentry with sites %s (%.1f%%), --no-sites %s (%.1f%%); the sites cost %.1f us a cycle (one create)\n", $2, 100*$2/$1, $7, 100*$7/$1, 1e6/$2 - 1e6/$7
}'

# Time spent in each program per call, from the kernel's own accounting
# (which adds a clock read on each side of every run).
echo 1 >/proc/sys/kernel/bpf_stats_enabled
for flags in "" "--kprobes"; do
	start_trace /dev/null -d $flags
	kill -STOP "$trace_pid"
	n=2000
	$bin/qpwork --dev rxe0 --churn "$n" >"$tmp/churn.out"
	took=$(sed -n 's/.*"event":"churn".*"seconds":\([0-9.]*\).*/\1/p' "$tmp/churn.out")
	stop_trace
	total=0
	for ns in $(sed -n 's/.*program .*: \([0-9]*\) runs, \([0-9]*\) ns each/\1*\2/p' "$tmp/trace.err"); do
		total=$((total + ns))
	done
	sed -n 's/^rdmatool trace: program /  /p' "$tmp/trace.err"
	echo "${flags:-fentry} $total $n $took" | awk '{printf "in-kernel probe time (%s): %.1f us per cycle, %.1f%% of the %.0f us a cycle took\n", $1, $2/$3/1000, 100*$2/($4*1e9), $4*1e6/$3}'
done
echo 0 >/proc/sys/kernel/bpf_stats_enabled

# The highest churn: one churner per CPU, at least two (on one CPU they
# preempt each other inside the probed calls), all traced, every event
# kept; fentry, then kprobes.
n=$(nproc)
[ "$n" -ge 2 ] || n=2
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
