"""JSON text of snapshot after snapshot, cheaply: the same text as
``json.dumps(obj, separators=(",", ":"))``, byte for byte.

A stream at 10 Hz of a big lab encodes some 400 kB a tick, and most of it is
unchanged from the tick before: the records of idle links, ports and paths,
their counters, the kernel's reading (taken every 5th tick), the zero rates
of idle links. Such parts are `Frozen`: read-only dicts of names, numbers
and other read-only parts, which their producers hand out again, the same
object, for as long as nothing in them changes (stats.Sampler,
port_table.PortCounterTable, linkstats.LinkStatsReader, rates). An Encoder
keeps the text of every Frozen it encoded in this call and the one before,
so an unchanged part costs one dictionary lookup; a new one goes to json's C
encoder. Lists, and dicts that hold lists (the snapshot's top, a host), are
walked here to find the Frozen parts, with the texts of keys and strings
cached; any other dict (a QP, a plane's numbers) and any value of a type not
handled here (an int subclass such as an IntEnum, a tuple, ...) goes to
json's C encoder whole. So the text is always json's.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring_ascii

_INF = float("inf")


class Frozen(dict):
    """A dict that refuses to change, so that its JSON text can be reused: its
    values are immutable too (numbers, strings, None, Frozen, FrozenList).

    Reading it is reading a dict (json, ==, dict(frozen) for a mutable copy).
    """

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("this record is shared between snapshots and read-only: copy it")

    __setitem__ = __delitem__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self):  # copy, deepcopy and pickle build a new one from a plain dict
        return (Frozen, (dict(self),))


class FrozenList(list):
    """A list of immutable values that refuses to change (see Frozen)."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("this list is shared between snapshots and read-only: copy it")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenList, (list(self),))


EMPTY_LIST = FrozenList()
_LISTS = frozenset({list, FrozenList})


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    return float.__repr__(value)


_dumps_one = json.JSONEncoder(separators=(",", ":")).encode


def _no_default(value: object) -> None:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# json's C encoder, made once (json.dumps makes one per call): for a dict of
# numbers it is about twice as fast as the walk below. No circular check.
_c_encoder = (
    c_make_encoder(None, _no_default, encode_basestring_ascii, None, ":", ",", False, False, True)
    if c_make_encoder is not None
    else None
)


class Encoder:
    """encode(obj) == json.dumps(obj, separators=(",", ":")), faster when Frozen
    parts of obj were in the previous call too. One per stream."""

    def __init__(self) -> None:
        self._frozen: dict[int, tuple[Frozen, str]] = {}  # id -> (the dict, its text)
        self._previous: dict[int, tuple[Frozen, str]] = {}
        self._strings: dict[str, str] = {}
        self._keys: dict[str, str] = {}

    def encode(self, obj: object, end: str = "") -> str:
        """The JSON text of obj, then end (e.g. a newline, without another copy)."""
        self._previous, self._frozen = self._frozen, {}
        out: list[str] = []
        self._value(obj, out)
        if end:
            out.append(end)
        if len(self._strings) > 100_000:  # strings that keep changing (timestamps as text)
            self._strings.clear()
        return "".join(out)

    def _value(self, value: object, out: list[str]) -> None:
        kind = type(value)
        if kind is str:
            text = self._strings.get(value)
            if text is None:
                text = self._strings[value] = encode_basestring_ascii(value)
            out.append(text)
        elif kind is int:
            out.append(int.__repr__(value))
        elif kind is float:
            out.append(_float_text(value))
        elif value is None:
            out.append("null")
        elif kind is Frozen:
            out.append(self._frozen_text(value))
        elif kind is dict:
            if any(type(v) in _LISTS for v in value.values()):  # records may be in there
                self._dict(value, out)
            else:  # a QP, a plane's numbers, ...: json's C encoder, whole
                out.append(_json(value))
        elif kind in _LISTS:
            self._list(value, out)
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        else:
            out.append(_json(value))

    def _frozen_text(self, value: Frozen) -> str:
        key = id(value)
        hit = self._frozen.get(key)
        if hit is None:
            hit = self._previous.get(key)
            if hit is None or hit[0] is not value:  # (the entry holds it: its id is its own)
                hit = (value, _json(value))
            self._frozen[key] = hit
        return hit[1]

    def _dict(self, value: dict, out: list[str]) -> None:
        if not value:
            out.append("{}")
            return
        start = len(out)
        keys = self._keys
        sep = "{"
        for k, v in value.items():
            text = keys.get(k)
            if text is None:
                if type(k) is not str:  # json's rules for int, float, bool and None keys
                    del out[start:]
                    out.append(_json(value))
                    return
                text = keys[k] = encode_basestring_ascii(k) + ":"
            out.append(sep + text)
            sep = ","
            self._value(v, out)
        out.append("}")

    def _list(self, value: list, out: list[str]) -> None:
        if not value:
            out.append("[]")
            return
        sep = "["
        frozen_text = self._frozen_text
        for v in value:
            out.append(sep)
            sep = ","
            if type(v) is Frozen:  # a record: most lists are lists of them
                out.append(frozen_text(v))
            else:
                self._value(v, out)
        out.append("]")


def _json(value: object) -> str:
    """json's own text of value: its C encoder (made once, see _c_encoder), which
    is faster than a walk here for anything that holds no records."""
    if _c_encoder is not None:
        return "".join(_c_encoder(value, 0))
    return _dumps_one(value)
