"""The typed control protocol (mrc_nic.contract.framing, mrc_nic.contract.daemonops,
mrc_nic.contract.eventops): every declared op round-trips through JSON, requests
are validated from the declarations, the services handle exactly the
declared ops, and docs/daemon.md lists exactly them.

Tier 1: pure Python, no root, no lab.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import types
import typing
from pathlib import Path

import pytest

from mrc_nic.contract import daemonops as ops
from mrc_nic.contract import eventops, framing, opsdoc
from mrc_nic.contract import session as session_module
from mrc_nic.contract.framing import Reply, Request, arg, op, reply
from mrc_nic.lab import client
from mrc_nic.lab.service import LineService
from mrc_nic.transport.qp import Retry

ALL_OPS = [*ops.OPS, *eventops.OPS]


# A sample service's ops, for what the machinery does with fields of every
# kind (the daemon's own ops are tested above, each of them).
@reply
class SqOpenReply(Reply):
    qpns: list[int] = arg("QPs opened")


@op("sq_open")
class SqOpen(Request[SqOpenReply]):
    """Open QPs."""

    count: int = arg("QPs to open")
    chunk: int = arg("bytes per WRITE")


@reply
class WriteReply(Reply):
    error: str | None = arg("why not")
    timing: list[dict] | None = arg("timings", None)


@op("write")
class Write(Request[WriteReply]):
    """Write."""

    dst: str = arg("the receiving host")
    qpns: list[int] = arg("send QPs")
    remote: list[dict] = arg("remote QPs")
    size: int = arg("bytes")
    chunk: int = arg("bytes per WRITE")
    verify: bool = arg("verify", False)
    retry: Retry = arg("retry budget", factory=Retry)
    cc: dict | None = arg("NSCC fields", None)
    ev_min_active: int | None = arg("the floor", None)


@reply
class RqCloseReply(Reply):
    closed: list[int] = arg("closed")


@op("rq_close")
class RqClose(Request[RqCloseReply]):
    """Close."""

    qpns: list[int] = arg("receive QPs")


SAMPLE = framing.Ops("sample", [SqOpen, Write, RqClose])


def sample(kind):
    """A value of a declared type that differs from any default."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        return sample(next(a for a in args if a is not type(None)))
    if origin is list:
        return [sample(args[0]), sample(args[0])]
    if origin is dict:
        return {"1": sample(args[1])}
    if dataclasses.is_dataclass(kind):
        return kind(**{f.name: sample(hint) for f, hint in _fields(kind)})
    return {bool: True, int: 3, float: 1.5, str: "x", dict: {"k": [1, "v"]}}[kind]


def _fields(cls):
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def full(cls):
    """An instance of a request or reply with every field set."""
    return cls(**{f.name: sample(hint) for f, hint in _fields(cls)})


def wire(message: dict) -> dict:
    return client.decode(client.encode(message))


@pytest.mark.parametrize("cls", ALL_OPS, ids=lambda c: c.OP)
def test_every_op_round_trips_through_the_wire(cls):
    service = ops.OPS if cls in ops.OPS else eventops.OPS
    request = full(cls)
    message = wire(framing.encode_request(request))
    assert message["op"] == cls.OP
    assert service.decode_request(message) == request
    result = full(cls.Reply)
    fds = framing.reply_fds(result)  # a reply's descriptors travel beside its line
    got = framing.decode_reply(cls.Reply, wire(framing.encode_reply(result)), cls.OP, fds)
    assert got == result


