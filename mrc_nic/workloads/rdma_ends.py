"""The two ends of a WRITE stream, each held by its own host's process.

rdma_write.Connection holds both ends of a connection in one process (what
`mrc-nic write` needs: one command, both hosts). A collective's rank, or a
scenario's host, holds only its own ends, as an NCCL rank does: SendEnd is a
send QP with its source buffer at the writer's host, RecvEnd a receive QP
with its landing buffer at the reader's host. They meet by swapping
endpoints (dicts, cm.Endpoint's fields) through whoever runs the processes,
then the writer's transfers go straight into the reader's buffer.

The buffers are writeplan's: 2 chunks each, cut into slots; WRITE k goes
from and to slot k % slots and WRITE k + slots is posted once WRITE k has
completed. With verify, the reader compares WRITE k's bytes with what the
writer sent (writeplan.chunk_data: the same seed gives the same bytes at
both ends) on its receive completion (every WRITE then carries an
immediate), and the slot is free for WRITE k + slots only once the reader
says so: it writes its count of verified WRITEs, 4 bytes, on a credit
socket the two processes share (NCCL's receiver posts its clear-to-send the
same way, in the writer's memory). Without verify there is no credit: the
reader's work takes no time in this model, as the adds of a collective.

progress() is non-blocking; fds() are what a loop waits on (fdwait).
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from typing import Any

from mrc_nic import verbs
from mrc_nic.lab import topology
from mrc_nic.workloads import rdma_write
from mrc_nic.workloads.writeplan import DEPTH_MAX, KIB, Pieces, chunk_data

CREDIT = struct.Struct("<Q")
RECVS_AHEAD = 2 * DEPTH_MAX  # receives kept posted: more than the writer can have in flight


class EndError(Exception):
    """A transfer of an end failed; the message says why (a QP in ERR, a mismatch)."""


def _slots(mr: verbs.MR, chunk: int) -> tuple[int, int]:
    slot = -(-chunk // KIB) * KIB
    return slot, len(mr.buf) // slot


class SendEnd:
    """A send QP and its source buffer (2 chunks) at this host."""

    def __init__(self, ctx: verbs.Context, pd: verbs.PD, chunk: int, index: int = 0) -> None:
        self.ctx, self.chunk, self.index = ctx, chunk, index
        self.cq = verbs.CQ(ctx, 4 * DEPTH_MAX)
        self.mr = pd.reg_mr(2 * chunk, verbs.Access.LOCAL_WRITE)
        cap = verbs.QPCap(max_send_wr=DEPTH_MAX, max_recv_wr=1)
        self.qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=self.cq, recv_cq=self.cq, cap=cap))
        self.slot, self.slots = _slots(self.mr, chunk)
        self.credit_fd: int | None = None
        self.credited = 0  # the reader's count of WRITEs read (the whole life of the QP)
        self._credit_buf = b""
        self.base = 0  # WRITEs of the transfers before this one
        self.pieces: Pieces | None = None
        self.last: rdma_write.Counters | None = None

    def endpoint(self) -> dict[str, Any]:
        return {"qpn": self.qp.qp_num, "gid": self.ctx.gid(0)}

    def take_credits(self, fd: int) -> None:
        """Read the reader's credits from fd (rdma_ends' credit socket)."""
        os.set_blocking(fd, False)  # progress() never waits on it
        self.credit_fd = fd

    def connect(self, peer: dict, topo: topology.Topology, opts: rdma_write.QpOptions) -> None:
        """INIT -> RTR -> RTS towards the reader's RecvEnd.endpoint()."""
        self.remote = peer
        rdma_write.connect_send(self.qp, peer["qpn"], peer["gid"], topo, opts)

    def fds(self) -> list[int]:
        return [self.cq.fileno(), *([self.credit_fd] if self.credit_fd is not None else [])]

    # ---- one transfer ------------------------------------------------------------------
    def start(
        self, size: int, *, seed: int, imm: bool, fill: bool, gated: bool = False, depth: int = 2
    ) -> None:
        """Begin writing `size` bytes in WRITEs of a chunk at most (imm: each
        with an immediate); fill: each WRITE's bytes from the seed (what a
        verifying reader expects); gated: a slot is reused only once the
        reader's credit says it has read it (verify)."""
        if self.pieces is not None:
            self.base += len(self.pieces)
        self.pieces = Pieces(0, size, max(1, size), self.chunk)
        self.size, self.seed, self.imm, self.fill, self.gated = size, seed, imm, fill, gated
        self.depth = min(depth, self.slots)
        self.posted = self.done = self.done_bytes = 0
        self.error: str | None = None
        self.started, self.ended = time.monotonic(), None
        self.before = self.last or self.counters()
        self._post()

    @property
    def finished(self) -> bool:
        return self.error is not None or self.done >= len(self.pieces)

    def _post(self) -> None:
        wrs: list[verbs.SendWR] = []
        n = len(self.pieces)
        limit = self.done + self.depth
        if self.gated:  # a slot is free once the reader has read it
            limit = min(limit, self.credited - self.base + self.slots)
        while self.posted < min(n, limit):
            k = self.posted
            _, length = self.pieces[k]
            at = (k % self.slots) * self.slot
            if self.fill and length:
                self.mr.buf[at : at + length] = chunk_data(self.seed, self.index, k, length)
            wrs.append(
                verbs.SendWR(
                    wr_id=k,
                    opcode=rdma_write.WRITE_IMM if self.imm else rdma_write.WRITE,
                    sg_list=[verbs.SGE(self.mr.addr + at, length, self.mr.lkey)] if length else [],
                    remote_addr=self.remote["addr"] + at,
                    rkey=self.remote["rkey"],
                    send_flags=verbs.SendFlags.SIGNALED,
                    imm_data=k & rdma_write.U32,
                )
            )
            self.posted += 1
        if wrs:
            self.qp.post_send(wrs)

    def progress(self) -> int:
        """Read completions and credits, post what they allow; how many there were."""
        got = 0
        if self.credit_fd is not None:
            with contextlib.suppress(BlockingIOError):
                data = os.read(self.credit_fd, 4096)  # a stream socket: whole credits only
                self._credit_buf += data
                whole = len(self._credit_buf) // CREDIT.size * CREDIT.size
                if whole:
                    got += 1
                    last = self._credit_buf[whole - CREDIT.size : whole]
                    self.credited = max(self.credited, CREDIT.unpack(last)[0])
                    self._credit_buf = self._credit_buf[whole:]
        for wc in self.cq.poll(rdma_write.POLL_BATCH):
            got += 1
            if self.error is not None:
                continue
            if wc.status != verbs.WcStatus.SUCCESS:
                reason = self.qp.query().get("err_reason") or ""
                self.error = wc.status.name + (f": {reason}" if reason else "")
                continue
            while self.done <= wc.wr_id:
                self.done_bytes += self.pieces[self.done][1]
                self.done += 1
        if self.finished and self.ended is None:
            self.ended = time.monotonic()
        elif not self.finished:
            self._post()
        return got

    def cancel(self, reason: str) -> None:
        """The QP to ERR (its WRs flush), best effort: a transfer out of time."""
        with contextlib.suppress(verbs.VerbsError, OSError):
            self.qp.modify(
                verbs.QPAttr(qp_state=verbs.QpState.ERR),
                verbs.QpAttrMask.STATE,
                ext={"reason": reason},
            )
        if self.error is None:
            self.error = reason

    def counters(self) -> rdma_write.Counters:
        return rdma_write.qp_counters(self.qp)

    def result(self) -> dict[str, Any]:
        """What the transfer did, as rdma_write's result names it."""
        seconds = (self.ended or time.monotonic()) - self.started
        self.last = now = self.counters()
        per_plane = {
            p: n - self.before.per_plane.get(p, 0) for p, n in sorted(now.per_plane.items())
        }
        total = sum(per_plane.values()) or 1
        return {
            "completed": self.error is None and self.done_bytes == self.size,
            "error": self.error,
            "bytes": self.done_bytes,
            "size": self.size,
            "seconds": round(seconds, 6),
            "goodput_bps": self.done_bytes * 8 / seconds if seconds > 0 else 0.0,
            "qps": [now.qp],
            "retransmits": now.retx - self.before.retx,
            "timeouts": now.timeouts - self.before.timeouts,
            "reorder_kicks": now.reorder_kicks - self.before.reorder_kicks,
            "per_plane_share": {str(p): n / total for p, n in per_plane.items()},
        }

    def stuck(self) -> dict[str, Any]:
        """Where the send QP stands in the NIC (a transfer that did not end in time)."""
        try:
            sq = self.qp.nic_send_state()
        except (KeyError, OSError) as e:
            return {"error": f"no send state: {e}"}
        return {
            "state": str(sq.state),
            "snd_una": sq.snd_una,
            "snd_nxt": sq.snd_nxt,
            "wqe_sent": sq.wqe_sent,
            "wqe_done": sq.wqe_done,
            "wqe_off": sq.wqe_off,
            "cwnd": sq.cwnd,
            "retx_pending": len(sq.retx_pending),
            "acked_out_of_order": len(sq.acked),
            "engine": sq.engine,
            "stats": sq.stats,
        }


