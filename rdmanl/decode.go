package rdmanl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/mdlayher/netlink"
)

// Decoders for RDMA_NLDEV messages. Each one walks the attributes with a
// switch; attributes it does not know drop through, so a newer kernel never
// breaks an older rdmatool. Strings and byte slices are copied out of the
// message buffer.

func decodeDevice(b []byte) (Device, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Device{}, err
	}
	var d Device
	for ad.Next() {
		switch ad.Type() {
		case attrDevIndex:
			d.Index = ad.Uint32()
		case attrDevName:
			d.Name = ad.String()
		case attrPortIndex:
			d.Ports = ad.Uint32()
		case attrCapFlags:
			d.CapFlags = ad.Uint64()
		case attrFWVersion:
			d.FWVersion = ad.String()
		case attrNodeGUID:
			d.NodeGUID = GUID(ad.Uint64())
		case attrSysImageGUID:
			d.SysImageGUID = GUID(ad.Uint64())
		case attrDevNodeType:
			d.NodeType = NodeType(ad.Uint8())
		case attrDevProtocol:
			d.Protocol = ad.String()
		case attrDevDIM:
			d.DIM = ad.Uint8() != 0
		case attrNameAssignType:
			d.NameAssignType, d.HasNameAssign = NameAssignType(ad.Uint8()), true
		case attrDevType:
			d.Type = ad.Uint8()
		case attrParentName:
			d.ParentName = ad.String()
		}
	}
	if err := ad.Err(); err != nil {
		return Device{}, err
	}
	if d.Name == "" {
		return Device{}, errors.New("device without a name")
	}
	return d, nil
}

func decodePort(b []byte) (Port, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Port{}, err
	}
	var p Port
	for ad.Next() {
		switch ad.Type() {
		case attrDevIndex:
			p.DevIndex = ad.Uint32()
		case attrDevName:
			p.DevName = ad.String()
		case attrPortIndex:
			p.Index = ad.Uint32()
		case attrCapFlags:
			p.CapFlags = ad.Uint64()
		case attrSubnetPrefix:
			p.SubnetPrefix = ad.Uint64()
		case attrLID:
			p.LID = ad.Uint32()
		case attrSMLID:
			p.SMLID = ad.Uint32()
		case attrLMC:
			p.LMC = ad.Uint8()
		case attrPortState:
			p.State = PortState(ad.Uint8())
		case attrPortPhysState:
			p.PhysState = PhysState(ad.Uint8())
		case attrNdevIndex:
			p.NetdevIndex = ad.Uint32()
		case attrNdevName:
			p.NetdevName = ad.String()
		}
	}
	if err := ad.Err(); err != nil {
		return Port{}, err
	}
	if p.Index == 0 {
		return Port{}, errors.New("port entry without a port index")
	}
	return p, nil
}

func decodeSummary(b []byte) (Summary, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	for ad.Next() {
		switch ad.Type() {
		case attrDevIndex:
			s.DevIndex = ad.Uint32()
		case attrDevName:
			s.DevName = ad.String()
		case attrResSummary:
			ad.Nested(func(tad *netlink.AttributeDecoder) error {
				for tad.Next() {
					if tad.Type() != attrResSummaryEntry {
						continue
					}
					tad.Nested(func(ead *netlink.AttributeDecoder) error {
						var c ResourceCount
						for ead.Next() {
							switch ead.Type() {
							case attrResSummaryEntryName:
								c.Name = ead.String()
							case attrResSummaryEntryCurr:
								c.Current = ead.Uint64()
							}
						}
						s.Counts = append(s.Counts, c)
						return ead.Err()
					})
				}
				return tad.Err()
			})
		}
	}
	return s, ad.Err()
}

// decodeOwner handles the attributes every resource entry carries.
func decodeOwner(ad *netlink.AttributeDecoder, o *Owner) bool {
	switch ad.Type() {
	case attrResPID:
		o.PID = ad.Uint32()
	case attrResKernName:
		o.KernName = ad.String()
	default:
		return false
	}
	return true
}

