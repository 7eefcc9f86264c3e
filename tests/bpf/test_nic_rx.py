"""Golden-packet tests of the receiver half of bpf/nic_xdp.c.

The program is compiled once for the module (lab ``znic<pid>``, small maps,
pins removed at teardown) and run with BPF_PROG_TEST_RUN on frames built by
mrc_nic.nic.wire. Every expected answer is built with wire.sack_packet or
wire.nack_packet from explicit values and compared byte for byte; there is no
Python model of the receiver.

Addresses follow the lab's plan: host h on plane p is 198.18.p.(h+1). The
data sender is host 0 (QP 0x000007), the receiver host 1 (QP 0x010005), and
the packets travel on plane 2. That plan is tests/helpers/nicprog.py's; the
receive QP's setup and its packets are tests/helpers/receiver.py's.

Each test starts from a freshly set-up receive QP (cum_psn = START, mpr 1:
a 128-PSN window), a region of 8 elements at BASE_VA, a zeroed memory and an
empty event ring. Data packets are middle packets of a long message
(last=False) unless a test is about messages, so that AETH.msn stays 0.

A frame cut before its UDP header cannot be told to be MRC: it is passed to
the stack (which drops it), not counted as a truncated MRC packet. The last
test attaches the program to a real veth pair (namespace znic-<pid>).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import time
from collections.abc import Callable

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import auth
from mrc_nic.nic import wire as w
from tests.helpers.header_probe import struct_layout
from tests.helpers.nicprog import (
    DATA,
    PLANE,
    QP_RX,
    QP_TX,
    RX_HOST,
    TX_HOST,
    XDP_DROP,
    XDP_PASS,
    XDP_TX,
    delta,
    patched,
    run,
    with_udp_payload,
)
from tests.helpers.receiver import (
    BASE_VA,
    EV,
    MPR,
    PORTS,
    REGION,
    REGION_ELEMS,
    REGION_FIRST_ELEM,
    RKEY,
    START,
    WINDOW,
    assert_answer,
    data,
    fresh_qp,
    nack,
    payload_for,
    sack,
    setup_qp,
)

LAB = f"znic{os.getpid()}"

# The program's sizes in this module (small: the tests read whole maps).
MR_ELEMS = 64
MAX_QPS = 64
MAX_REGIONS = 4
EVENT_PAGES = 1
PROGRAM_SIZES = dict(  # conftest's program fixture
    mr_elems=MR_ELEMS, max_qps=MAX_QPS, max_regions=MAX_REGIONS, event_pages=EVENT_PAGES
)


# ---- fixtures -------------------------------------------------------------------------


@pytest.fixture
def qp(maps, event_reader):
    """A fresh receive QP (cum_psn START), its region zeroed, no pending events."""
    fresh_qp(maps, MR_ELEMS)
    event_reader.read()
    return QP_RX


def elem_bytes(maps, elem: int) -> bytes:
    return maps.read_region(REGION, elem * nic.MR_ELEM_SIZE, nic.MR_ELEM_SIZE)


# ---- receiving data: placement and SACKs ------------------------------------------------------


def test_in_order_data_is_placed_and_sacked(program, maps, qp):
    before = maps.counters()
    pkt = data(START, elem=3)

    result = run(program, pkt)

    assert_answer(result, sack(START, cum=START + 1))
    assert len(result.data_out) == 94
    assert elem_bytes(maps, 3) == payload_for(START)
    assert elem_bytes(maps, 2) == bytes(1024) and elem_bytes(maps, 4) == bytes(1024)
    rq = maps.rq(QP_RX)
    assert (rq.cum_psn, rq.received, rq.msn) == (START + 1, [], 0)
    assert rq.stats["placed_pkts"] == 1 and rq.stats["placed_bytes"] == 1024
    assert rq.stats["sacks"] == 1 and rq.stats["data_pkts"] == 1
    assert delta(before, maps.counters()) == {"sack": 1, "placed": 1, "placed_bytes": 1024}


def test_delivery_clock_records_the_longest_gap_between_new_payloads(program, maps, qp):
    """The gap a failure causes, as the receiver sees it: BPF times each new
    placement; duplicates do not move the clock, and the bytes land in the
    lab's timeline bin of their time."""
    t0 = time.monotonic_ns()
    run(program, data(START))
    time.sleep(0.002)
    run(program, data(START))  # a duplicate 2 ms later: no progress
    time.sleep(0.020)
    run(program, data(START + 1))
    t1 = time.monotonic_ns()
    run(program, data(START + 2))

    st = maps.rq(QP_RX).stats
    assert t0 <= st["first_place_ns"] < st["last_place_ns"] <= time.monotonic_ns()
    # The longest gap is the 22 ms from START to START+1, not the dup's 2 ms.
    assert 20_000_000 <= st["max_gap_ns"] < t1 - t0
    assert st["first_place_ns"] < st["max_gap_end_ns"] <= t1
    timeline = maps.rx_timeline()
    here = {b: n for b, n in timeline.items() if t0 >> nic.TIMELINE_SHIFT <= b}
    assert sum(here.values()) == 3 * 1024, "three new payloads, the duplicate not counted"


def test_gap_log_keeps_the_longest_long_gap_of_each_bin(program, maps, qp):
    """The QP's gap log: gaps of at least GAP_MIN_NS, the longest per 67 ms
    bin, by end time; shorter gaps are not logged."""
    t0 = time.monotonic_ns()
    run(program, data(START))
    run(program, data(START + 1))  # back to back: far below the floor
    time.sleep(0.003)
    run(program, data(START + 2))  # a 3 ms gap
    time.sleep(0.012)
    run(program, data(START + 3))  # a 12 ms gap, the longest of its bin
    t_long = time.monotonic_ns()
    time.sleep(0.14)  # into a later bin
    run(program, data(START + 4))  # a 140 ms gap, another bin
    t1 = time.monotonic_ns()

    gaps = maps.rq(QP_RX).long_gaps
    assert all(t0 < end <= t1 and gap >= nic.GAP_MIN_NS for end, gap in gaps)
    last = gaps[-1]
    assert last[1] >= 140_000_000 and last[0] > t_long
    earlier = gaps[:-1]
    assert earlier, "the 12 ms gap (and maybe the 3 ms one, in an earlier bin) are logged"
    # Each bin holds the longest gap that ended in it: the 12 ms one beats the
    # 3 ms one when both ended in the same bin; the 3 ms one shows only alone.
    assert max(g for _, g in earlier) >= 12_000_000
    for end, gap in earlier:
        assert gap >= 12_000_000 or end >> nic.GAP_BIN_SHIFT != t_long >> nic.GAP_BIN_SHIFT


def test_out_of_order_then_hole_filled(program, maps, qp):
    # START+2 first: a hole at START and START+1.
    assert_answer(run(program, data(START + 2)), sack(START + 2, cum=START, bitmap=0b100))
    rq = maps.rq(QP_RX)
    assert (rq.cum_psn, rq.received) == (START, [START + 2])

    assert_answer(run(program, data(START + 1)), sack(START + 1, cum=START, bitmap=0b110))
    assert maps.rq(QP_RX).cum_psn == START

    # The hole filled: cum_psn moves over all three.
    assert_answer(run(program, data(START)), sack(START, cum=START + 3))
    rq = maps.rq(QP_RX)
    assert (rq.cum_psn, rq.received) == (START + 3, [])
    for i in range(3):
        assert elem_bytes(maps, i) == payload_for(START + i)


