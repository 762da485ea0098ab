package main

import (
	"fmt"
	"strconv"

	"github.com/rdmatool/rdmatool/internal/jsonw"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// Rows are the JSON API of the listings: field names follow iproute2's rdma
// (hyphens become underscores), every documented field is always present,
// and numbers stay numbers. Keys people read in hex also get a "_hex" string.

type devRow struct {
	IfIndex        uint32 `json:"ifindex" txt:"-"`
	IfName         string `json:"ifname" txt:"-"`
	Lead           string `json:"-" txt:"lead" filter:"-"`
	NodeType       string `json:"node_type"`
	FW             string `json:"fw" txt:"nz"`
	NodeGUID       string `json:"node_guid"`
	SysImageGUID   string `json:"sys_image_guid"`
	Protocol       string `json:"protocol" txt:"nz"`
	Ports          uint32 `json:"ports" txt:"d"`
	Caps           uint64 `json:"caps" txt:"d"`
	NameAssignType string `json:"name_assign_type" txt:"d"` // "" before 6.11
}

func devRowOf(d rdmanl.Device) devRow {
	r := devRow{
		IfIndex: d.Index, IfName: d.Name, Lead: fmt.Sprintf("%d: %s:", d.Index, d.Name), NodeType: d.NodeType.String(), FW: d.FWVersion,
		NodeGUID: d.NodeGUID.String(), SysImageGUID: d.SysImageGUID.String(),
		Protocol: d.Protocol, Ports: d.Ports, Caps: d.CapFlags,
	}
	if d.HasNameAssign {
		r.NameAssignType = d.NameAssignType.String()
	}
	return r
}

type linkRow struct {
	IfIndex      uint32 `json:"ifindex" txt:"-"`
	IfName       string `json:"ifname" txt:"-"`
	Link         string `json:"-" txt:"lead"`
	Port         uint32 `json:"port" txt:"-"`
	State        string `json:"state"`
	PhysState    string `json:"physical_state"`
	Netdev       string `json:"netdev" txt:"nz"`
	NetdevIndex  uint32 `json:"netdev_index" txt:"d"`
	LID          uint32 `json:"lid" txt:"nz"`
	SMLID        uint32 `json:"sm_lid" txt:"nz"`
	LMC          uint8  `json:"lmc" txt:"nz"`
	SubnetPrefix string `json:"subnet_prefix" txt:"nz"`
	Caps         uint64 `json:"caps" txt:"d"`
}

func linkRowOf(p rdmanl.Port) linkRow {
	r := linkRow{
		IfIndex: p.DevIndex, IfName: p.DevName, Link: fmt.Sprintf("link %s/%d", p.DevName, p.Index), Port: p.Index,
		State: p.State.String(), PhysState: p.PhysState.String(), Netdev: p.NetdevName, NetdevIndex: p.NetdevIndex,
		LID: p.LID, SMLID: p.SMLID, LMC: p.LMC, Caps: p.CapFlags,
	}
	if p.SubnetPrefix != 0 {
		r.SubnetPrefix = rdmanl.GUID(p.SubnetPrefix).String()
	}
	return r
}

// ownerFields resolves a resource owner to the row fields: pid (0 when none),
// comm (the process's, or the kernel module's like iproute2 prints it),
// kern_name, and the text form: "comm app", or "comm [ib_core]" for a
// kernel owner.
func ownerFields(o rdmanl.Owner, procs *owner.Resolver) (pid uint32, comm, kern, text string) {
	pid, comm, kern = ownerData(o, procs)
	return pid, comm, kern, commText(comm, kern)
}

// ownerData is ownerFields without the text form, which only the text
// output prints.
func ownerData(o rdmanl.Owner, procs *owner.Resolver) (pid uint32, comm, kern string) {
	if o.Kernel() {
		return 0, o.KernName, o.KernName
	}
	if p, ok := procs.Lookup(o.PID); ok {
		comm = p.Comm
	}
	return o.PID, comm, ""
}

// commText is an owner's text form: "comm app", "comm [ib_core]" for a
// kernel module, "" for an owner without a name.
func commText(comm, kern string) string {
	switch {
	case kern != "":
		return "comm [" + kern + "]"
	case comm != "":
		return "comm " + comm
	}
	return ""
}

type qpRow struct {
	IfIndex      uint32 `json:"ifindex" txt:"-"`
	IfName       string `json:"ifname" txt:"-"`
	Link         string `json:"-" txt:"lead" filter:"-"`
	Port         uint32 `json:"port" txt:"-"`
	LQPN         uint32 `json:"lqpn"`
	RQPN         uint32 `json:"rqpn" txt:"nz"` // 0 for types without a remote QP
	Type         string `json:"type"`
	State        string `json:"state"`
	RQPSN        uint32 `json:"rq_psn" txt:"d"`
	SQPSN        uint32 `json:"sq_psn" txt:"d"`
	PathMigState string `json:"path_mig_state" txt:"d"` // "" for UD, GSI, ...
	PDN          uint32 `json:"pdn" txt:"nz"`
	SRQ          bool   `json:"srq" txt:"-"`  // attached to an SRQ
	SRQN         uint32 `json:"srqn" txt:"-"` // meaningful when srq is true (SRQ numbers start at 0)
	SRQText      string `json:"-" txt:"lead" filter:"-"`
	PID          uint32 `json:"pid" txt:"nz"`
	Comm         string `json:"comm" txt:"-"`
	KernName     string `json:"kern_name" txt:"-"`
	CommText     string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
	// ULP is the kernel module a QP netlink reports as rdma_cm's serves
	// (rdmanl.ULPIndex); "" otherwise.
	ULP     string `json:"ulp" txt:"nz"`
	Subtype string `json:"subtype" txt:"nz"`
}

func resLink(dev string, port uint32) string {
	if port == 0 {
		return "link " + dev + "/-"
	}
	return "link " + dev + "/" + strconv.FormatUint(uint64(port), 10) // per QP row: no Sprintf
}

func qpRowOf(q rdmanl.QP, procs *owner.Resolver, ulps rdmanl.ULPIndex) qpRow {
	r := qpRowData(q, procs, ulps)
	r.Link = resLink(q.DevName, q.Port)
	if q.OnSRQ {
		r.SRQText = "srqn " + strconv.FormatUint(uint64(q.SRQN), 10)
	}
	r.CommText = commText(r.Comm, r.KernName)
	return r
}

// qpRowData is qpRowOf without the text output's words (Link, SRQText,
// CommText), which JSON and the filters do not use: three strings made
// per QP, a tenth of a 30,000-QP listing's time in user space.
func qpRowData(q rdmanl.QP, procs *owner.Resolver, ulps rdmanl.ULPIndex) qpRow {
	r := qpRow{
		IfIndex: q.DevIndex, IfName: q.DevName, Port: q.Port,
		LQPN: q.LQPN, RQPN: q.RQPN, Type: q.Type.String(), State: q.State.String(),
		RQPSN: q.RQPSN, SQPSN: q.SQPSN, PDN: q.PDN, SRQ: q.OnSRQ, SRQN: q.SRQN, Subtype: q.Subtype,
	}
	if q.HasPathMig {
		r.PathMigState = q.PathMigState.String()
	}
	r.PID, r.Comm, r.KernName = ownerData(q.Owner, procs)
	r.ULP = ulps.Of(q)
	return r
}

// appendJSON appends the row as json.Marshal writes it (TestQPRowJSON
// holds them equal): without reflection, the per-QP cost of `res qp -j`
// at 60,000 QPs.
func (r *qpRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"port":`...), r.Port)
	b = jsonw.AppendUint(append(b, `,"lqpn":`...), r.LQPN)
	b = jsonw.AppendUint(append(b, `,"rqpn":`...), r.RQPN)
	b = jsonw.AppendString(append(b, `,"type":`...), r.Type)
	b = jsonw.AppendString(append(b, `,"state":`...), r.State)
	b = jsonw.AppendUint(append(b, `,"rq_psn":`...), r.RQPSN)
	b = jsonw.AppendUint(append(b, `,"sq_psn":`...), r.SQPSN)
	b = jsonw.AppendString(append(b, `,"path_mig_state":`...), r.PathMigState)
	b = jsonw.AppendUint(append(b, `,"pdn":`...), r.PDN)
	b = jsonw.AppendBool(append(b, `,"srq":`...), r.SRQ)
	b = jsonw.AppendUint(append(b, `,"srqn":`...), r.SRQN)
	b = appendOwnerJSON(b, r.PID, r.Comm, r.KernName)
	b = jsonw.AppendString(append(b, `,"ulp":`...), r.ULP)
	b = jsonw.AppendString(append(b, `,"subtype":`...), r.Subtype)
	return append(b, '}')
}

// appendRowStart opens a resource row's JSON object with the fields every
// row begins with, ifindex and ifname.
func appendRowStart(b []byte, ifIndex uint32, ifName string) []byte {
	b = jsonw.AppendUint(append(b, `{"ifindex":`...), ifIndex)
	return jsonw.AppendString(append(b, `,"ifname":`...), ifName)
}

// appendOwnerJSON appends a resource's owner as its row's pid, comm and
// kern_name fields.
func appendOwnerJSON(b []byte, pid uint32, comm, kern string) []byte {
	b = jsonw.AppendUint(append(b, `,"pid":`...), pid)
	b = jsonw.AppendString(append(b, `,"comm":`...), comm)
	return jsonw.AppendString(append(b, `,"kern_name":`...), kern)
}

type cqRow struct {
	IfIndex  uint32 `json:"ifindex" txt:"-"`
	IfName   string `json:"ifname" txt:"-"`
	Lead     string `json:"-" txt:"lead" filter:"-"`
	CQN      uint32 `json:"cqn"`
	CQE      uint32 `json:"cqe"`
	Users    uint64 `json:"users"`
	PollCtx  string `json:"poll_ctx" txt:"nz"`
	DIM      bool   `json:"adaptive_moderation" txt:"d"`
	CtxN     uint32 `json:"ctxn" txt:"nz"`
	PID      uint32 `json:"pid" txt:"nz"`
	Comm     string `json:"comm" txt:"-"`
	KernName string `json:"kern_name" txt:"-"`
	CommText string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
}

func cqRowOf(c rdmanl.CQ, procs *owner.Resolver) cqRow {
	r := cqRow{IfIndex: c.DevIndex, IfName: c.DevName, Lead: "dev " + c.DevName, CQN: c.CQN, CQE: c.CQE, Users: c.Users, DIM: c.DIM, CtxN: c.CtxN}
	if c.HasPoll {
		r.PollCtx = c.PollCtx.String()
	}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(c.Owner, procs)
	return r
}

// appendJSON appends the row as json.Marshal writes it.
func (r *cqRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"cqn":`...), r.CQN)
	b = jsonw.AppendUint(append(b, `,"cqe":`...), r.CQE)
	b = jsonw.AppendUint(append(b, `,"users":`...), r.Users)
	b = jsonw.AppendString(append(b, `,"poll_ctx":`...), r.PollCtx)
	b = jsonw.AppendBool(append(b, `,"adaptive_moderation":`...), r.DIM)
	b = jsonw.AppendUint(append(b, `,"ctxn":`...), r.CtxN)
	return append(appendOwnerJSON(b, r.PID, r.Comm, r.KernName), '}')
}