// decodeDriver reads a RDMA_NLDEV_ATTR_DRIVER table: a name entry followed
// by an optional print type and one value entry, repeated.
func decodeDriver(ad *netlink.AttributeDecoder) []DriverAttr {
	var attrs []DriverAttr
	ad.Nested(func(nad *netlink.AttributeDecoder) error {
		attrs = decodeDriverTable(nad)
		return nad.Err()
	})
	return attrs
}

// decodeDriverTable reads the entries of a RDMA_NLDEV_ATTR_DRIVER table;
// nad.Err() says whether they were well formed.
func decodeDriverTable(nad *netlink.AttributeDecoder) []DriverAttr {
	var attrs []DriverAttr
	hex := false
	for nad.Next() {
		switch nad.Type() {
		case attrDriverString:
			attrs = append(attrs, DriverAttr{Name: nad.String()})
			hex = false
		case attrDriverPrintType:
			hex = nad.Uint8() == printTypeHex
		case attrDriverS32, attrDriverU32, attrDriverS64, attrDriverU64:
			var v int64
			switch nad.Type() {
			case attrDriverS32:
				v = int64(int32(nad.Uint32()))
			case attrDriverU32:
				v = int64(nad.Uint32())
			default:
				v = int64(nad.Uint64())
			}
			if n := len(attrs); n > 0 {
				attrs[n-1].Value, attrs[n-1].Hex = v, hex
			}
		}
	}
	return attrs
}

// decodeQP decodes one RES_QP_ENTRY nest. QP entries are the bulk of the
// largest dumps (tens of thousands at a time), so the entry is walked in
// place with walkAttrs: an AttributeDecoder copies every attribute's
// payload, eight allocations per QP. The checks are the decoder's: a
// fixed-size attribute of the wrong length makes the entry malformed.
// Unknown attributes are skipped.
func decodeQP(b []byte) (QP, error) {
	seen := false
	var qp QP
	var bad error
	u32 := func(p []byte) uint32 {
		if len(p) != 4 {
			bad = errMalformedAttr
			return 0
		}
		return binary.NativeEndian.Uint32(p)
	}
	u8 := func(p []byte) uint8 {
		if len(p) != 1 {
			bad = errMalformedAttr
			return 0
		}
		return p[0]
	}
	err := walkAttrs(b, func(typ uint16, p []byte) bool {
		switch typ {
		case attrResPID:
			qp.Owner.PID = u32(p)
		case attrResKernName:
			qp.Owner.KernName = string(bytes.TrimRight(p, "\x00"))
		case attrPortIndex:
			qp.Port = u32(p)
		case attrResLQPN:
			qp.LQPN = u32(p)
			seen = true
		case attrResRQPN:
			qp.RQPN, qp.HasRQPN = u32(p), true
		case attrResRQPSN:
			qp.RQPSN = u32(p)
		case attrResSQPSN:
			qp.SQPSN = u32(p)
		case attrResPathMigState:
			qp.PathMigState, qp.HasPathMig = PathMigState(u8(p)), true
		case attrResType: // mlx5 repeats RES_TYPE for driver QPs: the last one wins
			qp.Type = QPType(u8(p))
		case attrResState:
			qp.State = QPState(u8(p))
		case attrResPDN:
			qp.PDN = u32(p)
		case attrResSubtype:
			qp.Subtype = string(bytes.TrimRight(p, "\x00"))
		case attrDriver:
			nad, err := netlink.NewAttributeDecoder(p)
			if err != nil {
				bad = err
				return false
			}
			qp.Driver = decodeDriverTable(nad)
			bad = cmpErr(bad, nad.Err())
		case attrResRaw:
			qp.Raw = bytes.Clone(p)
		}
		return bad == nil
	})
	if err := cmpErr(err, bad); err != nil {
		return qp, err
	}
	if !seen {
		return qp, errMissing("LQPN")
	}
	return qp, nil
}