def test_cum_psn_advances_over_a_long_run(program, maps, qp):
    # 100 PSNs after a hole span two bitmap words; filling the hole moves
    # cum_psn over all of them at once, and the bitmap is left empty.
    setup_qp(maps, mpr=2)
    for psn in range(START + 1, START + 101):
        result = run(program, data(psn, elem=0, payload=b"x" * 8))
        assert result.retval == XDP_TX
    rq = maps.rq(QP_RX)
    assert rq.cum_psn == START and rq.received == list(range(START + 1, START + 101))

    assert_answer(
        run(program, data(START, elem=0, payload=b"y" * 8)), sack(START, cum=START + 101, mpr=2)
    )
    raw = maps.rq_raw(QP_RX)
    assert raw.cum_psn == START + 101 and not any(raw.bitmap)


def test_sack_base_moves_to_a_far_trigger(program, maps, qp):
    # With a 256-PSN window the trigger can be more than 64 PSNs past
    # cum_psn: the bitmap then starts at the trigger's PSN rounded down to 64.
    setup_qp(maps, mpr=2)
    far = START + 100  # 200: base 192, bit 8
    run(program, data(far - 1, elem=0))
    assert_answer(
        run(program, data(far, elem=1)),
        sack(far, cum=START, sack_psn=192, bitmap=1 << 8 | 1 << 7, mpr=2),
    )


def test_window_edges(program, maps, qp):
    # The last PSN of the window is accepted; the next one is NACKed.
    # It lies 64 or more PSNs past cum_psn: the SACK's bitmap starts at its
    # PSN rounded down to 64 (192), and stops at the window's end (bit 35).
    last_in = START + WINDOW - 1  # 227
    assert_answer(
        run(program, data(last_in, elem=0)), sack(last_in, cum=START, sack_psn=192, bitmap=1 << 35)
    )
    assert maps.rq(QP_RX).received == [last_in]

    before = maps.counters()
    result = run(program, data(START + WINDOW, elem=1))
    assert_answer(result, nack(START + WINDOW, w.NackReason.PSN_OOR_WINDOW, cum=START))
    assert elem_bytes(maps, 1) == bytes(1024), "a PSN beyond the window must not be placed"
    assert delta(before, maps.counters()) == {"nack_oor": 1}
    rq = maps.rq(QP_RX)
    assert rq.received == [last_in] and rq.stats["oor_pkts"] == 1


def test_psn_wraps_at_24_bits(program, maps, qp):
    top = w.PSN_MASK  # 0xFFFFFF
    setup_qp(maps, psn=top - 1)
    assert_answer(run(program, data(1, elem=2)), sack(1, cum=top - 1, bitmap=0b1000))
    assert_answer(run(program, data(top, elem=1)), sack(top, cum=top - 1, bitmap=0b1010))
    assert_answer(run(program, data(top - 1, elem=0)), sack(top - 1, cum=0, bitmap=0b10))
    assert_answer(run(program, data(0, elem=3)), sack(0, cum=2))
    # Below cum_psn across the wrap: a duplicate.
    assert_answer(run(program, data(top - 10, elem=4)), sack(top - 10, cum=2, flags=w.AckFlag.DUP))
    assert elem_bytes(maps, 4) == bytes(1024)


def test_ecn_ce_is_echoed(program, maps, qp):
    result = run(program, data(START, ecn=w.Ecn.CE))
    assert_answer(result, sack(START, cum=START + 1, flags=w.AckFlag.ECN))


def test_ev_and_timestamp_are_echoed(program, maps, qp):
    result = run(program, data(START, ev=0x0001, tx_ts=(1 << 64) - 1))
    assert_answer(result, sack(START, cum=START + 1, ev=0x0001, echo_ts=(1 << 64) - 1))


def test_short_and_zero_length_payloads(program, maps, qp):
    # A 1-byte payload lands at the start of its element, nothing else moves.
    maps.write_region(REGION, 0, b"\xee" * 1024)
    assert_answer(run(program, data(START, payload=b"\x01")), sack(START, cum=START + 1))
    assert elem_bytes(maps, 0) == b"\x01" + b"\xee" * 1023

    # A zero-length WRITE (90-byte frame) places nothing; its answer is
    # longer than it, so the frame grows. Its va and rkey are not checked.
    pkt = data(START + 1, payload=b"", va=3, rkey=0)
    assert len(bytes(pkt)) == 90
    assert_answer(run(program, pkt), sack(START + 1, cum=START + 2))
    assert maps.rq(QP_RX).stats["placed_bytes"] == 1


def test_retransmitted_data_is_handled_like_data(program, maps, qp):
    assert_answer(run(program, data(START, retx=True)), sack(START, cum=START + 1))
    assert elem_bytes(maps, 0) == payload_for(START)


def test_rts_accepts_data(program, maps, qp):
    setup_qp(maps, state=nic.QpState.RTS)
    assert_answer(run(program, data(START)), sack(START, cum=START + 1))


def test_answers_on_any_plane(program, maps, qp):
    for plane in (0, 15):
        ends = dataclasses.replace(
            DATA, src_ip=f"198.18.{plane}.{TX_HOST + 1}", dst_ip=f"198.18.{plane}.{RX_HOST + 1}"
        )
        psn = START + plane
        result = run(program, data(psn, ends=ends, elem=0))
        assert result.retval == XDP_TX
        assert Ether(result.data_out)[IP].src == ends.dst_ip
        assert Ether(result.data_out)[IP].dst == ends.src_ip


# ---- duplicates ---------------------------------------------------------------------------


SENTINEL = b"\x5e" * 1024


def test_a_packet_that_finds_its_qp_locked_is_dropped_and_counted(program, maps, qp):
    """The receive lock (nic_maps.h, nic_rx_locks) is two atomics and a bounded
    spin: a packet that finds it taken RX_LOCK_TRIES times is dropped and
    counted, and the QP's state does not move; once the lock is free, the
    same packet is placed and SACKed."""
    before = maps.counters()
    maps.set_rx_lock(QP_RX, True)
    try:
        assert maps.rx_lock_taken(QP_RX)
        assert maps.rx_lock_taken(QP_RX + nic.RX_LOCKS), "QPs equal modulo RX_LOCKS share it"
        assert not maps.rx_lock_taken(QP_RX + 1)

        assert run(program, data(START)).retval == XDP_DROP
        rq = maps.rq(QP_RX)
        assert (rq.cum_psn, rq.received, rq.stats["data_pkts"]) == (START, [], 0)
        assert delta(before, maps.counters()) == {"drop_rx_busy": 1}
    finally:
        maps.set_rx_lock(QP_RX, False)

    assert_answer(run(program, data(START)), sack(START, cum=START + 1))
    assert elem_bytes(maps, 0) == payload_for(START)
    assert not maps.rx_lock_taken(QP_RX)


