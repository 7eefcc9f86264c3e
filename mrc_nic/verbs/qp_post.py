"""post_send's side of a queue pair: WRs checked and planned into WQEs,
written into the NIC's send queue (nic.driver.sq) as slots free, and the
doorbell rung once per call (nic.driver.doorbell). A mixin of verbs.QP."""

from __future__ import annotations

import collections
import dataclasses
import errno
from typing import TYPE_CHECKING

from mrc_nic import nic
from mrc_nic.nic.driver.formats import WQ_HEAD, WQE
from mrc_nic.verbs.enums import QpState, SendFlags, WcStatus, WrOpcode
from mrc_nic.verbs.errors import VerbsError
from mrc_nic.verbs.qp_attrs import SendWR

if TYPE_CHECKING:
    from mrc_nic.nic.driver.sq import SendQueue

U32 = 0xFFFFFFFF
WQE_SIGNALED = int(nic.WQE_F_SIGNALED)
# post_send's hot path compares plain ints, not enum members (an IntFlag & costs ~1 us)
_POSTABLE = frozenset({int(WrOpcode.RDMA_WRITE), int(WrOpcode.RDMA_WRITE_WITH_IMM)})
_WRITE_IMM, _SIGNALED, _U64_LIMIT = (
    int(WrOpcode.RDMA_WRITE_WITH_IMM),
    int(SendFlags.SIGNALED),
    1 << 64,
)
OP_WRITE, OP_WRITE_IMM = int(nic.wireconst.Opcode.WRITE), int(nic.wireconst.Opcode.WRITE_IMM)


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


class QpPosting:
    """post_send, and the send WRs until the NIC completes them."""

    _sq: SendQueue
    _queued: collections.deque[tuple]
    _wrs: collections.deque[_Wr]
    _posted: int

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
        sq = self._sq  # (nic.driver.sq.SendQueue: its write and publish, inlined here)
        wq, depth = sq.memory, sq.depth
        done = WQ_HEAD.unpack_from(wq, sq.at)[1]
        self._retire(done)
        free = depth - ((self._posted - done) & U32)
        if free <= 0:
            return
        packets, posted, seg, queued = 0, self._posted, self._seg, self._queued
        pack, slots, size, seg1 = WQE.pack_into, sq.slots, WQE.size, seg - 1
        for _ in range(min(free, len(queued))):
            wr_id, remote, rkey, length, region, off, imm, opcode, flags, rec = queued.popleft()
            pack(wq, slots + (posted % depth) * size,
                 wr_id, remote, rkey, length, region, off, imm, opcode, flags)  # fmt: skip
            if rec is not None:
                rec.last_wqe = posted
            posted = (posted + 1) & U32
            packets += (length + seg1) // seg or 1  # a zero-length WRITE is a packet too
        self._posted = posted
        sq.publish(posted)  # after the WQEs: the NIC reads them then
        self._kick(packets)

    def _retire(self, done: int | None = None) -> None:
        """Forget completed WRs: unsignaled ones when the NIC's `done` passes
        them, signaled ones once their completion was read."""
        wrs = self._wrs
        if not wrs:
            return  # (nor reads the queue: a lost NIC's is unmapped)
        if done is None:
            sq = self._sq  # its head, read as _push reads it (no call: a record per WR)
            done = WQ_HEAD.unpack_from(sq.memory, sq.at)[1]
        while wrs:
            head = wrs[0]
            if head.last_wqe is None or ((done - 1 - head.last_wqe) & U32) >= 1 << 31:
                return  # not in the NIC yet, or not done
            if head.signaled and not head.delivered:
                return  # its completion is on its way to the CQ, or waits for one before
            wrs.popleft()
