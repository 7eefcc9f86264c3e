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
import ctypes
import dataclasses
import errno
import struct
from typing import TYPE_CHECKING, Any

from mrc_nic import nic
from mrc_nic.contract import appops
from mrc_nic.kernel import bpfsys
from mrc_nic.verbs.cq import CQ, WC, WC_WITH_IMM, status_of_error
from mrc_nic.verbs.enums import (
    MrcAttrMask,
    Mtu,
    QpAttrMask,
    QpState,
    SendFlags,
    WcOpcode,
    WcStatus,
    WrOpcode,
)
from mrc_nic.verbs.errors import VerbsError

if TYPE_CHECKING:
    from mrc_nic.verbs.memory import PD

U32 = 0xFFFFFFFF
WQE = nic.packer(nic.Wqe)  # struct nic_wqe (bpf/nic_structs.h), as the ABI gives it
WQ_HEAD = nic.packer(nic.Wq, upto="wqes")  # struct nic_wq: posted, done
WQE_SIGNALED = 0x1  # NIC_WQE_F_SIGNALED
# post_send's hot path compares plain ints, not enum members (an IntFlag & costs ~1 us)
_POSTABLE = frozenset({int(WrOpcode.RDMA_WRITE), int(WrOpcode.RDMA_WRITE_WITH_IMM)})
_WRITE_IMM, _SIGNALED, _U64_LIMIT = (
    int(WrOpcode.RDMA_WRITE_WITH_IMM),
    int(SendFlags.SIGNALED),
    1 << 64,
)
OP_WRITE, OP_WRITE_IMM = int(nic.wire.Opcode.WRITE), int(nic.wire.Opcode.WRITE_IMM)
EV_SEND_DONE, EV_RECV_IMM, EV_QP_ERR = (
    int(nic.EventType.SEND_DONE),
    int(nic.EventType.RECV_IMM),
    int(nic.EventType.QP_ERR),
)


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


@dataclasses.dataclass(slots=True)
class _Wr:
    """A posted send WR: until its NIC WQEs complete (or the QP fails)."""

    wr_id: int
    signaled: bool
    length: int
    imm: bool
    wqes: int  # WQEs it makes
    last_wqe: int | None = None  # the NIC index of its last WQE, once in the NIC
    completed: bool = False  # its completion record came
    ts: int = 0  # the NIC's completion time (its record's)
    delivered: bool = False  # its WC went to the CQ (in post order)


