#!/bin/sh
# make bench: inside the lab guest, grow the QPs held on rxe0 through each
# size given (default 1000 10000 30000 60000) and at each size time the QP
# listing of the floor (nlfloor), rdmatool and iproute2, then qp-leaks
# (netlink only, with probes, answered by a running agent) and the agent's
# CPU and RSS over 30 s at idle, and its heap profile, then the agent's and
# a JSON reader's CPU under about 1,000 probe events a second; first, before any
# QP, one device's udev rename by rdmatool and by rdma_rename. QPs are held by
# several qpwork processes of at most 20000 QPs each, so no process nears
# vm.max_map_count. Then, beside the QPs of the largest size, the MRs held
# on rxe0 grow through VMTEST_BENCH_MR_SIZES (default 10000 100000, in
# increasing order; empty: no MR part), and at each size the MR listing of
# the floor, rdmatool and iproute2 is timed; then the agent with every QP
# and MR tracked: its CPU and RSS until it has dumped the MRs, and at idle
# for 30 s with the MR and QP dumps it made meanwhile. Every measurement is
# a labtime line labelled "<what> <QPs>" (the MR listings "mr-<what>
# <MRs>", the renames "rename-<program> 1", one device); "size", "agent",
# "held" and "mr-" lines carry the rest. The host
# side (vmtest/bench/report) turns the log into tables, JSON and a plot.
set -eu
bin=.lab/bin
# The programs measured run from the guest's RAM (/tmp is a tmpfs), not
# from the 9p share: an executable read over 9p is read again when no
# process holds it, and TCG translates its code again, which made a
# rdmatool run take up to twice as long as the same run from RAM. iproute2
# runs from the guest's root disk, whose pages stay cached.
run=/tmp/bench-bin
mkdir -p $run
cp $bin/rdmatool $bin/rdmatool-udev-rename $bin/nlfloor $run/
sizes=${*:-1000 10000 30000 60000}
echo 262144 >/proc/sys/vm/max_map_count
echo "== kernel $VMTEST_KERNEL ($VMTEST_RELEASE)"

# udev rename, start to exit, of one device (rxe0) to its node GUID name
# (rdma-core's NAME_GUID, the same name for all): rdmatool-udev-rename, as
# the packaged rule runs it, and rdmatool rename udev, against rdma-core's
# rdma_rename,
# which udev runs from rdma-core's rules. --force: rxe0 was named by
# "rdma link add". Each run is undone, untimed, before the next.
guid=$(tr -d ':' </sys/class/infiniband/rxe0/node_guid)
back="rdma dev set rocex$guid name rxe0"
$bin/labtime -n 10 -after "$back" -label "rename-rdmatool-udev-rename 1" -- \
	$run/rdmatool-udev-rename --policy guid --force -- rxe0
$bin/labtime -n 10 -after "$back" -label "rename-rdmatool 1" -- \
	$run/rdmatool rename udev --policy guid --force -- rxe0
$bin/labtime -n 10 -after "$back" -label "rename-rdma_rename 1" -- \
	/usr/lib/udev/rdma_rename rxe0 NAME_GUID
rdma dev show rxe0 >/dev/null # both left it as it was

held=0
procs=0
holders=0
# Every holder reads its stdin from one FIFO that the script holds open
# for writing on fd 3 (the holders do not: 3>&-), so each holds what it
# made until the script exits.
mkfifo /tmp/hold
# holder ARGS...: start one qpwork on rxe0 with ARGS that holds what it
# made, and wait for its ready line (/tmp/qpworkK.out for the Kth).
holder() {
	holders=$((holders + 1))
	out=/tmp/qpwork$holders.out
	$bin/qpwork --dev rxe0 "$@" --hold stdin </tmp/hold 3>&- >$out &
	if [ $holders -eq 1 ]; then
		exec 3>/tmp/hold
	fi
	i=0
	until grep -q '"event":"ready"' $out; do
		if grep -q '"event":"error"' $out || [ $i -gt 12000 ]; then
			cat $out
			exit 1
		fi
		i=$((i + 1))
		sleep 0.1
	done
}
# hold N: start one qpwork holding N more QPs.
hold() {
	holder --qps "$1" --to INIT --batch --quiet
	procs=$((procs + 1))
	held=$((held + $1))
}