def test_duplicate_below_cum_psn(program, maps, qp):
    run(program, data(START))
    maps.write_region(REGION, 0, SENTINEL)
    before = maps.counters()

    result = run(program, data(START, payload=b"\x11" * 1024))

    assert_answer(result, sack(START, cum=START + 1, flags=w.AckFlag.DUP))
    assert elem_bytes(maps, 0) == SENTINEL, "a duplicate must not be placed again"
    assert delta(before, maps.counters()) == {"sack": 1, "dup": 1}
    rq = maps.rq(QP_RX)
    assert rq.stats["dup_pkts"] == 1 and rq.stats["placed_pkts"] == 1


def test_duplicate_in_bitmap(program, maps, qp):
    run(program, data(START + 1))
    maps.write_region(REGION, 1024, SENTINEL)
    before = maps.counters()

    result = run(program, data(START + 1, payload=b"\x11" * 1024, ecn=w.Ecn.CE))

    assert_answer(
        result, sack(START + 1, cum=START, bitmap=0b10, flags=w.AckFlag.DUP | w.AckFlag.ECN)
    )
    assert elem_bytes(maps, 1) == SENTINEL
    assert delta(before, maps.counters()) == {"sack": 1, "dup": 1}
    assert maps.rq(QP_RX).received == [START + 1]


# ---- trimmed packets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lasthop", "reason", "counter"),
    [
        (False, w.NackReason.TRIMMED, "nack_trimmed"),
        (True, w.NackReason.TRIMMED_LASTHOP, "nack_trimmed_lasthop"),
    ],
)
def test_trimmed_data_is_nacked(program, maps, qp, lasthop, reason, counter):
    run(program, data(START + 1))  # something in the bitmap for the NACK to report
    state = bytes(maps.rq_raw(QP_RX))
    before = maps.counters()

    result = run(program, w.trim(data(START), lasthop=lasthop))

    assert_answer(result, nack(START, reason, cum=START, bitmap=0b10))
    assert elem_bytes(maps, 0) == bytes(1024), "a trimmed packet places nothing"
    assert delta(before, maps.counters()) == {counter: 1}
    after = maps.rq_raw(QP_RX)
    assert (after.cum_psn, list(after.bitmap)) == (
        START,
        list(nic.RqLayout.from_buffer_copy(state).bitmap),
    )
    assert after.stats.trimmed_pkts == 1 and after.stats.nacks == 1


def test_trimmed_write_imm_and_ce(program, maps, qp):
    pkt = w.trim(data(START, imm=0xABCD, last=True, ecn=w.Ecn.CE))
    result = run(program, pkt)
    assert_answer(
        result,
        nack(START, w.NackReason.TRIMMED, cum=START, flags=w.AckFlag.TRIMMED | w.AckFlag.ECN),
    )
    assert maps.rq(QP_RX).pending_msgs == []


def test_trimmed_duplicate_is_flagged(program, maps, qp):
    run(program, data(START))
    result = run(program, w.trim(data(START)))
    assert_answer(
        result,
        nack(
            START,
            w.NackReason.TRIMMED,
            cum=START + 1,
            flags=w.AckFlag.TRIMMED | w.AckFlag.DUP,
        ),
    )


# ---- byte-granular placement -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "length"),
    [(8, 8), (100, 64), (1000, 48), (700, 1024), (1023, 1), (1, 1024)],
    ids=["8 at 8", "64 at 100", "across an element", "1 KiB at 700", "last byte", "1 KiB at 1"],
)
def test_a_payload_at_any_byte_is_placed_there_and_nowhere_else(program, maps, qp, offset, length):
    """RDMA places at any address: bytes [offset, offset + length) of the
    region get the payload, every other byte stays zero."""
    payload = bytes((i * 7 + 3) % 251 + 1 for i in range(length))
    result = run(program, data(START, va=BASE_VA + offset, payload=payload))
    assert_answer(result, sack(START, cum=START + 1))
    region = maps.read_region(REGION, 0, REGION_ELEMS * nic.MR_ELEM_SIZE)
    expect = bytes(offset) + payload
    expect += bytes(REGION_ELEMS * nic.MR_ELEM_SIZE - len(expect))
    assert region == expect


def test_a_region_with_head_and_tail_takes_bytes_inside_them_only(program, maps, qp):
    """An MR that starts and ends inside elements (an application's buffer at
    its page offset): its first and last bytes are placed, a byte before or
    after is a remote access error."""
    head, tail = 5, 3
    maps.set_region(
        REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY, base_va=BASE_VA,
        head=head, tail=tail,
    )  # fmt: skip
    end = REGION_ELEMS * nic.MR_ELEM_SIZE - tail
    first = data(START, va=BASE_VA + head, payload=b"A")
    assert_answer(run(program, first), sack(START, cum=START + 1))
    last = data(START + 1, va=BASE_VA + end - 2, payload=b"YZ")
    assert_answer(run(program, last), sack(START + 1, cum=START + 2))
    region = maps.read_region(REGION, 0, REGION_ELEMS * nic.MR_ELEM_SIZE)
    assert region[head] == ord("A") and region[end - 2 : end] == b"YZ"
    for va in (BASE_VA + head - 1, BASE_VA + end - 1):
        result = run(program, data(START + 2, va=va, payload=b"no"))
        refused = nack(
            START + 2, w.NackReason.UNEXP_EVENT, cum=START + 2, syndrome=w.Syndrome.NAK_REM_ACCESS
        )
        assert_answer(result, refused)
    assert maps.read_region(REGION, 0, REGION_ELEMS * nic.MR_ELEM_SIZE) == region


# ---- memory access errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"rkey": RKEY + 1},
        {"va": BASE_VA + REGION_ELEMS * 1024},  # one element past the region
        {"va": BASE_VA - 1024},  # before it
    ],
    ids=["wrong rkey", "past the region", "before the region"],
)
def test_remote_access_errors_are_fatal_nacks(program, maps, qp, change):
    state = bytes(maps.rq_raw(QP_RX))
    before = maps.counters()

    result = run(program, data(START, **change))

    assert_answer(
        result,
        nack(
            START,
            w.NackReason.UNEXP_EVENT,
            cum=START,
            syndrome=w.Syndrome.NAK_REM_ACCESS,
        ),
    )
    assert delta(before, maps.counters()) == {"nack_rem_access": 1}
    assert maps.memory()[:] == bytes(MR_ELEMS * nic.MR_ELEM_SIZE)
    after = maps.rq_raw(QP_RX)
    assert (after.cum_psn, bytes(after.bitmap)) == (
        START,
        bytes(nic.RqLayout.from_buffer_copy(state).bitmap),
    )


def test_access_is_checked_only_for_a_new_psn_in_the_window(program, maps, qp):
    # As RC: a packet that fails the PSN checks never reaches the access check,
    # so a stray or forged packet with a bad rkey cannot make a fatal NACK.
    run(program, data(START + 1))
    bad = {"rkey": RKEY + 1}
    before = maps.counters()

    assert_answer(
        run(program, data(START + 1, **bad)), sack(START + 1, START, 0b10, flags=w.AckFlag.DUP)
    )
    assert_answer(
        run(program, data(START - 5, elem=0, **bad)),
        sack(START - 5, START, 0b10, flags=w.AckFlag.DUP),
    )
    assert_answer(
        run(program, data(START + WINDOW, elem=0, **bad)),
        nack(START + WINDOW, w.NackReason.PSN_OOR_WINDOW, cum=START, bitmap=0b10),
    )
    assert delta(before, maps.counters()) == {"sack": 2, "dup": 2, "nack_oor": 1}
    rq = maps.rq(QP_RX)
    assert (rq.cum_psn, rq.received) == (START, [START + 1])


