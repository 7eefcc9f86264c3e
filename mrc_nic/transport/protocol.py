"""The host daemon's operations (mrc_nic.transport.daemon serves them).

Each one declared once (mrc_nic.lab.protocol): its request fields, their
types and defaults, and its reply. Callers send them with
`ctl.call(lab, host, protocol.SqOpen(count=1, chunk=MIB))`, which returns
the typed reply; the daemon's `op_sq_open` gets the validated SqOpen.
docs/daemon.md's lists of operations are written from here (`make docs`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mrc_nic.lab import eventops
from mrc_nic.lab import protocol as lp
from mrc_nic.lab.protocol import Reply, Request, arg, op, reply
from mrc_nic.transport import appops, ctlops
from mrc_nic.transport.sendjob import JobOptions

__all__ = [
    "OPS",
    "Cancel",
    "EvSet",
    "Ping",
    "QpList",
    "RqClose",
    "RqOpen",
    "SqClose",
    "SqOpen",
    "Write",
]

QPS_MAX = 64  # send QPs one sq_open opens, at most
CANCEL_REASON = "cancelled by the user"


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


@op("qp_list")
class QpList(Request[QpListReply]):
    """The host's QPs, by QP number."""


@reply
class SqOpenReply(Reply):
    qpns: list[int] = arg("the send QPs, in INIT")


@op("sq_open")
class SqOpen(Request[SqOpenReply]):
    """Send QPs in INIT, with their source buffers (2 chunks each)."""

    count: int = arg(f"QPs to open, 1..{QPS_MAX}")
    chunk: int = arg("bytes per WRITE, a multiple of 1 KiB")


@reply
class RqOpenReply(Reply):
    qps: list[dict] = arg("per peer QP: `qpn`, `rkey`, `region` (RTR), the write's `remote`")


@op("rq_open")
class RqOpen(Request[RqOpenReply]):
    """Receive QPs for a transfer, one per peer QP, each with a region of 2 chunks (RTR)."""

    peer: str = arg("the sending host")
    peer_qpns: list[int] = arg("its send QPs (sq_open)")
    chunk: int = arg("bytes per WRITE")
    mpr: int = arg("the MPR range, in 128-PSN units", 2)


@reply
class WriteReply(Reply):
    completed: bool = arg("every QP wrote its share")
    error: str | None = arg("why not (QPs in ERR and their reasons)")
    bytes: int = arg("bytes written")
    size: int = arg("bytes asked for")
    seconds: float = arg("from the first post to the last completion")
    goodput_bps: float = arg("bytes * 8 / seconds")
    qps: list[dict] = arg("the send QPs as qp_list shows them")
    chunks: int = arg("WRITEs planned")
    wqes_done: int = arg("WRITEs completed")
    messages: int = arg("messages completed")
    msg: int | None = arg("the message size (null: one message)")
    stopped: bool = arg("`duration` ended it, with fewer bytes than size")
    retransmits: int = arg("packets resent")
    timeouts: int = arg("retransmission timeouts")
    reorder_kicks: int = arg("reorder timer kicks")
    per_plane_share: dict[str, float] = arg("share of the packets sent, per plane")
    verified: bool = arg("with verify, every chunk arrived as sent")
    mismatch: list[dict] = arg("chunks that did not: `qpn`, `chunk`, `first_bad_byte`")
    timing: list[dict] | None = arg(
        "with timing, per QP: `qpn`, `wqe_base`, `per_msg`, `kick_ns` of each WRITE", None
    )


@op("write")
class Write(Request[WriteReply], JobOptions):
    """A transfer on send QPs of sq_open to the receive QPs of rq_open;
    replies when it ends."""

    # Its options are sendjob.JobOptions's fields, declared there once.

    dst: str = arg("the receiving host")
    qpns: list[int] = arg("send QPs (sq_open), none writing")
    remote: list[dict] = arg("rq_open's `qps`, in the order of `qpns`")


@reply
class RqCloseReply(Reply):
    closed: list[int] = arg("the receive QPs closed")
    stats: dict[str, dict] = arg("per QP closed (its number in decimal): receive counters")


@op("rq_close")
class RqClose(Request[RqCloseReply]):
    """Close receive QPs (those not on this host are passed over)."""

    qpns: list[int] = arg("receive QPs")


@reply
class SqCloseReply(Reply):
    closed: list[int] = arg("the send QPs closed")


@op("sq_close")
class SqClose(Request[SqCloseReply]):
    """Close send QPs a write left open (keep_open) or no write used; EBUSY while writing."""

    qpns: list[int] = arg("send QPs")


@reply
class CancelReply(Reply):
    cancelled: list[int] = arg("the QPs of the writes ended")


@op("cancel")
class Cancel(Request[CancelReply]):
    """End the writes running on these send QPs: their QPs go to ERR with the
    reason, and each write's caller gets its result."""

    qpns: list[int] = arg("send QPs")
    reason: str = arg("their `err_reason`", CANCEL_REASON)


@reply
class EvSetReply(Reply):
    qpn: int = arg("as asked")
    ev: int = arg("as asked")
    state: str = arg("as asked, in capitals")


@op("ev_set")
class EvSet(Request[EvSetReply]):
    """The operator's word on an EV of a send QP."""

    qpn: int = arg("a send QP")
    ev: int = arg("an EV of its profile")
    state: str = arg("DENIED or GOOD")


OPS = lp.Ops(
    "daemon",
    [
        Ping,
        QpList,
        SqOpen,
        RqOpen,
        Write,
        RqClose,
        SqClose,
        Cancel,
        EvSet,
        *appops.APP_OPS,
        *ctlops.CTL_OPS,
    ],
)

# ---- docs/daemon.md -------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parents[2] / "docs" / "daemon.md"
TABLES = {"daemon": OPS, "events": eventops.OPS}


def _marks(name: str) -> tuple[str, str]:
    return (
        f"<!-- ops:{name} (generated from the declarations: make docs) -->\n",
        f"<!-- /ops:{name} -->\n",
    )


def docs_text(text: str) -> str:
    """docs/daemon.md's text with each service's operations written anew."""
    for name, ops in TABLES.items():
        begin, end = _marks(name)
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"docs/daemon.md has no {begin.strip()} ... {end.strip()}")
        text = pattern.sub(lambda _, ops=ops, b=begin, e=end: b + lp.markdown(ops) + e, text)
    return text


def main(argv: list[str]) -> int:
    """python -m mrc_nic.transport.protocol [--check]: rewrite docs/daemon.md's
    lists of operations (--check: exit 1 when they are not up to date)."""
    old = DOCS.read_text()
    new = docs_text(old)
    if "--check" in argv:
        return int(new != old)
    if new != old:
        DOCS.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
