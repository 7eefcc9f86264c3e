"""The C ABI of the BPF programs, generated from bpf/*.h: do not edit.

Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails
when a header changed and this file was not regenerated.
"""

import ctypes
import enum
from mrc_nic.abi.switch_defs import *  # noqa: F403 (defs is the whole ABI)


class BpfSpinLock(ctypes.Structure):
    """struct bpf_spin_lock (bpf/kernel)."""

    _fields_ = [
        ("val", ctypes.c_uint32),
    ]


# ---- bpf/mrc_wire.h ------------------------------------------------------------

MRC_WIRE_ALIGN = 2  # tunable: the loader may override it
MRC_MTU = 1500  # tunable: the loader may override it
MRC_TRIM_LEN = 52  # tunable: the loader may override it
MRC_DSCP_NO_TRIM = 24  # tunable: the loader may override it
MRC_DSCP_TRIMMABLE = 26  # tunable: the loader may override it
MRC_DSCP_TRIMMABLE_RETX = 28  # tunable: the loader may override it
MRC_DSCP_TRIMMED = 40  # tunable: the loader may override it
MRC_DSCP_TRIMMED_LASTHOP = 42  # tunable: the loader may override it
MRC_DSCP_CONTROL = 48  # tunable: the loader may override it
MRC_UDP_PORT = 4791
MRC_EV_INVALID = 0
MRC_EV_MAX = 65535
MRC_ECN_MASK = 0x3
MRC_ECN_NOT_ECT = 0
MRC_ECN_ECT1 = 1
MRC_ECN_ECT0 = 2
MRC_ECN_CE = 3
MRC_DSCP_SHIFT = 2
MRC_OP_WRITE = 10
MRC_OP_WRITE_IMM = 11
MRC_OP_ACK = 17
MRC_OP_PROBE = 216
MRC_OP_PROBE_REPLY = 217
MRC_OP_VENDOR_FIRST = 192
MRC_BTH_SE_MASK = 0x80
MRC_BTH_MIG_MASK = 0x40
MRC_BTH_PAD_MASK = 0x30
MRC_BTH_PAD_SHIFT = 4
MRC_BTH_TVER_MASK = 0xf
MRC_BTH_FECN_MASK = 0x80000000
MRC_BTH_BECN_MASK = 0x40000000
MRC_BTH_RESV6_MASK = 0x3f000000
MRC_BTH_QPN_MASK = 0xffffff
MRC_BTH_ACK_MASK = 0x80000000
MRC_BTH_RESV7_MASK = 0x7f000000
MRC_BTH_PSN_MASK = 0xffffff
MRC_PKEY_DEFAULT = 65535
MRC_PSN_BITS = 24
MRC_PSN_MASK = 0xffffff
MRC_AETH_SYN_MASK = 0xff000000
MRC_AETH_SYN_SHIFT = 24
MRC_AETH_MSN_MASK = 0xffffff
MRC_AETH_TYPE_MASK = 0x60
MRC_AETH_TYPE_ACK = 0
MRC_AETH_TYPE_NAK = 96
MRC_AETH_ACK = 31
MRC_AETH_NAK_PSN_SEQ = 96
MRC_AETH_NAK_INV_REQ = 97
MRC_AETH_NAK_REM_ACCESS = 98
MRC_AETH_NAK_REM_OP = 99
MRC_DATA_F_LAST = 0x80000000
MRC_DATA_FLAGS_MASK = 0xff000000
MRC_DATA_FLAGS_SHIFT = 0x18
MRC_DATA_MSN_MASK = 0xffffff
MRC_ACK_MPR_MASK = 0xff000000
MRC_ACK_MPR_SHIFT = 24
MRC_ACK_CUM_PSN_MASK = 0xffffff
MRC_ACK_SACK_RESV_MASK = 0xff000000
MRC_ACK_SACK_PSN_MASK = 0xffffff
MRC_SACK_BITS = 64
MRC_MPR_UNIT = 128
MRC_ACK_F_ECN = 0x1
MRC_ACK_F_TRIMMED = 0x2
MRC_ACK_F_DUP = 0x4
MRC_NACK_NONE = 0
MRC_NACK_TRIMMED = 1
MRC_NACK_TRIMMED_LASTHOP = 2
MRC_NACK_NO_BITMAP = 6
MRC_NACK_NO_PKT_BUFFER = 7
MRC_NACK_NO_RESOURCE = 10
MRC_NACK_PSN_OOR_WINDOW = 11
MRC_NACK_UNEXP_EVENT = 25
MRC_PROBE_F_REVERSE = 0x80
MRC_PROBE_F_SVC = 0x40
MRC_PROBE_F_PORT_STATUS = 0x20
MRC_EP_QPN = 0xffffff
MRC_ICRC_LEN = 4
MRC_ICRC_UNUSED = 0
MRC_IPV4_UDP_LEN = 28
MRC_WRITE_HDRS_LEN = 44
MRC_WRITE_IMM_HDRS_LEN = 48
MRC_ACK_HDRS_LEN = 48
MRC_PROBE_HDRS_LEN = 28
MRC_WRITE_OVERHEAD = 76
MRC_WRITE_IMM_OVERHEAD = 80