type mrRow struct {
	IfIndex  uint32 `json:"ifindex" txt:"-"`
	IfName   string `json:"ifname" txt:"-"`
	Lead     string `json:"-" txt:"lead" filter:"-"`
	MRN      uint32 `json:"mrn"`
	RKey     uint32 `json:"rkey" txt:"-"` // 0 without CAP_NET_ADMIN
	RKeyHex  string `json:"rkey_hex" txt:"nz"`
	LKey     uint32 `json:"lkey" txt:"-"`
	LKeyHex  string `json:"lkey_hex" txt:"nz"`
	IOVA     uint64 `json:"iova" txt:"-"`
	IOVAHex  string `json:"iova_hex" txt:"nz"`
	MRLen    uint64 `json:"mrlen"`
	PDN      uint32 `json:"pdn"`
	PID      uint32 `json:"pid" txt:"nz"`
	Comm     string `json:"comm" txt:"-"`
	KernName string `json:"kern_name" txt:"-"`
	CommText string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
	// ULP is the kernel module a kernel MR serves (mrULP); "" otherwise.
	ULP string `json:"ulp" txt:"nz"`
}

// mrULP is the kernel module a kernel MR serves, as a QP row's ULP names
// the module a QP serves: netlink's kern_name of a kernel MR is the module
// that allocated the protection domain it was registered through
// (ib_alloc_mr takes it from the PD: rds_rdma, nvme_rdma, ib_iser, cifs
// or smbdirect), but for ib_core's and rdma_cm's own; "" for a user MR.
func mrULP(o rdmanl.Owner) string {
	switch o.KernName {
	case "", "ib_core", "rdma_cm":
		return ""
	}
	return o.KernName
}

