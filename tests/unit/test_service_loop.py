"""The services' loop (mrc_nic.lab.service.LineService) against clients that
misbehave: one loop serves every client of a host, so none may stall it."""

from __future__ import annotations

import errno
import json
import socket

import pytest

from mrc_nic.contract import framing
from mrc_nic.lab import service
from mrc_nic.lab.service import Conn, LineService


class Echo(LineService):
    operations = framing.Ops("echo", [framing.Ping])

    def op_ping(self, req: framing.Ping, conn) -> framing.PingReply:
        return framing.PingReply(pid=7)


@pytest.fixture
def echo(tmp_path):
    return Echo(tmp_path / "echo.sock")


def _registered(svc: LineService, sock: socket.socket) -> Conn:
    sock.setblocking(False)
    conn = Conn(sock)
    svc.watch(sock, lambda: svc._ready(conn))
    return conn


def test_a_client_that_reads_no_replies_is_dropped_not_waited_for(echo, monkeypatch):
    """Replies its socket does not take wait in its outbox; past OUTBOX_MAX the
    client is dropped. No send ever blocks the loop."""
    monkeypatch.setattr(service, "OUTBOX_MAX", 64 << 10)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = _registered(echo, ours)
        sent = 0
        while not conn.closed:
            assert sent < 100_000, "never dropped"
            echo._send(conn, {"ok": True, "pad": "x" * 1000})  # returns at once, every time
            sent += 1
        assert not conn.out and sent > 64  # the socket took some first; the rest went
        theirs.setblocking(False)
        got = b""
        while True:
            try:
                chunk = theirs.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            got += chunk
        assert got.count(b"\n") < sent  # what was queued at the drop went nowhere


def test_replies_that_wait_go_out_whole_and_in_order(echo):
    """A client that reads late gets every reply, whole, in order."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    with ours, theirs:
        conn = _registered(echo, ours)
        for i in range(200):
            echo._send(conn, {"ok": True, "i": i, "pad": "y" * 500})
        assert conn.out, "the small buffer left replies waiting"
        theirs.settimeout(5)
        lines: list[bytes] = []
        buf = b""
        while len(lines) < 200:
            for key, _ in echo.sel.select(0.01):  # the loop's part: writable, flush
                key.data()
            try:
                buf += theirs.recv(65536)
            except TimeoutError:
                break
            *done, buf = buf.split(b"\n")
            lines += done
        assert [json.loads(x)["i"] for x in lines] == list(range(200))
        assert not conn.out and not conn.closed


def test_a_user_past_its_connections_is_refused_in_one_line(echo, monkeypatch):
    """A user that is not root holds at most CONNS_PER_USER connections; the
    next gets one line saying so (EMFILE) and is closed; root has no cap."""
    monkeypatch.setattr(service, "CONNS_PER_USER", 2)
    monkeypatch.setattr(service, "peer_cred", lambda sock: (1, 4242, 4242))
    monkeypatch.setattr(service, "is_operator", lambda uid: uid == 0)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(echo.path))
    listener.listen(8)
    listener.setblocking(False)
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for c in clients:
            c.connect(str(echo.path))
            echo._accept(listener)
        assert echo._conns_by_uid[4242] == 2
        clients[2].settimeout(2)
        refusal = json.loads(clients[2].recv(4096))
        assert refusal["errno"] == "EMFILE" and "uid 4242 holds 2 connections" in refusal["message"]
        assert clients[2].recv(4096) == b""  # closed
    finally:
        for c in clients:
            c.close()
        listener.close()


def test_no_descriptor_left_pauses_new_connections_and_the_loop_goes_on(echo, capsys):
    """accept()'s EMFILE is not the end of the service: the listener leaves the
    loop for ACCEPT_PAUSE_S, and the loop goes on serving the others."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:

        class Full:  # a listener whose accept finds no descriptor left
            fileno = sock.fileno

            def accept(self):
                raise OSError(errno.EMFILE, "Too many open files")

        full = Full()
        echo.watch(full, lambda: None)
        echo._accept(full)
        assert echo._accept_paused_until is not None
        with pytest.raises(KeyError):
            echo.sel.get_key(full)  # out of the loop until the pause ends
    assert "new connections wait" in capsys.readouterr().err
