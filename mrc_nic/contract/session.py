"""The client side of the daemons' control sockets: a session, one call.

One unix stream socket per host daemon (contract.devices.socket_path),
mode 0600 (root only), or 0660 root:GROUP with the lab's [tenants] group.
Messages are JSON objects, one per line (UTF-8, '\\n' terminated), request
then reply, any number per connection:

    request:  {"op": "<name>", ...arguments}
    reply:    {"ok": true, ...results}
              {"ok": false, "errno": "EINVAL", "message": "what is wrong and what to do"}

A reply may come long after its request (a `write` replies when the
transfer ends), and may hand over file descriptors (SCM_RIGHTS: framing).
Each operation is declared once, as a typed request and reply
(contract.framing): the host daemons' in contract.daemonops, the event
log's in contract.eventops; docs/daemon.md lists them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

from mrc_nic.contract import framing
from mrc_nic.contract.devices import restart_hint, socket_path
from mrc_nic.contract.framing import MAX_LINE, R, Request, RequestError, decode, encode
from mrc_nic.errors import MrcNicError

MAX_FDS = 16  # descriptors one read takes (a reply hands over at most a few)


class DaemonError(MrcNicError, RuntimeError):
    """A daemon cannot be reached, or refused a request (errno, message)."""

    def __init__(self, message: str, errno_name: str | None = None) -> None:
        super().__init__(message)
        self.errno_name = errno_name


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
