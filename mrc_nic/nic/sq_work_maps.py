"""Send QPs' work: their send queues (nic_wqs) and kicks of the send engine.

Each send ring's queue is a BPF map of its own (one struct nic_wq, mmapable)
at the ring's index of nic_wqs: the daemon hands an application exactly its
QPs' queues as file descriptors (docs/api.md, "Isolation"). The daemon's
transfers and the tests post WQEs here, through the same WQE writer as verbs
(driver.sq), and kick through driver.doorbell's run_kick.
"""

from __future__ import annotations

import ctypes
import errno
import os

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.driver.doorbell import run_kick
from mrc_nic.nic.driver.sq import SendQueue, watch_send_queue
from mrc_nic.nic.layout import (
    SQ_DEPTH,
    TIMEOUT_F_REORDER,
    TIMEOUT_MAX,
    WQ_MAP,
    WQE_F_SIGNALED,
    KickOp,
    QpError,
    Wq,
)

WQ_BYTES = ctypes.sizeof(Wq)


def create_send_queue() -> int:
    """A new, empty send queue: a BPF array of one struct nic_wq, mmapable; its
    fd (the caller owns it)."""
    return bpfsys.map_create(
        bpfsys.BPF_MAP_TYPE_ARRAY, 4, WQ_BYTES, 1, flags=bpfsys.BPF_F_MMAPABLE, name="mrc_sq"
    )


