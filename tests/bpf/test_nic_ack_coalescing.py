"""Golden-packet tests of ACK coalescing in bpf/nic_xdp.c (docs/nic-program.md,
"ACK coalescing"): the receiver's rule, which data packets wait for a later
answer. The sender's half (AckReq, the fan-out of a SACK of several PSNs) is
in test_nic_engine.py.

The receive QP is tests/helpers/receiver.py's, set up with ack_every EVERY:
one in-order packet in EVERY is answered; a held packet is XDP_DROP, its
payload placed; an answer's cum_psn covers the held ones. Every expected
answer is built with wire.sack_packet / wire.nack_packet and compared byte
for byte.
"""

from __future__ import annotations

import os
import time

import pytest

from mrc_nic import nic
from mrc_nic.nic import wire as w
from tests.helpers.nicprog import QP_RX, XDP_DROP, delta, run
from tests.helpers.receiver import (
    REGION,
    START,
    assert_answer,
    data,
    fresh_qp,
    nack,
    payload_for,
    sack,
    setup_qp,
)

LAB = f"zack{os.getpid()}"
MR_ELEMS = 64
PROGRAM_SIZES = dict(mr_elems=MR_ELEMS, max_qps=64, max_regions=4, event_pages=1)

EVERY = 4
DELAY_NS = 1_000_000_000  # 1 s: longer than a test takes between two packets, unless it means to


def mid(psn: int, **kw):
    """A middle packet without AckReq: one the receiver may hold."""
    return data(psn, ackreq=False, **kw)


@pytest.fixture
def qp(maps, event_reader):
    fresh_qp(maps, MR_ELEMS, ack_every=EVERY, ack_delay_ns=DELAY_NS)
    event_reader.read()
    return QP_RX


def placed(maps, psn: int) -> bool:
    return maps.read_region(REGION, (psn - START) * nic.MR_ELEM_SIZE, 1024) == payload_for(psn)


def test_a_burst_in_order_gets_one_sack_covering_it(program, maps, qp):
    before = maps.counters()
    for psn in range(START, START + EVERY - 1):
        assert run(program, mid(psn)).retval == XDP_DROP, f"PSN {psn} answered"
        assert placed(maps, psn), "a held packet is placed all the same"

    result = run(program, mid(START + EVERY - 1))

    assert_answer(result, sack(START + EVERY - 1, cum=START + EVERY))
    d = delta(before, maps.counters())
    assert d["ack_held"] == EVERY - 1 and d["sack"] == 1 and d["placed"] == EVERY
    # and the count starts again after the answer
    assert run(program, mid(START + EVERY)).retval == XDP_DROP


def test_every_one_answers_every_packet(program, maps, qp):
    setup_qp(maps, ack_every=1)
    for psn in range(START, START + 3):
        assert_answer(run(program, mid(psn)), sack(psn, cum=psn + 1))


@pytest.mark.parametrize(
    ("what", "kw"),
    [
        ("AckReq", dict(ackreq=True)),
        ("LAST", dict(ackreq=False, last=True)),
        ("ECN", dict(ackreq=False, ecn=w.Ecn.CE)),
    ],
)
def test_a_packet_that_asks_is_answered_at_once(program, maps, qp, what, kw):
    assert run(program, mid(START)).retval == XDP_DROP
    result = run(program, data(START + 1, **kw))
    flags = w.AckFlag.ECN if what == "ECN" else 0
    msn = 1 if what == "LAST" else 0
    assert_answer(result, sack(START + 1, cum=START + 2, flags=flags, msn=msn))


def test_out_of_order_packets_are_coalesced_too(program, maps, qp):
    """Spraying reorders every flow: a burst out of order is one SACK, whose
    bitmap and cum_psn say what came."""
    for psn in (START + 2, START + 1, START + 3):
        assert run(program, mid(psn)).retval == XDP_DROP, f"PSN {psn} answered"
    assert_answer(run(program, mid(START + 5)), sack(START + 5, cum=START, bitmap=0b101110))
    # the first of a new run: held, placed, cum_psn over the four
    assert run(program, mid(START)).retval == XDP_DROP
    assert maps.rq_raw(QP_RX).cum_psn == START + 4


def test_a_packet_beyond_the_bitmap_is_answered_at_once(program, maps, qp):
    """A PSN 64 or more past cum_psn is answered now; while answers are held
    its SACK keeps the base at cum_psn, to report them (its own PSN is in the
    BTH); with none held the base moves to it as before."""
    setup_qp(maps, mpr=2, ack_every=EVERY, ack_delay_ns=DELAY_NS)
    assert run(program, mid(START + 63, elem=0)).retval == XDP_DROP
    result = run(program, mid(START + 100, elem=1))
    assert_answer(result, sack(START + 100, cum=START, bitmap=1 << 63, mpr=2))
    result = run(program, mid(START + 101, elem=2))
    assert_answer(result, sack(START + 101, cum=START, sack_psn=192, bitmap=0b11 << 8, mpr=2))


def test_a_duplicate_and_a_trim_are_answered_at_once(program, maps, qp):
    assert run(program, mid(START)).retval == XDP_DROP
    assert_answer(run(program, mid(START)), sack(START, cum=START + 1, flags=w.AckFlag.DUP))
    assert run(program, mid(START + 1)).retval == XDP_DROP
    result = run(program, w.trim(mid(START + 2)))
    assert_answer(
        result, nack(START + 2, w.NackReason.TRIMMED, cum=START + 2, flags=w.AckFlag.TRIMMED)
    )
    # the NACK's cum_psn answered the held packet: a new run of EVERY starts
    for psn in range(START + 2, START + 2 + EVERY - 1):
        assert run(program, mid(psn)).retval == XDP_DROP
    assert_answer(run(program, mid(START + 5)), sack(START + 5, cum=START + 6))


def test_a_packet_after_the_delay_is_answered(program, maps, qp):
    setup_qp(maps, ack_every=EVERY, ack_delay_ns=200_000)
    assert run(program, mid(START)).retval == XDP_DROP
    time.sleep(0.002)  # past the 200 us a held answer may wait
    assert_answer(run(program, mid(START + 1)), sack(START + 1, cum=START + 2))
    assert run(program, mid(START + 2)).retval == XDP_DROP, "a new run starts"
