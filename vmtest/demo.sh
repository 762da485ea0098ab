#!/bin/sh
# make demo: runs inside the lab guest. Workloads hold queue pairs the way
# real consumers leave them, and rdmatool shows what the kernel tracks.
set -u
bin=.lab/bin
say() { printf '\n== %s\n' "$*"; }
say "kernel $VMTEST_KERNEL ($VMTEST_RELEASE), $($bin/rdmatool version)"
$bin/rdmatool dev
$bin/rdmatool link

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
say "rdmatool res qp -j type RC state RTS -p"
$bin/rdmatool res qp -j -p type RC state RTS
exec 3>&-
wait