class QP:
    """A reliable MRC queue pair; modify it INIT -> RTR -> RTS, then post."""

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
        self._wq_at = reply.ring * ctypes_wq_size()
        self._wq = self.ctx.wq_memory
        self._seg = self.ctx.attr.seg_size
        self._posted = 0  # WQEs given to the NIC (free-running, as nic_wq.posted)
        self._queued: collections.deque[tuple] = collections.deque()  # WQEs waiting for slots
        self._wrs: collections.deque[_Wr] = collections.deque()  # send WRs not completed
        self._recvs: collections.deque[int] = collections.deque()  # posted receive wr_ids
        self._early: collections.deque[tuple] = collections.deque()  # messages before a receive
        self._arrived: list[tuple] = []  # WRITE_WITH_IMMs of the ring read under way
        self._kick = _doorbell(self.ctx.prog_fd, self.qp_num, self.ctx.doorbell)
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
        mask, mmask = QpAttrMask(attr_mask), MrcAttrMask(mrc_attr_mask)
        mrc_attr = mrc_attr or MrcQPAttr()
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
        target = QpState(attr.qp_state)
        reply = self.ctx.call(
            "modify_qp", appops.ModifyQp(qpn=self.qp_num, state=target.name, attrs=attrs)
        )
        self.state = QpState[reply.qp["state"]]
        if self.state == QpState.RTS:
            self._posted = WQ_HEAD.unpack_from(self._wq, self._wq_at)[0]
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

    # ---- posting -------------------------------------------------------------------------
    def post_send(self, wrs: SendWR | list[SendWR]) -> None:
        """mrc_post_send: every WR or none (VerbsError names the bad one, bad_wr)."""
        if isinstance(wrs, SendWR):
            wrs = [wrs]
        ctx = self.ctx
        if ctx._closed or self._closed or ctx._fatal:
            if not (ctx._closed or self._closed):
                raise ctx.fatal_error("post_send")  # the NIC is gone (verbs.fatal)
            raise VerbsError("post_send", errno.EBADF, f"QP {self.qp_num:#x} is destroyed")
        if self.state != QpState.RTS:
            if self.state == QpState.ERR:  # as verbs: posted to ERR, flushed
                for wr in wrs:
                    self.send_cq.deliver(self._wc(wr.wr_id, WcStatus.WR_FLUSH_ERR))
                return
            raise VerbsError(
                "post_send",
                errno.EINVAL,
                f"QP {self.qp_num:#x} is in {self.state.name}: post_send needs RTS "
                "(modify it first)",
            )
        self._retire()  # what the NIC completed since frees room
        room = self.cap.max_send_wr - len(self._wrs)
        if len(wrs) > room:
            limit = self.cap.max_send_wr
            why = (
                f"a post of {len(wrs)} WRs is more than the send queue holds ({limit}): post at "
                "most that many at a time, or create the QP with a larger max_send_wr"
                if len(wrs) > limit
                else f"the send queue holds {limit} WRs and {len(self._wrs)} are outstanding: "
                f"{len(wrs)} do not fit; poll the CQ for completions first"
            )
            raise VerbsError("post_send", errno.ENOMEM, why, bad_wr=room)
        sig_all = self.init_attr.sq_sig_all
        planned = [self._plan(i, wr, sig_all) for i, wr in enumerate(wrs)]  # all checked first
        wrs_out, queued = self._wrs, self._queued
        for rec, wqes in planned:
            wrs_out.append(rec)
            queued.extend(wqes)
        self._push()

    def _plan(self, index: int, wr: SendWR, sig_all: bool) -> tuple[_Wr, list[tuple]]:
        """A WR's record and its WQEs, checked: (wr_id, remote_va, rkey, len,
        src_region, src_off, imm, opcode, flags, the record on the last WQE)."""
        opcode, sgl, remote, wr_id = int(wr.opcode), wr.sg_list, wr.remote_addr, wr.wr_id
        if opcode not in _POSTABLE or len(sgl) > self.cap.max_send_sge:
            raise self._bad(index, wr)
        if not (0 <= wr.imm_data <= U32 and 0 <= wr_id < _U64_LIMIT and 0 <= wr.rkey <= U32):
            raise self._bad(index, wr)
        if not 0 <= remote < _U64_LIMIT:
            raise self._bad(index, wr)
        with_imm = opcode == _WRITE_IMM
        imm = wr.imm_data if with_imm else 0
        signaled = sig_all or bool(int(wr.send_flags) & _SIGNALED)
        mrs = self.pd.mrs
        if len(sgl) == 1:  # the common WR: one WQE, made as its tuple at once
            sge = sgl[0]
            mr, n = mrs.get(sge.lkey), sge.length
            off = sge.addr - mr.addr if mr is not None else -1
            if mr is None or not mr.valid or off < 0 or off + n > mr.length or n < 0:
                raise self._bad(index, wr)
            if remote + n > _U64_LIMIT:
                raise self._bad(index, wr)
            rec = _Wr(wr_id, signaled, n, with_imm, 1)
            op = OP_WRITE_IMM if with_imm else OP_WRITE
            flags = WQE_SIGNALED if signaled else 0
            return rec, [(wr_id, remote, wr.rkey, n, mr.lkey, off, imm, op, flags, rec)]
        wqes, length = [], 0
        for sge in sgl:
            mr = mrs.get(sge.lkey)
            off = sge.addr - mr.addr if mr is not None else -1
            n = sge.length
            if mr is None or not mr.valid or off < 0 or off + n > mr.length or n < 0:
                raise self._bad(index, wr)
            wqes.append([wr_id, remote, wr.rkey, n, mr.lkey, off, imm, OP_WRITE, 0, None])
            remote += n
            length += n
        if remote > _U64_LIMIT:  # the last byte past the 64-bit address space
            raise self._bad(index, wr)
        if not wqes:  # a zero-length WRITE: one packet, no payload (as verbs)
            wqes.append([wr_id, remote, wr.rkey, 0, 0, 0, imm, OP_WRITE, 0, None])
        rec = _Wr(wr_id, signaled, length, with_imm, len(wqes))
        last = wqes[-1]
        last[7] = OP_WRITE_IMM if with_imm else OP_WRITE
        last[8] = WQE_SIGNALED if signaled else 0
        last[9] = rec
        return rec, [tuple(w) for w in wqes]

    def _bad(self, index: int, wr: SendWR) -> VerbsError:
        """Why WR `index` is refused (worked out only once it is: posting stays cheap)."""
        cap = self.cap.max_send_sge
        if int(wr.opcode) not in _POSTABLE:
            why = f"opcode {wr.opcode!r}: MRC posts RDMA_WRITE and RDMA_WRITE_WITH_IMM only"
        elif len(wr.sg_list) > cap:
            why = f"{len(wr.sg_list)} SGEs, the QP's max_send_sge is {cap}"
        elif not 0 <= wr.imm_data <= U32:
            why = f"imm_data must fit 32 bits, not {wr.imm_data!r}"
        elif not 0 <= wr.wr_id < _U64_LIMIT:
            why = f"wr_id must fit 64 bits, not {wr.wr_id!r}"
        elif not 0 <= wr.rkey <= U32:
            why = f"rkey must fit 32 bits, not {wr.rkey!r} (the peer's mr.rkey)"
        elif not 0 <= wr.remote_addr < _U64_LIMIT:
            why = f"remote_addr must be a 64-bit address, not {wr.remote_addr!r}"
        elif wr.remote_addr + sum(sge.length for sge in wr.sg_list) > _U64_LIMIT:
            why = f"remote_addr {wr.remote_addr:#x} plus the SGEs' bytes runs past 2**64"
        else:
            why = self._bad_sge(wr)
        return VerbsError(
            "post_send", errno.EINVAL, f"WR {index} (wr_id {wr.wr_id}): {why}", bad_wr=index
        )

    def _bad_sge(self, wr: SendWR) -> str:
        for sge in wr.sg_list:
            try:
                mr = self.pd.mr_of(sge.lkey, "post_send")
                mr.offset_of(sge.addr, sge.length, "post_send")
            except VerbsError as e:
                return str(e).removeprefix("post_send: ").rsplit(" (", 1)[0]
            if sge.length < 0:
                return f"SGE length must not be negative, not {sge.length}"
        return "refused"

    def _push(self) -> None:
        """Queued WQEs into the NIC's free slots, then the doorbell."""
        if not self._queued:
            self._retire()
            return
        wq, at, depth = self._wq, self._wq_at, self.sq_depth
        done = WQ_HEAD.unpack_from(wq, at)[1]
        self._retire(done)
        free = depth - ((self._posted - done) & U32)
        if free <= 0:
            return
        packets, posted, seg, queued = 0, self._posted, self._seg, self._queued
        pack, slots, size, seg1 = WQE.pack_into, at + 8, WQE.size, seg - 1
        for _ in range(min(free, len(queued))):
            wr_id, remote, rkey, length, region, off, imm, opcode, flags, rec = queued.popleft()
            pack(wq, slots + (posted % depth) * size,
                 wr_id, remote, rkey, length, region, off, imm, opcode, flags)  # fmt: skip
            if rec is not None:
                rec.last_wqe = posted
            posted = (posted + 1) & U32
            packets += (length + seg1) // seg or 1  # a zero-length WRITE is a packet too
        self._posted = posted
        struct.pack_into("<I", wq, at, posted)  # after the WQEs: the NIC reads them then
        self._kick(packets)

    def _retire(self, done: int | None = None) -> None:
        """Forget completed WRs: unsignaled ones when the NIC's `done` passes
        them, signaled ones once their completion was read."""
        wrs = self._wrs
        if not wrs:
            return  # (nor reads the queue: a lost NIC's is unmapped)
        if done is None:
            done = WQ_HEAD.unpack_from(self._wq, self._wq_at)[1]
        while wrs:
            head = wrs[0]
            if head.last_wqe is None or ((done - 1 - head.last_wqe) & U32) >= 1 << 31:
                return  # not in the NIC yet, or not done
            if head.signaled and not head.delivered:
                return  # its completion is on its way to the CQ, or waits for one before
            wrs.popleft()

    def post_recv(self, wrs: RecvWR | list[RecvWR]) -> None:
        """mrc_post_recv: each WRITE_WITH_IMM message that completes takes one."""
        if isinstance(wrs, RecvWR):
            wrs = [wrs]
        if self.ctx._closed or self._closed:
            raise VerbsError("post_recv", errno.EBADF, f"QP {self.qp_num:#x} is destroyed")
        if self.ctx._fatal:
            raise self.ctx.fatal_error("post_recv")
        if self.state == QpState.RESET:
            raise VerbsError(
                "post_recv",
                errno.EINVAL,
                f"QP {self.qp_num:#x} is in RESET: modify it to INIT first",
            )
        if len(self._recvs) + len(wrs) > self.cap.max_recv_wr:
            raise VerbsError(
                "post_recv",
                errno.ENOMEM,
                f"the receive queue holds {self.cap.max_recv_wr} WRs and "
                f"{len(self._recvs)} are posted",
                bad_wr=self.cap.max_recv_wr - len(self._recvs),
            )
        if self.state == QpState.ERR:
            for wr in wrs:
                self.recv_cq.deliver(self._wc(wr.wr_id, WcStatus.WR_FLUSH_ERR, recv=True))
            return
        self._recvs.extend(wr.wr_id for wr in wrs)
        while self._early and self._recvs:
            self._complete_recv(*self._early.popleft())

    # ---- completions (called by the CQs) ---------------------------------------------------
    def _on_record(self, fields: tuple) -> None:
        kind = fields[0]
        if kind == EV_SEND_DONE:
            self._send_done(fields[7], fields[8])  # the WQE's index, the time
        elif kind == EV_RECV_IMM:
            self._arrived.append((fields[2], fields[3], fields[6], fields[8]))  # msn, imm, len, ts
        elif kind == EV_QP_ERR:
            self._fail(status_of_error(fields[4], fields[6]))  # syndrome, error

    def _take_arrivals(self) -> None:
        """The WRITE_WITH_IMMs of one read of the ring, in message order (MSN):
        two CPUs may have written their records in the other order. (Messages
        without an immediate take MSNs too, so order is all MSNs can give.)"""
        arrived = self._arrived
        if not arrived:
            return
        if len(arrived) > 1:
            base = arrived[0][0]
            arrived.sort(key=lambda m: (m[0] - base + (1 << 23)) & 0xFFFFFF)
        self._early.extend((imm, length, ts) for _, imm, length, ts in arrived)
        arrived.clear()
        while self._early and self._recvs:
            self._complete_recv(*self._early.popleft())

    def _send_done(self, wqe: int, ts: int) -> None:
        """A signaled WQE completed. Records of two CPUs may reach the ring out of
        order: completions go out in post order, each once every signaled WR
        before it has completed."""
        for rec in self._wrs:
            if rec.last_wqe == wqe:
                rec.completed, rec.ts = True, ts
                break
        for rec in self._wrs:
            if rec.signaled and not rec.completed:
                break
            if rec.signaled and not rec.delivered:
                rec.delivered = True
                op = WcOpcode.RDMA_WRITE
                wc = WC(rec.wr_id, WcStatus.SUCCESS, op, self.qp_num, rec.length)
                wc.timestamp_ns = rec.ts
                self.send_cq.deliver(wc)
        self._retire()

    def _complete_recv(self, imm: int, length: int, ts: int) -> None:
        wc = WC(
            self._recvs.popleft(), WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, self.qp_num,
            byte_len=length, imm_data=imm, wc_flags=WC_WITH_IMM, timestamp_ns=ts,
        )  # fmt: skip
        self.recv_cq.deliver(wc)

    def _fail(self, status: WcStatus) -> None:
        """The NIC put the QP in ERR: the oldest WR gets the error, the rest flush."""
        self.state = QpState.ERR
        self._take_arrivals()  # messages that completed before the error are delivered
        self._retire()  # the WRs the NIC completed are not the failed one
        first = next((r for r in self._wrs if not r.completed), None)
        if first is not None:
            first.completed = first.delivered = True
            self.send_cq.deliver(self._wc(first.wr_id, status))
        self._flush(WcStatus.WR_FLUSH_ERR)

    def _flush(self, status: WcStatus) -> None:
        for rec in self._wrs:
            if not rec.delivered:
                self.send_cq.deliver(self._wc(rec.wr_id, status))
        self._wrs.clear()
        self._queued.clear()
        while self._recvs:
            self.recv_cq.deliver(self._wc(self._recvs.popleft(), status, recv=True))

    def _device_lost(self) -> None:
        """The NIC is gone (verbs.fatal): ERR, every outstanding WR and
        receive flushed to the CQs; what the NIC still writes is ignored."""
        self._take_arrivals()
        self.state = QpState.ERR
        self._flush(WcStatus.WR_FLUSH_ERR)

    def _wc(self, wr_id: int, status: WcStatus, *, recv: bool = False) -> WC:
        op = WcOpcode.RECV_RDMA_WITH_IMM if recv else WcOpcode.RDMA_WRITE
        return WC(wr_id, status, op, self.qp_num)

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