@pytest.mark.parametrize("cls", ALL_OPS, ids=lambda c: c.OP)
def test_defaults_fill_what_a_request_leaves_out(cls):
    required = {
        f.name: sample(hint)
        for f, hint in _fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    service = ops.OPS if cls in ops.OPS else eventops.OPS
    assert service.decode_request({"op": cls.OP, **wire(required)}) == cls(**required)


def test_a_field_whose_default_is_none_is_left_out_while_none():
    request = Write(dst="h1", qpns=[1], remote=[], size=1, chunk=1024)
    message = framing.encode_request(request)
    assert "cc" not in message and "ev_min_active" not in message
    assert message["retry"] == {"linear_cnt": 7, "exp_cnt": 7}
    reply = dataclasses.replace(full(WriteReply), timing=None, error=None)
    out = framing.encode_reply(reply)
    assert "timing" not in out and out["error"] is None, "error has no default: always sent"


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"op": "sq_open", "chunk": 1024}, "sq_open: missing field 'count' (an integer)"),
        (
            {"op": "sq_open", "count": 1, "chunk": 1024, "cuont": 2},
            "sq_open: unknown field 'cuont' (fields: count, chunk)",
        ),
        (
            {"op": "sq_open", "count": "1", "chunk": 1024},
            "sq_open: field 'count' must be an integer, not '1' (str)",
        ),
        (
            {"op": "sq_open", "count": True, "chunk": 1024},
            "field 'count' must be an integer, not True (bool)",
        ),
        (
            {"op": "sq_open", "count": 1.0, "chunk": 1024},
            "field 'count' must be an integer, not 1.0 (float)",
        ),
        (
            {"op": "rq_close", "qpns": [1, "2"]},
            "rq_close: field 'qpns'[1] must be an integer",
        ),
        ({"op": "rq_close", "qpns": 5}, "field 'qpns' must be a list of integers, not 5"),
        ({"op": "ev_set", "qpn": 1, "ev": 2, "state": None}, "field 'state' must be a string"),
        (
            {"op": "write", "dst": "h1", "qpns": [], "remote": [], "size": 1, "chunk": 1024,
             "retry": {"linear": 1}},
            "write: field 'retry': unknown field 'linear' (fields: linear_cnt, exp_cnt)",
        ),
        (
            {"op": "write", "dst": "h1", "qpns": [], "remote": [], "size": 1, "chunk": 1024,
             "cc": [1]},
            "field 'cc' must be an object or null",
        ),
        (
            {"op": "write", "dst": "h1", "qpns": [], "remote": [], "size": 1, "chunk": 1024,
             "verify": 1},
            "field 'verify' must be true or false, not 1 (int)",
        ),
    ],
)  # fmt: skip
def test_a_bad_request_is_einval_naming_the_field(message, match):
    service = SAMPLE if message["op"] in SAMPLE.by_name else ops.OPS
    with pytest.raises(framing.RequestError) as e:
        service.decode_request(message)
    assert match in str(e.value) and e.value.errno == errno.EINVAL
    assert "\n" not in str(e.value)


def test_types_accept_what_json_gives():
    read = eventops.OPS.decode_request({"op": "read", "wait": 2, "types": None})
    assert read.wait == 2.0 and isinstance(read.wait, float) and read.types is None
    write = SAMPLE.decode_request(
        {"op": "write", "dst": "h1", "qpns": [], "remote": [], "size": 1, "chunk": 1024,
         "retry": {"exp_cnt": 25}, "ev_min_active": None, "cc": {"gamma": 0.5}}
    )  # fmt: skip
    assert write.retry == Retry(exp_cnt=25) and write.ev_min_active is None


@pytest.mark.parametrize("name", ["nonsense", None, 3, "post"])
def test_an_unknown_op_is_eopnotsupp(name):
    message = {} if name is None else {"op": name}
    with pytest.raises(framing.RequestError, match="unknown operation") as e:
        ops.OPS.decode_request(message)  # "post" is the event log's, not the daemon's
    assert e.value.errno == errno.EOPNOTSUPP


def test_a_reply_ignores_fields_it_does_not_declare_and_needs_those_it_does():
    reply = framing.decode_reply(SqOpenReply, {"ok": True, "qpns": [1], "new": 2}, "sq_open")
    assert reply == SqOpenReply(qpns=[1])
    with pytest.raises(framing.RequestError, match="sq_open reply: missing field 'qpns'"):
        framing.decode_reply(SqOpenReply, {"ok": True}, "sq_open")
    # The generic ping (testbed) reads any service's ping reply.
    daemon = framing.encode_reply(ops.PingReply(pid=7, host="h0", index=0))
    assert framing.decode_reply(framing.PingReply, daemon, "ping") == framing.PingReply(pid=7)