class MrcBth(ctypes.Structure):
    """struct mrc_bth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('pkey', 'qpn', 'apsn',)
    _fields_ = [
        ("opcode", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("pkey", ctypes.c_uint16),
        ("qpn", ctypes.c_uint32),
        ("apsn", ctypes.c_uint32),
    ]


class MrcReth(ctypes.Structure):
    """struct mrc_reth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('va', 'rkey', 'dmalen',)
    _fields_ = [
        ("va", ctypes.c_uint64),
        ("rkey", ctypes.c_uint32),
        ("dmalen", ctypes.c_uint32),
    ]


class MrcImmdt(ctypes.Structure):
    """struct mrc_immdt (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('imm',)
    _fields_ = [
        ("imm", ctypes.c_uint32),
    ]


class MrcAeth(ctypes.Structure):
    """struct mrc_aeth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('smsn',)
    _fields_ = [
        ("smsn", ctypes.c_uint32),
    ]


class MrcDataExt(ctypes.Structure):
    """struct mrc_data_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('flags_msn', 'msg_off', 'tx_ts',)
    _fields_ = [
        ("flags_msn", ctypes.c_uint32),
        ("msg_off", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
    ]


class MrcAckExt(ctypes.Structure):
    """struct mrc_ack_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('mpr_cum', 'sack_base', 'sack_bitmap', 'echo_ts', 'echo_ev', 'port_bitmap',)
    _fields_ = [
        ("mpr_cum", ctypes.c_uint32),
        ("sack_base", ctypes.c_uint32),
        ("sack_bitmap", ctypes.c_uint64),
        ("echo_ts", ctypes.c_uint64),
        ("echo_ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint8),
        ("nack_reason", ctypes.c_uint8),
        ("port_bitmap", ctypes.c_uint32),
    ]


class MrcProbeExt(ctypes.Structure):
    """struct mrc_probe_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('tx_ts', 'ev', 'port_bitmap',)
    _fields_ = [
        ("tx_ts", ctypes.c_uint64),
        ("ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
        ("port_bitmap", ctypes.c_uint32),
    ]

# ---- bpf/nic_consts.h ----------------------------------------------------------

NIC_MAX_QPS = 4096  # tunable: the loader may override it
NIC_MR_ELEMS = 0x10000  # tunable: the loader may override it
NIC_MAX_REGIONS = 256  # tunable: the loader may override it
NIC_REGION_BY_RKEY = 0xffffffff
NIC_REGION_NONE = 0xfffffffe
NIC_MAX_HOSTS = 256  # tunable: the loader may override it
NIC_MAX_PLANES = 16  # tunable: the loader may override it
NIC_QPN_HOST_SHIFT = 16
NIC_HOST_NET = 0xc6120000  # tunable: the loader may override it
NIC_REV_EVS = 16  # tunable: the loader may override it
NIC_EP_SLOTS = 128  # tunable: the loader may override it
NIC_EVENT_PAGES = 64  # tunable: the loader may override it
NIC_MAX_EVS = 16384  # tunable: the loader may override it
NIC_TX_RINGS = 256  # tunable: the loader may override it
NIC_SKIP_NS = 0x186a0  # tunable: the loader may override it
NIC_LOSS_WALK_MAX = 16  # tunable: the loader may override it
NIC_TIMELINE_SHIFT = 20  # tunable: the loader may override it
NIC_TIMELINE_BINS = 8192  # tunable: the loader may override it
NIC_GAP_MIN_NS = 0x186a0  # tunable: the loader may override it
NIC_HEAD_SCAN = 8  # tunable: the loader may override it
NIC_DOORBELL_IFINDEX = 4791
NIC_KICK_ETHERTYPE = 34997
NIC_TIMEOUT_MAX = 64  # tunable: the loader may override it
NIC_CQ_RING_PAGES = 16  # tunable: the loader may override it
NIC_MAX_CQS = 1024  # tunable: the loader may override it
ENGINE_EV_HOLD_NS = 0x30d40  # tunable: the loader may override it
NIC_MR_ELEM_SIZE = 1024
NIC_SEG_ELEMS_MAX = 3
NIC_SEG_ELEMS_FIT = 1
NIC_SEG_ELEMS = 1
NIC_SEG_SIZE = 1024
NIC_MPR_MAX = 8
NIC_BITMAP_BITS = 1024
NIC_BITMAP_WORDS = 16
NIC_MSG_SLOTS = 32
NIC_MAX_QP_EVS = 256
NIC_RETX_SLOTS = 256
NIC_RQ_TAG_USED = 0x80000000
NIC_MSG_F_VALID = 0x1
NIC_MSG_F_IMM = 0x2
NIC_GAP_BIN_SHIFT = 26
NIC_GAP_BINS = 64
NIC_RX_LOCKS = 256
NIC_RX_LOCK_TRIES = 1024
NIC_EVS_GOOD = 1
NIC_EVS_ASSUMED_BAD = 2
NIC_EVS_DENIED = 4
NIC_EVS_SKIP = 0x10000
NIC_EVS_UNKNOWN = 0x80000000
NIC_REV_UNTRIED = 0
NIC_REV_GOOD = 1
NIC_REV_ASSUMED_BAD = 2
NIC_RTT_RECENT_SHIFT = 6
NIC_RTT_RECENT_CAP = 4
NIC_HEAD_LOST = 16
NIC_TX_F_PREV = 0x1
NIC_TX_F_RETX = 0x2
NIC_WQE_F_SIGNALED = 0x1


class QpState(enum.IntEnum):
    """enum nic_qp_state (bpf/nic_consts.h)."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class RetxCause(enum.IntEnum):
    """enum nic_retx_cause (bpf/nic_consts.h)."""

    NACK = 1
    LOST = 2
    TIMEOUT = 3


class KickOp(enum.IntEnum):
    """enum nic_kick_op (bpf/nic_consts.h)."""

    SEND = 0
    TIMEOUT = 1
    CWND = 2
    EV_REPLACE = 3
    FAIL = 4


class QpError(enum.IntEnum):
    """enum nic_qp_error (bpf/nic_consts.h)."""

    NONE = 0
    RETRY_EXCEEDED = 1
    BAD_WQE = 2
    LOC_PROT = 3


class EventType(enum.IntEnum):
    """enum nic_event_type (bpf/nic_consts.h)."""

    RECV_IMM = 1
    EV_STATE = 2
    LOSS = 3
    QP_ERR = 4
    SEND_DONE = 5


class EvCause(enum.IntEnum):
    """enum nic_ev_cause (bpf/nic_consts.h)."""

    LOSS = 1
    PROBE_REPLY = 2
    TIMEOUT = 3


class Counter(enum.IntEnum):
    """enum nic_counter (bpf/nic_consts.h)."""

    PASS_NOT_MRC = 0
    PASS_OTHER_OPCODE = 1
    SACK = 2
    NACK_TRIMMED = 3
    NACK_TRIMMED_LASTHOP = 4
    NACK_OOR = 5
    NACK_NO_RESOURCE = 6
    NACK_REM_ACCESS = 7
    DROP_TRUNCATED = 8
    DROP_SHORT = 9
    DROP_BAD_LEN = 10
    DROP_TOO_LONG = 11
    DROP_BAD_OPCODE = 12
    DROP_IMM_NOT_LAST = 13
    DROP_UNKNOWN_QP = 14
    DROP_SPOOFED = 15
    DROP_QP_STATE = 16
    DROP_QP_CONFIG = 17
    DROP_BAD_VA = 18
    DROP_BAD_MSN = 19
    DROP_XDP_ERR = 20
    PLACED = 21
    PLACED_BYTES = 22
    DUP = 23
    MSG_DONE = 24
    EVENTS = 25
    EVENTS_LOST = 26
    PROBE_REPLY = 27
    ACK_CONSUMED = 28
    ACK_STALE = 29
    PROBE_REPLY_CONSUMED = 30
    DROP_BAD_ACK = 31
    DROP_ACK_RANGE = 32
    ACKED = 33
    LOST = 34
    RETX_QUEUED = 35
    UNKNOWN_EV = 36
    KICK_SENT = 37
    KICK_IDLE = 38
    TX_DATA = 39
    TX_RETX = 40
    TX_BYTES = 41
    TX_CLOCKED = 42
    TX_WINDOW_FULL = 43
    TX_NO_EV = 44
    TX_BAD_WQE = 45
    TX_REDIRECT_ERR = 46
    SEND_DONE = 47
    TIMEOUT_KICKS = 48
    TIMEOUT_QUEUED = 49
    LOST_HEAD = 50
    CWND_KICKS = 51
    EV_REPLACED = 52
    DROP_RX_BUSY = 53
    CQ_EVENTS = 54
    CQ_OVERRUN = 55
    FAIL_KICKS = 56
    DROP_BAD_PORT = 57
    DROP_DATA_RANGE = 58
    DROP_NACK_STALE = 59
    DROP_AUTH = 60
    ANSWER_REROUTED = 61
    REV_PROBE_REPLY = 62
    EP_PROBE = 63
    EP_PROBE_REPLY = 64
    PORT_STATUS_UPDATE = 65
    DROP_PORT_DISABLED = 66


NIC_CNT_MAX = 67

# ---- bpf/nic_structs.h ---------------------------------------------------------



class NicMsgSlot(ctypes.Structure):
    """struct nic_msg_slot (bpf/nic_structs.h)."""

    _fields_ = [
        ("va", ctypes.c_uint64),
        ("last_psn", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class NicRqStats(ctypes.Structure):
    """struct nic_rq_stats (bpf/nic_structs.h)."""

    _fields_ = [
        ("data_pkts", ctypes.c_uint64),
        ("placed_pkts", ctypes.c_uint64),
        ("placed_bytes", ctypes.c_uint64),
        ("dup_pkts", ctypes.c_uint64),
        ("trimmed_pkts", ctypes.c_uint64),
        ("oor_pkts", ctypes.c_uint64),
        ("sacks", ctypes.c_uint64),
        ("nacks", ctypes.c_uint64),
        ("msgs_done", ctypes.c_uint64),
        ("imm_done", ctypes.c_uint64),
        ("first_place_ns", ctypes.c_uint64),
        ("last_place_ns", ctypes.c_uint64),
        ("max_gap_ns", ctypes.c_uint64),
        ("max_gap_end_ns", ctypes.c_uint64),
    ]


class NicTimelineBin(ctypes.Structure):
    """struct nic_timeline_bin (bpf/nic_structs.h)."""

    _fields_ = [
        ("bin", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
    ]


class NicGapBin(ctypes.Structure):
    """struct nic_gap_bin (bpf/nic_structs.h)."""

    _fields_ = [
        ("end_ns", ctypes.c_uint64),
        ("gap_ns", ctypes.c_uint64),
    ]


class NicRq(ctypes.Structure):
    """struct nic_rq (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
        ("state", ctypes.c_uint32),
        ("local_host", ctypes.c_uint32),
        ("peer_host", ctypes.c_uint32),
        ("peer_qpn", ctypes.c_uint32),
        ("mpr", ctypes.c_uint32),
        ("region", ctypes.c_uint32),
        ("cum_psn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("recv_cq", ctypes.c_uint32),
        ("bitmap", ctypes.c_uint64 * 16),
        ("stats", NicRqStats),
        ("msgs", NicMsgSlot * 32),
        ("gaps", NicGapBin * 64),
        ("auth_key", ctypes.c_uint64 * 2),
        ("auth", ctypes.c_uint32),
        ("max_wimm_dest", ctypes.c_uint32),
        ("dyn_mpr", ctypes.c_uint32),
        ("wimm_held", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicRxLock(ctypes.Structure):
    """struct nic_rx_lock (bpf/nic_structs.h)."""

    _fields_ = [
        ("word", ctypes.c_uint64),
        ("pad", ctypes.c_uint64 * 7),
    ]


class NicRevEv(ctypes.Structure):
    """struct nic_rev_ev (bpf/nic_structs.h)."""

    _fields_ = [
        ("ev", ctypes.c_uint16),
        ("plane", ctypes.c_uint8),
        ("state", ctypes.c_uint8),
    ]


class NicRevEvSet(ctypes.Structure):
    """struct nic_rev_ev_set (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("n", ctypes.c_uint32),
        ("evs", NicRevEv * 16),
        ("n_use", ctypes.c_uint8 * 17),
        ("use", ctypes.c_uint8 * 272),
        ("reserved", ctypes.c_uint8 * 7),
    ]


class NicRevProbe(ctypes.Structure):
    """struct nic_rev_probe (bpf/nic_structs.h)."""

    _fields_ = [
        ("replies", ctypes.c_uint64),
        ("last_ns", ctypes.c_uint64),
        ("last_psn", ctypes.c_uint32),
        ("rtt_ns", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16 * 3),
    ]


class NicRevProbes(ctypes.Structure):
    """struct nic_rev_probes (bpf/nic_structs.h)."""

    _fields_ = [
        ("evs", NicRevProbe * 16),
    ]


class NicEpProbe(ctypes.Structure):
    """struct nic_ep_probe (bpf/nic_structs.h)."""

    _fields_ = [
        ("rx_ns", ctypes.c_uint64),
        ("tx_ts", ctypes.c_uint64),
        ("psn", ctypes.c_uint32),
        ("svc_ns", ctypes.c_uint32),
        ("src_ip", ctypes.c_uint32),
        ("port_bitmap", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("plane", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint32),
    ]


class NicEpProbes(ctypes.Structure):
    """struct nic_ep_probes (bpf/nic_structs.h)."""

    _fields_ = [
        ("slots", NicEpProbe * 128),
    ]


class NicHostCtl(ctypes.Structure):
    """struct nic_host_ctl (bpf/nic_structs.h)."""

    _fields_ = [
        ("ports_disabled", ctypes.c_uint32),
        ("ev_event_cq", ctypes.c_uint32),
    ]


class NicPeerPort(ctypes.Structure):
    """struct nic_peer_port (bpf/nic_structs.h)."""

    _fields_ = [
        ("rx_ns", ctypes.c_uint64),
        ("ports", ctypes.c_uint32),
        ("updates", ctypes.c_uint32),
        ("plane", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicPeerPorts(ctypes.Structure):
    """struct nic_peer_ports (bpf/nic_structs.h)."""

    _fields_ = [
        ("peers", NicPeerPort * 256),
    ]


class NicRetx(ctypes.Structure):
    """struct nic_retx (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("cause", ctypes.c_uint8),
        ("nack_reason", ctypes.c_uint8),
    ]


class NicSqTxStats(ctypes.Structure):
    """struct nic_sq_tx_stats (bpf/nic_structs.h)."""

    _fields_ = [
        ("data_pkts", ctypes.c_uint64),
        ("data_bytes", ctypes.c_uint64),
        ("retx_pkts", ctypes.c_uint64),
        ("retx_stale", ctypes.c_uint64),
        ("window_full", ctypes.c_uint64),
        ("wqes_done", ctypes.c_uint64),
    ]


class NicSqStats(ctypes.Structure):
    """struct nic_sq_stats (bpf/nic_structs.h)."""

    _fields_ = [
        ("sacks", ctypes.c_uint64),
        ("nacks", ctypes.c_uint64),
        ("stale_acks", ctypes.c_uint64),
        ("dup_acks", ctypes.c_uint64),
        ("acked_pkts", ctypes.c_uint64),
        ("lost_pkts", ctypes.c_uint64),
        ("retx_queued", ctypes.c_uint64),
        ("retx_overflow", ctypes.c_uint64),
        ("fatal_nacks", ctypes.c_uint64),
    ]


class NicSqCc(ctypes.Structure):
    """struct nic_sq_cc (bpf/nic_structs.h)."""

    _fields_ = [
        ("rtt_target_ns", ctypes.c_uint64),
        ("acks", ctypes.c_uint64),
        ("ecn_acks", ctypes.c_uint64),
        ("pkts_lo", ctypes.c_uint64),
        ("pkts_hi", ctypes.c_uint64),
        ("pkts_ecn_lo", ctypes.c_uint64),
        ("pkts_ecn_hi", ctypes.c_uint64),
        ("headroom", ctypes.c_uint64),
        ("rtt_samples", ctypes.c_uint64),
        ("rtt_sum_ns", ctypes.c_uint64),
        ("rtt_min_ns", ctypes.c_uint64),
        ("trims", ctypes.c_uint64),
        ("trims_lasthop", ctypes.c_uint64),
        ("cwnd_sets", ctypes.c_uint64),
    ]


class NicSq(ctypes.Structure):
    """struct nic_sq (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
        ("state", ctypes.c_uint32),
        ("local_host", ctypes.c_uint32),
        ("peer_host", ctypes.c_uint32),
        ("peer_qpn", ctypes.c_uint32),
        ("mpr", ctypes.c_uint32),
        ("ring", ctypes.c_uint32),
        ("n_evs", ctypes.c_uint32),
        ("ev_min_active", ctypes.c_uint32),
        ("snd_una", ctypes.c_uint32),
        ("snd_nxt", ctypes.c_uint32),
        ("retx_head", ctypes.c_uint32),
        ("retx_tail", ctypes.c_uint32),
        ("peer_ports", ctypes.c_uint32),
        ("reo_wnd_ns", ctypes.c_uint32),
        ("scan_psn", ctypes.c_uint32),
        ("acked", ctypes.c_uint64 * 16),
        ("echoed", ctypes.c_uint64 * 16),
        ("retx", ctypes.c_uint64 * 16),
        ("stats", NicSqStats),
        ("retxq", NicRetx * 256),
        ("evs", ctypes.c_uint16 * 256),
        ("engine", ctypes.c_uint32),
        ("cwnd", ctypes.c_uint32),
        ("snd_msn", ctypes.c_uint32),
        ("wqe_sent", ctypes.c_uint32),
        ("wqe_done", ctypes.c_uint32),
        ("wqe_off", ctypes.c_uint32),
        ("ev_next", ctypes.c_uint32),
        ("rtt_recent_ns", ctypes.c_uint32),
        ("wqe_last_psn", ctypes.c_uint32 * 32),
        ("tx_stats", NicSqTxStats),
        ("cc", NicSqCc),
        ("send_cq", ctypes.c_uint32),
        ("auth", ctypes.c_uint32),
        ("auth_key", ctypes.c_uint64 * 2),
        ("max_wimm", ctypes.c_uint32),
        ("dyn_mpr", ctypes.c_uint32),
        ("wimm_out", ctypes.c_uint32),
        ("peer_mpr", ctypes.c_uint32),
        ("wimm_full", ctypes.c_uint64),
        ("probe_good", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("peer_ports_ns", ctypes.c_uint64),
    ]


class NicEvKey(ctypes.Structure):
    """struct nic_ev_key (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
    ]


class NicEvStats(ctypes.Structure):
    """struct nic_ev_stats (bpf/nic_structs.h)."""

    _fields_ = [
        ("tx_pkts", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
        ("retx_pkts", ctypes.c_uint64),
        ("acks", ctypes.c_uint64),
        ("nack_trimmed", ctypes.c_uint64),
        ("nack_trimmed_lasthop", ctypes.c_uint64),
        ("nack_oor", ctypes.c_uint64),
        ("nack_no_resource", ctypes.c_uint64),
        ("nack_fatal", ctypes.c_uint64),
        ("ecn_marks", ctypes.c_uint64),
        ("lost_pkts", ctypes.c_uint64),
        ("retx_queued", ctypes.c_uint64),
        ("skips", ctypes.c_uint64),
        ("rtt_samples", ctypes.c_uint64),
        ("probe_replies", ctypes.c_uint64),
    ]


class NicEv(ctypes.Structure):
    """struct nic_ev (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
        ("plane", ctypes.c_uint32),
        ("state", ctypes.c_uint32),
        ("good_probes", ctypes.c_uint32),
        ("skip_until", ctypes.c_uint64),
        ("rtt_last", ctypes.c_uint64),
        ("rtt_min", ctypes.c_uint64),
        ("srtt", ctypes.c_uint64),
        ("last_tx_psn", ctypes.c_uint32),
        ("last_tx_cpu", ctypes.c_uint32),
        ("last_tx_ts", ctypes.c_uint64),
        ("stats", NicEvStats),
    ]


class NicTxPkt(ctypes.Structure):
    """struct nic_tx_pkt (bpf/nic_structs.h)."""

    _fields_ = [
        ("tx_ts", ctypes.c_uint64),
        ("psn", ctypes.c_uint32),
        ("prev_psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint16),
        ("len", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("msg_off", ctypes.c_uint32),
    ]


class NicTxRing(ctypes.Structure):
    """struct nic_tx_ring (bpf/nic_structs.h)."""

    _fields_ = [
        ("pkts", NicTxPkt * 1024),
    ]


class NicMrElem(ctypes.Structure):
    """struct nic_mr_elem (bpf/nic_structs.h)."""

    _fields_ = [
        ("bytes", ctypes.c_uint8 * 1024),
    ]


class NicRegion(ctypes.Structure):
    """struct nic_region (bpf/nic_structs.h)."""

    _fields_ = [
        ("base_va", ctypes.c_uint64),
        ("first_elem", ctypes.c_uint32),
        ("n_elems", ctypes.c_uint32),
        ("rkey", ctypes.c_uint32),
        ("owner", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("remote_write", ctypes.c_uint32),
    ]


class NicWqe(ctypes.Structure):
    """struct nic_wqe (bpf/nic_structs.h)."""

    _fields_ = [
        ("wr_id", ctypes.c_uint64),
        ("remote_va", ctypes.c_uint64),
        ("rkey", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("src_region", ctypes.c_uint32),
        ("src_off", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("opcode", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 2),
    ]


class NicWq(ctypes.Structure):
    """struct nic_wq (bpf/nic_structs.h)."""

    _fields_ = [
        ("posted", ctypes.c_uint32),
        ("done", ctypes.c_uint32),
        ("wqes", NicWqe * 32),
    ]


class NicKick(ctypes.Structure):
    """struct nic_kick (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("op", ctypes.c_uint16),
        ("arg", ctypes.c_uint16),
        ("age_ns", ctypes.c_uint64),
    ]


class NicPort(ctypes.Structure):
    """struct nic_port (bpf/nic_structs.h)."""

    _fields_ = [
        ("mac", ctypes.c_uint8 * 6),
        ("nh_mac", ctypes.c_uint8 * 6),
        ("ifindex", ctypes.c_uint32),
    ]


class NicEvent(ctypes.Structure):
    """struct nic_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("va", ctypes.c_uint64),
        ("len", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicEvEvent(ctypes.Structure):
    """struct nic_ev_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("old_state", ctypes.c_uint32),
        ("new_state", ctypes.c_uint32),
        ("cause", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicLossEvent(ctypes.Structure):
    """struct nic_loss_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
        ("ack_psn", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicQpErrEvent(ctypes.Structure):
    """struct nic_qp_err_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("syndrome", ctypes.c_uint32),
        ("reason", ctypes.c_uint32),
        ("error", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicSendEvent(ctypes.Structure):
    """struct nic_send_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("last_psn", ctypes.c_uint32),
        ("wr_id", ctypes.c_uint64),
        ("len", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicCqe(ctypes.Structure):
    """struct nic_cqe (bpf/nic_structs.h)."""

    _fields_ = [
        ("va", ctypes.c_uint64),
        ("msn", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicCqeBatch(ctypes.Structure):
    """struct nic_cqe_batch (bpf/nic_structs.h)."""

    _fields_ = [
        ("n", ctypes.c_uint32),
        ("done", ctypes.c_uint32),
        ("cqes", NicCqe * 32),
        ("out", NicEvent * 32),
    ]


class NicLost(ctypes.Structure):
    """struct nic_lost (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
    ]


class NicAckScratch(ctypes.Structure):
    """struct nic_ack_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("verdict", ctypes.c_uint32),
        ("newly", ctypes.c_uint32),
        ("fb", ctypes.c_uint32),
        ("queued", ctypes.c_uint32),
        ("fatal", ctypes.c_uint32),
        ("n_lost", ctypes.c_uint32),
        ("n_head", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("lost", NicLost * 16),
        ("head", NicLost * 16),
    ]


class NicTxScratch(ctypes.Structure):
    """struct nic_tx_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("what", ctypes.c_uint32),
        ("full", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("off", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("lost_ev", ctypes.c_uint32),
        ("second", ctypes.c_uint32),
        ("n_done", ctypes.c_uint32),
        ("n_wqes", ctypes.c_uint32),
        ("done", NicSendEvent * 32),
        ("wqe_copy", NicWqe),
    ]


class NicTimeoutScratch(ctypes.Structure):
    """struct nic_timeout_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32 * 64),
        ("ev", ctypes.c_uint32 * 64),
    ]

# ---- enums of #define groups --------------------------------------------------


class Opcode(enum.IntEnum):
    """MRC_OP_* (#define group)."""

    WRITE = 10
    WRITE_IMM = 11
    ACK = 17
    PROBE = 216
    PROBE_REPLY = 217


class Syndrome(enum.IntEnum):
    """MRC_AETH_* (#define group)."""

    ACK = 31
    NAK_PSN_SEQ = 96
    NAK_INV_REQ = 97
    NAK_REM_ACCESS = 98
    NAK_REM_OP = 99


class NackReason(enum.IntEnum):
    """MRC_NACK_* (#define group)."""

    NONE = 0
    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    NO_BITMAP = 6
    NO_PKT_BUFFER = 7
    NO_RESOURCE = 10
    PSN_OOR_WINDOW = 11
    UNEXP_EVENT = 25


class AckFlag(enum.IntFlag):
    """MRC_ACK_F_* (#define group)."""

    ECN = 1
    TRIMMED = 2
    DUP = 4


class Dscp(enum.IntEnum):
    """MRC_DSCP_* (#define group)."""

    NO_TRIM = 24
    TRIMMABLE = 26
    TRIMMABLE_RETX = 28
    TRIMMED = 40
    TRIMMED_LASTHOP = 42
    CONTROL = 48


class Ecn(enum.IntEnum):
    """MRC_ECN_* (#define group)."""

    NOT_ECT = 0
    ECT1 = 1
    ECT0 = 2
    CE = 3


class EvState(enum.IntEnum):
    """NIC_EVS_* (#define group)."""

    GOOD = 1
    ASSUMED_BAD = 2
    DENIED = 4
    SKIP = 0x10000
    UNKNOWN = 0x80000000


TUNABLES = frozenset(
    {
        "ENGINE_EV_HOLD_NS",
        "MAX_PORT_KEYS",
        "MRC_DSCP_CONTROL",
        "MRC_DSCP_NO_TRIM",
        "MRC_DSCP_TRIMMABLE",
        "MRC_DSCP_TRIMMABLE_RETX",
        "MRC_DSCP_TRIMMED",
        "MRC_DSCP_TRIMMED_LASTHOP",
        "MRC_MTU",
        "MRC_TRIM_LEN",
        "MRC_WIRE_ALIGN",
        "NIC_CQ_RING_PAGES",
        "NIC_EP_SLOTS",
        "NIC_EVENT_PAGES",
        "NIC_GAP_MIN_NS",
        "NIC_HEAD_SCAN",
        "NIC_HOST_NET",
        "NIC_LOSS_WALK_MAX",
        "NIC_MAX_CQS",
        "NIC_MAX_EVS",
        "NIC_MAX_HOSTS",
        "NIC_MAX_PLANES",
        "NIC_MAX_QPS",
        "NIC_MAX_REGIONS",
        "NIC_MR_ELEMS",
        "NIC_REV_EVS",
        "NIC_SKIP_NS",
        "NIC_TIMELINE_BINS",
        "NIC_TIMELINE_SHIFT",
        "NIC_TIMEOUT_MAX",
        "NIC_TX_RINGS",
        "SP_EV_FAULTS_MAX",
    }
)
