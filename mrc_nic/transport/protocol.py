"""The host daemon's operations (mrc_nic.transport.daemon serves them).

Each one declared once (mrc_nic.lab.protocol): its request fields, their
types and defaults, and its reply. Callers send them with
`ctl.call(lab, host, protocol.QpList())`, which returns the typed reply;
the daemon's `op_qp_list` gets the validated QpList. WRITEs are not here:
applications (and `mrc-nic write`) post them through mrc_nic.verbs, whose
setup operations are transport.appops.
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
