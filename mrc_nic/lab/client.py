"""The daemons' control socket: where it is, and the client (the wire: contract.framing).

One unix stream socket per host daemon, /run/mrc-nic/<lab>/<host>.sock,
mode 0600 (root only), or 0660 root:GROUP with the lab's [tenants] group. Messages are JSON objects, one per line (UTF-8, '\\n'
terminated), request then reply, any number per connection:

    request:  {"op": "<name>", ...arguments}
    reply:    {"ok": true, ...results}
              {"ok": false, "errno": "EINVAL", "message": "what is wrong and what to do"}

A reply may come long after its request (a `write` replies when the
transfer ends), and may hand over file descriptors (SCM_RIGHTS: framing). Each operation is declared once, as a typed request and
reply (mrc_nic.contract.framing): the host daemons' in mrc_nic.contract.daemonops,
the event log's in mrc_nic.contract.eventops; docs/daemon.md lists them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

from mrc_nic.contract import eventops, framing
from mrc_nic.contract.framing import (  # RequestError: callers' too
    MAX_LINE,
    R,
    Request,
    RequestError,
    decode,
    encode,
)
from mrc_nic.errors import MrcNicError
from mrc_nic.lab import state

MAX_FDS = 16  # descriptors one read takes (a reply hands over at most a few)
EVENTS_SERVICE = "events"  # the lab's event log (mrc_nic.observe.eventlog): events.sock


class DaemonError(MrcNicError, RuntimeError):
    """A daemon cannot be reached, or refused a request (errno, message)."""

    def __init__(self, message: str, errno_name: str | None = None) -> None:
        super().__init__(message)
        self.errno_name = errno_name


def socket_path(lab: str, host: str) -> Path:
    return state.lab_dir(lab) / f"{host}.sock"


def restart_hint(lab: str) -> str:
    """How to bring a lab's dead daemons back: `up --reuse` restarts them and
    keeps the lab (its links, faults and counters), with the topology and name
    the lab was made from."""
    record = state.LabState.load(lab)
    if record is None:
        return f"the lab is not up; start it with: mrc-nic up --name {lab}"
    return f"restart it with: mrc-nic up --reuse -t {record.topology_file} --name {lab}"


def call(lab: str, host: str, request: Request[R], *, timeout: float = 10.0) -> R:
    """Send one request to a host's daemon (or the event log, host
    EVENTS_SERVICE) and return its typed reply. Raises DaemonError when the
    daemon is not there or refuses."""
    with Session(lab, host, timeout=timeout) as session:
        return session.call(request)


class Session:
    """One connection to a service, kept open for many requests.

    The daemon ties what a session creates (an application's memory
    registrations, CQs and QPs) to its connection and releases it when the
    connection closes, also when the process dies."""

    def __init__(self, lab: str, host: str, *, timeout: float = 10.0) -> None:
        self.lab, self.host, self.timeout = lab, host, timeout
        path = socket_path(lab, host)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self._buf = b""
        self._fds: list[int] = []  # descriptors received (SCM_RIGHTS), not yet a reply's
        try:
            self.sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            self.sock.close()
            raise DaemonError(
                f"the daemon of {host} in lab {lab!r} is not running ({path} does not "
                f"answer); {restart_hint(lab)}"
            ) from None
        except PermissionError as e:
            self.sock.close()
            # connect() names no path; the user needs to know what refused them.
            raise PermissionError(e.errno, e.strerror, str(path)) from None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close_fds()
        self.sock.close()

    def _close_fds(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def call(self, request: Request[R], *, timeout: float | None = None) -> R:
        """Send a request and return its typed reply (DaemonError when refused).
        The reply's file descriptors (framing.fd_arg fields) are the caller's."""
        self.sock.settimeout(timeout or self.timeout)
        self.sock.sendall(encode(framing.encode_request(request)))
        reply = self._read_line(request.OP, timeout or self.timeout)
        fds, self._fds = self._fds, []  # one request at a time: these came with its reply
        try:
            if not reply.get("ok"):
                raise DaemonError(
                    f"{self.host}: {reply.get('message', 'refused')}", errno_name=reply.get("errno")
                )
            try:
                value = framing.decode_reply(type(request).Reply, reply, request.OP, fds)
            except RequestError as e:
                raise DaemonError(
                    f"{self.host} sent a reply that is not {request.OP}'s: {e}", "EPROTO"
                ) from None
        except BaseException:
            self._fds = fds
            self._close_fds()
            raise
        taken = set(framing.reply_fds(value))
        for fd in fds:  # descriptors the reply does not name: not ours to keep
            if fd not in taken:
                os.close(fd)
        return value  # type: ignore[return-value]

    def _read_line(self, op, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            try:
                chunk, fds, _, _ = socket.recv_fds(self.sock, 65536, MAX_FDS)
                self._fds += fds
            except TimeoutError:
                raise DaemonError(
                    f"the daemon of {self.host} did not answer {op!r} in {timeout:g} s"
                ) from None
            if not chunk:
                raise DaemonError(
                    f"the daemon of {self.host} closed the connection during {op!r} "
                    "(did it die? `mrc-nic status` shows the daemons)"
                )
            self._buf += chunk
            if len(self._buf) > MAX_LINE or time.monotonic() > deadline:
                raise DaemonError(f"the daemon of {self.host} sent a reply too long or too late")
        line, self._buf = self._buf.split(b"\n", 1)
        return decode(line)


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