func hex32(v uint32, ok bool) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf("0x%x", v)
}

func mrRowOf(m rdmanl.MR, procs *owner.Resolver) mrRow {
	r := mrRow{
		IfIndex: m.DevIndex, IfName: m.DevName, Lead: "dev " + m.DevName, MRN: m.MRN, RKey: m.RKey, LKey: m.LKey,
		RKeyHex: hex32(m.RKey, m.HasKeys), LKeyHex: hex32(m.LKey, m.HasKeys),
		IOVA: m.IOVA, IOVAHex: fmt.Sprintf("0x%x", m.IOVA), MRLen: m.Len, PDN: m.PDN,
	}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(m.Owner, procs)
	r.ULP = mrULP(m.Owner)
	return r
}

// appendJSON appends the row as json.Marshal writes it.
func (r *mrRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"mrn":`...), r.MRN)
	b = jsonw.AppendUint(append(b, `,"rkey":`...), r.RKey)
	b = jsonw.AppendString(append(b, `,"rkey_hex":`...), r.RKeyHex)
	b = jsonw.AppendUint(append(b, `,"lkey":`...), r.LKey)
	b = jsonw.AppendString(append(b, `,"lkey_hex":`...), r.LKeyHex)
	b = jsonw.AppendUint(append(b, `,"iova":`...), r.IOVA)
	b = jsonw.AppendString(append(b, `,"iova_hex":`...), r.IOVAHex)
	b = jsonw.AppendUint(append(b, `,"mrlen":`...), r.MRLen)
	b = jsonw.AppendUint(append(b, `,"pdn":`...), r.PDN)
	b = appendOwnerJSON(b, r.PID, r.Comm, r.KernName)
	b = jsonw.AppendString(append(b, `,"ulp":`...), r.ULP)
	return append(b, '}')
}

type pdRow struct {
	IfIndex             uint32 `json:"ifindex" txt:"-"`
	IfName              string `json:"ifname" txt:"-"`
	Lead                string `json:"-" txt:"lead" filter:"-"`
	PDN                 uint32 `json:"pdn"`
	Users               uint64 `json:"users"`
	LocalDMALKey        uint32 `json:"local_dma_lkey" txt:"-"`
	LocalDMALKeyHex     string `json:"local_dma_lkey_hex" txt:"nz"`
	UnsafeGlobalRKey    uint32 `json:"unsafe_global_rkey" txt:"-"`
	UnsafeGlobalRKeyHex string `json:"unsafe_global_rkey_hex" txt:"nz"`
	CtxN                uint32 `json:"ctxn" txt:"nz"`
	PID                 uint32 `json:"pid" txt:"nz"`
	Comm                string `json:"comm" txt:"-"`
	KernName            string `json:"kern_name" txt:"-"`
	CommText            string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
}

func pdRowOf(p rdmanl.PD, procs *owner.Resolver) pdRow {
	r := pdRow{
		IfIndex: p.DevIndex, IfName: p.DevName, Lead: "dev " + p.DevName, PDN: p.PDN, Users: p.Users,
		LocalDMALKey: p.LocalDMALKey, LocalDMALKeyHex: hex32(p.LocalDMALKey, p.LocalDMALKey != 0),
		UnsafeGlobalRKey: p.UnsafeGlobalRKey, UnsafeGlobalRKeyHex: hex32(p.UnsafeGlobalRKey, p.HasUnsafeGlobalRK),
		CtxN: p.CtxN,
	}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(p.Owner, procs)
	return r
}

// appendJSON appends the row as json.Marshal writes it.
func (r *pdRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"pdn":`...), r.PDN)
	b = jsonw.AppendUint(append(b, `,"users":`...), r.Users)
	b = jsonw.AppendUint(append(b, `,"local_dma_lkey":`...), r.LocalDMALKey)
	b = jsonw.AppendString(append(b, `,"local_dma_lkey_hex":`...), r.LocalDMALKeyHex)
	b = jsonw.AppendUint(append(b, `,"unsafe_global_rkey":`...), r.UnsafeGlobalRKey)
	b = jsonw.AppendString(append(b, `,"unsafe_global_rkey_hex":`...), r.UnsafeGlobalRKeyHex)
	b = jsonw.AppendUint(append(b, `,"ctxn":`...), r.CtxN)
	return append(appendOwnerJSON(b, r.PID, r.Comm, r.KernName), '}')
}

