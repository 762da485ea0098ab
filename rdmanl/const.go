package rdmanl

// Constants from include/uapi/rdma/rdma_netlink.h. The values are the
// kernel's ABI; names keep the uapi spelling in Go case.

const (
	familyRDMA  = 20 // NETLINK_RDMA
	clientNLDev = 5  // RDMA_NL_NLDEV
	groupNotify = 4  // RDMA_NL_GROUP_NOTIFY
)

// Commands (enum rdma_nldev_command).
const (
	cmdGet          = 1  // RDMA_NLDEV_CMD_GET
	cmdSet          = 2  // RDMA_NLDEV_CMD_SET
	cmdNewLink      = 3  // RDMA_NLDEV_CMD_NEWLINK
	cmdDelLink      = 4  // RDMA_NLDEV_CMD_DELLINK
	cmdPortGet      = 5  // RDMA_NLDEV_CMD_PORT_GET
	cmdSysGet       = 6  // RDMA_NLDEV_CMD_SYS_GET
	cmdSysSet       = 7  // RDMA_NLDEV_CMD_SYS_SET
	cmdResGet       = 9  // RDMA_NLDEV_CMD_RES_GET
	cmdResQPGet     = 10 // RDMA_NLDEV_CMD_RES_QP_GET
	cmdResCMIDGet   = 11 // RDMA_NLDEV_CMD_RES_CM_ID_GET
	cmdResCQGet     = 12 // RDMA_NLDEV_CMD_RES_CQ_GET
	cmdResMRGet     = 13 // RDMA_NLDEV_CMD_RES_MR_GET
	cmdResPDGet     = 14 // RDMA_NLDEV_CMD_RES_PD_GET
	cmdResQPGetRaw  = 19 // RDMA_NLDEV_CMD_RES_QP_GET_RAW
	cmdResCQGetRaw  = 20 // RDMA_NLDEV_CMD_RES_CQ_GET_RAW
	cmdResMRGetRaw  = 21 // RDMA_NLDEV_CMD_RES_MR_GET_RAW
	cmdResCtxGet    = 22 // RDMA_NLDEV_CMD_RES_CTX_GET
	cmdResSRQGet    = 23 // RDMA_NLDEV_CMD_RES_SRQ_GET
	cmdResSRQGetRaw = 25 // RDMA_NLDEV_CMD_RES_SRQ_GET_RAW
	cmdMonitor      = 28 // RDMA_NLDEV_CMD_MONITOR
)

