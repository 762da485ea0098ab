#!/bin/sh
# make demo: runs inside the lab guest. The agent runs from the start;
# workloads hold queue pairs the way real consumers leave them, and
# rdmatool shows what the kernel tracks, what the agent exports to
# Prometheus and what it finds.
set -u
bin=.lab/bin
sock=/tmp/rdmatool-agent.sock
say() { printf '\n== %s\n' "$*"; }
say "kernel $VMTEST_KERNEL ($VMTEST_RELEASE), $($bin/rdmatool version)"
$bin/rdmatool dev
$bin/rdmatool link

say "rdmatool agent (probes, metrics on 127.0.0.1:10095)"
$bin/rdmatool agent --socket $sock --interval 2s 2>/tmp/agent.log &
agent=$!
until $bin/rdmatool qp-leaks --agent-socket $sock -j >/dev/null 2>&1 || [ $? -eq 1 ]; do sleep 0.5; done

mkfifo /tmp/hold
# A healthy RC pair on each device, and on rxe0 QPs on an SRQ left in ERR
# (a consumer that waits for LAST_WQE_REACHED forever) and QPs never
# connected.
$bin/qpwork --dev rxe0 --pairs --qps 1 --to RTS --hold stdin --quiet </tmp/hold >/dev/null &
$bin/qpwork --dev siw0 --pairs --qps 1 --connect cm --addr 198.51.100.1 --to RTS --hold stdin --quiet </tmp/hold >/dev/null &
$bin/qpwork --dev rxe0 --srq --qps 2 --to ERR --hold stdin --quiet </tmp/hold >/dev/null &
$bin/qpwork --dev rxe0 --qps 2 --to INIT --hold stdin --quiet </tmp/hold >/dev/null &
exec 3>/tmp/hold
sleep 2

say "rdmatool res (per-device resource counts)"
$bin/rdmatool res
say "rdmatool res qp"
$bin/rdmatool res qp
say "rdmatool res qp state ERR (QPs in the error state)"
$bin/rdmatool res qp state ERR
say "rdmatool res srq (SRQs with their QPs)"
$bin/rdmatool res srq
say "rdmatool res cm_id link siw0"
$bin/rdmatool res cm_id link siw0
sleep 4
say "/metrics: the QPs by state and the findings by rule, as Prometheus scrapes them"
wget -qO- http://127.0.0.1:10095/metrics | grep -E '^rdmatool_(qps|findings|device_max_qps)[{ ]'
say "rdmatool qp-leaks, answered from the agent's history (the RTS pairs are healthy, the rest leak)"
$bin/rdmatool qp-leaks --agent-socket $sock --min-age 4s
echo "exit status $? (1: findings)"
say "what the agent learned of each device (its log)"
grep 'device learned' /tmp/agent.log
kill $agent
wait $agent
exec 3>&-
wait

say "a healthy workload: QP churn and SRQ QPs torn down by the IB spec 10.3.1 sequence"
$bin/qpwork --dev rxe0 --churn-seconds 6 --quiet >/dev/null &
$bin/qpwork --dev rxe0 --pairs --qps 2 --srq --to RTS --teardown spec --hold 3 --quiet >/dev/null &
$bin/rdmatool qp-leaks --no-agent --watch 8s --min-age 4s
echo "exit status $? (0: nothing found)"
wait
