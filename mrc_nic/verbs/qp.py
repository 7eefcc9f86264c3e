"""Queue pairs (mrc_create_qp, mrc_modify_qp, mrc_post_send, mrc_post_recv).

post_send writes WQEs straight into the QP's send queue in the NIC's mapped
memory (struct nic_wq) and rings the doorbell once per post_send call,
however many WRs it carries: a frame per engine run into the host's doorbell
port for a few runs, one live-frames BPF_PROG_RUN for more. The NIC holds
`sq_depth` WQEs per QP; WRs beyond them wait here, in order, and go in as
the NIC completes WQEs (each post_send and poll_cq moves them). Completions
come from the CQs (verbs.cq); only signaled WRs produce one, as in verbs.

A WR's SGEs become one WQE each, to consecutive remote addresses; the NIC
places and reads at any byte address and length. Receives (post_recv) match
the WRITE_WITH_IMM messages that complete, in message order.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from mrc_nic.contract import appops
from mrc_nic.verbs.enums import MrcAttrMask, Mtu, QpAttrMask, QpState, WcStatus
from mrc_nic.verbs.qp_attrs import (
    SGE,
    AHAttr,
    MrcQPAttr,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
    modify_attrs,
)
from mrc_nic.verbs.qp_completions import QpCompletions
from mrc_nic.verbs.qp_post import QpPosting, _Wr

if TYPE_CHECKING:
    from mrc_nic.verbs.memory import PD

__all__ = ["QP", "SGE", "AHAttr", "MrcQPAttr", "QPAttr", "QPCap", "QPInitAttr", "RecvWR", "SendWR"]


class QP(QpPosting, QpCompletions):
    """A reliable MRC queue pair; modify it INIT -> RTR -> RTS, then post.
    Posting is QpPosting's (verbs.qp_post), completions QpCompletions'
    (verbs.qp_completions); the attributes are verbs.qp_attrs'."""

    def __init__(self, pd: PD, init_attr: QPInitAttr) -> None:
        self.pd, self.ctx = pd, pd.ctx
        cap = init_attr.cap
        reply = self.ctx.call(
            "create_qp",
            appops.CreateQp(
                pd=pd.handle,
                send_cq=init_attr.send_cq.index,
                recv_cq=init_attr.recv_cq.index,
                max_send_wr=cap.max_send_wr,
                max_recv_wr=cap.max_recv_wr,
                max_send_sge=cap.max_send_sge,
                max_recv_sge=cap.max_recv_sge,
            ),
        )
        self.qp_num, self.sq_depth = reply.qpn, reply.sq_depth
        self.init_attr, self.cap = init_attr, cap
        self.send_cq, self.recv_cq = init_attr.send_cq, init_attr.recv_cq
        self.state = QpState.RESET
        self._sq = self.ctx._nic.send_queue(reply.sq_fd, self.sq_depth)  # the WQE writer
        self._seg = self.ctx.attr.seg_size
        self._posted = 0  # WQEs given to the NIC (free-running, as nic_wq.posted)
        self._queued: collections.deque[tuple] = collections.deque()  # WQEs waiting for slots
        self._wrs: collections.deque[_Wr] = collections.deque()  # send WRs not completed
        self._recvs: collections.deque[int] = collections.deque()  # posted receive wr_ids
        self._early: collections.deque[tuple] = collections.deque()  # messages before a receive
        self._arrived: list[tuple] = []  # WRITE_WITH_IMMs of the ring read under way
        self._kick = self.ctx._nic.doorbell(self.qp_num)
        init_attr.send_cq.qps[self.qp_num] = self
        init_attr.recv_cq.qps[self.qp_num] = self
        pd.qps[self.qp_num] = self
        self._closed = False

    # ---- modify_qp --------------------------------------------------------------------
    def modify(
        self,
        attr: QPAttr,
        attr_mask: int,
        mrc_attr: MrcQPAttr | None = None,
        mrc_attr_mask: int = 0,
        ext: dict[str, Any] | None = None,
    ) -> None:
        """mrc_modify_qp: the transition to attr.qp_state, with the attributes
        the masks name. Timeout and retry count may come as ibv attributes
        (as the OCP example passes them) or as MRC ones. ext: mrc-nic's
        extension attributes, not in mrc.h (RTS: cwnd, reorder_ns, cc,
        ev_count, ev_min_active; docs/api.md)."""
        attrs = modify_attrs(attr, attr_mask, mrc_attr or MrcQPAttr(), mrc_attr_mask, ext)
        target = QpState(attr.qp_state)
        reply = self.ctx.call(
            "modify_qp", appops.ModifyQp(qpn=self.qp_num, state=target.name, attrs=attrs)
        )
        self.state = QpState[reply.qp["state"]]
        if self.state == QpState.RTS:
            self._posted = self._sq.head()[0]
        if self.state == QpState.ERR:
            self._flush(WcStatus.WR_FLUSH_ERR)

    def to_init(
        self, access: int = 3, *, ev_profile_id: int = 0, cc_profile_id: int | None = None
    ) -> None:
        mrc = MrcQPAttr(ev_profile_id=ev_profile_id, cc_profile_id=cc_profile_id or 0)
        mmask = MrcAttrMask.EV_PROFILE_ID | (
            MrcAttrMask.CC_PROFILE_ID if cc_profile_id is not None else 0
        )
        self.modify(
            QPAttr(qp_state=QpState.INIT, qp_access_flags=access),
            QpAttrMask.STATE | QpAttrMask.ACCESS_FLAGS,
            mrc,
            mmask,
        )

    def to_rtr(
        self, dest_qp_num: int, dest_gid: str, *, rq_psn: int = 0, path_mtu: Mtu = Mtu.MTU_4096,
        mpr_dest: int | None = None, max_wimm_dest: int | None = None, cap: int | None = None,
        ext: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        attr = QPAttr(
            qp_state=QpState.RTR,
            dest_qp_num=dest_qp_num,
            rq_psn=rq_psn,
            path_mtu=path_mtu,
            ah_attr=AHAttr(dgid=dest_gid),
        )
        mask = QpAttrMask.STATE | QpAttrMask.AV | QpAttrMask.DEST_QPN | QpAttrMask.RQ_PSN
        mrc = MrcQPAttr(mpr_dest=mpr_dest or 0, max_wimm_dest=max_wimm_dest or 0, cap=cap or 0)
        mmask = MrcAttrMask.MPR_DEST if mpr_dest else 0
        mmask |= MrcAttrMask.MAX_WIMM_DEST if max_wimm_dest else 0
        mmask |= MrcAttrMask.CAP if cap is not None else 0
        self.modify(attr, mask | QpAttrMask.PATH_MTU, mrc, mmask, ext)

    def to_rts(
        self, *, sq_psn: int = 0, timeout: int | None = None, retry_linear_cnt: int = 7,
        retry_exp_cnt: int = 7, mpr: int | None = None, max_wimm: int | None = None,
        cap: int | None = None, ext: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        mrc = MrcQPAttr(
            timeout=timeout or 0, mpr=mpr or 0, max_wimm=max_wimm or 0, cap=cap or 0,
            retry_linear_cnt=retry_linear_cnt, retry_exp_cnt=retry_exp_cnt,
        )  # fmt: skip
        mmask = MrcAttrMask.RETRY_CNT
        mmask |= MrcAttrMask.TIMEOUT if timeout is not None else 0
        mmask |= MrcAttrMask.MPR if mpr else 0
        mmask |= MrcAttrMask.MAX_WIMM if max_wimm else 0
        mmask |= MrcAttrMask.CAP if cap is not None else 0
        self.modify(
            QPAttr(qp_state=QpState.RTS, sq_psn=sq_psn),
            QpAttrMask.STATE | QpAttrMask.SQ_PSN,
            mrc,
            mmask,
            ext,
        )

    def query(self) -> dict:
        """The QP as the daemon keeps it (mrc_query_qp): state, attributes, caps."""
        return self.ctx.call("query_qp", appops.QueryQp(qpn=self.qp_num)).qp

    # ---- the QP in the NIC (mrc-nic extension: statistics, docs/api.md) ------------------
    def nic_send_state(self) -> Any:
        """The send side as the NIC holds it now (nic.SqSnapshot: state, snd_una,
        snd_nxt, wqe_sent, tx_stats, cc, ...). KeyError before RTS."""
        return self.ctx._nic.send_state(self.qp_num)

    def nic_recv_state(self) -> Any:
        """The receive side as the NIC holds it now (nic.RqSnapshot: cum_psn,
        stats, long_gaps, ...). KeyError before RTR."""
        return self.ctx._nic.recv_state(self.qp_num)

    def nic_tx_per_plane(self) -> dict[int, int]:
        """Data packets sent on each plane by the QP's current EVs (those the
        daemon retired are query()'s retired_tx_pkts)."""
        return self.ctx._nic.tx_per_plane(self.qp_num)

    @property
    def outstanding(self) -> int:
        """Send WRs posted and not completed (max_send_wr bounds it)."""
        return len(self._wrs)

    def close(self) -> None:
        """mrc_destroy_qp."""
        if self._closed:
            return
        self._closed = True
        self.send_cq.qps.pop(self.qp_num, None)
        self.recv_cq.qps.pop(self.qp_num, None)
        self.pd.qps.pop(self.qp_num, None)
        if not (self.ctx._closed or self.ctx._lost):
            self.ctx.call("destroy_qp", appops.DestroyQp(qpn=self.qp_num))

    def __enter__(self) -> QP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