func decodeCQ(ad *netlink.AttributeDecoder) (CQ, error) {
	seen := false
	var cq CQ
	for ad.Next() {
		if decodeOwner(ad, &cq.Owner) {
			continue
		}
		switch ad.Type() {
		case attrResCQN:
			cq.CQN = ad.Uint32()
			seen = true
		case attrResCQE:
			cq.CQE = ad.Uint32()
		case attrResUseCnt:
			cq.Users = ad.Uint64()
		case attrResPollCtx:
			cq.PollCtx, cq.HasPoll = PollCtx(ad.Uint8()), true
		case attrDevDIM:
			cq.DIM = ad.Uint8() != 0
		case attrResCtxN:
			cq.CtxN = ad.Uint32()
		case attrDriver:
			cq.Driver = decodeDriver(ad)
		case attrResRaw:
			cq.Raw = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return cq, err
	}
	if !seen {
		return cq, errMissing("CQN")
	}
	return cq, nil
}

func decodeMR(ad *netlink.AttributeDecoder) (MR, error) {
	seen := false
	var mr MR
	for ad.Next() {
		if decodeOwner(ad, &mr.Owner) {
			continue
		}
		switch ad.Type() {
		case attrResMRN:
			mr.MRN = ad.Uint32()
			seen = true
		case attrResRKey:
			mr.RKey, mr.HasKeys = ad.Uint32(), true
		case attrResLKey:
			mr.LKey, mr.HasKeys = ad.Uint32(), true
		case attrResIOVA:
			mr.IOVA = ad.Uint64()
		case attrResMRLen:
			mr.Len = ad.Uint64()
		case attrResPDN:
			mr.PDN = ad.Uint32()
		case attrDriver:
			mr.Driver = decodeDriver(ad)
		case attrResRaw:
			mr.Raw = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return mr, err
	}
	if !seen {
		return mr, errMissing("MRN")
	}
	return mr, nil
}

func decodePD(ad *netlink.AttributeDecoder) (PD, error) {
	seen := false
	var pd PD
	for ad.Next() {
		if decodeOwner(ad, &pd.Owner) {
			continue
		}
		switch ad.Type() {
		case attrResPDN:
			pd.PDN = ad.Uint32()
			seen = true
		case attrResUseCnt:
			pd.Users = ad.Uint64()
		case attrResLocalDMALKey:
			pd.LocalDMALKey = ad.Uint32()
		case attrResUnsafeGlobalRKey:
			pd.UnsafeGlobalRKey, pd.HasUnsafeGlobalRK = ad.Uint32(), true
		case attrResCtxN:
			pd.CtxN = ad.Uint32()
		case attrDriver:
			pd.Driver = decodeDriver(ad)
		}
	}
	if err := ad.Err(); err != nil {
		return pd, err
	}
	if !seen {
		return pd, errMissing("PDN")
	}
	return pd, nil
}

func decodeCtx(ad *netlink.AttributeDecoder) (Context, error) {
	seen := false
	var c Context
	for ad.Next() {
		if decodeOwner(ad, &c.Owner) {
			continue
		}
		if ad.Type() == attrResCtxN {
			c.CtxN = ad.Uint32()
			seen = true
		}
	}
	if err := ad.Err(); err != nil {
		return c, err
	}
	if !seen {
		return c, errMissing("CTXN")
	}
	return c, nil
}

func decodeSRQ(ad *netlink.AttributeDecoder) (SRQ, error) {
	seen := false
	var s SRQ
	for ad.Next() {
		if decodeOwner(ad, &s.Owner) {
			continue
		}
		switch ad.Type() {
		case attrResSRQN:
			s.SRQN = ad.Uint32()
			seen = true
		case attrResType:
			s.Type = SRQType(ad.Uint8())
		case attrResPDN:
			s.PDN = ad.Uint32()
		case attrResCQN:
			s.CQN, s.HasCQ = ad.Uint32(), true
		case attrResQP:
			ad.Nested(func(tad *netlink.AttributeDecoder) error {
				for tad.Next() {
					if tad.Type() != attrResQPEntry {
						continue
					}
					tad.Nested(func(ead *netlink.AttributeDecoder) error {
						var r QPRange
						for ead.Next() {
							switch ead.Type() {
							case attrResLQPN:
								n := ead.Uint32()
								r = QPRange{Min: n, Max: n}
							case attrMinRange:
								r.Min = ead.Uint32()
							case attrMaxRange:
								r.Max = ead.Uint32()
							}
						}
						if r.Max < r.Min {
							return errors.New("SRQ QP range with max below min")
						}
						s.QPs = append(s.QPs, r)
						return ead.Err()
					})
				}
				return tad.Err()
			})
		case attrDriver:
			s.Driver = decodeDriver(ad)
		case attrResRaw:
			s.Raw = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return s, err
	}
	if !seen {
		return s, errMissing("SRQN")
	}
	return s, nil
}

func decodeCMID(ad *netlink.AttributeDecoder) (CMID, error) {
	seen := false
	var c CMID
	for ad.Next() {
		if decodeOwner(ad, &c.Owner) {
			continue
		}
		switch ad.Type() {
		case attrPortIndex:
			c.Port = ad.Uint32()
		case attrResCMIDN:
			c.CMIDN = ad.Uint32()
			seen = true
		case attrResLQPN:
			c.LQPN, c.HasQP = ad.Uint32(), true
		case attrResPS:
			c.PS = PortSpace(ad.Uint32())
		case attrResType:
			c.Type = QPType(ad.Uint8())
		case attrResState:
			c.State = CMState(ad.Uint8())
		case attrResSrcAddr:
			c.SrcAddr = decodeSockaddr(ad.Bytes())
		case attrResDstAddr:
			c.DstAddr = decodeSockaddr(ad.Bytes())
		}
	}
	if err := ad.Err(); err != nil {
		return c, err
	}
	if !seen {
		return c, errMissing("CM_IDN")
	}
	return c, nil
}

// decodeSockaddr reads a struct __kernel_sockaddr_storage holding an
// AF_INET or AF_INET6 address; anything else is the zero AddrPort. The
// family is host order, the port network order.
func decodeSockaddr(b []byte) netip.AddrPort {
	const afInet, afInet6 = 2, 10
	if len(b) < 4 {
		return netip.AddrPort{}
	}
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case afInet:
		if len(b) >= 8 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
		}
	case afInet6:
		if len(b) >= 24 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port)
		}
	}
	return netip.AddrPort{}
}

