"""Every event loop waits through epoll, so a process holding more than
1,024 descriptors works (issue 26 item 7): each loop below runs with its
descriptors numbered above select()'s FD_SETSIZE, where select.select raises
"filedescriptor out of range in select()". The loops that need a lab (a
WRITE's, the capture's) are run so in tests/lab/test_many_fds.py."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time

import pytest

from mrc_nic.kernel import fdwait, netns
from mrc_nic.observe import live
from mrc_nic.workloads import hostprocs, peers, traffic
from tests.helpers.fds import above_setsize, many_fds


@pytest.fixture
def high_fds():
    with many_fds():
        yield


def test_select_itself_refuses_such_descriptors(high_fds):
    r, w = os.pipe()
    try:
        above_setsize(r)
        with pytest.raises(ValueError, match="out of range"):
            select.select([r], [], [], 0)
    finally:
        os.close(r), os.close(w)


def test_waiter_and_readable_see_descriptors_above_1024(high_fds):
    r, w = os.pipe()
    a, b = socket.socketpair()
    try:
        above_setsize(r), above_setsize(a.fileno())
        assert fdwait.readable([r, a], 0) == []
        os.write(w, b"x")
        assert fdwait.readable([r, a], 1.0) == [r]
        with fdwait.Waiter([r, a]) as waiter:
            b.send(b"y")
            assert sorted(map(id, waiter.wait(1.0))) == sorted(map(id, [r, a]))
            os.read(r, 1), a.recv(1)
            assert waiter.wait(-1) == []  # a deadline already passed: no wait
    finally:
        os.close(r), os.close(w), a.close(), b.close()


def _proc_printing(*lines: dict) -> subprocess.Popen:
    code = "import sys\n" + "".join(f"print({json.dumps(json.dumps(x))})\n" for x in lines)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_host_processes_lines_are_gathered_above_1024(high_fds):
    hosts = []
    try:
        for i in range(3):
            host = object.__new__(hostprocs.HostProc)  # no namespace needed
            host.netns, host.buf, host.lines, host.stderr_tail = f"ns{i}", b"", [], ""
            host.proc = _proc_printing({"ready": 100 + i})
            above_setsize(host.proc.stdout.fileno())
            hosts.append(host)
        got = hostprocs.gather(hosts, "ready", time.monotonic() + 30)
        assert [g["ready"] for g in got] == [100, 101, 102]
    finally:
        for host in hosts:
            host.proc.kill(), host.proc.wait(), host.proc.stdout.close(), host.proc.stderr.close()


def test_peer_ready_line_is_read_above_1024(high_fds):
    proc = _proc_printing({"ready": True, "port": 4242}, {"later": 1})
    try:
        above_setsize(proc.stdout.fileno())
        ready, rest = peers._ready_line(proc, 30)
        assert ready == {"ready": True, "port": 4242}
    finally:
        proc.kill(), proc.wait(), proc.stdout.close(), proc.stderr.close()


def test_traffic_receiver_counts_datagrams_above_1024(high_fds):
    socks = []
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for plane in range(2):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            above_setsize(s.fileno())
            socks.append((plane, s))
        sender.bind(("127.0.0.1", 0))
        sport = sender.getsockname()[1]
        for plane, s in socks:
            for _ in range(3 + plane):
                sender.sendto(b"z" * 100, s.getsockname())
        got = traffic._receive(socks, 0.3)
        assert got["packets"] == {f"0/{sport}": 3, f"1/{sport}": 4}
        assert got["bytes"] == {f"0/{sport}": 300, f"1/{sport}": 400}
    finally:
        sender.close()
        for _, s in socks:
            s.close()


def test_namespace_child_result_is_read_above_1024(high_fds):
    r, w = os.pipe()
    above_setsize(r)
    pid = os.fork()
    if pid == 0:  # the child a start_in() makes, without entering a namespace
        os.write(w, json.dumps({"result": [1, 2]}).encode())
        os._exit(0)
    os.close(w)
    assert netns.Child(pid, r).result(timeout=30) == [1, 2]


def test_live_key_reader_takes_keys_above_1024(high_fds, monkeypatch):
    r, w = os.pipe()
    stdin = os.fdopen(r, "r")
    try:
        above_setsize(stdin.fileno())
        monkeypatch.setattr(sys, "stdin", stdin)
        reader = live.KeyReader()
        start = time.monotonic()
        reader.sleep(0.05)  # no key: the whole wait
        assert time.monotonic() - start >= 0.05 and not reader.quit
        os.write(w, b"q")
        reader.sleep(30)
        assert reader.quit
    finally:
        stdin.close(), os.close(w)
