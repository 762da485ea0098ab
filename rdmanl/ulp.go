package rdmanl

// ULPs names the kernel module (the upper-layer protocol, ULP) that owns
// each kernel QP rdma_cm created for it, by LQPN. Netlink reports those QPs
// as rdma_cm's: rdma_create_qp calls ib_create_qp in rdma_cm, which records
// its own module name. The owner is the module that owns the rdma_cm ID
// bound to the QP (rdma_cm gives an ID made for an incoming connection its
// listener's owner), else the module that created the SRQ the QP receives
// on. qps, ids and srqs are one device's dumps; QPs of other owners, and
// those neither table names a module for, are left out.
func ULPs(qps []QP, ids []CMID, srqs []SRQ) map[uint32]string {
	byQPN := map[uint32]string{}
	for _, id := range ids {
		if id.LQPN != 0 && id.Owner.KernName != "" && id.Owner.KernName != "rdma_cm" {
			byQPN[id.LQPN] = id.Owner.KernName
		}
	}
	bySRQ := map[uint32]string{}
	for _, s := range srqs {
		if s.Owner.KernName != "" {
			bySRQ[s.SRQN] = s.Owner.KernName
		}
	}
	out := map[uint32]string{}
	for _, qp := range qps {
		if qp.Owner.KernName != "rdma_cm" {
			continue
		}
		if m := byQPN[qp.LQPN]; m != "" {
			out[qp.LQPN] = m
		} else if m := bySRQ[qp.SRQN]; qp.OnSRQ && m != "" {
			out[qp.LQPN] = m
		}
	}
	return out
}
