"""The host daemon's operations (mrc_nic.transport.daemon serves them).

Each one declared once (mrc_nic.contract.framing): its request fields, their
types and defaults, and its reply. Callers send them with
`client.call(lab, host, daemonops.QpList())` (mrc_nic.lab.client), which returns the typed reply;
the daemon's handler of qp_list gets the validated QpList. WRITEs are not here:
applications (and `mrc-nic write`) post them through mrc_nic.verbs, whose
setup operations are contract.appops.
docs/daemon.md's lists of operations are written from here (mrc_nic.contract.opsdoc).
"""

from __future__ import annotations

from mrc_nic.contract import appops, ctlops
from mrc_nic.contract import framing as lp
from mrc_nic.contract.framing import Reply, Request, arg, op, reply

__all__ = ["OPS", "EvSet", "Ping", "QpList"]


@reply
class PingReply(lp.PingReply):
    host: str = arg("the daemon's host")
    index: int = arg("the host's index in the lab")


@op("ping")
class Ping(lp.Ping, Request[PingReply]):
    """Is the daemon there?"""


@reply
class QpListReply(Reply):
    host: str = arg("the daemon's host")
    qps: list[dict] = arg("every QP: state, role, OCP attributes, `err_reason`")
    sessions: list[dict] = arg(
        "every application session: pid, command, what it holds (pds, cqs, qps, "
        "memory bytes) and its limits (shares)",
        factory=list,
    )


@op("qp_list")
class QpList(Request[QpListReply]):
    """The host's QPs, by QP number."""


@reply
class EvSetReply(Reply):
    qpn: int = arg("as asked")
    ev: int = arg("as asked")
    state: str = arg("as asked, in capitals")


@op("ev_set")
class EvSet(Request[EvSetReply]):
    """The operator's word on an EV of a send QP in RTS."""

    qpn: int = arg("a send QP")
    ev: int = arg("an EV of its profile")
    state: str = arg("DENIED or GOOD")


OPS = lp.Ops(
    "daemon",
    [Ping, QpList, EvSet, *appops.APP_OPS, *ctlops.CTL_OPS],
)
