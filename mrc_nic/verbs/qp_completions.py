"""The completion side of a queue pair: receives posted and matched to the
WRITE_WITH_IMM messages that complete, the NIC's records (read by the CQs)
turned into work completions in post order, errors and flushes. A mixin of
verbs.QP."""

from __future__ import annotations

import collections
import errno

from mrc_nic.nic.driver.formats import (
    CQE_TS,
    CQE_TYPE,
    ERR_ERROR,
    ERR_SYNDROME,
    RECV_IMM,
    RECV_LEN,
    RECV_MSN,
    SEND_WQE,
)
from mrc_nic.nic.layout import EventType
from mrc_nic.verbs.cq import WC, WC_WITH_IMM, status_of_error
from mrc_nic.verbs.enums import QpState, WcOpcode, WcStatus
from mrc_nic.verbs.errors import VerbsError
from mrc_nic.verbs.qp_attrs import RecvWR

EV_SEND_DONE, EV_RECV_IMM, EV_QP_ERR = (
    int(EventType.SEND_DONE),
    int(EventType.RECV_IMM),
    int(EventType.QP_ERR),
)


class QpCompletions:
    """post_recv, and what the CQs hand the QP: records, errors, the NIC's death."""

    _recvs: collections.deque[int]
    _early: collections.deque[tuple]
    _arrived: list[tuple]

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
    def _on_record(
        self, fields: tuple, _kind: int = CQE_TYPE, _wqe: int = SEND_WQE, _ts: int = CQE_TS,
        _send: int = EV_SEND_DONE, _recv: int = EV_RECV_IMM,
    ) -> None:  # fmt: skip
        """One completion record (formats.CQE: the record's words, then ts). The
        field indexes come from the ABI (nic.driver.formats), bound as defaults:
        a record per completion, and local loads are the cheapest."""
        kind = fields[_kind]
        if kind == _send:
            self._send_done(fields[_wqe], fields[_ts])  # the WQE's index, the time
        elif kind == _recv:
            self._arrived.append(
                (fields[RECV_MSN], fields[RECV_IMM], fields[RECV_LEN], fields[_ts])
            )
        elif kind == EV_QP_ERR:
            self._fail(status_of_error(fields[ERR_SYNDROME], fields[ERR_ERROR]))

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
