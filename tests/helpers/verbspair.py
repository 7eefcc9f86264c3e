"""A verbs QP pair between two hosts of a lab, each side a Context of its own
(as two processes would be): tests/lab/test_verbs.py and the lab tests that
need an application's QP."""

from __future__ import annotations

import os
import time

from mrc_nic import verbs
from mrc_nic.verbs import SGE, SendFlags, SendWR, WcStatus

MR_BYTES = 1 << 20


class Side:
    """One host's context, PD, MR, CQs and QP."""

    def __init__(self, lab: str, host: str, **cap) -> None:
        self.ctx = verbs.Context(lab, host)
        self.pd = verbs.PD(self.ctx)
        self.mr = self.pd.reg_mr(MR_BYTES)
        self.scq = verbs.CQ(self.ctx, 256)
        self.rcq = verbs.CQ(self.ctx, 256)
        attr = verbs.QPInitAttr(send_cq=self.scq, recv_cq=self.rcq, cap=verbs.QPCap(**cap))
        self.qp = verbs.QP(self.pd, attr)

    def close(self) -> None:
        self.ctx.close()


def connect(a: Side, b: Side, *, ev_profile_id: int = 0) -> None:
    """INIT (a on EV profile ev_profile_id), RTR, RTS on both sides."""
    a.qp.to_init(ev_profile_id=ev_profile_id)
    b.qp.to_init()
    a.qp.to_rtr(b.qp.qp_num, b.ctx.gid())
    b.qp.to_rtr(a.qp.qp_num, a.ctx.gid(1))  # any plane's address names the host
    for s in (a, b):
        s.qp.to_rts()


def poll_n(cq: verbs.CQ, n: int, timeout: float = 10.0) -> list[verbs.WC]:
    got: list[verbs.WC] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += cq.poll(n - len(got))
        if len(got) < n:
            cq.wait(0.05)
    return got


def write(a: Side, b: Side, offset: int, length: int, **kw) -> SendWR:
    return SendWR(
        sg_list=[SGE(a.mr.addr + offset, length, a.mr.lkey)],
        remote_addr=b.mr.addr + offset,
        rkey=b.mr.rkey,
        **kw,
    )


def verified_write(a: Side, b: Side, length: int) -> None:
    """One signaled WRITE of `length` random bytes from a's MR to b's: it
    completes with SUCCESS and b's memory holds the bytes."""
    data = os.urandom(length)
    a.mr.buf[:length] = data
    a.qp.post_send(write(a, b, 0, length, wr_id=1, send_flags=SendFlags.SIGNALED))
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(1, WcStatus.SUCCESS)]
    assert bytes(b.mr.buf[:length]) == data