type ctxRow struct {
	IfIndex  uint32 `json:"ifindex" txt:"-"`
	IfName   string `json:"ifname" txt:"-"`
	Lead     string `json:"-" txt:"lead" filter:"-"`
	CtxN     uint32 `json:"ctxn"`
	PID      uint32 `json:"pid" txt:"nz"`
	Comm     string `json:"comm" txt:"-"`
	KernName string `json:"kern_name" txt:"-"`
	CommText string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
}

func ctxRowOf(c rdmanl.Context, procs *owner.Resolver) ctxRow {
	r := ctxRow{IfIndex: c.DevIndex, IfName: c.DevName, Lead: "dev " + c.DevName, CtxN: c.CtxN}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(c.Owner, procs)
	return r
}

// appendJSON appends the row as json.Marshal writes it.
func (r *ctxRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"ctxn":`...), r.CtxN)
	return append(appendOwnerJSON(b, r.PID, r.Comm, r.KernName), '}')
}

type qpRange struct {
	Min uint32 `json:"min"`
	Max uint32 `json:"max"`
}

func (r qpRange) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

type srqRow struct {
	IfIndex  uint32    `json:"ifindex" txt:"-"`
	IfName   string    `json:"ifname" txt:"-"`
	Lead     string    `json:"-" txt:"lead" filter:"-"`
	SRQN     uint32    `json:"srqn"`
	Type     string    `json:"type"`
	PDN      uint32    `json:"pdn"`
	CQN      uint32    `json:"cqn" txt:"nz"`
	LQPN     []string  `json:"lqpn" filter:"-"` // iproute2's form: ["17-18", "20"]
	QPRanges []qpRange `json:"qp_ranges" txt:"-" filter:"-"`
	QPs      uint64    `json:"qps" txt:"d"` // how many QPs are attached
	PID      uint32    `json:"pid" txt:"nz"`
	Comm     string    `json:"comm" txt:"-"`
	KernName string    `json:"kern_name" txt:"-"`
	CommText string    `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
}