# ---- the per-packet MAC (nic_auth.h) ------------------------------------------------------------

KEY = bytes(range(16))


def mac_of_data(psn: int, **kw) -> int:
    d = dict(opcode=w.Opcode.WRITE, qpn=QP_RX, psn=psn, va=BASE_VA + (psn - START) * 1024)
    d |= dict(rkey=RKEY, dmalen=1024, last=False, msn=0, msg_off=0)
    return auth.data_mac(KEY, **(d | kw))


def mac_of_sack(psn: int, cum: int, bitmap: int = 0, flags: int = 0) -> int:
    return auth.ack_mac(
        KEY,
        qpn=QP_TX,
        psn=psn,
        cum_psn=cum,
        sack_psn=cum,
        sack_bitmap=bitmap,
        syndrome=w.Syndrome.ACK,
        reason=0,
        flags=flags,
        echo_ev=EV,
        port_bitmap=PORTS,
    )


def test_a_qp_with_a_key_takes_data_with_its_mac_and_macs_its_answer(program, maps, qp):
    setup_qp(maps, auth_key=KEY)
    result = run(program, data(START, icrc=mac_of_data(START)))
    assert_answer(result, sack(START, cum=START + 1, icrc=mac_of_sack(START, START + 1)))
    assert maps.rq(QP_RX).cum_psn == START + 1


@pytest.mark.parametrize(
    "frame",
    [
        lambda: data(START),  # no MAC (the ICRC slot's 0)
        lambda: data(START, icrc=mac_of_data(START) ^ 1),
        lambda: data(START, icrc=mac_of_data(START + 1)),  # another PSN's MAC
        lambda: data(START, rkey=RKEY + 1, icrc=mac_of_data(START)),  # a field changed
        lambda: data(
            START,
            icrc=auth.data_mac(
                bytes(16),
                **{
                    "opcode": 0x0A,
                    "qpn": QP_RX,
                    "psn": START,
                    "va": BASE_VA,
                    "rkey": RKEY,
                    "dmalen": 1024,
                    "last": False,
                    "msn": 0,
                    "msg_off": 0,
                },
            ),
        ),  # another key
    ],
    ids=["no MAC", "one bit off", "replayed from another PSN", "rkey changed", "another key"],
)
def test_data_without_the_right_mac_is_dropped(program, maps, qp, frame):
    setup_qp(maps, auth_key=KEY)
    state, memory, before = bytes(maps.rq_raw(QP_RX)), maps.memory()[:], maps.counters()

    assert run(program, frame()).retval == XDP_DROP

    assert delta(before, maps.counters()) == {"drop_auth": 1}
    assert bytes(maps.rq_raw(QP_RX)) == state and maps.memory()[:] == memory


def test_a_trimmed_header_needs_no_mac(program, maps, qp):
    # Its MAC went with the payload; all it can cause is a NACK (MAC'd).
    setup_qp(maps, auth_key=KEY)
    mac = auth.ack_mac(
        KEY,
        qpn=QP_TX,
        psn=START,
        cum_psn=START,
        sack_psn=START,
        sack_bitmap=0,
        syndrome=w.Syndrome.NAK_PSN_SEQ,
        reason=w.NackReason.TRIMMED,
        flags=w.AckFlag.TRIMMED,
        echo_ev=EV,
        port_bitmap=PORTS,
    )
    result = run(program, w.trim(data(START)))
    assert_answer(result, nack(START, w.NackReason.TRIMMED, cum=START, icrc=mac))


# ---- MRs named by rkey (the verbs API: setup_rq's REGION_BY_RKEY) -------------------------------

APP_BASE = 2 << 40  # an application MR's address: region 2's space


def app_rkey(region: int, secret: int = 0xABCDE) -> int:
    """An application MR's rkey: random high bits, the region id in the low ones."""
    return (secret << 2 | region) & 0xFFFFFFFF  # MAX_REGIONS = 4: two bits of region id


@pytest.fixture
def app_qp(maps, qp):
    """The receive QP taking WRITEs into whichever MR of its host the rkey names:
    region 2 (this host's), region 3 (another host's)."""
    maps.set_region(
        2, first_elem=0, n_elems=4, rkey=app_rkey(2), base_va=APP_BASE, owner=RX_HOST + 1
    )
    maps.set_region(
        3, first_elem=4, n_elems=4, rkey=app_rkey(3), base_va=3 << 40, owner=TX_HOST + 1
    )
    setup_qp(maps, region=nic.REGION_BY_RKEY)
    yield qp
    maps.clear_region(2)
    maps.clear_region(3)


def test_an_rkey_names_the_mr_its_write_lands_in(program, maps, app_qp):
    pkt = data(START, rkey=app_rkey(2), va=APP_BASE + 1024)
    assert_answer(run(program, pkt), sack(START, cum=START + 1))
    assert maps.read_region(2, 1024, 1024) == payload_for(START)
    assert maps.read_region(REGION, 0, REGION_ELEMS * 1024) == bytes(REGION_ELEMS * 1024)


@pytest.mark.parametrize(
    "change",
    [
        {"rkey": app_rkey(2, secret=0x12345)},  # the region's id, not its key
        {"rkey": app_rkey(3), "va": 3 << 40},  # another host's MR
        {"rkey": RKEY},  # a region the daemon gave a QP by id (owner 0)
    ],
    ids=["forged rkey", "another host's MR", "a QP's own region"],
)
def test_an_rkey_that_names_no_mr_of_this_host_is_a_remote_access_error(
    program, maps, app_qp, change
):
    assert_refused(program, maps, data(START, **({"va": APP_BASE} | change)))


def app_mr(maps, **kw) -> None:
    """Region 2, this host's MR, with its protection domain and access as given."""
    maps.set_region(
        2, first_elem=0, n_elems=4, rkey=app_rkey(2), base_va=APP_BASE, owner=RX_HOST + 1, **kw
    )


def test_an_rkey_of_the_qps_pd_is_placed(program, maps, app_qp):
    app_mr(maps, pd=7)
    setup_qp(maps, region=nic.REGION_BY_RKEY, pd=7)
    pkt = data(START, rkey=app_rkey(2), va=APP_BASE)
    assert_answer(run(program, pkt), sack(START, cum=START + 1))
    assert maps.read_region(2, 0, 1024) == payload_for(START)


def assert_refused(program, maps, pkt: Packet) -> None:
    """pkt is a remote access error: NACKed (fatal), nothing written anywhere."""
    before = maps.counters()
    result = run(program, pkt)
    assert_answer(
        result,
        nack(START, w.NackReason.UNEXP_EVENT, cum=START, syndrome=w.Syndrome.NAK_REM_ACCESS),
    )
    assert delta(before, maps.counters()) == {"nack_rem_access": 1}
    assert maps.memory()[:] == bytes(MR_ELEMS * nic.MR_ELEM_SIZE), "nothing written"


