"""Connection setup out of band, as RDMA applications do it: over a TCP socket.

Two processes, each in its own host (mrc-nic exec), swap what each needs to
reach the other (QP number, start PSN, GID, rkey, address and length of the
memory it may write) the way the OCP example's do_exchange does, then keep
the socket for barriers between phases. One side listens (the server: no
address), the other connects to an address of the server's host.

    with cm.Link.open(server, port) as link:      # server None: listen
        peer = link.swap(cm.Endpoint.of(qp, mr, ctx.gid()))
        qp.to_rtr(peer.qpn, peer.gid, rq_psn=peer.psn); qp.to_rts()
        link.barrier()
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Callable
from typing import Any

DEFAULT_PORT = 18185  # the OCP example's
_MAX_LINE = 1 << 16


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One side's connection facts."""

    qpn: int
    psn: int
    gid: str
    rkey: int
    addr: int
    length: int

    @classmethod
    def of(cls, qp: Any, mr: Any, gid: str, psn: int = 0) -> Endpoint:
        return cls(qpn=qp.qp_num, psn=psn, gid=gid, rkey=mr.rkey, addr=mr.addr, length=mr.length)


class NoServer(TimeoutError):
    """Nothing accepted the connection to the server's address and port in time."""


class Link:
    """The out-of-band TCP connection between the two processes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    @classmethod
    def open(
        cls,
        server: str | None,
        port: int = DEFAULT_PORT,
        *,
        timeout: float = 60.0,
        wait_for_server: float | None = None,
        on_listening: Callable[[int], None] | None = None,
    ) -> Link:
        """Listen for one peer (server None) or connect to `server`, retrying
        until it listens or `wait_for_server` seconds pass (None: `timeout`;
        peers that start together, like an all-reduce's ranks, wait; a client
        started by hand does not, as perftest's: NoServer at once).
        `timeout` then bounds every read. on_listening(port) is called once a
        server listens: a client started after it finds it."""
        if server is None:
            with socket.create_server(("", port), reuse_port=False) as listener:
                listener.settimeout(timeout)
                if on_listening is not None:
                    on_listening(port)
                sock, _ = listener.accept()
        else:
            wait = timeout if wait_for_server is None else wait_for_server
            deadline = time.monotonic() + wait
            while True:
                try:
                    sock = socket.create_connection((server, port), timeout=max(wait, 1.0))
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        why = e.strerror or type(e).__name__
                        raise NoServer(
                            f"no server at {server}:{port} ({why.lower()}, for {wait:g} s)"
                        ) from None
                    time.sleep(0.05)
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock)

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def recv(self) -> dict:
        while b"\n" not in self._buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the peer closed the connection")
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise ConnectionError("the peer sent a message too long")
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def swap(self, mine: Endpoint) -> Endpoint:
        """Send ours, receive theirs."""
        self.send(dataclasses.asdict(mine))
        return Endpoint(**self.recv())

    def barrier(self, tag: str = "sync") -> None:
        """Both sides reach this point before either goes on."""
        self.send({"barrier": tag})
        got = self.recv()
        if got.get("barrier") != tag:
            raise ConnectionError(f"barrier {tag!r}: the peer sent {got!r}")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