func srqRowOf(s rdmanl.SRQ, procs *owner.Resolver) srqRow {
	r := srqRow{IfIndex: s.DevIndex, IfName: s.DevName, Lead: "dev " + s.DevName, SRQN: s.SRQN, Type: s.Type.String(), PDN: s.PDN, CQN: s.CQN, QPRanges: []qpRange{}, LQPN: []string{}}
	for _, q := range s.QPs {
		qr := qpRange{Min: q.Min, Max: q.Max}
		r.QPRanges = append(r.QPRanges, qr)
		r.LQPN = append(r.LQPN, qr.String())
		r.QPs += uint64(q.Max-q.Min) + 1
	}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(s.Owner, procs)
	return r
}

type cmIDRow struct {
	IfIndex  uint32 `json:"ifindex" txt:"-"`
	IfName   string `json:"ifname" txt:"-"`
	Link     string `json:"-" txt:"lead" filter:"-"`
	Port     uint32 `json:"port" txt:"-"`
	CMIDN    uint32 `json:"cm_idn"`
	LQPN     uint32 `json:"lqpn" txt:"nz"`
	QPType   string `json:"qp_type"`
	State    string `json:"state"`
	PS       string `json:"ps"`
	SrcAddr  string `json:"src_addr" txt:"nz"`
	SrcPort  uint16 `json:"src_port" txt:"nz"`
	DstAddr  string `json:"dst_addr" txt:"nz"`
	DstPort  uint16 `json:"dst_port" txt:"nz"`
	PID      uint32 `json:"pid" txt:"nz"`
	Comm     string `json:"comm" txt:"-"`
	KernName string `json:"kern_name" txt:"-"`
	CommText string `json:"-" txt:"lead" filter:"-"` // "comm app", kernel: "comm [ib_core]"
}