@pytest.mark.parametrize(
    ("mr", "qp_pd"),
    [
        ({"pd": 8}, 7),
        ({"pd": 7, "remote_write": False}, 7),
        ({}, 7),  # an MR of PD 0 (the daemon's)
        ({"pd": 7}, 0),  # a QP of PD 0
    ],
    ids=["another PD", "no REMOTE_WRITE", "a PD-0 MR", "a PD-0 QP"],
)
def test_an_rkey_of_another_pd_is_a_remote_access_error(program, maps, app_qp, mr, qp_pd):
    app_mr(maps, **mr)
    setup_qp(maps, region=nic.REGION_BY_RKEY, pd=qp_pd)
    assert_refused(program, maps, data(START, rkey=app_rkey(2), va=APP_BASE))


def test_a_region_by_id_of_another_pd_is_a_remote_access_error(program, maps, qp):
    """The daemon's own QPs (a region by id) work in PD 0: a region of another PD is refused."""
    maps.set_region(REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY,
                    base_va=BASE_VA, pd=3)  # fmt: skip
    assert_refused(program, maps, data(START))


def test_a_region_by_id_ignores_owned_regions(program, maps, qp):
    """A daemon QP's region (by id) stays its own: an MR's rkey does not reach it."""
    maps.set_region(REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY,
                    base_va=BASE_VA, owner=RX_HOST + 1)  # fmt: skip
    result = run(program, data(START))
    assert result.retval == XDP_TX and Ether(result.data_out)[w.MRCAck].nack_reason != 0


# ---- drops: malformed packets and packets the QP must not take -------------------------------


def _imm_without_last() -> bytes:
    pkt = data(START, imm=7, last=True)
    pkt[w.MRCData].last = 0
    return bytes(pkt)


def _spoofed(**fields) -> Callable[[], Packet]:
    return lambda: data(START, ends=dataclasses.replace(DATA, **fields))


def _opcode(op: int) -> Callable[[], bytes]:
    return lambda: patched(data(START), 42, bytes([op]))


@dataclasses.dataclass
class Drop:
    name: str
    frame: Callable[[], Packet | bytes]
    counter: str
    setup: dict | None = None  # fields of the stored QP to change before the packet


def write_raw_rq(maps, **fields) -> None:
    """Store QP_RX with some fields changed, bypassing the client's checks."""
    value = maps.rq_raw(QP_RX)
    for name, v in fields.items():
        setattr(value, name, v)
    bpfsys.map_update(
        maps.fd(nic.RX_QPS_MAP), maps.rx_slot(QP_RX).to_bytes(4, "little"), bytes(value)
    )


WRITE = data(START)  # frame offsets: BTH 42, RETH 54, MRC_DATA 70, payload 86
WRITE_FRAME = bytes(WRITE)
WRITE_UDP_PAYLOAD = bytes(WRITE[UDP].payload)

DROPS = [
    Drop("unknown QP", lambda: data(START, dqpn=QP_RX + 1), "drop_unknown_qp"),
    Drop("QP of another host", lambda: data(START, dqpn=0x020005), "drop_unknown_qp"),
    Drop("spoofed source host", _spoofed(src_ip="198.18.2.9"), "drop_spoofed"),
    Drop("source on another plane", _spoofed(src_ip="198.18.3.1"), "drop_spoofed"),
    Drop("source outside the lab", _spoofed(src_ip="10.0.0.1"), "drop_spoofed"),
    Drop("destination is another host", _spoofed(dst_ip="198.18.2.3"), "drop_spoofed"),
    Drop("destination outside the lab", _spoofed(dst_ip="10.18.2.2"), "drop_spoofed"),
    Drop(
        "plane beyond the last",
        _spoofed(src_ip="198.18.16.1", dst_ip="198.18.16.2"),
        "drop_spoofed",
    ),
    Drop("QP in RESET", lambda: WRITE, "drop_qp_state", {"state": nic.QpState.RESET}),
    Drop("QP in INIT", lambda: WRITE, "drop_qp_state", {"state": nic.QpState.INIT}),
    Drop("QP in ERR", lambda: WRITE, "drop_qp_state", {"state": nic.QpState.ERR}),
    Drop("RETH length > payload", lambda: data(START, dmalen=1025), "drop_bad_len"),
    Drop("RETH length < payload", lambda: data(START, dmalen=1023), "drop_bad_len"),
    Drop(
        "RETH length of a trimmed packet, untrimmed",
        lambda: data(START, payload=b"ab", dmalen=64),
        "drop_bad_len",
    ),
    Drop(
        "UDP length disagrees with IPv4",
        lambda: patched(WRITE, 38, (1000).to_bytes(2, "big")),
        "drop_bad_len",
    ),
    Drop("UDP length below 8", lambda: patched(WRITE, 38, (4).to_bytes(2, "big")), "drop_bad_len"),
    Drop("payload > element", lambda: data(START, payload=bytes(1025)), "drop_too_long"),
    Drop(
        "payload > MRC_PAYLOAD_MAX",
        lambda: data(START, payload=bytes(w.payload_max() + 1)),
        "drop_too_long",
    ),
    Drop("WRITE_IMM without LAST", _imm_without_last, "drop_imm_not_last"),
    Drop("opcode RC READ request", _opcode(0x0C), "drop_bad_opcode"),
    Drop("opcode RC SEND only", _opcode(0x04), "drop_bad_opcode"),
    Drop("opcode vendor 0xDA", _opcode(0xDA), "drop_bad_opcode"),
    Drop("opcode 0xFF", _opcode(0xFF), "drop_bad_opcode"),
    Drop("mpr 0", lambda: WRITE, "drop_qp_config", {"mpr": 0}),
    Drop("UDP source port 0 (EV 0)", lambda: patched(WRITE, 34, b"\0\0"), "drop_bad_port"),
    Drop("PSN past any window", lambda: data(START + nic.BITMAP_BITS), "drop_data_range"),
    Drop("PSN far ahead", lambda: data((START + (1 << 22)) & w.PSN_MASK), "drop_data_range"),
    Drop(
        "trimmed, PSN past any window",
        lambda: w.trim(data(START + nic.BITMAP_BITS)),
        "drop_data_range",
    ),
    Drop(
        "bad rkey, PSN past any window",
        lambda: data(START + nic.BITMAP_BITS, rkey=RKEY + 1),
        "drop_data_range",
    ),
]
# Truncations: the frame cut, headers unchanged (their lengths now lie).
for _cut, _what in [
    (42, "after UDP"),
    (54, "after BTH"),
    (70, "after RETH"),
    (86, "after MRC_DATA"),
    (86 + 500, "mid-payload"),
    (len(WRITE_FRAME) - 4, "without ICRC"),
    (len(WRITE_FRAME) - 1, "one byte short"),
]:
    DROPS.append(Drop(f"cut {_what}", lambda cut=_cut: WRITE_FRAME[:cut], "drop_truncated"))
# Short: lengths consistent, but the UDP payload ends inside the MRC headers.
for _keep, _what in [
    (0, "no BTH"),
    (11, "part of BTH"),
    (12, "BTH only"),
    (28, "BTH RETH"),
    (44, "no ICRC"),
]:
    DROPS.append(
        Drop(
            f"short: {_what}",
            lambda keep=_keep: with_udp_payload(WRITE, WRITE_UDP_PAYLOAD[:keep]),
            "drop_short",
        )
    )
