"""Applications' sessions with the host daemon, and what each owns.

The verbs API (mrc_nic.verbs) sets up through a session (contract.appops)
and then posts and polls without the daemon. A session is one connection:
its protection domains, memory registrations, CQs and QPs are released when
the connection closes (the process ended, however); other sessions are
untouched. The records here are shared by the daemon's parts: resources
(transport.appresources), QP lifecycle (transport.qplife) and supervision
(transport.appsupervise).
"""

from __future__ import annotations

import dataclasses
import errno
from typing import Any

from mrc_nic import nic
from mrc_nic.contract import shares
from mrc_nic.lab.service import Conn, is_operator
from mrc_nic.transport import hostmem, supervisor
from mrc_nic.transport.qp import QpError, QpState


def einval(message: str) -> QpError:
    return QpError(errno.EINVAL, message)


@dataclasses.dataclass
class AppMr:
    pd: int
    region: int
    rkey: int
    addr: int
    length: int
    access: int
    span: hostmem.Span
    pool: hostmem.ElemAllocator


@dataclasses.dataclass(kw_only=True)
class AppQp(supervisor.Supervised):
    """A QP an application owns (send and receive side)."""

    session: AppSession
    pd: int
    ring: int
    send_cq: int
    recv_cq: int
    caps: dict[str, int]
    access: int = 0
    evs: dict[int, int] = dataclasses.field(default_factory=dict)
    ev_min_active: int = 0
    retired_tx_pkts: dict[int, int] = dataclasses.field(default_factory=dict)
    backup: Any = None  # the EV profile's replacements (evreplace)
    remote: dict = dataclasses.field(default_factory=dict)  # the prober's: {"qpn": ...}
    rq_set: bool = False
    sq_set: bool = False
    auth: bool = False  # its packets carry a MAC (an auth_key at RTR or RTS)
    send_key: bytes | None = None  # RTS's auth_key: the prober MACs its probes with it
    # The daemon's read-only view of the send queue it made for the QP: the
    # supervisor reads its head every tick, without looking the queue up.
    queue: nic.SendQueue

    def describe(self) -> dict:
        """The QP as qp_list and query_qp show it."""
        return {
            **self.qp.as_dict(),
            "role": "app",
            "pid": self.session.pid,
            "pd": self.pd,
            "send_cq": self.send_cq,
            "recv_cq": self.recv_cq,
            "cap": dict(self.caps),
            "access": self.access,
            # the supervisor's counts, and packets of EVs replaced since (their counters went)
            "timeouts": self.timeouts,
            "reorder_kicks": self.reorder_kicks,
            "retired_tx_pkts": {str(p): n for p, n in self.retired_tx_pkts.items()},
            "auth": self.auth,
        }


@dataclasses.dataclass
class AppSession:
    conn: Conn
    pid: int = 0
    uid: int = 0  # a tenant's (not root): its sessions share one share of the host
    command: str = ""
    limits: shares.Limits | None = None  # its shares of the host (app_hello)
    pds: set[int] = dataclasses.field(default_factory=set)
    mrs: dict[int, AppMr] = dataclasses.field(default_factory=dict)
    cqs: set[int] = dataclasses.field(default_factory=set)
    qps: dict[int, AppQp] = dataclasses.field(default_factory=dict)

    @property
    def mr_bytes(self) -> int:
        return sum(mr.length for mr in self.mrs.values())

    def held(self) -> dict[str, int]:
        """What it holds, by share name (contract.shares.RESOURCES)."""
        return {
            "memory": self.mr_bytes,
            "qps": len(self.qps),
            "cqs": len(self.cqs),
            "pds": len(self.pds),
        }


class Sessions:
    """Every application session of one host, by connection."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.by_conn: dict[int, AppSession] = {}

    def session(self, conn: Conn, *, create: bool = False) -> AppSession:
        found = self.by_conn.get(id(conn))
        if found is None:
            if not create:
                raise QpError(errno.EPERM, "open a session first (app_hello): verbs.Context does")
            found = self.by_conn[id(conn)] = AppSession(conn)
        return found

    def within_share(self, session: AppSession, name: str, more: int) -> None:
        """Refuse what would take the session past its share (ENOMEM for memory).
        A tenant's sessions (a user that is not root) hold one share together:
        a program cannot take more by opening more sessions."""
        if session.limits is None:
            return
        if is_operator(session.uid):
            held, who = session.held()[name], "this session"
        else:
            mine = [s for s in self.by_conn.values() if s.uid == session.uid]
            held = sum(s.held()[name] for s in mine)
            who = f"uid {session.uid} (its {len(mine)} session(s) together)"
        why = session.limits.check(name, held, more, self.host, who)
        if why is None and not is_operator(session.uid):
            why = self._tenants_room(session, name, more)
        if why is not None:
            raise QpError(errno.ENOMEM if name == "memory" else errno.ENOSPC, why)

    def _tenants_room(self, session: AppSession, name: str, more: int) -> str | None:
        """Why `more` does not fit what every tenant together may hold
        (shares.TENANTS_FRACTION of the host: the rest is root's), or None."""
        tenants = [s for s in self.by_conn.values() if not is_operator(s.uid)]
        held = sum(s.held()[name] for s in tenants)
        most = int(session.limits.capacity[name] * shares.TENANTS_FRACTION)
        if held + more <= most:
            return None
        return (
            f"the tenants of {self.host} (users that are not root, {len(tenants)} session(s)) "
            f"hold {held} of its {shares.WHAT[name]}, and together they may hold {most} "
            f"({shares.TENANTS_FRACTION:.0%}: the rest is kept for root's tools): release some"
        )

    def pop(self, conn: Conn) -> AppSession | None:
        return self.by_conn.pop(id(conn), None)

    def qps(self) -> list[AppQp]:
        return [aq for s in self.by_conn.values() for aq in s.qps.values()]

    def sending(self) -> dict[int, AppQp]:
        """Send QPs in RTS: the supervisor's, the prober's and the EV replacer's."""
        return {aq.qp.qpn: aq for aq in self.qps() if aq.sq_set and aq.qp.state == QpState.RTS}

    def describe(self) -> list[dict]:
        """Who holds what on this host (qp list)."""
        return [
            {
                "host": self.host,
                "pid": s.pid,
                "command": s.command,
                **s.held(),
                "shares": dict(s.limits.limits) if s.limits else {},
            }
            for s in self.by_conn.values()
        ]
