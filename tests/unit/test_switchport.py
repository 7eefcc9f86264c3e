"""The switch port program's Python side, without loading it: lab names, pins,
the loss threshold, CPU lists and the counters' fields (the golden tests are
in tests/bpf/test_switchport.py)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from mrc_nic.fabric import switchport as sp
from mrc_nic.kernel import bpfsys


def test_lab_names_are_checked():
    for bad in ("", "Lab", "a/b", "..", "a-b"):
        with pytest.raises(ValueError, match="lab name"):
            sp.pin_dir(bad)


def test_unpin_absent_lab_is_quiet():
    sp.unpin(f"zabsent{os.getpid()}")


def test_loss_threshold_scale():
    assert sp.loss_threshold(0) == 0
    assert sp.loss_threshold(0.5) == 1 << 31
    assert sp.loss_threshold(1) == 1 << 32  # above every 32-bit hash: always drops


def test_parse_cpu_list():
    assert bpfsys.parse_cpu_list("0-3,5,7-8\n") == [0, 1, 2, 3, 5, 7, 8]
    assert bpfsys.parse_cpu_list("0") == [0]


def test_port_counters_fields_follow_the_struct():
    names = [f.name for f in dataclasses.fields(sp.PortCounters)]
    assert names == [name for name, _ in sp.CountersLayout._fields_]