DROPS.append(
    Drop(
        "short: WRITE_IMM headers without ICRC",
        lambda: with_udp_payload(
            data(START, imm=1, last=True), bytes(data(START, imm=1, last=True)[UDP].payload)[:48]
        ),
        "drop_short",
    )
)
DROPS.append(
    Drop(
        "consistent lengths, payload shorter than RETH",
        lambda: with_udp_payload(WRITE, WRITE_UDP_PAYLOAD[:-8]),
        "drop_bad_len",
    )
)
DROPS.append(
    Drop(
        "BAD_MSN: a LAST packet of a completed message",
        lambda: data(START, last=True, msn=(1 << 24) - 1),
        "drop_bad_msn",
    )
)


@pytest.mark.parametrize("case", DROPS, ids=[c.name for c in DROPS])
def test_dropped_and_counted(program, maps, qp, case: Drop):
    if case.setup:
        write_raw_rq(maps, **case.setup)
    maps.write_region(REGION, 0, SENTINEL)
    state = bytes(maps.rq_raw(QP_RX))
    memory = maps.memory()[:]
    before = maps.counters()

    result = run(program, case.frame())

    assert result.retval == XDP_DROP
    assert delta(before, maps.counters()) == {case.counter: 1}
    assert bytes(maps.rq_raw(QP_RX)) == state, "a dropped packet must not change the QP"
    assert maps.memory()[:] == memory, "a dropped packet must not be placed"


def test_bad_msn_of_a_recorded_message(program, maps, qp):
    # Two LAST packets for one MSN: the second is inconsistent.
    run(program, data(START + 1, last=True, msn=0))
    before = maps.counters()
    result = run(program, data(START + 2, last=True, msn=0))
    assert result.retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_bad_msn": 1}
    assert maps.rq(QP_RX).received == [START + 1]
    assert elem_bytes(maps, 2) == bytes(1024), "refused before its payload is copied"


# ---- not ours: passed to the stack, untouched ---------------------------------------------


def _eth() -> Ether:
    # Explicit addresses: scapy would otherwise try to resolve them.
    return Ether(src=DATA.src_mac, dst=DATA.dst_mac)


def _ip(**kw) -> IP:
    return IP(src=DATA.src_ip, dst=DATA.dst_ip, **kw)


PASSES = [
    (
        "ARP",
        lambda: (
            Ether(src=DATA.src_mac, dst="ff:ff:ff:ff:ff:ff")
            / ARP(hwsrc=DATA.src_mac, psrc=DATA.src_ip, pdst=DATA.dst_ip)
        ),
        "pass_not_mrc",
    ),
    ("ICMP echo", lambda: _eth() / _ip() / ICMP(), "pass_not_mrc"),
    (
        "UDP to another port",
        lambda: _eth() / _ip() / UDP(sport=EV, dport=5201) / Raw(bytes(64)),
        "pass_not_mrc",
    ),
    (
        "UDP from port 4791",
        lambda: _eth() / _ip() / UDP(sport=4791, dport=5201) / Raw(b"x"),
        "pass_not_mrc",
    ),
    ("TCP", lambda: _eth() / _ip(proto=6) / Raw(bytes(40)), "pass_not_mrc"),
    (
        "IPv6 UDP 4791",
        lambda: (
            _eth() / IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=EV, dport=4791) / Raw(bytes(60))
        ),
        "pass_not_mrc",
    ),
    ("IPv4 fragment", lambda: _eth() / _ip(frag=10, proto=17) / Raw(bytes(60)), "pass_not_mrc"),
    ("cut after Ethernet", lambda: WRITE_FRAME[:14], "pass_not_mrc"),
    ("cut inside IPv4", lambda: WRITE_FRAME[:30], "pass_not_mrc"),
    ("cut after IPv4", lambda: WRITE_FRAME[:34], "pass_not_mrc"),
    ("cut inside UDP", lambda: WRITE_FRAME[:40], "pass_not_mrc"),
    ("RoCE UD SEND", _opcode(0x64), "pass_other_opcode"),
    ("RoCE CNP", _opcode(0x81), "pass_other_opcode"),
    # SACK, NACK, PROBE and PROBE_REPLY are no longer passed: tests/bpf/test_nic_tx.py.
]


@pytest.mark.parametrize(("name", "frame", "counter"), PASSES, ids=[p[0] for p in PASSES])
def test_passed_untouched(program, maps, qp, name, frame, counter):
    state = bytes(maps.rq_raw(QP_RX))
    before = maps.counters()
    raw = bytes(frame())

    result = run(program, raw)

    assert result.retval == XDP_PASS
    assert result.data_out == raw
    assert delta(before, maps.counters()) == {counter: 1}
    assert bytes(maps.rq_raw(QP_RX)) == state


# ---- messages: MSN, WRITE_WITH_IMM completions in order -----------------------------------------


def test_write_imm_completes_when_whole(program, maps, qp, event_reader):
    # One 3-packet WRITE_WITH_IMM message, MSN 0, its LAST packet first.
    base = BASE_VA + 2 * 1024

    def pkt(i: int, **kw) -> Packet:
        return data(START + i, va=base + i * 1024, msg_off=i * 1024, msn=0, **kw)

    assert_answer(run(program, pkt(2, imm=0xDEADBEEF, last=True)), sack(START + 2, START, 0b100))
    assert maps.rq(QP_RX).pending_msgs == [
        {"msn": 0, "last_psn": START + 2, "va": base, "len": 3072, "imm": 0xDEADBEEF}
    ]
    assert_answer(run(program, pkt(0)), sack(START, START + 1, 0b10))
    assert event_reader.read() == [], "no completion before the message is whole"

    assert_answer(run(program, pkt(1)), sack(START + 1, START + 3, msn=1))

    assert event_reader.wait(timeout=1.0)
    events = [e.as_dict() for e in event_reader.read()]
    assert len(events) == 1 and events[0].pop("ts") > 0
    assert events[0] == {
        "type": nic.EventType.RECV_IMM,
        "qpn": QP_RX,
        "msn": 0,
        "imm": 0xDEADBEEF,
        "va": base,
        "len": 3072,
    }
    rq = maps.rq(QP_RX)
    assert (rq.msn, rq.pending_msgs) == (1, [])
    assert (rq.stats["msgs_done"], rq.stats["imm_done"]) == (1, 1)
    for i in range(3):
        assert elem_bytes(maps, 2 + i) == payload_for(START + i)


def test_completions_are_in_message_order(program, maps, qp, event_reader):
    # MSN 0: plain WRITE (PSN START); MSN 1: WRITE_IMM (START+1); MSN 2:
    # WRITE_IMM (START+2). Arrival order: 2, 1, 0.
    before = maps.counters()
    assert_answer(
        run(program, data(START + 2, msn=2, imm=22, last=True)), sack(START + 2, START, 0b100)
    )
    assert_answer(
        run(program, data(START + 1, msn=1, imm=11, last=True)), sack(START + 1, START, 0b110)
    )
    assert event_reader.read() == []

    assert_answer(run(program, data(START, msn=0, last=True)), sack(START, START + 3, msn=3))

    events = event_reader.read()
    assert [(e.msn, e.imm, e.len) for e in events] == [(1, 11, 1024), (2, 22, 1024)]
    got = delta(before, maps.counters())
    assert got == {
        "sack": 3,
        "placed": 3,
        "placed_bytes": 3 * 1024,
        "msg_done": 3,
        "events": 2,
    }


