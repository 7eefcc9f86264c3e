"""Applications' send QPs in RTS, supervised every tick of the daemon's loop.

Per send QP (transport.supervisor): NSCC, top-up, the reorder timer, the
retransmission timeout and the retry budget; a QP whose budget is spent, or
whose queue counters are wrong, goes to ERR with a reason, which the
application reads from its CQ and the lab's event log records. A QP the NIC
put in ERR itself (a fatal NACK) is followed into ERR.
"""

from __future__ import annotations

import contextlib

from mrc_nic import nic
from mrc_nic.lab import client
from mrc_nic.transport import supervisor
from mrc_nic.transport.host import HostContext
from mrc_nic.transport.sessions import AppQp


class Supervision:
    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx

    def tick(self, now: float) -> None:
        maps = self.ctx.maps
        for aq in self.ctx.sessions.sending().values():
            try:
                head = aq.queue.head()  # before the snapshot: supervisor.head_fault
                s = maps.sq(aq.qp.qpn, psns=False)  # counts of its rings, not lists
            except KeyError:
                continue
            aq.lost_pkts = s.stats["lost_pkts"]
            if s.state == nic.QpState.ERR:  # a fatal NACK: the NIC told the application
                aq.qp.to_err(
                    "the NIC put it in ERR (a fatal NACK, or a WQE it could not read from: "
                    "the QP's CQ has the error)"
                )
                self._stop_receiving(aq)
                self._report_error(aq)
                continue
            if not aq.last_progress:
                aq.last_progress = aq.last_kick = now
            stall = supervisor.stalled(aq, s, head, now, nic.SQ_DEPTH)
            if stall is not None:  # LOC_QP_OP_ERR: the queue itself is wrong
                self.fail(aq, stall, nic.QpError.BAD_WQE)
                continue
            reason = supervisor.step(maps, aq, s, now, head[0] != s.wqe_sent)
            if reason is not None:
                self.fail(aq, reason, nic.QpError.RETRY_EXCEEDED)

    def fail(self, aq: AppQp, reason: str, error: nic.QpError) -> None:
        """ERR with a reason; the application hears it from its CQ (the NIC's
        QP_ERR record: its oldest WR gets the error, the rest flush)."""
        aq.qp.to_err(reason)
        self.ctx.maps.fail_qp(aq.qp.qpn, error)
        self._stop_receiving(aq)
        self._report_error(aq)

    def _stop_receiving(self, aq: AppQp) -> None:
        """A QP in ERR takes no more data (verbs: the whole QP is in error)."""
        if aq.rq_set:
            with contextlib.suppress(KeyError):
                self.ctx.maps.set_rq_state(aq.qp.qpn, nic.QpState.ERR)

    def _report_error(self, aq: AppQp) -> None:
        host = self.ctx.host
        event = {"type": "qp_error", "host": host, "qpns": [aq.qp.qpn]}
        event["message"] = f"QP {aq.qp.qpn:#x} of pid {aq.session.pid}: {aq.qp.err_reason}"
        client.post_event(self.ctx.topo.lab, event, source=host)