def test_each_op_has_its_reply_and_a_name_once():
    for cls in ALL_OPS:
        assert issubclass(cls.Reply, framing.Reply), cls
        assert cls.__doc__, f"{cls.OP} has no doc"
        for f in [*dataclasses.fields(cls), *dataclasses.fields(cls.Reply)]:
            assert f.metadata.get("doc"), f"{cls.OP}: field {f.name} has no doc"
    with pytest.raises(ValueError, match="declared twice"):
        framing.Ops("x", [ops.Ping, eventops.Ping])


def test_the_services_handle_exactly_the_declared_ops(tmp_path):
    from mrc_nic.observe.eventlog import EventLog
    from mrc_nic.transport.appresources import AppResources
    from mrc_nic.transport.daemon import Daemon
    from mrc_nic.transport.evevents import EvEvents
    from mrc_nic.transport.ports import Ports
    from mrc_nic.transport.profileops import ProfileOps
    from mrc_nic.transport.qplife import QpLifecycle

    assert EventLog.operations is eventops.OPS
    assert {n[3:] for n in dir(EventLog) if n.startswith("op_")} == set(eventops.OPS.by_name)
    # the daemon: its own op_ methods and each part's handles, once each, all declared
    assert Daemon.operations is ops.OPS
    handled = [n[3:] for n in dir(Daemon) if n.startswith("op_")]
    for part in (AppResources, QpLifecycle, EvEvents, ProfileOps, Ports):
        for request, method in part.handles.items():
            assert ops.OPS.by_name[request.OP] is request
            assert callable(getattr(part, method)), (part, method)
            handled.append(request.OP)
    assert sorted(handled) == sorted(ops.OPS.by_name)

    class Deaf(LineService):
        operations = framing.Ops("deaf", [framing.Ping])

    deaf = Deaf(tmp_path / "deaf.sock")
    with pytest.raises(TypeError, match=r"without a handler: \['ping'\]"):
        deaf.check_handlers()
    deaf.handle(framing.Ping, lambda req, conn: framing.PingReply(pid=1))
    deaf.check_handlers()
    with pytest.raises(TypeError, match="has a handler already"):
        deaf.handle(framing.Ping, lambda req, conn: None)
    with pytest.raises(TypeError, match="declares no operation 'sq_open'"):
        deaf.handle(SqOpen, lambda req, conn: None)
    assert deaf.handle_line(b'{"op": "ping"}', None) == ({"ok": True, "pid": 1}, [])
    with pytest.raises(TypeError, match=r"handlers of no declared operation: \['write'\]"):

        class Stray(LineService):
            operations = framing.Ops("stray", [framing.Ping])

            def op_write(self, req, conn) -> None: ...


class Echo(LineService):
    operations = framing.Ops("echo", [SqOpen, Write])

    def op_sq_open(self, req: SqOpen, conn) -> SqOpenReply:
        if req.count > 64:
            raise framing.RequestError(errno.EINVAL, "too many")
        return SqOpenReply(qpns=[req.count, req.chunk])

    def op_write(self, req: Write, conn) -> None:
        return None  # answered later


def test_a_service_dispatches_typed_requests_and_answers_on_the_wire(tmp_path):
    echo = Echo(tmp_path / "echo.sock")
    line = client.encode(framing.encode_request(SqOpen(count=2, chunk=1024))).strip()
    assert echo.handle_line(line, None) == ({"ok": True, "qpns": [2, 1024]}, [])
    refused, _ = echo.handle_line(b'{"op": "sq_open", "count": 65, "chunk": 1}', None)
    assert refused == {"ok": False, "errno": "EINVAL", "message": "too many"}
    bad, _ = echo.handle_line(b'{"op": "sq_open", "count": 1}', None)
    assert bad["errno"] == "EINVAL" and "missing field 'chunk'" in bad["message"]
    unknown, _ = echo.handle_line(b'{"op": "ping"}', None)
    assert unknown["errno"] == errno.errorcode[errno.EOPNOTSUPP]
    assert echo.handle_line(b"[1]", None)[0]["errno"] == "EINVAL"
    later = Write(dst="h1", qpns=[], remote=[], size=1, chunk=1024)
    assert echo.handle_line(client.encode(framing.encode_request(later)), None) is None


