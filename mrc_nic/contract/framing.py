"""Typed control protocols: each operation of a lab service declared once.

An operation is a dataclass of its request fields (types, defaults, a line
of doc each), made with `@op("name")`, whose base `Request[R]` names its
reply dataclass R. The same declaration
- validates a request as it arrives (decode_request: an unknown operation is
  EOPNOTSUPP; a missing, unknown or wrongly typed field is EINVAL, one line
  saying which field and what is expected),
- dispatches it in the service (mrc_nic.lab.service: the operation's handler
  gets the typed request and returns the typed reply),
- encodes and decodes it on the client (mrc_nic.lab.client.call),
- and writes the service's list in docs/daemon.md (markdown, contract.opsdoc).

The wire is JSON lines (encode and decode, below): {"op": name, **fields}, then
{"ok": true, **reply fields}. A field whose default is None is left out of a
message while it is None. A reply may carry fields its declaration does not
have (a newer service): the client ignores them; a request may not.

A reply may hand the client file descriptors (`fd_arg` fields: its NIC
resources, docs/api.md "Isolation"): they travel with the reply's line as
SCM_RIGHTS, in the order of those fields, and the line holds each one's
position among them (-1: none). The service closes its copies once sent;
the client owns what it received.

The ops: the host daemons' in mrc_nic.contract.daemonops, the event log's in
mrc_nic.contract.eventops; `Ping` is the op every service answers.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar, dataclass_transform

from mrc_nic.errors import MrcNicError


class RequestError(MrcNicError):
    """A service refuses a request: errno (errno.EINVAL, ...) and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.errno = code

    @property
    def name(self) -> str:
        return errno.errorcode.get(self.errno, str(self.errno))

    def as_dict(self) -> dict:
        return {"errno": self.name, "message": str(self)}


def arg(doc: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING):
    """A declared field: its doc (docs/daemon.md) and its default, if any
    (factory: a default made fresh for each message, e.g. a dataclass)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"doc": doc})


def fd_arg(doc: str):
    """A reply field that is a file descriptor (SCM_RIGHTS; -1: none)."""
    return dataclasses.field(default=-1, metadata={"doc": doc, "fd": True})


def fd_fields(cls: type) -> list[str]:
    """The names of a reply's file-descriptor fields, in order."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("fd")]


@dataclasses.dataclass(kw_only=True)
class Reply:
    """Base of the reply dataclasses (declared with @reply)."""


R = TypeVar("R", bound=Reply)


class Request(Generic[R]):
    """Base of the request dataclasses (declared with @op)."""

    OP: ClassVar[str]
    Reply: ClassVar[type[Reply]]


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field, arg, fd_arg))
def reply(cls: type) -> type:
    """Declare a reply: a keyword-only dataclass of its fields."""
    return dataclasses.dataclass(kw_only=True)(cls)


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field, arg, fd_arg))
def op(name: str) -> Callable[[type], type]:
    """Declare an operation: its name and, as a dataclass, its request fields;
    its reply is the type argument of its Request[...] base."""

    def declare(cls: type) -> type:
        cls = dataclasses.dataclass(kw_only=True)(cls)
        cls.OP = name
        cls.Reply = next(
            typing.get_args(base)[0]
            for base in cls.__orig_bases__  # type: ignore[attr-defined]
            if typing.get_origin(base) is Request
        )
        return cls

    return declare


@reply
class PingReply(Reply):
    pid: int = arg("the service's process id")


@op("ping")
class Ping(Request[PingReply]):
    """Is the service there? (Each service's ping extends the reply.)"""


class Ops:
    """The operations one service answers."""

    def __init__(self, service: str, ops: Iterable[type[Request]]) -> None:
        self.service = service
        self.by_name: dict[str, type[Request]] = {}
        for cls in ops:
            if cls.OP in self.by_name:
                raise ValueError(f"{service}: operation {cls.OP!r} declared twice")
            self.by_name[cls.OP] = cls

    def __iter__(self):
        return iter(self.by_name.values())

    def decode_request(self, message: dict) -> Request:
        """The typed request of a decoded line; RequestError when it is not one."""
        name = message.get("op")
        cls = self.by_name.get(name) if isinstance(name, str) else None
        if cls is None:
            raise RequestError(errno.EOPNOTSUPP, f"unknown operation {name!r} (see docs/daemon.md)")
        return _build(cls, {k: v for k, v in message.items() if k != "op"}, cls.OP, strict=True)


# ---- messages -------------------------------------------------------------------------
def encode_request(request: Request) -> dict:
    return {"op": request.OP, **_fields_out(request)}


def encode_reply(value: Reply) -> dict:
    """The reply's line; its fd fields as their positions in reply_fds(value)."""
    out = _fields_out(value)
    at = 0
    for name in fd_fields(type(value)):
        if out[name] >= 0:
            out[name], at = at, at + 1
    return out


