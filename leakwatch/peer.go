package leakwatch

import "github.com/rdmatool/rdmatool/rdmanl"

// Peers gives the QPs of the device with index the peers a dump of its
// rdma_cm IDs named (peers: the address at the other end of each QP's
// connection by QPN, rdmanl.Peers), between the scans that list its QPs:
// a QP that connects and fails within a second (a reconnect loop) is
// gone before a scan lists it, while a dump of the rdma_cm IDs, which
// costs the provider no query, can be made as it connects. A QP keeps a
// peer it has until another is named, after it is destroyed too; a QP
// destroyed whose rdma_cm ID is still there (the consumer destroys the
// QP, then the ID) gets its peer as a live one does. QPNs the watcher
// does not know are left alone.
func (w *Watcher) Peers(index uint32, peers map[uint32]string) {
	dev := w.devs[index]
	if dev == nil {
		return
	}
	for qpn, p := range peers {
		h := w.qps[qpKey{index, qpn}]
		if h == nil || p == "" {
			continue
		}
		a := peerFrom(p)
		if a == (peerAddr{}) || a == h.peer {
			continue
		}
		h.peer = a
		w.peerLearned(dev, h)
	}
}

// peerLearned gives h's failures kept for qp-error-storm the peer h has
// now: the dump that names a failed QP's peer may come after its failure.
// It walks the device's failures (at most MaxQPErrors) once for a QP that
// entered Error, when a QP's peer is learned, not at each event.
func (w *Watcher) peerLearned(dev *deviceState, h *History) {
	if h.events == nil {
		return // it never entered Error
	}
	for _, e := range dev.qpErrors.from(0) {
		if e.qpn == h.QPN && e.created == h.FirstSeen {
			e.peer = h.peer
		}
	}
}

// WantsPeer says whether the QP qpn of the device with index is one an
// rdma_cm ID may name the peer of and none has yet: an RC QP of a process,
// or one rdma_cm created for a kernel ULP (other kernel QPs have no
// rdma_cm ID). The caller decides from it whether to dump the device's
// rdma_cm IDs (Peers) while the QP is connected.
func (w *Watcher) WantsPeer(index, qpn uint32) bool {
	h := w.qps[qpKey{index, qpn}]
	if h == nil || h.Type != rdmanl.QPTypeRC {
		return false
	}
	n := h.qpNames()
	return h.peer == (peerAddr{}) && (!n.owner.Kernel() || n.owner.KernName == "rdma_cm")
}
