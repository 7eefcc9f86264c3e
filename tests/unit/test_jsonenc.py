"""The stream's JSON encoder: json.dumps's text, byte for byte, snapshot after
snapshot, with the text of unchanged read-only parts reused. Pure Python."""

from __future__ import annotations

import copy
import enum
import json
import pickle
from collections import OrderedDict

import pytest

from mrc_nic.observe import rates
from mrc_nic.observe.jsonenc import EMPTY_LIST, Encoder, Frozen, FrozenList
from tests.helpers.fake_snapshot import default_topology, recv_qp, send_qp, snapshot


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Colour(enum.IntEnum):
    RED = 3


ODD_VALUES = [
    {"a": 1, "b": [1, 2.5, None, True, False], "c": {}, "d": []},
    {"é": "ünïcode ✓", "tab": 'a\tb"c\\d\n', "ctl": "\x01\x7f"},
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key", "s": 0},
    {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "z": -0.0, "e": 1e16},
    {"big": 2**64 - 1, "neg": -(2**63), "enum": Colour.RED, "tuple": (1, "x", None)},
    [OrderedDict(b=1, a=2), Frozen(x=1, y=[1, 2]), FrozenList(["a", "b"]), EMPTY_LIST],
    [{"rec": 1, "frozen": Frozen(p=0)}, {"rec": 1, "frozen": Frozen(p=0)}, 7, "s", None],
    {"walked": [1, {"a": 2}], 3: "an int key after a list", "f": Frozen(z=1)},
    {"top": [Frozen(a=1)], "plain": {"n": [Frozen(b=2)], "m": {"deep": (1, 2)}}},
    "just a string",
    12,
    [],
]


@pytest.mark.parametrize("value", ODD_VALUES)
def test_the_text_is_json_dumps(value):
    encoder = Encoder()
    assert encoder.encode(value) == dumps(value)
    assert encoder.encode(value) == dumps(value)  # again, from what it kept


def test_snapshots_with_rates_encode_as_json_dumps_one_after_another():
    topo = default_topology()
    encoder = Encoder()
    prev = None
    for t in range(6):
        snap = snapshot(
            topo,
            10.0 + t / 10,
            pkts=lambda lk, d, t=t: 1000 * t if lk.plane == 2 else 5,
            qps=[send_qp(1, acked=100 * t), recv_qp(0x10001, placed=100 * t)],
            kernel_seconds=10.0 + (t // 3) / 2,
            nic_counters={"tx_retx": t, "drop_spoofed": 0},
        )
        if prev is not None:
            rates.add_rates(prev, snap)
        assert encoder.encode(snap) == dumps(snap)
        prev = snap


def test_a_record_whose_list_or_dict_changed_is_encoded_again():
    shared = Frozen(pkts=1)
    inner = [1]
    plain = {"n": 1}
    records = [{"a": shared, "l": inner, "d": plain}, {"a": shared, "s": "x"}]
    encoder = Encoder()
    assert encoder.encode(records) == dumps(records)
    inner.append(2)
    plain["n"] = 2
    assert encoder.encode(records) == dumps(records)
    records[1]["s"] = "y"  # a new value object: a new signature
    assert encoder.encode(records) == dumps(records)


def test_records_with_the_same_values_under_other_keys_are_not_confused():
    value = Frozen(n=1)
    encoder = Encoder()
    assert encoder.encode([{"a": value}]) == '[{"a":{"n":1}}]'
    assert encoder.encode([{"b": value}]) == '[{"b":{"n":1}}]'


def test_frozen_parts_refuse_changes_but_copy_and_pickle():
    frozen = Frozen(a=1, b=2)
    for change in (
        lambda: frozen.__setitem__("a", 2),
        lambda: frozen.__delitem__("a"),
        lambda: frozen.update(a=3),
        lambda: frozen.pop("a"),
        lambda: frozen.setdefault("c", 1),
        frozen.clear,
        frozen.popitem,
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    with pytest.raises(TypeError):
        frozen |= {"c": 1}
    assert frozen == {"a": 1, "b": 2}
    for twin in (copy.copy(frozen), copy.deepcopy(frozen), pickle.loads(pickle.dumps(frozen))):
        assert twin == frozen and type(twin) is Frozen
    names = FrozenList(["h0", "h1"])
    with pytest.raises(TypeError, match="read-only"):
        names.append("h2")
    assert names == ["h0", "h1"] and copy.deepcopy(names) == names
    mutable = dict(frozen)
    mutable["a"] = 5
    assert frozen["a"] == 1
