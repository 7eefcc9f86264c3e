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


# ---- completion queues (verbs): argument checks without a program ---------------------------


def _maps_without_pins(**sizes) -> nic.NicMaps:
    """A NicMaps whose checks run before any map is touched (no pins, no root)."""
    maps = object.__new__(nic.NicMaps)
    for name, value in (dict(max_cqs=8, tx_rings=4, max_regions=4, max_qps=16) | sizes).items():
        setattr(maps, name, value)
    return maps


def test_load_checks_the_cq_arguments():
    with pytest.raises(ValueError, match="cq_ring_pages must be a power of two"):
        nic.NicProgram.load("zx", cq_ring_pages=3)
    with pytest.raises(ValueError, match="max_cqs"):
        nic.NicProgram.load("zx", max_cqs=0)
    config = nic.NicConfig(cq_ring_pages=4, max_cqs=32)
    assert {"-DNIC_CQ_RING_PAGES=4", "-DNIC_MAX_CQS=32"} <= set(config.cflags())


def test_qp_setup_checks_its_cq():
    maps = _maps_without_pins()
    common = dict(local_host=0, peer_host=1, peer_qpn=5)
    for cq in (-1, 9, 1.0):
        with pytest.raises(ValueError, match="no CQ"):
            maps.setup_sq(7, ring=1, evs={0xC001: 0}, cq=cq, **common)
        with pytest.raises(ValueError, match="no CQ"):
            maps.setup_rq(7, region=0, cq=cq, **common)


def test_cq_ring_calls_check_index_and_fd():
    maps = _maps_without_pins()
    with pytest.raises(ValueError, match="index"):
        maps.set_cq_ring(8, 0)
    with pytest.raises(ValueError, match="ring_fd"):
        maps.set_cq_ring(0, -1)
    with pytest.raises(ValueError, match="index"):
        maps.clear_cq_ring(-1)
    with pytest.raises(ValueError, match="index"):
        maps.cq_ring_id(8)


def test_fail_qp_needs_a_local_reason():
    maps = _maps_without_pins()
    for reason in (nic.QpError.NONE, 0, 7, "retry"):
        with pytest.raises(ValueError, match="reason"):
            maps.fail_qp(7, reason)
    with pytest.raises(ValueError, match="qpn"):
        maps.fail_qp(1 << 24)


def test_ring_buffer_creation_checks_size_and_name():
    from mrc_nic.kernel import bpfsys

    for size in (0, 1000, 3 * 4096, 4096.0):
        with pytest.raises(ValueError, match="power of two"):
            bpfsys.ringbuf_create(size)
    with pytest.raises(ValueError, match="at most 15"):
        bpfsys.map_create(bpfsys.BPF_MAP_TYPE_RINGBUF, 0, 0, 4096, name="x" * 16)


def test_verbs_fields_of_the_shared_structs():
    # Grown at their ends or in reserved fields: the offsets BPF and user space had stay.
    assert nic.Wq.done.offset == 4 and nic.Wq.wqes.offset == 8
    assert (nic.Wqe.opcode.offset, nic.Wqe.flags.offset, ctypes.sizeof(nic.Wqe)) == (36, 37, 40)
    assert nic.RqLayout.recv_cq.offset == 36 and nic.RqLayout.bitmap.offset == 40
    # then the OCP QP attributes (max_wimm, dynamic MPR, probe_good) after them,
    # and the blame's silent_ns, reo_learned_ns and reo_grown_ts last
    assert nic.SqLayout.send_cq.offset == ctypes.sizeof(nic.SqLayout) - 24 - 40 - 8 - 8
    assert nic.SqLayout.peer_ports_ns.offset == ctypes.sizeof(nic.SqLayout) - 24
    assert nic.SqLayout.reo_learned_ns.offset == ctypes.sizeof(nic.SqLayout) - 12
    assert nic.SqLayout.reo_grown_ts.offset == ctypes.sizeof(nic.SqLayout) - 8
    assert (nic.SqLayout.auth.offset, nic.SqLayout.auth_key.offset) == (3404, 3408)
    assert nic.SqLayout.max_wimm.offset == 3424
    assert nic.RqLayout.auth_key.offset == ctypes.sizeof(nic.RqLayout) - 56
    assert nic.RqLayout.max_wimm_dest.offset == ctypes.sizeof(nic.RqLayout) - 36
    assert nic.RqLayout.pd.offset == ctypes.sizeof(nic.RqLayout) - 24  # then the PD
    # then ACK coalescing (docs/nic-program.md): setup, BPF-owned, setup
    assert nic.RqLayout.ack_every.offset == ctypes.sizeof(nic.RqLayout) - 20
    assert nic.RqLayout.ack_held_ns.offset == ctypes.sizeof(nic.RqLayout) - 16
    assert nic.RqLayout.ack_delay_ns.offset == ctypes.sizeof(nic.RqLayout) - 8
    assert (nic.QpErrEvent.error.offset, ctypes.sizeof(nic.QpErrEvent)) == (24, 40)
    assert nic.WQE_F_SIGNALED == 1 and nic.QpError.RETRY_EXCEEDED == 1
    frame = nic.kick_frame(0x000007, nic.KickOp.FAIL, nic.QpError.RETRY_EXCEEDED)
    assert frame[:8] == bytes.fromhex("0700000004000100")
    assert {nic.CQ_RINGS_MAP, nic.CQ_TEMPLATE_MAP} <= set(nic.MAP_PINS)


def test_ring_psns_walks_the_set_bits_of_a_wrapping_window():
    from mrc_nic.nic import layout, sq_maps, wireconst

    bits = layout.BITMAP_BITS
    words = (ctypes.c_uint64 * (bits // 64))()
    start = wireconst.PSN_MASK - 5  # the window wraps the PSN space and the ring
    want = [(start + i) & wireconst.PSN_MASK for i in (0, 3, 6, 63, 64, 200)]
    for psn in [*want, (start + 300) & wireconst.PSN_MASK]:  # the last one: past count
        pos = psn % bits
        words[pos // 64] |= 1 << (pos % 64)
    assert sq_maps.ring_psns(words, start, 300) == want
    assert sq_maps.ring_psns(words, start, 0) == []
    # counted without listing (the daemon's every-tick snapshot), the same window
    assert sq_maps.ring_count(words, start, 300) == len(want)
    assert sq_maps.ring_count(words, start, 301) == len(want) + 1
    assert sq_maps.ring_count(words, start, 0) == 0
