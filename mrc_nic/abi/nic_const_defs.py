"""The NIC program's constants and enums, generated from bpf/*.h: do not edit.

Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails
when a header changed and this file was not regenerated.
"""

import enum

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
NIC_ACK_EVERY = 1  # tunable: the loader may override it
NIC_ACK_DELAY_NS = 50000  # tunable: the loader may override it
NIC_FANOUT_MAX = 8
NIC_TIMEOUT_MAX = 64  # tunable: the loader may override it
NIC_TIMEOUT_F_REORDER = 0x8000
NIC_CQ_RING_PAGES = 16  # tunable: the loader may override it
NIC_MAX_CQS = 1024  # tunable: the loader may override it
ENGINE_EV_HOLD_NS = 0x30d40  # tunable: the loader may override it
NIC_MR_ELEM_SIZE = 1024
NIC_SEG_ELEMS_MAX = 3
NIC_SEG_ELEMS_FIT = 1
NIC_SEG_ELEMS = 1
NIC_SEG_SIZE = 1024
NIC_COPY_BUF = 4096
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
NIC_REO_LEARN_SHIFT = 20
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
    LOST_SUSPECT = 67
    SUSPECT_CLEARED = 68
    SUSPECT_BLAMED = 69
    ACK_HELD = 70
    ACK_FANOUT = 71
    DROP_NOT_KICK = 72


NIC_CNT_MAX = 73

# ---- enums of #define groups --------------------------------------------------


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
        "NIC_ACK_DELAY_NS",
        "NIC_ACK_EVERY",
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
    }
)
