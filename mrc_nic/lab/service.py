"""A single-threaded control-socket server: the loop the lab's services share.

The host daemons (mrc_nic.transport.daemon) and the lab's event log (mrc_nic.observe.eventlog)
each serve one unix socket (root's, mode 0600; a host daemon's is root:GROUP
0660 when the lab names a [tenants] group: `group`, lab.access) with the line protocol of
mrc_nic.lab.client, from one selector loop that also wakes every `tick_s` for the
service's own work. A subclass names its operations (`operations`, declared in
mrc_nic.contract.framing's way) and gives each one handler: a method
`op_<name>(request, conn)`, or any callable registered with
`handle(RequestClass, fn)` (the host daemon's parts register theirs). A
handler gets the typed request, already validated, and returns the typed
reply, or None to answer later with `reply(conn, ...)`; it refuses with
framing.RequestError (an errno and a message). serve() refuses to start
while an operation has no handler. Other file descriptors join
the loop with `watch(fd, callback)`. A peer that is not root (SO_PEERCRED
at connect) may call only the operations in `open_ops` (a host daemon's:
the applications'); any other is refused with EPERM before its handler.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mrc_nic.contract import framing

Handler = Callable[[Any, Any], Any]  # (typed request, Conn) -> typed reply, or None: later
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_cred(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel took them
    when it connected (SO_PEERCRED)."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def is_operator(uid: int) -> bool:
    """Root, or the service's own user (a process that could as well ptrace
    the service: a test's service run by its user)."""
    return uid in (0, os.geteuid())


# What a service holds for one client that does not read its replies: past it
# the client is dropped, never waited for (one loop serves every client).
OUTBOX_MAX = 4 << 20
# Connections one user that is not root may hold to one service at once.
CONNS_PER_USER = 256
ACCEPT_PAUSE_S = 0.1  # no descriptor left (EMFILE): new connections wait this long


@dataclass(eq=False)
class Conn:
    sock: socket.socket
    buf: bytes = b""
    uid: int = 0  # the peer's (peer_cred): who may call what (LineService.open_ops)
    # Replies not sent yet (the client's socket buffer is full): (bytes, the
    # descriptors that go with their first byte), oldest first; and their size.
    out: collections.deque = field(default_factory=collections.deque)
    queued: int = 0
    closed: bool = False