func decodeSystem(b []byte) (systemSettings, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return systemSettings{}, err
	}
	var s systemSettings
	for ad.Next() {
		switch ad.Type() {
		case attrSysNetnsMode:
			s.NetnsShared = ad.Uint8() != 0
		case attrSysCopyOnFork:
			s.CopyOnFork, s.HasCopyOnFork = ad.Uint8() != 0, true
		case attrSysPrivQKeyMode:
			s.PrivilegedQKey, s.HasPrivQKey = ad.Uint8() != 0, true
		case attrSysMonitorMode:
			s.MonitorMode, s.HasMonitorMode = ad.Uint8() != 0, true
		}
	}
	return s, ad.Err()
}

func decodeMonitor(b []byte) (MonitorEvent, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return MonitorEvent{}, err
	}
	var e MonitorEvent
	for ad.Next() {
		switch ad.Type() {
		case attrEventType:
			e.Type = MonitorEventType(ad.Uint8())
		case attrDevIndex:
			e.DevIndex = ad.Uint32()
		case attrDevName:
			e.DevName = ad.String()
		case attrPortIndex:
			e.Port = ad.Uint32()
		case attrNdevIndex:
			e.NetdevIndex = ad.Uint32()
		case attrNdevName:
			e.NetdevName = ad.String()
		}
	}
	return e, ad.Err()
}

func errMissing(attr string) error { return errors.New("entry without " + attr) }
