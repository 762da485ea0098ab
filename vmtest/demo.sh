#!/bin/sh
# make demo: runs inside the lab guest. Shows the lab's RDMA devices as
# rdmatool sees them while a workload holds queue pairs.
set -u
bin=.lab/bin
echo "== kernel $VMTEST_KERNEL ($VMTEST_RELEASE)"
$bin/rdmatool version
echo
echo "== a workload holds an RC pair on rxe0 and one on siw0, plus two QPs on an SRQ left in ERR"
mkfifo /tmp/hold
$bin/qpwork --dev rxe0 --pairs --qps 1 --to RTS --hold stdin --quiet </tmp/hold &
$bin/qpwork --dev siw0 --pairs --qps 1 --connect cm --addr 198.51.100.1 --to RTS --hold stdin --quiet </tmp/hold &
$bin/qpwork --dev rxe0 --srq --qps 2 --to ERR --hold stdin --quiet </tmp/hold &
exec 3>/tmp/hold
sleep 2
echo
echo "== rdma res show qp (iproute2)"
rdma res show qp
exec 3>&-
wait
