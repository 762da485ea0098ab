package rdmanl

// ULPIndex names the kernel module (the upper-layer protocol, ULP) that
// owns a kernel QP rdma_cm created for it. Netlink reports those QPs as
// rdma_cm's: rdma_create_qp calls ib_create_qp from rdma_cm, which records
// its own module name. The owner is the module that owns the rdma_cm ID
// bound to the QP (rdma_cm gives an ID made for an incoming connection its
// listener's owner), else the module that created the SRQ the QP receives
// on. Build one per device from its CM ID and SRQ dumps.
type ULPIndex struct {
	byQPN map[uint32]string
	bySRQ map[uint32]string
}

// NewULPIndex indexes one device's rdma_cm IDs and SRQs.
func NewULPIndex(ids []CMID, srqs []SRQ) ULPIndex {
	x := ULPIndex{byQPN: map[uint32]string{}, bySRQ: map[uint32]string{}}
	for _, id := range ids {
		if id.LQPN != 0 && id.Owner.KernName != "" && id.Owner.KernName != "rdma_cm" {
			x.byQPN[id.LQPN] = id.Owner.KernName
		}
	}
	for _, s := range srqs {
		if s.Owner.KernName != "" {
			x.bySRQ[s.SRQN] = s.Owner.KernName
		}
	}
	return x
}

// Of returns the ULP of qp, a QP of the indexed device: "" for QPs not
// rdma_cm's and those neither table names a module for.
func (x ULPIndex) Of(qp QP) string {
	if qp.Owner.KernName != "rdma_cm" {
		return ""
	}
	if m := x.byQPN[qp.LQPN]; m != "" {
		return m
	}
	if qp.OnSRQ {
		return x.bySRQ[qp.SRQN]
	}
	return ""
}

// ULPs maps the LQPNs of one device's qps to their ULP (ULPIndex.Of),
// leaving out those it names none for.
func ULPs(qps []QP, ids []CMID, srqs []SRQ) map[uint32]string {
	x := NewULPIndex(ids, srqs)
	out := map[uint32]string{}
	for _, qp := range qps {
		if m := x.Of(qp); m != "" {
			out[qp.LQPN] = m
		}
	}
	return out
}

// Peers maps the LQPN of each QP one of a device's rdma_cm IDs is bound
// to onto the address at the other end of its connection: the ID's
// destination address, the remote's on either side of a connection (a
// listener's ID for an incoming connection has the remote's address as
// its destination), without the port (on the passive side the remote's
// is ephemeral). QPs no ID with a destination names are left out.
func Peers(ids []CMID) map[uint32]string {
	out := map[uint32]string{}
	for _, id := range ids {
		if id.LQPN != 0 && id.DstAddr.IsValid() {
			out[id.LQPN] = id.DstAddr.Addr().String()
		}
	}
	return out
}