def ctypes_wq_size() -> int:
    return ctypes.sizeof(nic.Wq)


def _doorbell(prog_fd: int, qpn: int, port: tuple | None = None):
    """The QP's doorbell: n runs of the send engine (each sends at most one
    packet; the SACKs clock the rest). A few runs are frames sent into the
    host's doorbell port (port: nic.open_doorbell's socket and frame size);
    more, or any the port refuses, one BPF_PROG_RUN with live frames. Returns
    the BPF_PROG_RUN's result, or None."""
    data = nic.kick_frame(qpn)
    meta = ctypes.sizeof(nic.Kick)
    ctx = bytes(bpfsys.XdpMd(data=meta, data_end=len(data)))
    batch_max, frames_max = nic.LIVE_BATCH_MAX, nic.DOORBELL_FRAMES_MAX
    send = frame = None
    if port is not None:
        send, frame = port[0].send, nic.doorbell_frame(qpn, port[1])

    def ring(packets: int) -> bpfsys.TestRunResult | None:
        packets = max(1, min(packets, batch_max))
        if send is not None and packets <= frames_max:
            try:
                for _ in range(packets):
                    send(frame)
                return None
            except OSError:
                pass  # the port's queue is full: BPF_PROG_RUN below (extra runs are idle)
        return bpfsys.prog_test_run(
            prog_fd, data, repeat=packets, data_size_out=0, ctx_in=ctx,
            flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=packets,
        )  # fmt: skip

    return ring