def test_max_wimm_dest_bounds_write_with_imms_held(program, maps, qp, event_reader):
    # max_wimm_dest 1: WRITE_WITH_IMM 0 is held (START missing), WRITE_WITH_IMM 1
    # is refused; a plain WRITE is not bounded. Once 0 completes, 1 is taken.
    setup_qp(maps, max_wimm_dest=1)
    assert_answer(
        run(program, data(START + 1, msn=0, imm=10, last=True)), sack(START + 1, START, 0b10)
    )
    assert maps.rq(QP_RX).wimm_held == 1
    assert_answer(
        run(program, data(START + 3, msn=2, imm=12, last=True)),
        nack(START + 3, w.NackReason.NO_RESOURCE, cum=START, bitmap=0b10),
    )
    assert_answer(run(program, data(START + 2, msn=1, last=True)), sack(START + 2, START, 0b110))
    assert_answer(run(program, data(START, msn=0)), sack(START, START + 3, msn=2))
    rq = maps.rq(QP_RX)
    assert (rq.wimm_held, rq.msn) == (0, 2)
    assert [e.imm for e in event_reader.read()] == [10]
    assert_answer(
        run(program, data(START + 3, msn=2, imm=12, last=True)), sack(START + 3, START + 4, msn=3)
    )


@pytest.mark.parametrize(("dyn_mpr", "advertised"), [(True, MPR), (False, 0)])
def test_answers_advertise_the_mpr_with_dynamic_mpr(program, maps, qp, dyn_mpr, advertised):
    setup_qp(maps, dyn_mpr=dyn_mpr)
    assert_answer(run(program, data(START)), sack(START, START + 1, mpr=advertised))


def test_message_beyond_the_slots_is_nacked(program, maps, qp):
    before = maps.counters()
    result = run(program, data(START + 1, msn=nic.MSG_SLOTS, last=True))
    assert_answer(result, nack(START + 1, w.NackReason.NO_RESOURCE, cum=START))
    assert delta(before, maps.counters()) == {"nack_no_resource": 1}
    rq = maps.rq(QP_RX)
    assert rq.received == [] and rq.pending_msgs == []
    # The last slot still fits.
    assert run(program, data(START + 1, msn=nic.MSG_SLOTS - 1, last=True)).retval == XDP_TX
    assert [m["msn"] for m in maps.rq(QP_RX).pending_msgs] == [nic.MSG_SLOTS - 1]


def test_msn_starts_where_setup_says(program, maps, qp, event_reader):
    setup_qp(maps, msn=w.MSN_MASK)  # the next message is the last MSN before the wrap
    assert_answer(
        run(program, data(START, msn=w.MSN_MASK, imm=5, last=True)), sack(START, START + 1, msn=0)
    )
    assert [(e.msn, e.imm) for e in event_reader.read()] == [(w.MSN_MASK, 5)]


# ---- the map client ----------------------------------------------------------------------------


def test_memory_mmap_is_the_map(program, maps, qp):
    fd = maps.fd(nic.MR_MAP)
    elem = REGION_FIRST_ELEM + 5
    maps.write_region(REGION, 5 * 1024, b"\x42" * 1024)
    assert bpfsys.map_lookup(fd, elem.to_bytes(4, "little"), 1024) == b"\x42" * 1024
    bpfsys.map_update(fd, elem.to_bytes(4, "little"), b"\x24" * 1024)
    assert maps.read_region(REGION, 5 * 1024, 1024) == b"\x24" * 1024
    with pytest.raises(ValueError, match="outside region"):
        maps.read_region(REGION, REGION_ELEMS * 1024 - 1, 2)


def test_set_rq_state_keeps_receive_state(program, maps, qp):
    run(program, data(START + 3))
    maps.set_rq_state(QP_RX, nic.QpState.ERR)
    rq = maps.rq(QP_RX)
    assert (rq.state, rq.received, rq.stats["placed_pkts"]) == (nic.QpState.ERR, [START + 3], 1)
    assert run(program, data(START)).retval == XDP_DROP
    maps.set_rq_state(QP_RX, nic.QpState.RTS)
    assert run(program, data(START)).retval == XDP_TX


def test_delete_rq(program, maps, qp):
    maps.delete_rq(QP_RX)
    with pytest.raises(KeyError):
        maps.rq(QP_RX)
    with pytest.raises(KeyError):
        maps.delete_rq(QP_RX)
    assert run(program, data(START)).retval == XDP_DROP


def test_a_qp_receives_in_the_slot_its_number_picks(program, maps, qp):
    """nic_rx_qps is an array: QP q receives in slot q & (MAX_QPS - 1). A
    second QP that wants a taken slot is refused and the first keeps
    receiving; once the first is deleted the slot is the second's, and the
    first's packets are dropped as for an unknown QP."""
    rival = QP_RX + MAX_QPS
    args = dict(local_host=RX_HOST, peer_host=TX_HOST, peer_qpn=QP_TX, region=REGION, psn=START)
    assert maps.rx_slot(rival) == maps.rx_slot(QP_RX) == QP_RX % MAX_QPS
    with pytest.raises(FileExistsError, match=rf"slot 5 \(QPN & 0x3f\) is QP {QP_RX:#x}'s"):
        maps.setup_rq(rival, **args)
    # The rival reaches nothing of QP_RX's through the shared slot.
    for touch in (maps.rq, maps.delete_rq, lambda q: maps.set_rq_state(q, nic.QpState.ERR)):
        with pytest.raises(KeyError):
            touch(rival)
    with pytest.raises(KeyError):
        maps.delete_rq(QP_RX | 1 << 31)  # the owner word's tag bit is no QPN bit
    assert maps.rq(QP_RX).state == nic.QpState.RTR
    assert run(program, data(START)).retval == XDP_TX
    assert maps.rx_qpns() == [QP_RX]
    maps.delete_rq(QP_RX)
    assert maps.rx_qpns() == []
    maps.setup_rq(rival, **args)
    try:
        assert maps.rx_qpns() == [rival]
        before = maps.counters()
        assert run(program, data(START + 1)).retval == XDP_DROP
        assert delta(before, maps.counters()) == {"drop_unknown_qp": 1}
        assert run(program, data(START + 1, dqpn=rival)).retval == XDP_TX
        assert maps.rq(rival).received == [START + 1]
        with pytest.raises(KeyError):
            maps.rq(QP_RX)
    finally:
        maps.delete_rq(rival)


def test_client_refuses_bad_values(maps):
    good = dict(local_host=1, peer_host=0, peer_qpn=1, region=0)
    with pytest.raises(ValueError, match="mpr"):
        maps.setup_rq(1, **good, mpr=nic.MPR_MAX + 1)
    with pytest.raises(ValueError, match="mpr"):
        maps.setup_rq(1, **good, mpr=0)
    with pytest.raises(ValueError, match="qpn"):
        maps.setup_rq(1 << 24, **good)
    with pytest.raises(ValueError, match="region"):
        maps.setup_rq(1, **(good | {"region": MAX_REGIONS}))
    with pytest.raises(ValueError, match="do not fit"):
        maps.set_region(0, first_elem=MR_ELEMS - 1, n_elems=2, rkey=1)
    with pytest.raises(ValueError, match="base_va"):
        maps.set_region(0, first_elem=0, n_elems=1, rkey=1, base_va=-1)
    with pytest.raises(ValueError, match="leave no byte"):
        maps.set_region(0, first_elem=0, n_elems=1, rkey=1, head=512, tail=512)
    with pytest.raises(KeyError):
        maps.rq(0xFFFFFF)