def test_docs_list_exactly_the_declared_ops():
    text = opsdoc.DOCS.read_text()
    assert opsdoc.docs_text(text) == text, "docs/daemon.md is out of date: run `make docs`"
    for name, service in opsdoc.TABLES.items():
        begin, end = (re.escape(m) for m in opsdoc._marks(name))
        section = re.search(begin + "(.*?)" + end, text, re.S).group(1)
        documented = re.findall(r"^- \*\*`(\w+)`\*\*", section, re.M)
        assert documented == list(service.by_name), name


def test_the_docs_tool_checks_and_writes(tmp_path, monkeypatch):
    doc = tmp_path / "daemon.md"
    doc.write_text(opsdoc.DOCS.read_text().replace("`qp_list`", "`qp_list_old`", 1))
    monkeypatch.setattr(opsdoc, "DOCS", doc)
    assert opsdoc.main(["--check"]) == 1
    assert opsdoc.main([]) == 0 and opsdoc.main(["--check"]) == 0
    assert (
        doc.read_text()
        == Path(opsdoc.__file__).resolve().parents[2].joinpath("docs/daemon.md").read_text()
    )
    with pytest.raises(ValueError, match="no <!-- ops:daemon"):
        opsdoc.docs_text("no marks")


def test_the_client_sends_the_declaration_and_returns_the_typed_reply(monkeypatch):
    sent = []

    class FakeSock:
        def __init__(self, *a):
            self.replies = [b'{"ok": true, "qpns": [65537], "extra": 1}\n']

        def settimeout(self, t):
            pass

        def connect(self, path):
            pass

        def sendall(self, data):
            sent.append(json.loads(data))

        def recvmsg(self, n, ancillary):
            return (self.replies.pop(0) if self.replies else b""), [], 0, None

        def close(self):
            pass

    monkeypatch.setattr(session_module.socket, "socket", FakeSock)
    reply = client.call("lab", "h0", SqOpen(count=1, chunk=2048))
    assert sent == [{"op": "sq_open", "count": 1, "chunk": 2048}]
    assert reply == SqOpenReply(qpns=[65537])
    with pytest.raises(client.DaemonError, match="not qp_list's: qp_list reply: missing field"):
        client.call("lab", "h0", ops.QpList())


@reply
class PipeReply(Reply):
    note: str = arg("what the descriptors are")
    first: int = framing.fd_arg("a pipe's read end")
    missing: int = framing.fd_arg("none: -1")
    second: int = framing.fd_arg("another pipe's read end")


@op("pipes")
class Pipes(Request[PipeReply]):
    """Two pipes' read ends, handed over."""


class PipeService(LineService):
    operations = framing.Ops("pipes", [Pipes])

    def op_pipes(self, req: Pipes, conn) -> PipeReply:
        self.ends = [os.pipe(), os.pipe()]
        return PipeReply(note="two", first=self.ends[0][0], second=self.ends[1][0])


def test_a_reply_hands_its_descriptors_over_scm_rights(tmp_path):
    """The reply's fd fields arrive as descriptors of the client's own, in
    order, and the service keeps none of them open."""
    import socket

    from mrc_nic.lab.service import Conn

    service = PipeService(tmp_path / "pipes.sock")
    server, far = socket.socketpair()
    session = object.__new__(client.Session)  # connected through the pair, not a path
    session.lab, session.host, session.timeout = "lab", "h0", 5.0
    session.sock, session._buf, session._fds = far, b"", []
    try:
        far.sendall(client.encode(framing.encode_request(Pipes())))
        line = server.recv(4096).strip()
        service._send(Conn(server), *service.handle_line(line, Conn(server)))
        for read_end, _ in service.ends:  # the service's copies are closed once sent
            with pytest.raises(OSError):
                os.fstat(read_end)
        got = framing.decode_reply(PipeReply, session._read_line("pipes", 5.0), "pipes",
                                   session._fds)  # fmt: skip
        assert got.note == "two" and got.missing == -1
        for (_, write_end), fd in zip(service.ends, (got.first, got.second), strict=True):
            os.write(write_end, b"x")
            assert os.read(fd, 1) == b"x"  # the very pipe, through the client's own fd
            os.close(fd)
            os.close(write_end)
    finally:
        server.close()
        far.close()