// Attributes (enum rdma_nldev_attr).
const (
	attrDevIndex            = 1   // RDMA_NLDEV_ATTR_DEV_INDEX, u32
	attrDevName             = 2   // RDMA_NLDEV_ATTR_DEV_NAME, string
	attrPortIndex           = 3   // RDMA_NLDEV_ATTR_PORT_INDEX, u32
	attrCapFlags            = 4   // RDMA_NLDEV_ATTR_CAP_FLAGS, u64
	attrFWVersion           = 5   // RDMA_NLDEV_ATTR_FW_VERSION, string
	attrNodeGUID            = 6   // RDMA_NLDEV_ATTR_NODE_GUID, u64
	attrSysImageGUID        = 7   // RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, u64
	attrSubnetPrefix        = 8   // RDMA_NLDEV_ATTR_SUBNET_PREFIX, u64
	attrLID                 = 9   // RDMA_NLDEV_ATTR_LID, u32
	attrSMLID               = 10  // RDMA_NLDEV_ATTR_SM_LID, u32
	attrLMC                 = 11  // RDMA_NLDEV_ATTR_LMC, u8
	attrPortState           = 12  // RDMA_NLDEV_ATTR_PORT_STATE, u8
	attrPortPhysState       = 13  // RDMA_NLDEV_ATTR_PORT_PHYS_STATE, u8
	attrDevNodeType         = 14  // RDMA_NLDEV_ATTR_DEV_NODE_TYPE, u8
	attrResSummary          = 15  // RDMA_NLDEV_ATTR_RES_SUMMARY, nested
	attrResSummaryEntry     = 16  // RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY, nested
	attrResSummaryEntryName = 17  // RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME, string
	attrResSummaryEntryCurr = 18  // RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR, u64
	attrResQP               = 19  // RDMA_NLDEV_ATTR_RES_QP, nested
	attrResQPEntry          = 20  // RDMA_NLDEV_ATTR_RES_QP_ENTRY, nested
	attrResLQPN             = 21  // RDMA_NLDEV_ATTR_RES_LQPN, u32
	attrResRQPN             = 22  // RDMA_NLDEV_ATTR_RES_RQPN, u32
	attrResRQPSN            = 23  // RDMA_NLDEV_ATTR_RES_RQ_PSN, u32
	attrResSQPSN            = 24  // RDMA_NLDEV_ATTR_RES_SQ_PSN, u32
	attrResPathMigState     = 25  // RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE, u8
	attrResType             = 26  // RDMA_NLDEV_ATTR_RES_TYPE, u8
	attrResState            = 27  // RDMA_NLDEV_ATTR_RES_STATE, u8
	attrResPID              = 28  // RDMA_NLDEV_ATTR_RES_PID, u32
	attrResKernName         = 29  // RDMA_NLDEV_ATTR_RES_KERN_NAME, string
	attrResCMID             = 30  // RDMA_NLDEV_ATTR_RES_CM_ID, nested
	attrResCMIDEntry        = 31  // RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY, nested
	attrResPS               = 32  // RDMA_NLDEV_ATTR_RES_PS, u32
	attrResSrcAddr          = 33  // RDMA_NLDEV_ATTR_RES_SRC_ADDR, sockaddr_storage
	attrResDstAddr          = 34  // RDMA_NLDEV_ATTR_RES_DST_ADDR, sockaddr_storage
	attrResCQ               = 35  // RDMA_NLDEV_ATTR_RES_CQ, nested
	attrResCQEntry          = 36  // RDMA_NLDEV_ATTR_RES_CQ_ENTRY, nested
	attrResCQE              = 37  // RDMA_NLDEV_ATTR_RES_CQE, u32
	attrResUseCnt           = 38  // RDMA_NLDEV_ATTR_RES_USECNT, u64
	attrResPollCtx          = 39  // RDMA_NLDEV_ATTR_RES_POLL_CTX, u8
	attrResMR               = 40  // RDMA_NLDEV_ATTR_RES_MR, nested
	attrResMREntry          = 41  // RDMA_NLDEV_ATTR_RES_MR_ENTRY, nested
	attrResRKey             = 42  // RDMA_NLDEV_ATTR_RES_RKEY, u32
	attrResLKey             = 43  // RDMA_NLDEV_ATTR_RES_LKEY, u32
	attrResIOVA             = 44  // RDMA_NLDEV_ATTR_RES_IOVA, u64
	attrResMRLen            = 45  // RDMA_NLDEV_ATTR_RES_MRLEN, u64
	attrResPD               = 46  // RDMA_NLDEV_ATTR_RES_PD, nested
	attrResPDEntry          = 47  // RDMA_NLDEV_ATTR_RES_PD_ENTRY, nested
	attrResLocalDMALKey     = 48  // RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY, u32
	attrResUnsafeGlobalRKey = 49  // RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY, u32
	attrNdevIndex           = 50  // RDMA_NLDEV_ATTR_NDEV_INDEX, u32
	attrNdevName            = 51  // RDMA_NLDEV_ATTR_NDEV_NAME, string
	attrDriver              = 52  // RDMA_NLDEV_ATTR_DRIVER, nested
	attrDriverEntry         = 53  // RDMA_NLDEV_ATTR_DRIVER_ENTRY, nested
	attrDriverString        = 54  // RDMA_NLDEV_ATTR_DRIVER_STRING, string
	attrDriverPrintType     = 55  // RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE, u8
	attrDriverS32           = 56  // RDMA_NLDEV_ATTR_DRIVER_S32
	attrDriverU32           = 57  // RDMA_NLDEV_ATTR_DRIVER_U32
	attrDriverS64           = 58  // RDMA_NLDEV_ATTR_DRIVER_S64
	attrDriverU64           = 59  // RDMA_NLDEV_ATTR_DRIVER_U64
	attrResPDN              = 60  // RDMA_NLDEV_ATTR_RES_PDN, u32
	attrResCQN              = 61  // RDMA_NLDEV_ATTR_RES_CQN, u32
	attrResMRN              = 62  // RDMA_NLDEV_ATTR_RES_MRN, u32
	attrResCMIDN            = 63  // RDMA_NLDEV_ATTR_RES_CM_IDN, u32
	attrResCtxN             = 64  // RDMA_NLDEV_ATTR_RES_CTXN, u32
	attrLinkType            = 65  // RDMA_NLDEV_ATTR_LINK_TYPE, string
	attrSysNetnsMode        = 66  // RDMA_NLDEV_SYS_ATTR_NETNS_MODE, u8
	attrDevProtocol         = 67  // RDMA_NLDEV_ATTR_DEV_PROTOCOL, string
	attrDevDIM              = 84  // RDMA_NLDEV_ATTR_DEV_DIM, u8
	attrResRaw              = 85  // RDMA_NLDEV_ATTR_RES_RAW, binary
	attrResCtx              = 86  // RDMA_NLDEV_ATTR_RES_CTX, nested
	attrResCtxEntry         = 87  // RDMA_NLDEV_ATTR_RES_CTX_ENTRY, nested
	attrResSRQ              = 88  // RDMA_NLDEV_ATTR_RES_SRQ, nested
	attrResSRQEntry         = 89  // RDMA_NLDEV_ATTR_RES_SRQ_ENTRY, nested
	attrResSRQN             = 90  // RDMA_NLDEV_ATTR_RES_SRQN, u32
	attrMinRange            = 91  // RDMA_NLDEV_ATTR_MIN_RANGE, u32
	attrMaxRange            = 92  // RDMA_NLDEV_ATTR_MAX_RANGE, u32
	attrSysCopyOnFork       = 93  // RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, u8
	attrSysPrivQKeyMode     = 96  // RDMA_NLDEV_SYS_ATTR_PRIVILEGED_QKEY_MODE, u8
	attrDriverDetails       = 97  // RDMA_NLDEV_ATTR_DRIVER_DETAILS, u8
	attrResSubtype          = 98  // RDMA_NLDEV_ATTR_RES_SUBTYPE, string
	attrDevType             = 99  // RDMA_NLDEV_ATTR_DEV_TYPE, u8
	attrParentName          = 100 // RDMA_NLDEV_ATTR_PARENT_NAME, string
	attrNameAssignType      = 101 // RDMA_NLDEV_ATTR_NAME_ASSIGN_TYPE, u8
	attrEventType           = 102 // RDMA_NLDEV_ATTR_EVENT_TYPE, u8
	attrSysMonitorMode      = 103 // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE, u8
)

// Values of RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE.
const printTypeHex = 1 // RDMA_NLDEV_PRINT_TYPE_HEX