class SendWorkMaps:
    """NicMaps' part for send queues and kicks: nic_wqs, BPF_PROG_RUN of the program."""

    def new_send_queue(self, ring: int) -> int:
        """Give ring `ring` a new, empty send queue (the one it had, if any, is
        the NIC's no more: its holders write into nothing); the queue's fd,
        which the caller owns (the daemon hands it to the QP's session)."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        fd = create_send_queue()
        try:
            self.set_inner_map(WQ_MAP, ring, fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def watch_send_queue(self, sq_fd: int) -> SendQueue:
        """A read-only view of the send queue behind sq_fd (new_send_queue's;
        the fd stays the caller's): its head without a lookup or a syscall."""
        return watch_send_queue(sq_fd)

    def send_queue_fd(self, ring: int) -> int:
        """A new fd of ring `ring`'s send queue (KeyError if it has none)."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        return self.inner_map_fd(WQ_MAP, ring)

    def clear_send_queue(self, ring: int) -> None:
        """Take ring `ring`'s send queue from the NIC (a destroyed QP's)."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        self.clear_inner_map(WQ_MAP, ring)

    def wq_head(self, ring: int) -> tuple[int, int]:
        """(posted, done) of the send queue in ring `ring`: WQEs given to the
        NIC and completed by it (free-running), read from the mapped queue."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        return self.send_queue(ring).head()

    def send_queue(self, ring: int) -> SendQueue:
        """The send queue of ring `ring`, to write WQEs into (driver.sq; KeyError
        if the ring has none)."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        return SendQueue(self._inner_mapped(WQ_MAP, ring, WQ_BYTES))

    def wq(self, qpn: int) -> Wq:
        """A copy of a QP's send queue (posted, done, and the WQE slots)."""
        ring = self.sq_raw(qpn).ring
        return Wq.from_buffer_copy(self._inner_mapped(WQ_MAP, ring, WQ_BYTES)[:WQ_BYTES])

    def post_write(
        self,
        qpn: int,
        *,
        length: int,
        src_region: int,
        remote_va: int,
        rkey: int,
        src_offset: int = 0,
        imm: int | None = None,
        wr_id: int = 0,
        signaled: bool = True,
    ) -> int:
        """Post an RDMA WRITE (WRITE_WITH_IMM when imm is given) on a send QP; returns
        the WQE's index (free-running; NIC_EV_SEND_DONE reports it, with wr_id).

        length bytes from byte src_offset of the local region src_region go to
        remote_va (rkey) at the peer, at any byte of either. The
        engine sends nothing until kicked (kick) or clocked by the QP's ACKs.
        signaled=False: on a QP with a send CQ, its completion writes no
        record (it still frees its slot); without a CQ every WQE reports.
        BlockingIOError when SQ_DEPTH WQEs are outstanding (not completed:
        the queue's done, which BPF publishes). One poster per QP at a time.
        """
        raw = self.sq_raw(qpn)
        if not raw.engine:
            raise ValueError(f"QP {qpn:#x} is not served by the send engine (setup_sq engine)")
        pins.check_range("length", length, pins.U32_MAX)
        pins.check_range("remote_va", remote_va, pins.U64_MAX)
        pins.check_range("rkey", rkey, pins.U32_MAX)
        pins.check_range("wr_id", wr_id, pins.U64_MAX)
        if imm is not None:
            pins.check_range("imm", imm, pins.U32_MAX)
        self._span(src_region, src_offset, length)  # KeyError / ValueError if outside
        queue = self.send_queue(raw.ring)
        posted, done = queue.head()
        if (posted - done) & pins.U32_MAX >= SQ_DEPTH:
            raise BlockingIOError(
                errno.EAGAIN, f"send queue of QP {qpn:#x} is full ({SQ_DEPTH} WQEs outstanding)"
            )
        opcode = wireconst.Opcode.WRITE if imm is None else wireconst.Opcode.WRITE_IMM
        flags = WQE_F_SIGNALED if signaled else 0
        queue.write(posted, (wr_id, remote_va, rkey, length, src_region, src_offset, imm or 0,
                             opcode, flags))  # fmt: skip
        queue.publish((posted + 1) & pins.U32_MAX)  # the WQE first: the engine reads posted first
        return posted

    def kick(
        self, qpn: int, packets: int, *, live: bool = True, batch_size: int = 0
    ) -> bpfsys.TestRunResult:
        """Run the send engine for a QP, `packets` times, through the pinned program:
        with live frames, up to `packets` data packets leave (see run_kick)."""
        return run_kick(self.program_fd(), qpn, packets, live=live, batch_size=batch_size)

    def timeout_kick(
        self,
        qpn: int,
        packets: int,
        *,
        max_psns: int = TIMEOUT_MAX,
        age_ns: int = 0,
        reorder: bool = False,
    ) -> None:
        """The retransmission timeout of a QP: a timeout kick queues up to
        max_psns of its oldest unacknowledged PSNs last sent age_ns ago or more
        (in BPF, under the QP's lock) and puts their EVs in ASSUMED_BAD, then a
        send kick of `packets` runs sends them (and new data, if there is
        room). The counters timeout_kicks and timeout_queued say what it did.
        reorder: the reorder timer's kick, not a timeout: what it queues is
        overdue, and no EV is blamed for it (docs/nic-program.md, "Blame")."""
        if not (isinstance(max_psns, int) and 1 <= max_psns <= TIMEOUT_MAX):
            raise ValueError(f"max_psns must be 1..{TIMEOUT_MAX}, not {max_psns!r}")
        arg = max_psns | (TIMEOUT_F_REORDER if reorder else 0)
        run_kick(self.program_fd(), qpn, 1, op=KickOp.TIMEOUT, arg=arg, age_ns=age_ns)
        if packets:
            self.kick(qpn, packets, batch_size=packets)

    def fail_qp(self, qpn: int, reason: QpError = QpError.RETRY_EXCEEDED) -> None:
        """Move a send QP to ERR for a local reason (the daemon: its retry budget
        is spent) with a NIC_KICK_FAIL kick: in BPF, under the QP's lock, and
        its QP_ERR record (error = reason, psn = snd_una) goes to nic_events and
        to the QP's send CQ, as a fatal NACK's does. A QP already in ERR is left
        as it is (it was reported); an unknown one counts drop_unknown_qp."""
        pins.check_range("qpn", qpn, wireconst.QPN_MASK)
        if not isinstance(reason, int) or reason not in set(QpError) - {QpError.NONE}:
            raise ValueError(
                f"reason must be a QpError other than NONE (a fatal NACK's), not {reason!r}"
            )
        run_kick(self.program_fd(), qpn, 1, op=KickOp.FAIL, arg=int(reason))

    def cwnd_kick(self, qpn: int, cwnd: int, *, rtt_target_ns: int = 0, packets: int = 1) -> None:
        """Congestion control's new window for a QP that may be sending: a
        NIC_KICK_CWND kick sets cwnd (packets in flight; 0: the window) and
        cc.rtt_target_ns (the RTT at or above which its SACKs count as high
        delay, struct nic_sq_cc) under the QP's lock, then runs the engine
        `packets` times with live frames, so that a window that grew is
        filled at once (the ACK clock sends one packet per ACK, never more)."""
        if not (isinstance(cwnd, int) and 0 <= cwnd <= 0xFFFF):
            raise ValueError(f"cwnd must be 0..65535 packets, not {cwnd!r}")
        pins.check_range("rtt_target_ns", rtt_target_ns, pins.U64_MAX)
        run_kick(
            self.program_fd(),
            qpn,
            max(1, packets),
            op=KickOp.CWND,
            arg=cwnd,
            age_ns=rtt_target_ns,
            batch_size=max(1, packets),
        )