class LineService:
    tick_s = 0.001
    operations: ClassVar[framing.Ops]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """No op_ method of an operation the service does not declare."""
        super().__init_subclass__(**kwargs)
        handlers = {name[3:] for name in dir(cls) if name.startswith("op_")}
        stray = handlers - set(cls.operations.by_name)
        if stray:
            raise TypeError(f"{cls.__name__}: handlers of no declared operation: {sorted(stray)}")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.group: int | None = None  # a gid: the socket is root:group 0660, not 0600
        self.open_ops: frozenset[str] = frozenset()  # what a peer that is not root may call
        self.sel = selectors.DefaultSelector()
        self.running = True
        self._conns_by_uid: collections.Counter[int] = collections.Counter()
        self._accept_paused_until: float | None = None  # EMFILE: new connections wait
        self.handlers: dict[str, Handler] = {
            name: getattr(self, f"op_{name}")
            for name in self.operations.by_name
            if hasattr(self, f"op_{name}")
        }

    def handle(self, request: type[framing.Request], handler: Handler) -> None:
        """`handler(request, conn)` answers the declared operation `request`."""
        name = request.OP
        if self.operations.by_name.get(name) is not request:
            raise TypeError(f"{type(self).__name__} declares no operation {name!r}")
        if name in self.handlers:
            raise TypeError(f"{type(self).__name__}: operation {name!r} has a handler already")
        self.handlers[name] = handler

    def check_handlers(self) -> None:
        """Every declared operation has its handler (TypeError naming those without)."""
        missing = sorted(set(self.operations.by_name) - set(self.handlers))
        if missing:
            raise TypeError(f"{type(self).__name__}: operations without a handler: {missing}")

    # ---- to override ---------------------------------------------------------------
    def tick(self, now: float) -> None:
        """The service's own work, at least every tick_interval()."""

    def tick_interval(self) -> float:
        """Seconds the loop may sleep without a request: tick_s unless the service
        knows it has nothing to do."""
        return self.tick_s

    def on_drop(self, conn: Conn) -> None:
        """A client went away (a later reply to it goes nowhere)."""

    def close(self) -> None:
        """Release what the service holds; the loop has ended."""

    # ---- the loop ------------------------------------------------------------------
    def watch(self, fileobj: Any, callback: Callable[[], None]) -> None:
        self.sel.register(fileobj, selectors.EVENT_READ, callback)

    def serve_until_signalled(self) -> None:
        """serve() until SIGTERM or SIGINT (mrc-nic down, Ctrl-C)."""

        def stop(*_: object) -> None:
            self.running = False

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.serve()

    def serve(self) -> None:
        self.check_handlers()
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is root's alone (0600) ...
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        if self.group is not None:  # ... or root's and its group's (lab.access)
            os.chown(self.path, -1, self.group)
            os.chmod(self.path, 0o660)
        listener.listen(16)
        listener.setblocking(False)
        _raise_descriptor_limit()
        self.watch(listener, functools.partial(self._accept, listener))
        try:
            while self.running:
                for key, _ in self.sel.select(self.tick_interval()):
                    key.data()
                now = time.monotonic()
                if self._accept_paused_until is not None and now >= self._accept_paused_until:
                    self._accept_paused_until = None
                    self.watch(listener, functools.partial(self._accept, listener))
                self.tick(now)
        finally:
            self.path.unlink(missing_ok=True)
            listener.close()
            self.close()

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        except OSError as e:  # EMFILE, ENFILE: no descriptor left; the others' go on
            print(f"accept: {e}; new connections wait {ACCEPT_PAUSE_S} s", file=sys.stderr)
            self.sel.unregister(listener)
            self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S
            return
        sock.setblocking(False)
        uid = peer_cred(sock)[1]
        if not is_operator(uid) and self._conns_by_uid[uid] >= CONNS_PER_USER:
            with contextlib.suppress(OSError):  # one line, if its buffer takes it
                sock.send(framing.encode(self.too_many(uid)))
            sock.close()
            return
        conn = Conn(sock, uid=uid)
        self._conns_by_uid[uid] += 1
        self.watch(sock, functools.partial(self._ready, conn))

    @staticmethod
    def too_many(uid: int) -> dict:
        return {
            "ok": False,
            "errno": "EMFILE",
            "message": f"uid {uid} holds {CONNS_PER_USER} connections to this service, the "
            "most a user that is not root may: close some (each verbs.Context is one)",
        }

    def _ready(self, conn: Conn) -> None:
        """The client's socket is readable, or writable while replies wait."""
        if conn.out:
            self._flush(conn)
        if not conn.closed:
            self._read(conn)

    def _read(self, conn: Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except BlockingIOError:
            return  # only writable (replies waiting)
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        conn.buf += chunk
        while b"\n" in conn.buf and not conn.closed:
            line, conn.buf = conn.buf.split(b"\n", 1)
            message = self.handle_line(line, conn)
            if message is not None:
                self._send(conn, *message)
        if len(conn.buf) > framing.MAX_LINE and not conn.closed:
            self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.on_drop(conn)
        self.sel.unregister(conn.sock)
        conn.sock.close()
        self._conns_by_uid[conn.uid] -= 1
        for _, fds in conn.out:
            _close(fds)
        conn.out.clear()

    def reply(self, conn: Conn | None, result: framing.Reply) -> None:
        """Answer a request whose handler returned None (a client gone: nowhere)."""
        self._send(conn, *self._reply_message(result))

    @staticmethod
    def _reply_message(result: framing.Reply) -> tuple[dict, list[int]]:
        return {"ok": True, **framing.encode_reply(result)}, framing.reply_fds(result)

    def _send(self, conn: Conn | None, message: dict, fds: list[int] = ()) -> None:
        """Send a message, with the reply's file descriptors (SCM_RIGHTS), which
        are closed here once sent, or if they cannot be. Never waits: what the
        client's socket does not take waits in its outbox, and a client whose
        outbox passes OUTBOX_MAX (it reads no replies) is dropped."""
        if conn is None or conn.closed:
            _close(fds)
            return
        data = framing.encode(message)
        conn.out.append((data, list(fds)))
        conn.queued += len(data)
        self._flush(conn)

    def _flush(self, conn: Conn) -> None:
        while conn.out:
            data, fds = conn.out[0]
            try:
                sent = socket.send_fds(conn.sock, [data], fds) if fds else conn.sock.send(data)
            except BlockingIOError:
                break
            except OSError:  # the client is gone
                self._drop(conn)
                return
            _close(fds)  # they went with the first byte
            conn.queued -= sent
            if sent < len(data):
                conn.out[0] = (data[sent:], [])
                break
            conn.out.popleft()
        if conn.queued > OUTBOX_MAX:
            print(f"dropped uid {conn.uid}'s connection: it reads no replies", file=sys.stderr)
            self._drop(conn)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        try:
            key = self.sel.get_key(conn.sock)
        except KeyError:
            return  # not in the loop (a test's connection)
        if key.events != events:
            self.sel.modify(conn.sock, events, functools.partial(self._ready, conn))

    # ---- requests --------------------------------------------------------------------
    def operator_only(self, op: str, conn: Conn) -> str:
        """Why a peer that is not root may not call `op`, and what to do: the
        line operator commands give a user that is not root (cli.needs_root)."""
        return (
            f"{op} is an operator's operation and uid {conn.uid} is not root: mrc-nic needs "
            "root for it; run it with sudo (an application's session, app_hello, offers "
            "the applications' operations)"
        )

    def handle_line(self, line: bytes, conn: Conn) -> tuple[dict, list[int]] | None:
        """The answer to one request line and the descriptors it hands over,
        or None when the handler answers later."""
        try:
            request = self.operations.decode_request(framing.decode(line))
            outsider = conn is not None and not is_operator(conn.uid)  # None: no peer (a test's)
            if outsider and request.OP not in self.open_ops:
                raise framing.RequestError(errno.EPERM, self.operator_only(request.OP, conn))
            result = self.handlers[request.OP](request, conn)
        except framing.RequestError as e:
            return {"ok": False, **e.as_dict()}, []
        except (ValueError, KeyError, TypeError) as e:
            return {"ok": False, "errno": "EINVAL", "message": f"bad request: {e}"}, []
        except Exception as e:  # noqa: BLE001 (a request must never end the service)
            traceback.print_exc(file=sys.stderr)  # the service's log (lab.workers.log_path)
            return {"ok": False, "errno": "EIO", "message": f"{type(e).__name__}: {e}"}, []
        if result is None:
            return None  # answered later
        return self._reply_message(result)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _raise_descriptor_limit() -> None:
    """As many descriptors as the hard limit allows: each client holds one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
