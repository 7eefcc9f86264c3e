"""Completion queues (mrc_create_cq, mrc_poll_cq): the NIC's ring buffer, read here.

Each CQ is a BPF ring buffer the daemon creates for this session and hands
over (create_cq's ring_fd, read by nic.driver.cq's CqRing), at a slot of the
lab's array of rings (nic_cq_rings), where the NIC posts the completions of
the QPs that use the CQ. poll() reads the ring through shared memory (no syscall), as records of
the ABI's layout (nic.driver.formats.CQE) that each QP turns into WCs.
fileno() is an epoll fd over the ring and an eventfd, for
select/epoll/asyncio: readable while the NIC has posted completions or the
library holds some (flushes, receives matched late, what a poll left
behind); the eventfd is written only when that set goes from
empty to not, so a poll that takes what it found makes no syscall. The
context's session socket is in it too (POLLRDHUP): the NIC's death wakes a
program asleep on its CQs (verbs.fatal).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import os
import select
from typing import TYPE_CHECKING, Any

from mrc_nic import nic
from mrc_nic.contract import appops
from mrc_nic.nic.driver.formats import CQE_QPN
from mrc_nic.verbs.enums import WcOpcode, WcStatus
from mrc_nic.verbs.errors import VerbsError

if TYPE_CHECKING:
    from mrc_nic.verbs.context import Context

WC_WITH_IMM = 2  # ibv_wc_flags


@dataclasses.dataclass(slots=True)
class WC:
    """A work completion (struct ibv_wc's fields that MRC fills)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm_data: int = 0
    wc_flags: int = 0
    vendor_err: int = 0
    # When the NIC completed it (bpf_ktime_get_ns: CLOCK_MONOTONIC, as
    # time.monotonic_ns()); ibv_wc_read_completion_ts of an extended CQ. 0: made
    # by the library (a flush).
    timestamp_ns: int = 0


class CQ:
    """A completion queue of `cqe` entries at least."""

    def __init__(self, ctx: Context, cqe: int = 256, cq_context: Any = None) -> None:
        self.ctx, self.cq_context = ctx, cq_context
        reply = ctx.call("create_cq", appops.CreateCq(cqe=cqe))
        self.index = reply.cq
        self.cqe = cqe
        self._fds: list[int] = []  # the eventfd: close() closes it
        self._ring = self._channel = None
        try:
            self._ring = ctx._nic.cq_ring(self.index, reply.ring_fd, reply.lost_base)
            self._fd = self._ring.fileno()
            self._event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._fds.append(self._event)
            self._channel = select.epoll()  # fileno(): readable if either is
            self._channel.register(self._fd, select.EPOLLIN)
            self._channel.register(self._event, select.EPOLLIN)
            # the daemon's end: only a hangup, never its replies (those are read in calls)
            self._session_fd = ctx.session.sock.fileno()
            self._channel.register(self._session_fd, select.EPOLLRDHUP)
            self._poller = select.poll()  # wait(): the ring and the daemon's end
            self._poller.register(self._fd, select.POLLIN)
            self._poller.register(self._session_fd, select.POLLRDHUP)
        except (OSError, ValueError) as e:
            self._release()  # the daemon clears the ring's slot with the CQ
            with contextlib.suppress(VerbsError):
                ctx.call("destroy_cq", appops.DestroyCq(cq=self.index))
            raise VerbsError(
                "create_cq", getattr(e, "errno", None) or errno.EIO, f"its ring buffer: {e}"
            ) from None
        self._ready: collections.deque[WC] = collections.deque()
        self._held = self._polling = False  # the eventfd says _ready is not empty; in poll()
        self.qps: dict[int, Any] = {}  # qpn -> verbs.QP whose completions come here
        self._closed = False
        ctx.cqs.append(self)

    # ---- polling --------------------------------------------------------------------
    def poll(self, num_entries: int = 1) -> list[WC]:
        """Up to num_entries completions, oldest first ([] if none)."""
        if self._closed:
            raise VerbsError("poll_cq", errno.EBADF, "the CQ is destroyed (or its context closed)")
        if self.ctx._fatal:
            self.ctx.device_lost()  # the flushes into _ready; the error once they are taken
        ready = self._ready
        if len(ready) < num_entries:
            self._polling = True
            try:
                self._drain()
            except BaseException:
                self._settle()  # what the failed drain made is held: the fd says so
                raise
            finally:
                self._polling = False
        out = []
        while ready and len(out) < num_entries:
            out.append(ready.popleft())
        self._settle()
        if not out:  # what was read before an overrun (or the NIC's death) is delivered first
            if self.ctx._lost:
                raise self.ctx.fatal_error("poll_cq")
            self._check_overrun()
        return out

    def _settle(self) -> None:
        """The eventfd readable exactly while the library holds completions."""
        if bool(self._ready) != self._held:
            self._hold(bool(self._ready))

    def _hold(self, held: bool) -> None:
        """The eventfd readable (the library holds completions) or not."""
        if held:
            os.eventfd_write(self._event, 1)
        else:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._event)
        self._held = held

    def _check_overrun(self) -> None:
        lost = self._ring.lost()
        if lost:
            raise VerbsError(
                "poll_cq",
                errno.EOVERFLOW,
                f"CQ {self.index} overran: the NIC lost {lost} completion(s) to its full ring, "
                "and the CQ is in error (IBV_EVENT_CQ_ERR); destroy it, and poll more often "
                "or signal fewer WRs",
            )

    def _drain(self) -> None:
        """Every record in the ring to its QP, which turns it into WCs here."""
        records = self._ring.records()
        qps = self.qps
        if not records:
            for qp in qps.values():  # queued WRs waiting for NIC slots
                qp._push()
            return
        touched = set()
        for fields in records:
            qp = qps.get(fields[CQE_QPN])
            if qp is not None:
                qp._on_record(fields)
                touched.add(qp)
        for qp in touched:
            qp._take_arrivals()
            qp._push()

    def deliver(self, wc: WC) -> None:
        """A completion the library makes (a flush, a matched receive). Outside
        a poll of this CQ (a flush on modify, a receive posted late, another
        CQ's poll) the fd becomes readable; a poll settles it itself."""
        if self._closed:
            return  # its context closed: nobody polls it, its fds are gone
        self._ready.append(wc)
        if not (self._held or self._polling):
            self._hold(True)

    # ---- waiting ------------------------------------------------------------------
    def fileno(self) -> int:
        """Readable while completions wait: posted by the NIC, or held here."""
        return self._channel.fileno()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a completion is there (True) or timeout seconds pass."""
        if self._ready or self.ctx._fatal:
            return True  # (the NIC's death: poll gives the flushes, then raises)
        got = self._poller.poll(None if timeout is None else int(timeout * 1000))
        if any(fd == self._session_fd for fd, _ in got):
            self.ctx._fatal = True  # the daemon's end, before the watcher thread says it
        return bool(got)

    def close(self) -> None:
        """Destroy the CQ (its QPs first: EBUSY otherwise; a closed context's
        CQ goes with it)."""
        if self._closed:
            return
        if self.qps and not self.ctx._closed:
            raise VerbsError(
                "destroy_cq",
                errno.EBUSY,
                f"QPs {', '.join(f'{q:#x}' for q in self.qps)} use it: destroy them first",
            )
        self._closed = True
        try:
            if not (self.ctx._closed or self.ctx._lost):
                self.ctx.call("destroy_cq", appops.DestroyCq(cq=self.index))
        finally:
            self.ctx.cqs.remove(self)
            self._release()

    def _release(self) -> None:
        """This process's side of the CQ: its mappings and fds."""
        if self._ring is not None:
            self._ring.close()
        if self._channel is not None:
            self._channel.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> CQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status_of_error(syndrome: int, error: int) -> WcStatus:
    """The WC status of a QP_ERR record: a local error's, or the NAK's syndrome's."""
    if error == nic.QpError.RETRY_EXCEEDED:
        return WcStatus.RETRY_EXC_ERR
    if error == nic.QpError.BAD_WQE:
        return WcStatus.LOC_QP_OP_ERR
    if error == nic.QpError.LOC_PROT:  # a WQE's source of another PD
        return WcStatus.LOC_PROT_ERR
    return {
        nic.wire.Syndrome.NAK_REM_ACCESS: WcStatus.REM_ACCESS_ERR,
        nic.wire.Syndrome.NAK_INV_REQ: WcStatus.REM_INV_REQ_ERR,
        nic.wire.Syndrome.NAK_REM_OP: WcStatus.REM_OP_ERR,
    }.get(syndrome, WcStatus.GENERAL_ERR)
