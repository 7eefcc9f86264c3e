"""The verbs constants the API takes and returns, with libibverbs' values.

Names follow verbs.h (IBV_WC_SUCCESS -> WcStatus.SUCCESS), mrc.h
(MRC_QP_MPR -> MrcAttrMask.MPR) and mrc_ctl.h (MRC_CTL_EV_MODE_GEN ->
EvMode.GEN), so a reader of the C API finds them.
"""

from __future__ import annotations

import enum

from mrc_nic import nic

# mrc_ctl.h's enums are the contract's: the daemon takes and returns them
from mrc_nic.contract.enums import EvFmtMode, EvMode, EvState, ProfileState  # noqa: F401


class WcStatus(enum.IntEnum):
    """enum ibv_wc_status (the ones this NIC reports)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    GENERAL_ERR = 21


class AsyncEventType(enum.IntEnum):
    """enum ibv_event_type (the ones this NIC raises)."""

    CQ_ERR = 0
    QP_FATAL = 1
    DEVICE_FATAL = 8


class WcOpcode(enum.IntEnum):
    """enum ibv_wc_opcode."""

    RDMA_WRITE = 1
    RECV_RDMA_WITH_IMM = 129


class WrOpcode(enum.IntEnum):
    """enum ibv_wr_opcode: MRC has only RDMA WRITE and WRITE_WITH_IMM."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1


class SendFlags(enum.IntFlag):
    """enum ibv_send_flags."""

    FENCE = 1
    SIGNALED = 2
    SOLICITED = 4
    INLINE = 8


class Access(enum.IntFlag):
    """enum ibv_access_flags (MRC has no READ or atomics)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8
    RELAXED_ORDERING = 1 << 20  # accepted: placement is in any order anyway


QpState = nic.QpState  # enum ibv_qp_state: the NIC keeps the same values (enum nic_qp_state)


class QpAttrMask(enum.IntFlag):
    """enum ibv_qp_attr_mask."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20


class MrcAttrMask(enum.IntFlag):
    """enum mrc_qp_attr_mask (mrc.h)."""

    MAX_WIMM = 1 << 0
    MAX_WIMM_DEST = 1 << 1
    MPR = 1 << 2
    MPR_DEST = 1 << 3
    TIMEOUT = 1 << 4
    EV_PROFILE_ID = 1 << 5
    CC_PROFILE_ID = 1 << 6
    QP_HINT = 1 << 7
    RETRY_CNT = 1 << 8
    CAP = 1 << 9


class MrcQpCap(enum.IntFlag):
    """enum mrc_qp_cap (mrc.h): MrcQPAttr.cap, set with MrcAttrMask.CAP."""

    TRIM_NACK_DEST_UNSUPPORTED = 1 << 0
    DYNAMIC_MPR = 1 << 1  # effective only when both ends enable it
    SVC_TIME_DEST_UNSUPPORTED = 1 << 2


class Mtu(enum.IntEnum):
    """enum ibv_mtu."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5

    @property
    def bytes(self) -> int:
        return 128 << self.value