sock=/tmp/rdmatool-agent.sock
metrics=127.0.0.1:10095
# With the probes on, the agent dumps a device's QPs every --reconcile;
# at an --interval it reads the device's resource summary when the probes
# counted a resource added or removed since the last, and dumps its MRs
# when that counts another number of them (and every --reconcile).
reconcile=300
# Its heap profile (in use after a collection) is written after each
# idle window and its CPU profile: .lab/bench/agent-heap-KERNEL.K for the Kth size (the
# last, K+1, after the idle window with the MRs).
# A CPU profile of another window after each idle window too:
# .lab/bench/agent-idle-KERNEL.K, numbered as the heap profiles.
RDMATOOL_HEAPPROFILE=.lab/bench/agent-heap-$VMTEST_KERNEL RDMATOOL_CPUWINDOWS=.lab/bench/agent-idle-$VMTEST_KERNEL \
	$run/rdmatool agent --socket "$sock" --interval 5s --reconcile ${reconcile}s \
	--metrics-address $metrics 2>/tmp/agent.err &
agent=$!
profiles=0
# until_agent TEST...: run TEST every second until it succeeds; the
# agent gone or 600 tries end the script.
until_agent() {
	i=0
	until "$@"; do
		if ! kill -0 "$agent" 2>/dev/null || [ $i -gt 600 ]; then
			cat /tmp/agent.err
			exit 1
		fi
		i=$((i + 1))
		sleep 1
	done
}
# names N: whether the agent answers, naming at least N QPs.
names() {
	a=$($run/rdmatool qp-leaks -j --limit 0 --agent-socket "$sock" --min-age 1s 2>/dev/null)
	echo "$a" | grep -q '"source":"agent"' && [ "$(echo "$a" | grep -o '"qpn"' | wc -l)" -ge "$1" ]
}
# agent_names N: wait until the agent answers, naming at least N QPs.
agent_names() {
	until_agent names "$1"
}
# churn_window N: for 10 s, QP churn on rxe0 at 167 create, INIT, RTR,
# RTS, ERR, destroy cycles a second (about 1,000 probe events a second)
# while the agent and a JSON reader (rdmatool trace -j) follow it: the
# CPU time (USER_HZ ticks) each used and the cycles made.
churn_window() {
	$run/rdmatool trace -j >/dev/null 2>/tmp/trace.err &
	tracer=$!
	i=0
	until grep -qs "attached" /tmp/trace.err; do
		if ! kill -0 "$tracer" 2>/dev/null || [ $i -gt 1200 ]; then
			cat /tmp/trace.err
			exit 1
		fi
		i=$((i + 1))
		sleep 0.1
	done
	a0=$(cut -d' ' -f14,15 /proc/$agent/stat)
	t0=$(cut -d' ' -f14,15 /proc/$tracer/stat)
	$bin/qpwork --dev rxe0 --churn-seconds 10 --churn-rate 167 >/tmp/churn.out
	a1=$(cut -d' ' -f14,15 /proc/$agent/stat)
	t1=$(cut -d' ' -f14,15 /proc/$tracer/stat)
	kill -INT "$tracer"
	wait "$tracer" || true
	cycles=$(sed -n 's/.*"event":"churn","cycles":\([0-9]*\).*/\1/p' /tmp/churn.out)
	took=$(sed -n 's/.*"event":"churn".*"seconds":\([0-9.]*\).*/\1/p' /tmp/churn.out)
	echo "churn $1 cycles $cycles seconds $took agent-ticks $(( ${a1% *} + ${a1#* } - ${a0% *} - ${a0#* } )) reader-ticks $(( ${t1% *} + ${t1#* } - ${t0% *} - ${t0#* } )) hz 100"
}
# agent_counters prints the agent's scan and lost-event counts.
agent_counters() {
	$run/rdmatool qp-leaks -j --limit 1 --agent-socket "$sock" 2>/dev/null | grep -oE '"(scans|lost_events)":[0-9]+' | tr '\n' ' '
}
# metric NAME: the agent's NAME of rxe0 from its /metrics (0 when it has
# none). The agent must be running: a stopped one does not answer.
metric() {
	wget -q -O- "http://$metrics/metrics" | awk -v m="$1" '
		index($1, m "{") == 1 && index($1, "device=\"rxe0\"") { v = $2 }
		END { printf "%.0f\n", v + 0 }'
}
# counted N: whether the agent's last MR dump of rxe0 counted at least N
# MRs.
counted() {
	[ "$(metric rdmatool_mrs)" -ge "$1" ]
}
# agent_mrs N: wait until the agent's last MR dump of rxe0 counted at
# least N MRs.
agent_mrs() {
	until_agent counted "$1"
}
# idle_profile: a CPU profile of the agent over another $idle s at idle,
# after the measured window: the profiler's buffers (1.7 MB of heap) and
# its writing of the profile would count in that window's RSS.
idle_profile() {
	kill -USR2 "$agent"
	sleep "$idle"
	kill -USR2 "$agent"
}
# ticks: the agent's CPU time so far (utime + stime, USER_HZ ticks).
ticks() {
	t=$(cut -d' ' -f14,15 /proc/$agent/stat)
	echo $(( ${t% *} + ${t#* } ))
}
# Its start (BTF, loading and verifying the probes) keeps the guest busy
# for seconds: nothing is timed before it answers.
agent_names 0
# What the agent holds before any QP: the runtime, its text, the probes'
# ring buffer (anonymous, file-backed and shared pages).
echo "agent-start $(grep -E '^(VmRSS|RssAnon|RssFile|RssShmem)' /proc/$agent/status | tr -s ' \t\n' ' ')"

for n in $sizes; do
	while [ $held -lt "$n" ]; do
		more=$((n - held))
		[ $more -gt 20000 ] && more=20000
		hold $more
	done
	# The agent's scans would compete for the guest's CPUs: it sleeps
	# while anything else is timed.
	kill -STOP "$agent"
	# Few runs where one run takes long (TCG): the spread is small there.
	runs=5
	[ "$n" -gt 10000 ] && runs=3
	listed="rdmatool lists $($run/rdmatool res qp -j | grep -o '"lqpn"' | wc -l)"
	[ "$n" -le 10000 ] && listed="$listed, iproute2 $(rdma -j res show qp | grep -o '"lqpn"' | wc -l)"
	echo "held $n QPs in $procs processes; $listed"
	$run/nlfloor -v
	$bin/labtime -n $runs -label "floor $n" -- $run/nlfloor
	$bin/labtime -n $runs -label "rdmatool $n" -- $run/rdmatool res qp -j
	$bin/labtime -n $runs -label "rdmatool-text $n" -- $run/rdmatool res qp
	iruns=$runs
	[ "$n" -gt 30000 ] && iruns=1
	$bin/labtime -n $iruns -label "iproute2 $n" -- rdma -j res show qp
	RDMATOOL_CPUPROFILE=.lab/bench/res-qp-$VMTEST_KERNEL-$n.pprof $run/rdmatool res qp -j >/dev/null

	# qp-leaks: every QP is held in INIT, so every one is a finding (exit 1).
	$bin/labtime -n 1 -ok 0,1 -label "qp-leaks-netlink $n" -- $run/rdmatool qp-leaks -j --no-agent --no-probes --watch 2s --min-age 1s
	$bin/labtime -n 1 -ok 0,1 -label "qp-leaks-probes $n" -- $run/rdmatool qp-leaks -j --no-agent --watch 2s --min-age 1s
	kill -CONT "$agent"
	# The agent has scanned them all once its answer names at least n QPs.
	agent_names "$n"
	echo "agent $n $(grep -E '^(VmRSS|VmHWM)' /proc/$agent/status | tr -s ' \t\n' ' ')"
	# The default answer: the summary and the 1000 most severe findings;
	# then every finding (--limit 0), as before the summary existed.
	$bin/labtime -n $runs -ok 0,1 -label "qp-leaks-agent $n" -- $run/rdmatool qp-leaks -j --agent-socket "$sock" --min-age 1s
	echo "size qp-leaks-agent $n $($run/rdmatool qp-leaks -j --agent-socket "$sock" --min-age 1s | wc -c)"
	$bin/labtime -n 1 -ok 0,1 -label "qp-leaks-agent-all $n" -- $run/rdmatool qp-leaks -j --limit 0 --agent-socket "$sock" --min-age 1s
	echo "size qp-leaks-agent-all $n $($run/rdmatool qp-leaks -j --limit 0 --agent-socket "$sock" --min-age 1s | wc -c)"
	# The agent at idle: asked nothing for $idle s while it goes on
	# scanning every --interval. Its CPU time over the window (utime +
	# stime, in USER_HZ ticks: 100 a second on Linux) and its RSS at the end.
	idle=30
	# Its scans and lost probe events before and after the window: what
	# it did while nobody asked.
	echo "idle-work $n before $(agent_counters)"
	# And rxe0's QP dumps: one is its --reconcile's, when that comes due
	# in the window (most of a TCG window's CPU at 60,000 QPs).
	q0=$(metric rdmatool_scans_total)
	cpu0=$(cut -d' ' -f14,15 /proc/$agent/stat)
	sleep $idle
	cpu1=$(cut -d' ' -f14,15 /proc/$agent/stat)
	ticks=$(( ${cpu1% *} + ${cpu1#* } - ${cpu0% *} - ${cpu0#* } ))
	echo "idle $n ticks $ticks hz 100 seconds $idle rss $(awk '/^VmRSS/ {print $2}' /proc/$agent/status) kB"
	echo "idle-rss $n $(grep -E '^(RssAnon|RssFile|RssShmem)' /proc/$agent/status | tr -s ' \t\n' ' ')"
	echo "idle-work $n after $(agent_counters)" # once the RSS is read: the question allocates
	echo "idle-dumps $n $(($(metric rdmatool_scans_total) - q0))"
	idle_profile
	profiles=$((profiles + 1))
	kill -USR1 "$agent"
	i=0
	until [ -s .lab/bench/agent-heap-$VMTEST_KERNEL.$profiles ] || [ $i -gt 300 ]; do
		i=$((i + 1))
		sleep 0.1
	done
	# After the profile: the churn's destroyed QPs stay in the agent's
	# history for a minute.
	churn_window "$n"
	kill -STOP "$agent"
	echo "size qp-leaks-netlink $n $($run/rdmatool qp-leaks -j --limit 0 --no-agent --no-probes --watch 2s --min-age 1s | wc -c)"
done

# MRs, beside the QPs of the largest size: each step's MRs registered a
# page each on one PD by one qpwork --reg-mrs. Each MR pins its page: as
# root (CAP_IPC_LOCK) RLIMIT_MEMLOCK does not bind; it is lifted anyway.
# The agent stays stopped while the listings are timed.
mr_sizes=${VMTEST_BENCH_MR_SIZES-10000 100000}
mrs=0
mrprocs=0
if [ -n "$mr_sizes" ]; then
	# shellcheck disable=SC3045 # the guest's sh is dash, which has it
	ulimit -l unlimited || echo "RLIMIT_MEMLOCK stays $(ulimit -l) KiB"
	# The agent's MR and QP dumps before any MR is registered (it answers
	# only while it runs).
	kill -CONT "$agent"
	d0=$(metric rdmatool_mr_dumps_total)
	s0=$(metric rdmatool_scans_total)
	kill -STOP "$agent"
fi
for m in $mr_sizes; do
	if [ "$m" -lt "$mrs" ]; then
		echo "MR sizes must increase: $mr_sizes"
		exit 1
	fi
	if [ "$m" -gt "$mrs" ]; then
		holder --reg-mrs $((m - mrs))
		mrprocs=$((mrprocs + 1))
		echo "mr-reg $(grep '"event":"reg_mrs"' $out)"
		mrs=$m
	fi
	runs=5
	[ "$m" -gt 10000 ] && runs=3
	# The count is also the CPU profile's run.
	listed="rdmatool lists $(RDMATOOL_CPUPROFILE=.lab/bench/res-mr-$VMTEST_KERNEL-$m.pprof $run/rdmatool res mr -j | grep -o '"mrn"' | wc -l)"
	[ "$m" -le 10000 ] && listed="$listed, iproute2 $(rdma -j res show mr | grep -o '"mrn"' | wc -l)"
	echo "mr-held $m MRs in $mrprocs processes, beside $held QPs; $listed"
	$run/nlfloor -v -res mr
	$bin/labtime -n $runs -label "mr-floor $m" -- $run/nlfloor -res mr
	$bin/labtime -n $runs -label "mr-rdmatool $m" -- $run/rdmatool res mr -j
	$bin/labtime -n $runs -label "mr-rdmatool-text $m" -- $run/rdmatool res mr
	iruns=$runs
	[ "$m" -gt 10000 ] && iruns=1
	$bin/labtime -n $iruns -label "mr-iproute2 $m" -- rdma -j res show mr
done
if [ "$mrs" -gt 0 ]; then
	# Catching up: from when it runs again until its metrics count the
	# MRs (its summary, read every --interval, counts another number of
	# MRs: it dumps them). Its CPU time then, and the MR and QP dumps it
	# made since the count above (a --reconcile may have come due while
	# it was stopped).
	c0=$(ticks)
	t0=$(date +%s)
	kill -CONT "$agent"
	agent_mrs "$mrs"
	c1=$(ticks)
	t1=$(date +%s)
	d1=$(metric rdmatool_mr_dumps_total)
	s1=$(metric rdmatool_scans_total)
	echo "mr-catchup $held $mrs ticks $((c1 - c0)) hz 100 seconds $((t1 - t0)) mr-dumps $((d1 - d0)) scans $((s1 - s0))"
	echo "mr-agent $held $mrs $(grep -E '^(VmRSS|VmHWM)' /proc/$agent/status | tr -s ' \t\n' ' ')"
	# At idle with every QP and MR tracked, as for the QPs alone above:
	# its CPU over the window, its RSS at the end, and the MR and QP dumps
	# it made in the window (at most one each per --reconcile).
	c0=$(ticks)
	sleep "$idle"
	c1=$(ticks)
	echo "mr-idle $held $mrs ticks $((c1 - c0)) hz 100 seconds $idle rss $(awk '/^VmRSS/ {print $2}' /proc/$agent/status) kB"
	echo "mr-idle-rss $held $mrs $(grep -E '^(RssAnon|RssFile|RssShmem)' /proc/$agent/status | tr -s ' \t\n' ' ')"
	d2=$(metric rdmatool_mr_dumps_total) # once the RSS is read: a scrape allocates
	s2=$(metric rdmatool_scans_total)
	echo "mr-idle-work $held $mrs mr-dumps $((d2 - d1)) scans $((s2 - s1)) reconcile $reconcile"
	idle_profile
	profiles=$((profiles + 1))
	kill -USR1 "$agent"
	i=0
	until [ -s ".lab/bench/agent-heap-$VMTEST_KERNEL.$profiles" ] || [ $i -gt 300 ]; do
		i=$((i + 1))
		sleep 0.1
	done
fi
kill -CONT "$agent"
kill -INT "$agent"
wait "$agent" || true
