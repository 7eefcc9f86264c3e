"""client.post_event keeps one connection to a lab's event log per process (a
daemon posts hundreds of events a second under EV churn), reconnects once
when the log closed it (restarted), and loses the event quietly when there
is no log, as before. Against a fake event log on a unix socket."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from mrc_nic.contract import session as session_module
from mrc_nic.lab import client


class FakeLog:
    """Accepts connections and answers every post line with a sequence number."""

    def __init__(self, path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.connections = 0
        self.events: list[dict] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.conns.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        buf = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.events.append(json.loads(line)["event"])
                conn.sendall(json.dumps({"ok": True, "seq": len(self.events)}).encode() + b"\n")

    def drop_connections(self) -> None:
        """As a restarted log: every kept connection is gone."""
        for c in self.conns:
            c.shutdown(socket.SHUT_RDWR)
            c.close()
        self.conns.clear()

    def close(self) -> None:
        self.listener.close()
        self.drop_connections()


@pytest.fixture
def log(tmp_path, monkeypatch):
    def path(lab: str, host: str):
        return tmp_path / f"{lab}-{host}.sock"

    monkeypatch.setattr(session_module, "socket_path", path)
    fake = FakeLog(tmp_path / f"zpost-{client.EVENTS_SERVICE}.sock")
    yield fake
    fake.close()
    session = client._event_sessions.pop("zpost", None)
    if session is not None:
        session.close()


def test_posts_share_one_connection_and_survive_a_restarted_log(log):
    for i in range(5):
        client.post_event("zpost", {"type": "note", "i": i})
    assert [e["i"] for e in log.events] == list(range(5))
    assert log.connections == 1

    log.drop_connections()
    client.post_event("zpost", {"type": "note", "i": 5})
    assert [e["i"] for e in log.events] == list(range(6)), "not lost: posted on a new connection"
    assert log.connections == 2


def test_without_a_log_the_event_is_lost_quietly(tmp_path, monkeypatch):
    monkeypatch.setattr(client, "socket_path", lambda lab, host: tmp_path / "none.sock")
    client.post_event("znolog", {"type": "note"})  # no exception
    assert "znolog" not in client._event_sessions