class RecvEnd:
    """A receive QP and its landing buffer (2 chunks) at this host."""

    def __init__(self, ctx: verbs.Context, pd: verbs.PD, chunk: int, index: int = 0) -> None:
        self.ctx, self.chunk, self.index = ctx, chunk, index
        self.cq = verbs.CQ(ctx, 4 * RECVS_AHEAD)
        access = verbs.Access.LOCAL_WRITE | verbs.Access.REMOTE_WRITE
        self.mr = pd.reg_mr(2 * chunk, access)
        cap = verbs.QPCap(max_send_wr=1, max_recv_wr=RECVS_AHEAD)
        self.qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=self.cq, recv_cq=self.cq, cap=cap))
        self.slot, self.slots = _slots(self.mr, chunk)
        self.credit_fd: int | None = None
        self.arrived_total = 0  # WRITEs arrived over the QP's life: the credit
        self.recvs_posted = self.recvs_done = 0
        self.expected = 0

    def endpoint(self) -> dict[str, Any]:
        return {
            "qpn": self.qp.qp_num,
            "gid": self.ctx.gid(0),
            "rkey": self.mr.rkey,
            "addr": self.mr.addr,
        }

    def connect(self, peer: dict, opts: rdma_write.QpOptions) -> None:
        """INIT -> RTR towards the writer's SendEnd.endpoint(); receives posted."""
        rdma_write.connect_recv(self.qp, peer["qpn"], peer["gid"], opts)
        self._post_recvs()

    def fds(self) -> list[int]:
        return [self.cq.fileno()]

    def _post_recvs(self) -> None:
        n = RECVS_AHEAD - (self.recvs_posted - self.recvs_done)
        if n > 0:
            first = self.recvs_posted
            self.qp.post_recv([verbs.RecvWR(wr_id=first + i) for i in range(n)])
            self.recvs_posted += n

    # ---- one transfer (WRITEs with immediates) -----------------------------------------
    def expect(self, size: int, *, seed: int, verify: bool) -> None:
        """Count (and with verify compare) the next `size` bytes the writer
        sends with immediates."""
        self.pieces = Pieces(0, size, max(1, size), self.chunk)
        self.expected, self.seed, self.verify = size, seed, verify
        self.received = self.arrived = 0
        self.error: str | None = None
        self.verified = verify
        self.done_ns: int | None = None

    @property
    def finished(self) -> bool:
        return self.error is not None or self.arrived >= len(self.pieces)

    def progress(self) -> int:
        wcs = self.cq.poll(rdma_write.POLL_BATCH)
        for wc in wcs:
            self.recvs_done += 1
            if self.error is not None:
                continue
            if wc.status != verbs.WcStatus.SUCCESS:
                self.error = f"receive {wc.status.name}"
                continue
            k = wc.imm_data
            _, length = self.pieces[k] if k < len(self.pieces) else (0, -1)
            if k != self.arrived or wc.byte_len != length:
                self.error = f"WRITE {k} ({wc.byte_len} B) came where {self.arrived} was due"
                continue
            if self.verify and length:
                at = (k % self.slots) * self.slot
                want = chunk_data(self.seed, self.index, k, length)
                if bytes(self.mr.buf[at : at + length]) != want:
                    self.error = f"WRITE {k} arrived different from what was sent"
                    self.verified = False
                    continue
            self.received += length
            self.arrived += 1
            self.arrived_total += 1
            if self.credit_fd is not None:  # read (and verified): the writer may reuse the slot
                os.write(self.credit_fd, CREDIT.pack(self.arrived_total))
            if self.finished:
                self.done_ns = wc.timestamp_ns or time.monotonic_ns()
        if wcs:
            self._post_recvs()
        return len(wcs)
