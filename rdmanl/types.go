package rdmanl

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// enumName names v from names, or "unknown(v)" for a value a newer kernel
// added: unknown values are never an error.
func enumName(names []string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return "unknown(" + strconv.Itoa(int(v)) + ")"
}

// GUID is a node or system image GUID. The kernel sends it as a host-order
// u64 of the big-endian GUID; String prints it most significant part first,
// as sysfs and iproute2 do: "0002:c903:00a1:b2c3".
type GUID uint64

func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// MarshalText implements encoding.TextMarshaler.
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it reads what
// MarshalText writes ("0002:c903:00a1:b2c3"), so JSON reports decode.
func (g *GUID) UnmarshalText(b []byte) error {
	s := string(b)
	var v uint64
	parts := strings.Split(s, ":")
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 16, 16)
		if err != nil || len(p) != 4 || len(parts) != 4 {
			return fmt.Errorf("rdmanl: GUID %q: want 0002:c903:00a1:b2c3", s)
		}
		v = v<<16 | n
	}
	*g = GUID(v)
	return nil
}

// QPState is a queue pair state (enum ib_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateErr
)

var qpStateNames = []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string { return enumName(qpStateNames, uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s QPState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// QPType is a queue pair type (enum ib_qp_type).
type QPType uint8

// Queue pair types.
const (
	QPTypeSMI       QPType = 0
	QPTypeGSI       QPType = 1
	QPTypeRC        QPType = 2
	QPTypeUC        QPType = 3
	QPTypeUD        QPType = 4
	QPTypeRawIPv6   QPType = 5
	QPTypeRawEther  QPType = 6
	QPTypeRawPacket QPType = 8
	QPTypeXRCIni    QPType = 9
	QPTypeXRCTgt    QPType = 10
	QPTypeDriver    QPType = 0xff // IB_QPT_DRIVER: a provider's internal QP
)

var qpTypeNames = []string{"SMI", "GSI", "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "", "RAW_PACKET", "XRC_INI", "XRC_TGT"}

func (t QPType) String() string {
	if t == QPTypeDriver {
		return "DRIVER"
	}
	return enumName(qpTypeNames, uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t QPType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// PathMigState is a QP's path migration state (enum ib_mig_state).
type PathMigState uint8

var pathMigNames = []string{"MIGRATED", "REARM", "ARMED"}

func (s PathMigState) String() string { return enumName(pathMigNames, uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s PathMigState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PortState is a port's logical state (enum ib_port_state).
type PortState uint8

// PortStateActive is the state of a usable port.
const PortStateActive PortState = 4

var portStateNames = []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

func (s PortState) String() string { return enumName(portStateNames, uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s PortState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PhysState is a port's physical state (enum ib_port_phys_state).
type PhysState uint8

var physStateNames = []string{"", "SLEEP", "POLLING", "DISABLED", "PORT_CONFIGURATION_TRAINING", "LINK_UP", "LINK_ERROR_RECOVERY", "PHY_TEST"}

func (s PhysState) String() string { return enumName(physStateNames, uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s PhysState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// NodeType is a device's node type (enum rdma_node_type).
type NodeType uint8

var nodeTypeNames = []string{"", "ca", "switch", "router", "rnic", "usnic", "usnic_udp", "unspecified"}

func (t NodeType) String() string { return enumName(nodeTypeNames, uint8(t)) }

// MarshalText implements encoding.TextMarshaler.
func (t NodeType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// NameAssignType says who named a device (enum rdma_nl_name_assign_type).
type NameAssignType uint8

// Name assignment types; NameAssignUser means user space renamed it.
const (
	NameAssignUnknown NameAssignType = 0
	NameAssignUser    NameAssignType = 1
)

var nameAssignNames = []string{"unknown", "user"}

func (t NameAssignType) String() string { return enumName(nameAssignNames, uint8(t)) }

// MarshalText implements encoding.TextMarshaler.
func (t NameAssignType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// SRQType is a shared receive queue's type (enum ib_srq_type).
type SRQType uint8

var srqTypeNames = []string{"BASIC", "XRC", "TM"}

func (t SRQType) String() string { return enumName(srqTypeNames, uint8(t)) }

// MarshalText implements encoding.TextMarshaler.
func (t SRQType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// PollCtx is how a kernel CQ is polled (enum ib_poll_context).
type PollCtx uint8

var pollCtxNames = []string{"DIRECT", "SOFTIRQ", "WORKQUEUE", "UNBOUND_WORKQUEUE"}

func (p PollCtx) String() string { return enumName(pollCtxNames, uint8(p)) }

// MarshalText implements encoding.TextMarshaler.
func (p PollCtx) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// CMState is an rdma_cm ID's state (enum rdma_cm_state).
type CMState uint8

// CMStateConnect is RDMA_CM_CONNECT: connecting, or connected (rdma_cm
// keeps the state once the connection is established).
const CMStateConnect CMState = 5

var cmStateNames = []string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED",
	"CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}

func (s CMState) String() string { return enumName(cmStateNames, uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s CMState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint32

func (p PortSpace) String() string {
	switch p {
	case 0x0002:
		return "IPOIB"
	case 0x0106:
		return "TCP"
	case 0x0111:
		return "UDP"
	case 0x013f:
		return "IB"
	}
	return "unknown(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (p PortSpace) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Owner says who holds a resource: a user process (PID, which is 0 when
// the creating thread has exited or lives in another PID namespace) or a
// kernel module (KernName, such as "ib_core" or "rdma_cm").
type Owner struct {
	PID      uint32
	KernName string
}

// Kernel reports whether a kernel module owns the resource. A user resource
// whose creator is gone has neither PID nor KernName: it is not a kernel one.
func (o Owner) Kernel() bool { return o.KernName != "" }

// DriverAttr is one provider-specific attribute (RDMA_NLDEV_ATTR_DRIVER_*).
type DriverAttr struct {
	Name  string
	Value int64 // u64 values above MaxInt64 keep their bits
	Hex   bool  // the provider asks for hex printing
}

// Device is an RDMA device (RDMA_NLDEV_CMD_GET).
type Device struct {
	Index          uint32
	Name           string
	Ports          uint32 // number of ports
	CapFlags       uint64
	FWVersion      string
	NodeGUID       GUID
	SysImageGUID   GUID
	NodeType       NodeType
	Protocol       string // "ib", "roce", "iw", "opa", ... (5.2+)
	DIM            bool
	NameAssignType NameAssignType // 6.11+; HasNameAssignType says whether sent
	HasNameAssign  bool
	Type           uint8 // RDMA_NLDEV_ATTR_DEV_TYPE: 1 is an SMI sub-device
	ParentName     string
}

// Port is one port of a device (RDMA_NLDEV_CMD_PORT_GET).
type Port struct {
	DevIndex     uint32
	DevName      string
	Index        uint32
	CapFlags     uint64
	SubnetPrefix uint64 // InfiniBand only
	LID          uint32
	SMLID        uint32
	LMC          uint8
	State        PortState
	PhysState    PhysState
	NetdevIndex  uint32 // 0 when the port has no netdev
	NetdevName   string
}

// Summary counts a device's tracked resources (RDMA_NLDEV_CMD_RES_GET).
// Netlink carries only current counts; the device limits (max_qp, ...) come
// from the verbs query.
type Summary struct {
	DevIndex uint32
	DevName  string
	Counts   []ResourceCount // in the kernel's order
}

// ResourceCount is one entry of a summary.
type ResourceCount struct {
	Name    string // "pd", "cq", "qp", "cm_id", "mr", "ctx", "srq"
	Current uint64
}

// QP is a tracked queue pair (RDMA_NLDEV_CMD_RES_QP_GET).
type QP struct {
	DevIndex     uint32
	DevName      string
	Port         uint32 // 0 while the QP has no port (RESET, or not yet modified)
	LQPN         uint32
	RQPN         uint32 // RC and UC only; see HasRQPN
	HasRQPN      bool
	RQPSN        uint32 // RC and UC only
	SQPSN        uint32
	PathMigState PathMigState // RC, UC and XRC only; see HasPathMig
	HasPathMig   bool
	Type         QPType
	State        QPState
	PDN          uint32 // user QPs only; 0 for kernel QPs
	Owner        Owner
	Subtype      string // driver QPs (6.10+), e.g. "DCT"
	SRQN         uint32 // joined from the SRQ dump; valid when OnSRQ (SRQ numbers start at 0)
	OnSRQ        bool
	Driver       []DriverAttr
	Raw          []byte // RES_QP_GET_RAW only
}

// CQ is a tracked completion queue.
type CQ struct {
	DevIndex uint32
	DevName  string
	CQN      uint32
	CQE      uint32
	Users    uint64 // RDMA_NLDEV_ATTR_RES_USECNT
	PollCtx  PollCtx
	HasPoll  bool // kernel CQs only
	DIM      bool
	CtxN     uint32
	Owner    Owner
	Driver   []DriverAttr
	Raw      []byte
}

// MR is a tracked memory region. RKey and LKey are sent only to callers with
// CAP_NET_ADMIN (HasKeys).
type MR struct {
	DevIndex uint32
	DevName  string
	MRN      uint32
	RKey     uint32
	LKey     uint32
	HasKeys  bool
	IOVA     uint64
	Len      uint64
	PDN      uint32
	Owner    Owner
	Driver   []DriverAttr
	Raw      []byte
}

// PD is a tracked protection domain.
type PD struct {
	DevIndex          uint32
	DevName           string
	PDN               uint32
	Users             uint64
	LocalDMALKey      uint32 // CAP_NET_ADMIN only
	UnsafeGlobalRKey  uint32 // CAP_NET_ADMIN only, and only when set
	HasUnsafeGlobalRK bool
	CtxN              uint32
	Owner             Owner
	Driver            []DriverAttr
}

// Context is a tracked user verbs context (an open device file).
type Context struct {
	DevIndex uint32
	DevName  string
	CtxN     uint32
	Owner    Owner
}

// QPRange is a run of QP numbers attached to an SRQ; Min == Max for one QP.
type QPRange struct{ Min, Max uint32 }

// SRQ is a tracked shared receive queue with the QPs attached to it.
type SRQ struct {
	DevIndex uint32
	DevName  string
	SRQN     uint32
	Type     SRQType
	PDN      uint32
	CQN      uint32 // XRC and TM SRQs only
	HasCQ    bool
	QPs      []QPRange
	Owner    Owner
	Driver   []DriverAttr
	Raw      []byte
}

// HasQP reports whether qpn is attached to the SRQ.
func (s SRQ) HasQP(qpn uint32) bool {
	for _, r := range s.QPs {
		if qpn >= r.Min && qpn <= r.Max {
			return true
		}
	}
	return false
}

// CMID is a tracked rdma_cm identifier.
type CMID struct {
	DevIndex uint32
	DevName  string
	Port     uint32
	CMIDN    uint32
	LQPN     uint32 // 0 when no QP is bound
	HasQP    bool
	PS       PortSpace
	Type     QPType
	State    CMState
	SrcAddr  netip.AddrPort
	DstAddr  netip.AddrPort
	Owner    Owner
}

// systemSettings are the RDMA subsystem's settings (RDMA_NLDEV_CMD_SYS_GET).
type systemSettings struct {
	NetnsShared    bool // netns mode: shared (true) or exclusive
	CopyOnFork     bool
	HasCopyOnFork  bool
	PrivilegedQKey bool
	HasPrivQKey    bool
	MonitorMode    bool // the kernel can send monitor events (6.12+)
	HasMonitorMode bool
}

// MonitorEventType is the kind of a monitor event (enum rdma_nl_notify_event_type).
type MonitorEventType uint8

var monitorEventNames = []string{"register", "unregister", "netdev_attach", "netdev_detach", "rename", "netdev_rename"}

func (t MonitorEventType) String() string { return enumName(monitorEventNames, uint8(t)) }

// MarshalText implements encoding.TextMarshaler.
func (t MonitorEventType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// MonitorEvent is one event of the RDMA_NL_GROUP_NOTIFY multicast group.
type MonitorEvent struct {
	Type        MonitorEventType
	DevIndex    uint32
	DevName     string
	Port        uint32
	NetdevIndex uint32
	NetdevName  string
}
