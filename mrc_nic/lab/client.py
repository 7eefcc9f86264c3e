"""The daemons' control sockets as the lab's tools use them: the session
(contract.session, re-exported here), and the lab's event log.
"""

from __future__ import annotations

import threading

from mrc_nic.contract import eventops
from mrc_nic.contract.devices import restart_hint, socket_path
from mrc_nic.contract.framing import RequestError, decode, encode
from mrc_nic.contract.session import MAX_FDS, DaemonError, Session, call

__all__ = [
    "EVENTS_SERVICE",
    "MAX_FDS",
    "DaemonError",
    "RequestError",
    "Session",
    "call",
    "decode",
    "encode",
    "post_event",
    "restart_hint",
    "socket_path",
]

EVENTS_SERVICE = "events"  # the lab's event log (mrc_nic.observe.eventlog): events.sock


# One connection to each lab's event log per process, kept: a daemon posts
# hundreds of events a second under churn (EV replacements), and a connection
# each was a tenth of its CPU. The lock: a CLI may post from two threads (chaos).
_event_sessions: dict[str, Session] = {}
_event_lock = threading.Lock()


def post_event(lab: str, event: dict, source: str = "cli") -> None:
    """Record an event (a fault put in force, a QP in ERR) in the lab's event
    log. Best effort: without a running log the event is lost, and
    `mrc-nic events` says the log is not running."""
    request = eventops.Post(event=event, source=source)
    with _event_lock:
        for _ in range(2):  # a kept connection the log closed (it restarted): once more
            session = _event_sessions.pop(lab, None)
            try:
                if session is None:
                    session = Session(lab, EVENTS_SERVICE, timeout=2.0)
                session.call(request)
            except (DaemonError, OSError):
                if session is not None:
                    session.close()
                continue
            _event_sessions[lab] = session
            return
