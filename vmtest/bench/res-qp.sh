#!/bin/sh
# make bench: inside the lab guest, hold N QPs on rxe0 and time rdmatool's
# QP listing against iproute2's in the same run. Usage: res-qp.sh [N]
set -eu
n=${1:-10000}
bin=.lab/bin
# Two mmaps per QP: the default vm.max_map_count stops one process at ~32.7k.
echo 262144 >/proc/sys/vm/max_map_count
mkfifo /tmp/hold
$bin/qpwork --dev rxe0 --qps "$n" --to INIT --batch --quiet --hold stdin </tmp/hold >/tmp/qpwork.out &
exec 3>/tmp/hold
i=0
until grep -q '"event":"ready"' /tmp/qpwork.out; do
	if grep -q '"event":"error"' /tmp/qpwork.out || [ $i -gt 6000 ]; then
		cat /tmp/qpwork.out
		exit 1
	fi
	i=$((i + 1))
	sleep 0.1
done
echo "== kernel $VMTEST_KERNEL ($VMTEST_RELEASE): $(grep -o '"qps":[0-9]*' /tmp/qpwork.out | head -1) held on rxe0"
echo "rdmatool lists $($bin/rdmatool res qp -j | grep -o '"lqpn"' | wc -l) QPs, iproute2 $(rdma -j res show qp | grep -o '"lqpn"' | wc -l)"
$bin/labtime -n 5 -label "rdmatool res qp -j" -- $bin/rdmatool res qp -j
$bin/labtime -n 5 -label "rdma -j res show qp" -- rdma -j res show qp
$bin/labtime -n 5 -label "rdmatool res qp (text)" -- $bin/rdmatool res qp
$bin/labtime -n 5 -label "rdma res show qp (text)" -- rdma res show qp
# qp-leaks over the same QPs (held in INIT: every one is a finding, exit 1),
# observing locally, then answered by a running agent.
$bin/labtime -n 3 -ok 0,1 -label "rdmatool qp-leaks (2s, netlink)" -- $bin/rdmatool qp-leaks -j --no-agent --no-probes --watch 2s --min-age 1s
$bin/labtime -n 3 -ok 0,1 -label "rdmatool qp-leaks (2s, probes)" -- $bin/rdmatool qp-leaks -j --no-agent --watch 2s --min-age 1s
sock=/tmp/rdmatool-agent.sock
$bin/rdmatool agent --socket "$sock" --interval 5s 2>/tmp/agent.err &
agent=$!
i=0
until $bin/rdmatool qp-leaks -j --agent-socket "$sock" --min-age 1s 2>/dev/null | grep -q '"source":"agent"'; do
	if ! kill -0 "$agent" 2>/dev/null || [ $i -gt 600 ]; then
		cat /tmp/agent.err
		exit 1
	fi
	i=$((i + 1))
	sleep 0.5
done
sleep 6 # a few scans of the 10k QPs into the agent's history
$bin/labtime -n 5 -ok 0,1 -label "rdmatool qp-leaks (answered by the agent)" -- $bin/rdmatool qp-leaks -j --agent-socket "$sock" --min-age 1s
echo "agent memory after $(grep -c . /tmp/agent.err) log lines: $(grep -E '^(VmRSS|VmHWM)' /proc/$agent/status | tr -s ' \t\n' ' ')"
echo "agent CPU since start: $(awk '{printf "%.1f s", ($14 + $15) / 100}' /proc/$agent/stat)"
kill -INT "$agent"
wait "$agent" || true
exec 3>&-
wait