func cmIDRowOf(c rdmanl.CMID, procs *owner.Resolver) cmIDRow {
	r := cmIDRow{
		IfIndex: c.DevIndex, IfName: c.DevName, Link: resLink(c.DevName, c.Port), Port: c.Port, CMIDN: c.CMIDN,
		LQPN: c.LQPN, QPType: c.Type.String(), State: c.State.String(), PS: c.PS.String(),
	}
	if c.SrcAddr.IsValid() {
		r.SrcAddr, r.SrcPort = c.SrcAddr.Addr().String(), c.SrcAddr.Port()
	}
	if c.DstAddr.IsValid() {
		r.DstAddr, r.DstPort = c.DstAddr.Addr().String(), c.DstAddr.Port()
	}
	r.PID, r.Comm, r.KernName, r.CommText = ownerFields(c.Owner, procs)
	return r
}

// appendJSON appends the row as json.Marshal writes it.
func (r *cmIDRow) appendJSON(b []byte) []byte {
	b = appendRowStart(b, r.IfIndex, r.IfName)
	b = jsonw.AppendUint(append(b, `,"port":`...), r.Port)
	b = jsonw.AppendUint(append(b, `,"cm_idn":`...), r.CMIDN)
	b = jsonw.AppendUint(append(b, `,"lqpn":`...), r.LQPN)
	b = jsonw.AppendString(append(b, `,"qp_type":`...), r.QPType)
	b = jsonw.AppendString(append(b, `,"state":`...), r.State)
	b = jsonw.AppendString(append(b, `,"ps":`...), r.PS)
	b = jsonw.AppendString(append(b, `,"src_addr":`...), r.SrcAddr)
	b = jsonw.AppendUint(append(b, `,"src_port":`...), r.SrcPort)
	b = jsonw.AppendString(append(b, `,"dst_addr":`...), r.DstAddr)
	b = jsonw.AppendUint(append(b, `,"dst_port":`...), r.DstPort)
	return append(appendOwnerJSON(b, r.PID, r.Comm, r.KernName), '}')
}

// summaryRow is `rdma res` compatible: one count per resource type.
type summaryRow struct {
	IfIndex uint32 `json:"ifindex" txt:"-"`
	IfName  string `json:"ifname" txt:"-"`
	Lead    string `json:"-" txt:"lead"`
	PD      uint64 `json:"pd"`
	CQ      uint64 `json:"cq"`
	QP      uint64 `json:"qp"`
	CMID    uint64 `json:"cm_id"`
	MR      uint64 `json:"mr"`
	Ctx     uint64 `json:"ctx"`
	SRQ     uint64 `json:"srq"`
}

func summaryRowOf(s rdmanl.Summary) summaryRow {
	r := summaryRow{IfIndex: s.DevIndex, IfName: s.DevName, Lead: fmt.Sprintf("%d: %s:", s.DevIndex, s.DevName)}
	for _, c := range s.Counts {
		switch c.Name {
		case "pd":
			r.PD = c.Current
		case "cq":
			r.CQ = c.Current
		case "qp":
			r.QP = c.Current
		case "cm_id":
			r.CMID = c.Current
		case "mr":
			r.MR = c.Current
		case "ctx":
			r.Ctx = c.Current
		case "srq":
			r.SRQ = c.Current
		}
	}
	return r
}
