"""The attributes of a queue pair (struct ibv_qp_attr, mrc_qp_attr, the WRs)
and how modify_qp's masks turn into the daemon's request."""

from __future__ import annotations

import dataclasses
import errno
from typing import Any

from mrc_nic.verbs.cq import CQ
from mrc_nic.verbs.enums import MrcAttrMask, Mtu, QpAttrMask, QpState, WrOpcode
from mrc_nic.verbs.errors import VerbsError


@dataclasses.dataclass(slots=True)
class SGE:
    """struct ibv_sge: `length` bytes at `addr` of the MR whose lkey is `lkey`."""

    addr: int
    length: int
    lkey: int


@dataclasses.dataclass(slots=True)
class SendWR:
    """struct ibv_send_wr for RDMA_WRITE and RDMA_WRITE_WITH_IMM."""

    wr_id: int = 0
    opcode: WrOpcode = WrOpcode.RDMA_WRITE
    sg_list: list[SGE] = dataclasses.field(default_factory=list)
    remote_addr: int = 0
    rkey: int = 0
    send_flags: int = 0
    imm_data: int = 0


@dataclasses.dataclass(slots=True)
class RecvWR:
    """struct ibv_recv_wr: a WRITE_WITH_IMM's completion takes one, in order."""

    wr_id: int = 0
    sg_list: list[SGE] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class QPCap:
    max_send_wr: int = 128
    max_recv_wr: int = 16
    max_send_sge: int = 1
    max_recv_sge: int = 1


@dataclasses.dataclass
class QPInitAttr:
    """struct mrc_qp_init_attr."""

    send_cq: CQ
    recv_cq: CQ
    cap: QPCap = dataclasses.field(default_factory=QPCap)
    sq_sig_all: bool = False
    qp_context: Any = None


@dataclasses.dataclass
class AHAttr:
    """The address vector: the peer's GID (an address of its host, or its name)."""

    dgid: str = ""
    port_num: int = 1
    sgid_index: int = 0
    is_global: int = 1


@dataclasses.dataclass
class QPAttr:
    """struct ibv_qp_attr (what MRC uses of it)."""

    qp_state: QpState = QpState.RESET
    cur_qp_state: QpState = QpState.RESET
    qp_access_flags: int = 0
    pkey_index: int = 0
    port_num: int = 1
    path_mtu: Mtu = Mtu.MTU_4096
    dest_qp_num: int = 0
    rq_psn: int = 0
    sq_psn: int = 0
    timeout: int = 0
    retry_cnt: int = 0
    rnr_retry: int = 0
    ah_attr: AHAttr = dataclasses.field(default_factory=AHAttr)


@dataclasses.dataclass
class MrcQPAttr:
    """struct mrc_qp_attr."""

    mpr: int = 0
    mpr_dest: int = 0
    max_wimm: int = 0
    max_wimm_dest: int = 0
    timeout: int = 0
    ev_profile_id: int = 0
    cc_profile_id: int = 0
    retry_linear_cnt: int = 7
    retry_exp_cnt: int = 7
    cap: int = 0  # MrcQpCap bits (MRC_QP_CAP: DYNAMIC_MPR)


# What each ibv mask bit carries into the daemon's modify_qp, and the bits MRC refuses.
_IBV_IGNORED = QpAttrMask.STATE | QpAttrMask.CUR_STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT
_IBV_REFUSED = (
    QpAttrMask.QKEY
    | QpAttrMask.MAX_QP_RD_ATOMIC
    | QpAttrMask.MAX_DEST_RD_ATOMIC
    | QpAttrMask.ALT_PATH
    | QpAttrMask.MIN_RNR_TIMER
    | QpAttrMask.PATH_MIG_STATE
    | QpAttrMask.EN_SQD_ASYNC_NOTIFY
    | QpAttrMask.CAP
)


def modify_attrs(
    attr: QPAttr,
    attr_mask: int,
    mrc_attr: MrcQPAttr,
    mrc_attr_mask: int,
    ext: dict[str, Any] | None,
) -> dict[str, Any]:
    """modify_qp's attributes for the daemon: those the masks name, checked
    (VerbsError: nothing is sent), and ext's (mrc-nic's extensions)."""
    mask, mmask = QpAttrMask(attr_mask), MrcAttrMask(mrc_attr_mask)
    if not mask & QpAttrMask.STATE:
        raise VerbsError(
            "modify_qp", errno.EINVAL, "attr_mask needs STATE: MRC modifies by transition"
        )
    refused = mask & _IBV_REFUSED
    if refused:
        raise VerbsError("modify_qp", errno.EINVAL, f"{refused!r} is not an MRC QP attribute")
    if mask & QpAttrMask.PORT and attr.port_num != 1:
        raise VerbsError(
            "modify_qp",
            errno.EINVAL,
            "port_num must be 1: one port per NIC, one plane each inside",
        )
    if mask & QpAttrMask.RETRY_CNT and not 0 <= attr.retry_cnt <= 7:
        raise VerbsError(
            "modify_qp", errno.EINVAL, f"retry_cnt is 3 bits (0..7), not {attr.retry_cnt!r}"
        )
    attrs: dict[str, Any] = {}
    pick = [
        (mask & QpAttrMask.ACCESS_FLAGS, "qp_access_flags", lambda: int(attr.qp_access_flags)),
        (mask & QpAttrMask.AV, "dest_gid", lambda: attr.ah_attr.dgid),
        (mask & QpAttrMask.DEST_QPN, "dest_qp_num", lambda: attr.dest_qp_num),
        (mask & QpAttrMask.RQ_PSN, "rq_psn", lambda: attr.rq_psn),
        (mask & QpAttrMask.PATH_MTU, "path_mtu", lambda: Mtu(attr.path_mtu).bytes),
        (mask & QpAttrMask.SQ_PSN, "sq_psn", lambda: attr.sq_psn),
        (mask & QpAttrMask.TIMEOUT, "timeout", lambda: attr.timeout),
        (mask & QpAttrMask.RETRY_CNT, "retry_linear_cnt", lambda: attr.retry_cnt),
        (mmask & MrcAttrMask.TIMEOUT, "timeout", lambda: mrc_attr.timeout),
        (mmask & MrcAttrMask.MPR, "mpr", lambda: mrc_attr.mpr),
        (mmask & MrcAttrMask.MPR_DEST, "mpr_dest", lambda: mrc_attr.mpr_dest),
        (mmask & MrcAttrMask.MAX_WIMM, "max_wimm", lambda: mrc_attr.max_wimm),
        (mmask & MrcAttrMask.MAX_WIMM_DEST, "max_wimm_dest", lambda: mrc_attr.max_wimm_dest),
        (mmask & MrcAttrMask.EV_PROFILE_ID, "ev_profile_id", lambda: mrc_attr.ev_profile_id),
        (mmask & MrcAttrMask.CC_PROFILE_ID, "cc_profile_id", lambda: mrc_attr.cc_profile_id),
        (mmask & MrcAttrMask.CAP, "cap", lambda: int(mrc_attr.cap)),
    ]
    for wanted, name, value in pick:
        if wanted:
            attrs[name] = value()
    if mmask & MrcAttrMask.RETRY_CNT:
        attrs["retry_linear_cnt"] = mrc_attr.retry_linear_cnt
        attrs["retry_exp_cnt"] = mrc_attr.retry_exp_cnt
    clash = set(ext or {}) & set(attrs)
    if clash:
        raise VerbsError(
            "modify_qp", errno.EINVAL, f"{', '.join(sorted(clash))}: given twice (ext and mask)"
        )
    attrs.update(ext or {})
    return attrs
