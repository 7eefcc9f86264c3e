"""The NIC program's Python side, without loading it: argument checks, enums
and record layouts, the kick frame, segment sizes, and the header's names
against their Python copies (the golden tests are in tests/bpf/test_nic_*.py)."""

from __future__ import annotations

import ctypes
import os

import pytest

from mrc_nic import nic

# ---- loading: argument checks, pins --------------------------------------------------


def test_unpin_absent_lab_is_quiet():
    nic.unpin(f"zabsent{os.getpid()}")


def test_load_checks_its_arguments():
    with pytest.raises(ValueError, match="host_net"):
        nic.NicProgram.load("zx", host_net="198.18.0.0/24")
    with pytest.raises(ValueError, match="event_pages"):
        nic.NicProgram.load("zx", event_pages=3)
    for max_qps in (48, 1, 1 << 17):
        with pytest.raises(ValueError, match="max_qps must be a power of two from 2 to 65536"):
            nic.NicProgram.load("zx", max_qps=max_qps)
    with pytest.raises(ValueError, match="lab name"):
        nic.NicProgram.load("Bad-Name")


def test_counter_indices_are_dense():
    assert [c.value for c in nic.Counter] == list(range(nic.COUNTER_SLOTS))


def test_load_checks_the_send_arguments():
    with pytest.raises(ValueError, match="tx_rings"):
        nic.NicProgram.load("zx", tx_rings=0)
    with pytest.raises(ValueError, match="max_evs"):
        nic.NicProgram.load("zx", max_evs=0)
    with pytest.raises(ValueError, match="skip_ns"):
        nic.NicProgram.load("zx", skip_ns=-1)


# ---- layouts and constants ----------------------------------------------------------------


def test_event_records_share_one_frame():
    # The ring reader decodes by type: every record is a completion's size,
    # with type and qpn first and ts last.
    size = ctypes.sizeof(nic.Event)
    for layout in nic.EVENT_LAYOUTS.values():
        assert ctypes.sizeof(layout) == size
        assert (layout.type.offset, layout.qpn.offset, layout.ts.offset) == (0, 4, size - 8)


def test_kick_framestruct_layout():
    frame = nic.kick_frame(0x010203, nic.KickOp.TIMEOUT, 5, age_ns=0x0A0B)
    assert frame[:16] == bytes.fromhex("03020100010005000b0a000000000000")
    frame = nic.kick_frame(0x010203, nic.KickOp.CWND, 300, age_ns=0x0A0B)
    assert frame[:16] == bytes.fromhex("0302010002002c010b0a000000000000")
    assert len(frame) == 16 + 64 and frame[16 + 12 : 16 + 14] == b"\x88\xb5"
    with pytest.raises(ValueError, match="packets"):
        nic.run_kick(-1, 1, 0)


def test_segment_size_follows_the_mtu():
    assert [nic.seg_size(m) for m in (1104, 1500, 2127, 2128, 3151, 3152, 3506)] == [
        1024,
        1024,
        1024,
        2048,
        2048,
        3072,
        3072,
    ]
    with pytest.raises(ValueError, match="MTU of 1104 or more"):
        nic.seg_size(1100)