def test_load_refuses_existing_pins(program):
    with pytest.raises(FileExistsError, match="already pinned"):
        nic.NicProgram.load(LAB, mr_elems=MR_ELEMS)


def test_pinned_maps_have_expected_shape(program):
    expected = {
        nic.RX_QPS_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, ctypes.sizeof(nic.RqLayout), MAX_QPS),
        nic.RX_SLOTS_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, 4, MAX_QPS),
        nic.MR_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, nic.MR_ELEM_SIZE, MR_ELEMS),
        nic.REGIONS_MAP: (
            bpfsys.BPF_MAP_TYPE_ARRAY,
            4,
            ctypes.sizeof(nic.RegionLayout),
            MAX_REGIONS,
        ),
        nic.PORT_UP_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, 4, nic.MAX_HOSTS),
        nic.COUNTERS_MAP: (bpfsys.BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, nic.COUNTER_SLOTS),
        nic.EVENTS_MAP: (nic.BPF_MAP_TYPE_RINGBUF, 0, 0, EVENT_PAGES * os.sysconf("SC_PAGE_SIZE")),
    }
    for name, shape in expected.items():
        fd = bpfsys.obj_get(nic.pin_dir(LAB) / name)
        try:
            info = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        assert (info.type, info.key_size, info.value_size, info.max_entries) == shape, name
        assert info.name == name
        if name == nic.MR_MAP:
            assert info.map_flags & nic.BPF_F_MMAPABLE


def test_unpin_removes_only_nic_maps(program):
    # A pin of another module (switchport's port_faults) in the lab's
    # directory survives nic.unpin, and so does the directory.
    from bcc import BPF

    lab = f"znicu{os.getpid()}"
    directory = nic.pin_dir(lab)
    other = directory / "port_faults"
    probe = BPF(text=b"BPF_ARRAY(port_faults, u32, 1);")
    try:
        nic.NicProgram.load(lab, mr_elems=4, max_qps=4, max_regions=1, event_pages=1).close()
        assert sorted(p.name for p in directory.iterdir()) == sorted(nic.PINNED_MAPS)
        bpfsys.obj_pin(probe[b"port_faults"].map_fd, other)
        nic.unpin(lab)
        assert [p.name for p in directory.iterdir()] == ["port_faults"]
        other.unlink()
        nic.unpin(lab)
        assert not directory.exists()
    finally:
        probe.cleanup()
        other.unlink(missing_ok=True)
        nic.unpin(lab)


# ---- layouts and constants against the header ----------------------------------------------------


@pytest.mark.parametrize(
    ("map_name", "view"), [(nic.RX_QPS_MAP, nic.RqLayout), (nic.REGIONS_MAP, nic.RegionLayout)]
)
def test_program_maps_use_the_pythonstruct_layout(program, map_name, view):
    leaf = program.bpf[map_name.encode()].Leaf
    assert struct_layout(leaf) == struct_layout(view)


# ---- a real port: XDP_TX on a veth pair ------------------------------------------------------


@pytest.mark.netns
def test_attach_answers_on_a_veth(program, maps, qp):
    """Data sent into one end of a veth pair comes back as a SACK.

    Both ends carry the program (XDP_TX into a veth needs a program on the
    peer, docs/design.md, section 3). The SACK reaching the sender's end is consumed
    there by the program's sender role: the sending QP's snd_una moves past
    the PSN, and it records the SACK's port bitmap.
    """
    import socket

    from pyroute2 import IPRoute

    from mrc_nic.kernel import netns

    ns = f"znic-{os.getpid()}"
    netns.create(ns)
    try:
        with IPRoute(netns=ns, flags=0) as ipr:
            ipr.link("add", ifname="znic-a", kind="veth", peer={"ifname": "znic-b"})
            ia = ipr.link_lookup(ifname="znic-a")[0]
            ib = ipr.link_lookup(ifname="znic-b")[0]
            for index in (ia, ib):
                ipr.link("set", index=index, state="up")
                program.attach(ipr, index)
            link = ipr.get_links(ia)[0]
            xdp = link.get_attr("IFLA_XDP")
            assert xdp.get_attr("IFLA_XDP_PROG_ID") > 0

            # The data sender's QP, with START in flight: it takes the SACK.
            maps.setup_sq(
                QP_TX,
                local_host=TX_HOST,
                peer_host=RX_HOST,
                peer_qpn=QP_RX,
                ring=0,
                evs={EV: PLANE},
                psn=START,
                snd_nxt=START + 1,
            )
            with netns.entered(ns):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            try:
                sock.bind(("znic-b", 0))
                sock.settimeout(2)
                frame = bytes(
                    data(
                        START,
                        ends=dataclasses.replace(
                            DATA, src_mac=_mac(ipr, ib), dst_mac=_mac(ipr, ia)
                        ),
                    )
                )
                sock.send(frame)
                deadline = time.monotonic() + 2
                while maps.sq(QP_TX).snd_una != START + 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                sock.close()
            sq = maps.sq(QP_TX)
            maps.delete_sq(QP_TX)
            assert (sq.snd_una, sq.stats["sacks"], sq.peer_ports) == (START + 1, 1, PORTS)
            assert elem_bytes(maps, 0) == payload_for(START)

            for index in (ia, ib):
                nic.NicProgram.detach(ipr, index)
            assert ipr.get_links(ia)[0].get_attr("IFLA_XDP").get_attr("IFLA_XDP_PROG_ID") is None
    finally:
        netns.remove(ns)


def _mac(ipr, index: int) -> str:
    return ipr.get_links(index)[0].get_attr("IFLA_ADDRESS")


# ---- isolation: an MR's memory, a map of its own (docs/api.md, "Isolation") ------------------


def test_data_is_placed_in_the_regions_own_memory_map(program, maps, qp):
    """An application's MR is a map of its own at its region's entry of
    nic_mems: the payload lands there and nowhere in nic_mr; a region whose
    memory map was taken away takes nothing (a remote access error)."""
    import mmap

    fd = maps.new_region_memory(REGION_ELEMS)
    try:
        maps.set_region(
            REGION, first_elem=0, n_elems=REGION_ELEMS, rkey=RKEY, base_va=BASE_VA,
            memory_fd=fd,
        )  # fmt: skip
        own = mmap.mmap(fd, REGION_ELEMS * nic.MR_ELEM_SIZE)
    finally:
        os.close(fd)
    try:
        assert_answer(run(program, data(START, elem=3)), sack(START, cum=START + 1))
        assert own[3 * 1024 : 4 * 1024] == payload_for(START)
        assert maps.memory()[:] == bytes(MR_ELEMS * nic.MR_ELEM_SIZE)  # nic_mr untouched
        maps.clear_inner_map(nic.MEMS_MAP, REGION)  # the region, without its memory
        before = maps.counters()
        result = run(program, data(START + 1, elem=4))
        assert result.data_out and delta(before, maps.counters()) == {"nack_rem_access": 1}
        assert own[4 * 1024 : 5 * 1024] == bytes(1024)
    finally:
        own.close()