def reply_fds(value: Reply) -> list[int]:
    """The file descriptors a reply hands over, in its fd fields' order."""
    return [fd for fd in (getattr(value, n) for n in fd_fields(type(value))) if fd >= 0]


def decode_reply(cls: type[R], message: dict, op_name: str, fds: list[int] = ()) -> R:
    """A reply's results (without "ok") as its dataclass; fields it does not
    declare are ignored; RequestError (EINVAL) when one is missing or mistyped.
    fds: the descriptors that came with the line; its fd fields get them."""
    body = {k: v for k, v in message.items() if k != "ok"}
    value = _build(cls, body, f"{op_name} reply", strict=False)
    for name in fd_fields(cls):
        at = getattr(value, name)
        if at >= 0:
            if at >= len(fds):
                raise RequestError(
                    errno.EPROTO, f"{op_name} reply: field {name!r} names fd {at} of {len(fds)}"
                )
            setattr(value, name, fds[at])
    return value


def _fields_out(value: Any) -> dict:
    out = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if v is None and f.default is None:
            continue
        out[f.name] = _plain(v)
    return out


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _fields_out(v)
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


# ---- validation -------------------------------------------------------------------------
@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, body: dict, where: str, *, strict: bool) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    if strict:
        for name in body:
            if name not in fields:
                raise RequestError(
                    errno.EINVAL,
                    f"{where}: unknown field {name!r} (fields: {', '.join(fields) or 'none'})",
                )
    hints = _hints(cls)
    values = {}
    for name, f in fields.items():
        if name not in body:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RequestError(
                    errno.EINVAL, f"{where}: missing field {name!r} ({describe(hints[name])})"
                )
            continue
        values[name] = _check(body[name], hints[name], f"{where}: field {name!r}", strict)
    return cls(**values)


def _check(value: Any, kind: Any, where: str, strict: bool, expected: str = "") -> Any:
    """value as `kind` (int, float, bool, str, dict, list[X], X | None, a
    dataclass, Any), or RequestError saying what was expected."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    ok = True
    if kind is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check(value, inner[0] if len(inner) == 1 else Any, where, strict, describe(kind))
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind is str:
        ok = isinstance(value, str)
    elif kind is dict or origin is dict:
        ok = isinstance(value, dict)
    elif kind is list or origin is list:
        if isinstance(value, list):
            item = args[0] if args else Any
            return [_check(v, item, f"{where}[{i}]", strict) for i, v in enumerate(value)]
        ok = False
    elif dataclasses.is_dataclass(kind):
        if isinstance(value, dict):
            return _build(kind, value, where, strict=strict)
        ok = False
    if not ok:
        raise RequestError(
            errno.EINVAL, f"{where} must be {expected or describe(kind)}, not {_shown(value)}"
        )
    return value


def describe(kind: Any) -> str:
    """What a field holds, in words (errors, docs)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        inner = [describe(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"a list of {_plural(args[0])}" if args else "a list"
    if dataclasses.is_dataclass(kind):
        names = ", ".join(f.name for f in dataclasses.fields(kind))
        return f"an object ({names})"
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        dict: "an object",
    }.get(origin or kind, "anything")


def _plural(kind: Any) -> str:
    return {int: "integers", str: "strings", float: "numbers", dict: "objects"}.get(
        kind, f"({describe(kind)})"
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 40 else text[:37] + "...") + f" ({type(value).__name__})"


# ---- docs -------------------------------------------------------------------------------
def markdown(ops: Ops) -> str:
    """The service's operations for docs/daemon.md: per op, what it does, its
    request fields (with defaults) and its reply fields."""
    out = []
    for cls in ops:
        out.append(f"- **`{cls.OP}`**: {' '.join((cls.__doc__ or '').split())}")
        for title, kind, request in (("request", cls, True), ("reply", cls.Reply, False)):
            lines = _field_docs(kind, request=request)
            out.append(f"  - {title}:" + ("" if lines else " no fields"))
            out += [f"    - {line}" for line in lines]
    return "\n".join(out) + "\n"


def _field_docs(cls: type, *, request: bool) -> list[str]:
    """One line per field; a class's own fields before those it inherits."""
    hints = _hints(cls)
    own = cls.__dict__.get("__annotations__", {})
    out = []
    for f in sorted(dataclasses.fields(cls), key=lambda f: f.name not in own):
        if not f.init:
            continue
        text = f"`{f.name}` ({describe(hints[f.name])}"
        if request and f.default is not dataclasses.MISSING:
            text += f", default {_default(f.default)}"
        elif request and f.default_factory is not dataclasses.MISSING:
            text += f", default {_default(f.default_factory())}"
        doc = f.metadata.get("doc", "")
        out.append(text + ")" + (f": {doc}" if doc else ""))
    return out


def _default(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        value = _fields_out(value)
    return f"`{json.dumps(value, separators=(',', ':'))}`"


# ---- the wire: one JSON object per line -------------------------------------------------
MAX_LINE = 1 << 20  # a longer message is refused (the service drops the connection)


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a message must be a JSON object")
    return value
