"""Golden-packet tests of the sender half of bpf/nic_xdp.c (and of PROBE -> PROBE_REPLY).

The program is compiled once for the module (lab ``ztx<pid>``, small maps,
pins removed at teardown) and run with BPF_PROG_TEST_RUN on SACKs, NACKs,
PROBEs and PROBE_REPLYs built by mrc_nic.nic.wire from explicit values. What the
program decides is read back from its maps (mrc_nic.nic's client) and its
event ring; there is no Python model of the sender.

Addresses follow the lab's plan: host h on plane p is 198.18.p.(h+1). The
data sender is host 0 (send QP 0x000007), the receiver host 1 (QP 0x010005),
and the acknowledgements come back on plane 2: from 198.18.2.2 to 198.18.2.1.

Each test starts from a freshly set-up send QP: snd_una = START, snd_nxt =
START + SENT (mpr 1: a 128-PSN window), three GOOD EVs (A and B on plane 2, C
on plane 3), an empty PSN -> EV table, an empty event ring. Timestamps that
must give RTT samples are taken from CLOCK_MONOTONIC, the clock of
bpf_ktime_get_ns(), and the samples are checked against bounds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import random
import time
from collections.abc import Callable

import pytest
from scapy.layers.inet import UDP
from scapy.packet import Packet

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import auth
from mrc_nic.nic import wire as w
from mrc_nic.transport import prober
from tests.helpers import nicprog
from tests.helpers.header_probe import struct_layout
from tests.helpers.nicprog import (
    ANSWER,
    DATA,
    PLANE,
    QP_RX,
    QP_TX,
    RX_HOST,
    TX_HOST,
    XDP_DROP,
    XDP_TX,
    delta,
    patched,
    run,
    with_udp_payload,
)

LAB = f"ztx{os.getpid()}"

# The program's sizes in this module.
MAX_QPS = 16
MAX_EVS = 64
TX_RINGS = 8
EVENT_PAGES = 1
PROGRAM_SIZES = dict(  # conftest's program fixture
    mr_elems=16,
    max_qps=MAX_QPS,
    max_regions=2,
    event_pages=EVENT_PAGES,
    max_evs=MAX_EVS,
    tx_rings=TX_RINGS,
)

# The plan (nicprog's): QP_TX, the send QP, is the dest QP of every SACK, NACK and
# PROBE_REPLY; QP_RX, the peer's receive QP, of PROBEs (DATA's direction).
ACK = ANSWER  # receiver -> sender: SACK, NACK, PROBE_REPLY
EV_A, EV_B, EV_C = 0xC001, 0xC002, 0xC003
EVS = {EV_A: PLANE, EV_B: PLANE, EV_C: PLANE + 1}
RING = 3
START = 100
SENT = 32  # PSNs in flight after setup: [START, START + SENT)
MPR = 1
WINDOW = MPR * w.MPR_UNIT
PEER_PORTS = 0b1011  # the receiver's ports that are up, as its ACKs say
TS = 1_000_000_000  # 1 s after boot: always in the past
SKIP_NS = nic.DEFAULT_SKIP_NS


def tx_ts(psn: int) -> int:
    """The transmit time recorded for (and echoed with) PSN psn."""
    return TS + psn * 1000


# ---- packets --------------------------------------------------------------------------


def _ack_fields(psn: int, cum: int, bitmap: int, ev: int, kw: dict) -> dict:
    """What the SACK and the NACK of data packet psn sent on ev share; ends,
    dqpn, echo_ts (tx_ts(psn)) and port_bitmap are taken out of kw when given there."""
    return dict(
        ends=kw.pop("ends", ACK),
        ev=ev,
        dqpn=kw.pop("dqpn", QP_TX),
        psn=psn,
        cum_psn=cum,
        echo_ts=kw.pop("echo_ts", tx_ts(psn)),
        sack_bitmap=bitmap,
        port_bitmap=kw.pop("port_bitmap", PEER_PORTS),
        mpr=MPR,
    )


def sack(psn: int, cum: int, bitmap: int = 0, *, ev: int = EV_A, **kw) -> Packet:
    """A SACK for the data packet psn sent on ev (echo_ts: tx_ts(psn) unless given)."""
    fields = _ack_fields(psn, cum, bitmap, ev, kw)
    return w.sack_packet(**fields, **kw)


def nack(psn: int, reason: w.NackReason, cum: int, bitmap: int = 0, *, ev: int = EV_A, **kw):
    """A NACK of the data packet psn sent on ev."""
    fields = _ack_fields(psn, cum, bitmap, ev, kw)
    return w.nack_packet(reason=reason, **fields, **kw)


def probe_reply(psn: int, *, ev: int = EV_A, **kw) -> Packet:
    """A PROBE_REPLY for probe number psn of ev, to the send QP."""
    return w.probe_reply(
        kw.pop("ends", ACK),
        ev=ev,
        dqpn=kw.pop("dqpn", QP_TX),
        psn=psn,
        echo_ts=kw.pop("echo_ts", TS),
        port_bitmap=PEER_PORTS,
        **kw,
    )


# Frame offsets of a SACK/NACK: BTH 42, AETH 54 (syndrome byte), MRC_ACK 58,
# nack_reason 85, ICRC 90.
AETH_SYNDROME_AT = 54
NACK_REASON_AT = 85


# ---- fixtures -------------------------------------------------------------------------


@pytest.fixture
def sq(maps, event_reader):
    """A fresh send QP with SENT PSNs in flight, its EVs GOOD, no pending events."""
    setup_sq(maps)
    event_reader.read()
    return QP_TX


def setup_sq(maps, **kw) -> None:
    args = dict(
        local_host=TX_HOST,
        peer_host=RX_HOST,
        peer_qpn=QP_RX,
        ring=RING,
        evs=EVS,
        mpr=MPR,
        psn=START,
        snd_nxt=START + SENT,
    )
    maps.setup_sq(QP_TX, **(args | kw))


def record(maps, plan: dict[int, int]) -> None:
    """Record transmissions as the send engine would: {psn: ev}, in send order."""
    for psn, ev in plan.items():
        maps.record_tx(QP_TX, psn, ev, tx_ts=tx_ts(psn))


def state_bytes(maps) -> tuple[bytes, ...]:
    """The send QP and its EVs as stored (the spin lock reads as 0)."""
    return (bytes(maps.sq_raw(QP_TX)), *(bytes(maps.ev_raw(QP_TX, ev)) for ev in EVS))


def consumed(program, maps, frame: Packet | bytes) -> dict[str, int]:
    """Run an ACK or PROBE_REPLY that must be consumed; the counters it moved."""
    before = maps.counters()
    result = run(program, frame)
    assert result.retval == XDP_DROP, f"verdict {result.retval}"
    return delta(before, maps.counters())


def assert_skipping(ev: nic.EvSnapshot, t0: int, t1: int) -> None:
    """ev was put in SKIP by a packet processed between t0 and t1 (CLOCK_MONOTONIC)."""
    assert ev.state == nic.EvState.SKIP
    assert t0 + SKIP_NS <= ev.skip_until <= t1 + SKIP_NS


# ---- SACK: acknowledgements and the window ------------------------------------------------


def test_sack_advances_snd_una_and_frees_window(program, maps, sq):
    assert maps.sq(QP_TX).window_free == WINDOW - SENT

    got = consumed(program, maps, sack(START + 3, cum=START + 4, port_bitmap=0b0110))

    assert got == {"ack_consumed": 1, "acked": 4}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.snd_nxt, s.acked, s.retx_queue) == (START + 4, START + SENT, [], [])
    assert s.window_free == WINDOW - SENT + 4
    assert s.peer_ports == 0b0110
    assert s.stats == dict.fromkeys(s.stats, 0) | {"sacks": 1, "acked_pkts": 4}
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.GOOD
    assert (a.stats["acks"], a.stats["rtt_samples"]) == (1, 1)


def test_everything_acknowledged(program, maps, sq):
    # cum_psn = snd_nxt: every PSN sent is acknowledged, the whole window is free.
    assert consumed(program, maps, sack(START + SENT - 1, cum=START + SENT)) == {
        "ack_consumed": 1,
        "acked": SENT,
    }
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.in_flight, s.window_free) == (START + SENT, 0, WINDOW)


def test_bitmap_only_sack_marks_bits_without_advancing(program, maps, sq):
    assert consumed(program, maps, sack(START + 2, cum=START, bitmap=0b1100)) == {
        "ack_consumed": 1,
        "acked": 2,
    }
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked, s.window_free) == (START, [START + 2, START + 3], WINDOW - SENT)

    # START + 1 joins them; START is still the hole.
    got = consumed(program, maps, sack(START + 1, cum=START, bitmap=0b1110))
    assert got == {"ack_consumed": 1, "acked": 1}
    assert maps.sq(QP_TX).acked == [START + 1, START + 2, START + 3]

    # The hole filled: snd_una moves over the whole run, one PSN newly acknowledged.
    got = consumed(program, maps, sack(START, cum=START + 4))
    assert got == {"ack_consumed": 1, "acked": 1}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked, s.stats["acked_pkts"]) == (START + 4, [], 4)
    raw = maps.sq_raw(QP_TX)
    assert not any(raw.acked) and not any(raw.echoed), "bits behind snd_una must be cleared"


def test_sack_bitmap_base_below_snd_una_and_far_above(program, maps, sq):
    setup_sq(maps, snd_nxt=START + WINDOW)  # [100, 228) in flight
    consumed(program, maps, sack(START + 3, cum=START + 4))
    # An older view of the receiver (base 100, below snd_una 104): the bits
    # below snd_una are ignored, 106 is new.
    got = consumed(program, maps, sack(START + 6, cum=START, bitmap=0b1001111))
    assert got == {"ack_consumed": 1, "acked": 1}
    assert maps.sq(QP_TX).acked == [START + 6]
    # A base far above snd_una (the receiver's view of a far trigger); a bit
    # at or beyond snd_nxt (base + 40 = 232 >= 228) is ignored.
    got = consumed(
        program, maps, sack(195, cum=START + 4, sack_psn=192, bitmap=1 | 1 << 3 | 1 << 40)
    )
    assert got == {"ack_consumed": 1, "acked": 2}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked) == (START + 4, [START + 6, 192, 195])


def test_window_across_the_psn_wrap(program, maps, sq):
    top = w.PSN_MASK
    setup_sq(maps, psn=top - 3, snd_nxt=5)  # [top - 3, 5): 9 PSNs

    # Bits 3, 4, 5 from top - 3: PSNs top, 0 and 1 (the trigger).
    got = consumed(program, maps, sack(1, cum=top - 3, sack_psn=top - 3, bitmap=0b111000))
    assert got == {"ack_consumed": 1, "acked": 3}
    assert maps.sq(QP_TX).acked == [top, 0, 1]

    assert consumed(program, maps, sack(top - 3, cum=top - 2)) == {"ack_consumed": 1, "acked": 1}
    got = consumed(program, maps, sack(top - 1, cum=top - 2, bitmap=0b11110))
    assert got == {"ack_consumed": 1, "acked": 1}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked) == (top - 2, [top - 1, top, 0, 1])

    # The hole at top - 2 filled: snd_una crosses the wrap.
    got = consumed(program, maps, sack(top - 2, cum=2, ev=EV_B))
    assert got == {"ack_consumed": 1, "acked": 1}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked, s.in_flight) == (2, [], 3)


# ---- SACK: stale, duplicate, never sent -------------------------------------------------------


def test_duplicate_sack_is_counted_and_ignored(program, maps, sq):
    pkt = sack(START + 2, cum=START, bitmap=0b100, flags=w.AckFlag.ECN)
    consumed(program, maps, pkt)
    sq_before, *evs_before = state_bytes(maps)

    assert consumed(program, maps, pkt) == {"ack_stale": 1}

    sq_after, *evs_after = state_bytes(maps)
    assert evs_after == evs_before, "a duplicate gives no feedback to its EV"
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked) == (START, [START + 2])
    assert (s.stats["sacks"], s.stats["dup_acks"], s.stats["acked_pkts"]) == (2, 1, 1)
    counted = maps.sq(QP_TX, psns=False)  # the daemon's every-tick read: counts, no lists
    assert (counted.acked, counted.acked_count, counted.in_network) == (None, 1, s.in_network)
    assert maps.ev(QP_TX, EV_A).stats["ecn_marks"] == 1


def test_stale_sack_is_counted_and_ignored(program, maps, sq):
    consumed(program, maps, sack(START + 5, cum=START + 6))
    sq_before, *evs_before = state_bytes(maps)

    # A SACK from before: its PSN and its cumulative PSN are behind snd_una.
    assert consumed(program, maps, sack(START + 1, cum=START + 2, ev=EV_B)) == {"ack_stale": 1}

    assert state_bytes(maps)[1:] == tuple(evs_before)
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked, s.stats["stale_acks"]) == (START + 6, [], 1)


def test_stale_sack_still_frees_window(program, maps, sq):
    # Its own PSN is behind snd_una, but its cumulative PSN is news.
    consumed(program, maps, sack(START + 1, cum=START + 2))
    got = consumed(program, maps, sack(START, cum=START + 5, ev=EV_B))
    assert got == {"ack_consumed": 1, "acked": 3}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.stats["stale_acks"]) == (START + 5, 1)
    assert maps.ev(QP_TX, EV_B).stats["acks"] == 0, "no feedback from a stale SACK"


@pytest.mark.parametrize(
    "pkt",
    [
        lambda: sack(START + SENT, cum=START),
        lambda: sack(START, cum=START + SENT + 1),
        lambda: sack(START + WINDOW + 7, cum=START),
        lambda: nack(START + SENT, w.NackReason.TRIMMED, cum=START),
    ],
    ids=["PSN = snd_nxt", "cum beyond snd_nxt", "PSN far beyond", "NACK of an unsent PSN"],
)
def test_acknowledging_psns_never_sent_is_dropped(program, maps, sq, pkt):
    state = state_bytes(maps)
    assert consumed(program, maps, pkt()) == {"drop_ack_range": 1}
    assert state_bytes(maps) == state


# ---- drops: ACKs the QP must not take, malformed ACKs and probe replies ----------------------


def write_raw_sq(maps, **fields) -> None:
    """Store the send QP with some fields changed, bypassing the client's checks."""
    value = maps.sq_raw(QP_TX)
    for name, v in fields.items():
        setattr(value, name, v)
    bpfsys.map_update(maps.fd(nic.TX_QPS_MAP), QP_TX.to_bytes(4, "little"), bytes(value))


@dataclasses.dataclass
class Drop:
    name: str
    frame: Callable[[], Packet | bytes]
    counter: str
    setup: dict | None = None  # fields of the stored send QP to change first


SACK = sack(START, cum=START + 1)
SACK_PAYLOAD = bytes(SACK[UDP].payload)
PROBE_REPLY = probe_reply(3)
PROBE_REPLY_PAYLOAD = bytes(PROBE_REPLY[UDP].payload)


def _ends(**fields) -> w.Endpoints:
    return dataclasses.replace(ACK, **fields)


DROPS = [
    Drop("unknown QP", lambda: sack(START, START + 1, dqpn=QP_TX + 1), "drop_unknown_qp"),
    Drop("the peer's QP", lambda: sack(START, START + 1, dqpn=QP_RX), "drop_unknown_qp"),
    Drop(
        "spoofed source host",
        lambda: sack(START, START + 1, ends=_ends(src_ip="198.18.2.9")),
        "drop_spoofed",
    ),
    Drop(
        "source on another plane",
        lambda: sack(START, START + 1, ends=_ends(src_ip="198.18.3.2")),
        "drop_spoofed",
    ),
    Drop(
        "destination is another host",
        lambda: sack(START, START + 1, ends=_ends(dst_ip="198.18.2.3")),
        "drop_spoofed",
    ),
    Drop(
        "the data direction (our own address as source)",
        lambda: sack(START, START + 1, ends=DATA),
        "drop_spoofed",
    ),
    Drop(
        "source outside the lab",
        lambda: sack(START, START + 1, ends=_ends(src_ip="10.0.0.2")),
        "drop_spoofed",
    ),
    Drop("QP in RESET", lambda: SACK, "drop_qp_state", {"state": nic.QpState.RESET}),
    Drop("QP in INIT", lambda: SACK, "drop_qp_state", {"state": nic.QpState.INIT}),
    Drop("QP in RTR", lambda: SACK, "drop_qp_state", {"state": nic.QpState.RTR}),
    Drop("QP in ERR", lambda: SACK, "drop_qp_state", {"state": nic.QpState.ERR}),
    Drop("mpr 0", lambda: SACK, "drop_qp_config", {"mpr": 0}),
    Drop("mpr too large", lambda: SACK, "drop_qp_config", {"mpr": nic.MPR_MAX + 1}),
    Drop("no such ring", lambda: SACK, "drop_qp_config", {"ring": TX_RINGS}),
    Drop(
        "more in flight than the window",
        lambda: SACK,
        "drop_qp_config",
        {"snd_nxt": START + WINDOW + 1},
    ),
    Drop(
        "SACK syndrome with a NACK reason",
        lambda: patched(SACK, NACK_REASON_AT, bytes([w.NackReason.TRIMMED])),
        "drop_bad_ack",
    ),
    Drop(
        "NAK syndrome without a reason",
        lambda: patched(SACK, AETH_SYNDROME_AT, bytes([w.Syndrome.NAK_PSN_SEQ])),
        "drop_bad_ack",
    ),
    Drop(
        "unknown NACK reason",
        lambda: patched(nack(START, w.NackReason.TRIMMED, START), NACK_REASON_AT, b"\x33"),
        "drop_bad_ack",
    ),
    Drop(
        "fatal reason with a retryable syndrome",
        lambda: nack(START, w.NackReason.UNEXP_EVENT, START, syndrome=w.Syndrome.NAK_PSN_SEQ),
        "drop_bad_ack",
    ),
    Drop(
        "retryable reason with a fatal syndrome",
        lambda: nack(START, w.NackReason.TRIMMED, START, syndrome=w.Syndrome.NAK_REM_ACCESS),
        "drop_bad_ack",
    ),
    Drop(
        "RNR NAK syndrome",
        lambda: patched(SACK, AETH_SYNDROME_AT, b"\x20"),
        "drop_bad_ack",
    ),
    Drop(
        "ACK syndrome with credits",
        lambda: patched(SACK, AETH_SYNDROME_AT, b"\x05"),
        "drop_bad_ack",
    ),
    Drop("UDP source port 0 (EV 0)", lambda: patched(SACK, 34, b"\0\0"), "drop_bad_port"),
    Drop(
        "fatal NACK behind snd_una",
        lambda: nack(
            START - 1, w.NackReason.UNEXP_EVENT, START, syndrome=w.Syndrome.NAK_REM_ACCESS
        ),
        "drop_nack_stale",
    ),
    Drop(
        "fatal NACK far behind snd_una",
        lambda: nack(
            START - (1 << 22) & w.PSN_MASK,
            w.NackReason.UNEXP_EVENT,
            START,
            syndrome=w.Syndrome.NAK_INV_REQ,
        ),
        "drop_nack_stale",
    ),
    Drop(
        "fatal NACK at snd_nxt",
        lambda: nack(
            START + SENT, w.NackReason.UNEXP_EVENT, START, syndrome=w.Syndrome.NAK_REM_ACCESS
        ),
        "drop_ack_range",
    ),
    Drop("short SACK", lambda: with_udp_payload(SACK, SACK_PAYLOAD[:-1]), "drop_short"),
    Drop("SACK headers only", lambda: with_udp_payload(SACK, SACK_PAYLOAD[:48]), "drop_short"),
    Drop("long SACK", lambda: with_udp_payload(SACK, SACK_PAYLOAD + bytes(4)), "drop_bad_len"),
    Drop("SACK cut", lambda: bytes(SACK)[:-1], "drop_truncated"),
    Drop(
        "PROBE_REPLY to an unknown QP",
        lambda: probe_reply(3, dqpn=QP_TX + 1),
        "drop_unknown_qp",
    ),
    Drop(
        "spoofed PROBE_REPLY",
        lambda: probe_reply(3, ends=_ends(src_ip="198.18.2.9")),
        "drop_spoofed",
    ),
    Drop("PROBE_REPLY, QP in ERR", lambda: PROBE_REPLY, "drop_qp_state", {"state": 6}),
    Drop(
        "short PROBE_REPLY",
        lambda: with_udp_payload(PROBE_REPLY, PROBE_REPLY_PAYLOAD[:-1]),
        "drop_short",
    ),
    Drop(
        "long PROBE_REPLY",
        lambda: with_udp_payload(PROBE_REPLY, PROBE_REPLY_PAYLOAD + bytes(4)),
        "drop_bad_len",
    ),
]


@pytest.mark.parametrize("case", DROPS, ids=[c.name for c in DROPS])
def test_dropped_and_counted(program, maps, sq, case: Drop):
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)  # a PROBE_REPLY would change it
    if case.setup:
        write_raw_sq(maps, **case.setup)
    state = state_bytes(maps)

    assert consumed(program, maps, case.frame()) == {case.counter: 1}
    assert state_bytes(maps) == state, "a dropped packet must not change the QP or its EVs"


# ---- ECN and SKIP --------------------------------------------------------------------------


def test_ecn_sack_skips_its_ev(program, maps, sq):
    t0 = time.monotonic_ns()
    got = consumed(program, maps, sack(START, cum=START + 1, ev=EV_B, flags=w.AckFlag.ECN))
    t1 = time.monotonic_ns()

    assert got == {"ack_consumed": 1, "acked": 1}
    b = maps.ev(QP_TX, EV_B)
    assert_skipping(b, t0, t1)
    assert (b.stats["ecn_marks"], b.stats["skips"], b.stats["acks"]) == (1, 1, 1)
    for other in (EV_A, EV_C):
        assert maps.ev(QP_TX, other).state == nic.EvState.GOOD
    assert maps.sq(QP_TX).snd_una == START + 1


def test_skip_is_extended_then_expires(program, maps, sq):
    consumed(program, maps, sack(START, START + 1, flags=w.AckFlag.ECN))
    first = maps.ev(QP_TX, EV_A).skip_until
    t0 = time.monotonic_ns()
    consumed(program, maps, sack(START + 1, START + 2, flags=w.AckFlag.ECN))
    a = maps.ev(QP_TX, EV_A)
    assert_skipping(a, t0, time.monotonic_ns())
    assert a.skip_until > first and a.stats["skips"] == 2

    # Nothing undoes a SKIP but time; the next ACK for the EV after it sees GOOD.
    time.sleep(2 * SKIP_NS / 1e9)
    consumed(program, maps, sack(START + 2, START + 3))
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.GOOD and a.stats["skips"] == 2


def test_ecn_does_not_lift_worse_states(program, maps, sq):
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.DENIED)
    maps.set_ev_state(QP_TX, EV_B, nic.EvState.ASSUMED_BAD)
    consumed(program, maps, sack(START, START + 1, ev=EV_A, flags=w.AckFlag.ECN))
    consumed(program, maps, sack(START + 1, START + 2, ev=EV_B, flags=w.AckFlag.ECN))
    a, b = maps.ev(QP_TX, EV_A), maps.ev(QP_TX, EV_B)
    assert (a.state, b.state) == (nic.EvState.DENIED, nic.EvState.ASSUMED_BAD)
    assert (a.stats["ecn_marks"], b.stats["ecn_marks"]) == (1, 1)
    assert a.skip_until == b.skip_until == 0


# ---- NACKs ----------------------------------------------------------------------------------


def test_trim_nack_skips_and_queues_the_psn(program, maps, sq, event_reader):
    # The NACK also reports START + 1 received (bitmap): a NACK frees window too.
    t0 = time.monotonic_ns()
    got = consumed(
        program, maps, nack(START + 3, w.NackReason.TRIMMED, cum=START, bitmap=0b10, ev=EV_B)
    )
    t1 = time.monotonic_ns()

    assert got == {"ack_consumed": 1, "acked": 1, "retx_queued": 1}
    b = maps.ev(QP_TX, EV_B)
    assert_skipping(b, t0, t1)
    assert b.stats == dict.fromkeys(b.stats, 0) | {
        "nack_trimmed": 1,
        "retx_queued": 1,
        "skips": 1,
    }
    s = maps.sq(QP_TX)
    assert s.retx_queue == [
        {
            "psn": START + 3,
            "ev": EV_B,
            "cause": nic.RetxCause.NACK,
            "nack_reason": w.NackReason.TRIMMED,
        }
    ]
    assert (s.snd_una, s.acked, s.retx_pending) == (START, [START + 1], [START + 3])
    assert (s.stats["nacks"], s.stats["retx_queued"]) == (1, 1)
    assert event_reader.read() == [], "trims are not events: the engine drains the queue"

    # The same NACK again: not queued twice.
    assert consumed(
        program, maps, nack(START + 3, w.NackReason.TRIMMED, cum=START, bitmap=0b10, ev=EV_B)
    ) == {"ack_stale": 1}
    assert len(maps.retx_queue(QP_TX)) == 1


def test_trimmed_and_marked_is_one_skip(program, maps, sq):
    pkt = nack(START, w.NackReason.TRIMMED, cum=START, flags=w.AckFlag.TRIMMED | w.AckFlag.ECN)
    consumed(program, maps, pkt)
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.SKIP
    assert (a.stats["nack_trimmed"], a.stats["ecn_marks"], a.stats["skips"]) == (1, 1, 1)


def test_lasthop_trim_queues_but_does_not_skip(program, maps, sq):
    # Incast at the receiver is on every EV: skipping this one would not help.
    got = consumed(program, maps, nack(START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    assert got == {"ack_consumed": 1, "retx_queued": 1}
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.GOOD
    assert (a.stats["nack_trimmed_lasthop"], a.stats["skips"]) == (1, 0)
    assert maps.retx_queue(QP_TX) == [
        {
            "psn": START,
            "ev": EV_A,
            "cause": nic.RetxCause.NACK,
            "nack_reason": w.NackReason.TRIMMED_LASTHOP,
        }
    ]


@pytest.mark.parametrize(
    ("reason", "counter"),
    [
        (w.NackReason.PSN_OOR_WINDOW, "nack_oor"),
        (w.NackReason.NO_BITMAP, "nack_no_resource"),
        (w.NackReason.NO_PKT_BUFFER, "nack_no_resource"),
        (w.NackReason.NO_RESOURCE, "nack_no_resource"),
    ],
)
def test_retryable_nack_queues_the_psn(program, maps, sq, reason, counter):
    got = consumed(program, maps, nack(START + 20, reason, cum=START + 2, ev=EV_C))
    assert got == {"ack_consumed": 1, "acked": 2, "retx_queued": 1}
    c = maps.ev(QP_TX, EV_C)
    assert c.state == nic.EvState.GOOD, "not a path problem"
    assert (c.stats[counter], c.stats["retx_queued"]) == (1, 1)
    s = maps.sq(QP_TX)
    assert s.snd_una == START + 2
    assert s.retx_queue == [
        {"psn": START + 20, "ev": EV_C, "cause": nic.RetxCause.NACK, "nack_reason": reason}
    ]


def test_nack_of_an_acknowledged_psn_queues_nothing(program, maps, sq):
    # START + 4 acknowledged by another SACK's bitmap, then NACKed (a late
    # NACK of an earlier transmission): feedback for its EV, nothing queued.
    consumed(program, maps, sack(START + 5, cum=START, bitmap=0b110000))
    got = consumed(
        program, maps, nack(START + 4, w.NackReason.PSN_OOR_WINDOW, cum=START, bitmap=0b110000)
    )
    assert got == {"ack_consumed": 1}
    assert maps.retx_queue(QP_TX) == []
    assert maps.ev(QP_TX, EV_A).stats["nack_oor"] == 1
    # Its own SACK or NACK again: a duplicate, stale.
    got = consumed(program, maps, nack(START + 4, w.NackReason.PSN_OOR_WINDOW, cum=START))
    assert got == {"ack_stale": 1}


def test_fatal_nack_moves_the_qp_to_err(program, maps, sq, event_reader):
    t0 = time.monotonic_ns()
    got = consumed(
        program,
        maps,
        nack(
            START + 1,
            w.NackReason.UNEXP_EVENT,
            cum=START,
            syndrome=w.Syndrome.NAK_REM_ACCESS,
            ev=EV_B,
        ),
    )
    t1 = time.monotonic_ns()

    assert got == {"ack_consumed": 1, "events": 1}
    s = maps.sq(QP_TX)
    assert s.state == nic.QpState.ERR
    assert (s.stats["fatal_nacks"], s.retx_queue) == (1, [])
    assert maps.ev(QP_TX, EV_B).stats["nack_fatal"] == 1
    events = event_reader.read()
    assert [type(e) for e in events] == [nic.QpErrEvent]
    event = events[0].as_dict()
    assert t0 <= event.pop("ts") <= t1
    assert event == {
        "type": nic.EventType.QP_ERR,
        "qpn": QP_TX,
        "psn": START + 1,
        "ev": EV_B,
        "syndrome": w.Syndrome.NAK_REM_ACCESS,
        "reason": w.NackReason.UNEXP_EVENT,
        "error": nic.QpError.NONE,
    }
    # An ERR QP takes no more acknowledgements.
    assert consumed(program, maps, sack(START, cum=START + 1)) == {"drop_qp_state": 1}


def test_fatal_nack_of_an_acknowledged_psn_is_dropped(program, maps, sq, event_reader):
    # The receiver placed START + 2 (SACKed): a fatal NACK for it is a ghost.
    consumed(program, maps, sack(START + 2, cum=START))
    event_reader.read()
    state = state_bytes(maps)
    fatal = nack(START + 2, w.NackReason.UNEXP_EVENT, START, syndrome=w.Syndrome.NAK_REM_ACCESS)

    assert consumed(program, maps, fatal) == {"drop_nack_stale": 1}
    assert state_bytes(maps) == state
    assert event_reader.read() == []


# Every outcome a packet counts exactly once (nic_consts.h, enum nic_counter).
ACK_OUTCOMES = {"ack_consumed", "ack_stale"}


def test_a_flood_of_forged_acks_outside_the_window_changes_nothing(program, maps, sq):
    # Right QPN and addresses, random everything else, no PSN or bitmap inside
    # [snd_una, snd_nxt): as the lab's forgers send. Seeded: the run is repeatable.
    rng = random.Random(19)
    syndromes = [0x1F, 0x60, 0x61, 0x62, 0x63, 0x20, 0x05]
    reasons = [0, 1, 2, 6, 7, 0x0A, 0x0B, 0x19, 0x33]

    def outside(lo: int, hi: int) -> int:  # a PSN not in [lo, hi)
        while True:
            v = rng.randrange(1 << 24)
            if not 0 <= w.psn_diff(v, lo) < hi - lo:
                return v

    frames = []
    for _ in range(400):
        pkt = nack(
            outside(START, START + SENT),
            w.NackReason.TRIMMED,
            cum=outside(START + 1, START + SENT + 1),
            sack_psn=outside(START - 63, START + SENT),
            bitmap=rng.getrandbits(64),
            ev=rng.choice([EV_A, EV_C, 0x4242]),
        )
        raw = patched(pkt, AETH_SYNDROME_AT, bytes([rng.choice(syndromes)]))
        raw = patched(raw, NACK_REASON_AT, bytes([rng.choice(reasons)]))
        if rng.random() < 0.05:
            raw = patched(raw, 34, b"\0\0")
        frames.append(raw)
    state = state_bytes(maps)
    before = maps.counters()

    for f in frames:
        assert run(program, f).retval == XDP_DROP

    got = delta(before, maps.counters())
    outcomes = {k: v for k, v in got.items() if k.startswith("drop_") or k in ACK_OUTCOMES}
    assert sum(outcomes.values()) == len(frames), got
    assert got.keys() == outcomes.keys(), "no acknowledgement, loss or event"
    assert {"drop_nack_stale", "drop_ack_range", "drop_bad_ack", "drop_bad_port"} <= got.keys()
    s = maps.sq(QP_TX)
    assert s.state == nic.QpState.RTS
    assert (s.snd_una, s.snd_nxt, s.acked, s.retx_queue) == (START, START + SENT, [], [])
    assert state_bytes(maps)[1:] == state[1:], "no EV feedback"


KEY = bytes(range(16))


def mac_of(psn: int, cum: int, *, reason: int = 0, syndrome: int = w.Syndrome.ACK) -> int:
    """The MAC of sack(psn, cum) / nack(psn, reason, cum) under KEY."""
    return auth.ack_mac(
        KEY,
        qpn=QP_TX,
        psn=psn,
        cum_psn=cum,
        sack_psn=cum,
        sack_bitmap=0,
        syndrome=syndrome,
        reason=reason,
        flags=w.AckFlag.TRIMMED if reason in (1, 2) else 0,
        echo_ev=EV_A,
        port_bitmap=PEER_PORTS,
    )


def test_a_qp_with_a_key_takes_only_acks_with_its_mac(program, maps, sq):
    setup_sq(maps, auth_key=KEY)
    state = state_bytes(maps)
    fatal = dict(reason=w.NackReason.UNEXP_EVENT, syndrome=w.Syndrome.NAK_REM_ACCESS)
    # Forged in the window: without the MAC they would acknowledge and kill.
    forged = [
        sack(START + 3, cum=START + SENT),
        sack(START + 3, cum=START + SENT, icrc=mac_of(START + 3, START + SENT) ^ 0x100),
        sack(START + 3, cum=START + SENT, icrc=mac_of(START + 3, START + 4)),
        nack(START + 1, w.NackReason.UNEXP_EVENT, START, syndrome=w.Syndrome.NAK_REM_ACCESS),
        nack(
            START + 1,
            w.NackReason.UNEXP_EVENT,
            START,
            syndrome=w.Syndrome.NAK_REM_ACCESS,
            icrc=mac_of(START + 1, START, reason=1, syndrome=w.Syndrome.NAK_PSN_SEQ),
        ),
    ]
    for pkt in forged:
        assert consumed(program, maps, pkt) == {"drop_auth": 1}
    assert state_bytes(maps) == state

    got = consumed(program, maps, sack(START + 3, cum=START + 4, icrc=mac_of(START + 3, START + 4)))
    assert got == {"ack_consumed": 1, "acked": 4}
    got = consumed(
        program,
        maps,
        nack(
            START + 5,
            w.NackReason.UNEXP_EVENT,
            START + 4,
            syndrome=w.Syndrome.NAK_REM_ACCESS,
            icrc=mac_of(START + 5, START + 4, **fatal),
        ),
    )
    assert got == {"ack_consumed": 1, "events": 1}
    assert maps.sq(QP_TX).state == nic.QpState.ERR


# ---- loss detection: the per-EV walk --------------------------------------------------------


def test_sack_hole_on_the_same_ev_is_a_loss(program, maps, sq, event_reader):
    # A and B alternate. START + 2 (on A) is lost; START + 3 (on B) is only late.
    record(maps, {START + i: (EV_A, EV_B)[i % 2] for i in range(8)})
    consumed(program, maps, sack(START, cum=START + 1, ev=EV_A))
    consumed(program, maps, sack(START + 1, cum=START + 2, ev=EV_B))
    event_reader.read()

    t0 = time.monotonic_ns()
    got = consumed(program, maps, sack(START + 4, cum=START + 2, bitmap=0b100, ev=EV_A))
    t1 = time.monotonic_ns()

    assert got == {"ack_consumed": 1, "acked": 1, "lost": 1, "retx_queued": 1, "events": 2}
    s = maps.sq(QP_TX)
    assert s.retx_queue == [
        {"psn": START + 2, "ev": EV_A, "cause": nic.RetxCause.LOST, "nack_reason": 0}
    ]
    assert s.retx_pending == [START + 2], "START + 3 went on B: no later B packet was acked"
    assert (s.snd_una, s.acked, s.stats["lost_pkts"]) == (START + 2, [START + 4], 1)
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.ASSUMED_BAD
    assert (a.stats["lost_pkts"], a.stats["retx_queued"]) == (1, 1)
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD

    events = event_reader.read()
    assert [type(e) for e in events] == [nic.EvEvent, nic.LossEvent]
    records = [e.as_dict() for e in events]
    for r in records:
        assert t0 <= r.pop("ts") <= t1
    assert records == [
        {
            "type": nic.EventType.EV_STATE,
            "qpn": QP_TX,
            "ev": EV_A,
            "old_state": nic.EvState.GOOD,
            "new_state": nic.EvState.ASSUMED_BAD,
            "cause": nic.EvCause.LOSS,
            "psn": START + 2,
        },
        {
            "type": nic.EventType.LOSS,
            "qpn": QP_TX,
            "psn": START + 2,
            "ev": EV_A,
            "tx_ts": tx_ts(START + 2),
            "ack_psn": START + 4,
        },
    ]

    # The next SACK on A stops at START + 4 (acked): nothing declared again.
    got = consumed(program, maps, sack(START + 6, cum=START + 2, bitmap=0b10100, ev=EV_A))
    assert got == {"ack_consumed": 1, "acked": 1}
    assert event_reader.read() == []
    assert len(maps.retx_queue(QP_TX)) == 1


def test_consecutive_losses_on_one_ev(program, maps, sq, event_reader):
    record(maps, {START: EV_C, START + 1: EV_C, START + 2: EV_C, START + 3: EV_C})
    got = consumed(program, maps, sack(START + 3, cum=START, bitmap=0b1000, ev=EV_C))
    assert got == {"ack_consumed": 1, "acked": 1, "lost": 3, "retx_queued": 3, "events": 4}
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START + 2, START + 1, START]
    events = event_reader.read()
    assert [type(e) for e in events] == [nic.EvEvent] + [nic.LossEvent] * 3
    assert [(e.psn, e.tx_ts, e.ack_psn) for e in events[1:]] == [
        (p, tx_ts(p), START + 3) for p in (START + 2, START + 1, START)
    ]
    assert maps.ev(QP_TX, EV_C).stats["lost_pkts"] == 3


def test_loss_walk_is_bounded(program, maps, sq, event_reader):
    n = nic.LOSS_WALK_MAX + 4
    record(maps, {START + i: EV_A for i in range(n)})
    got = consumed(program, maps, sack(START + n - 1, cum=START, bitmap=1 << (n - 1)))
    assert got["lost"] == nic.LOSS_WALK_MAX
    assert maps.sq(QP_TX).retx_pending == list(
        range(START + n - 1 - nic.LOSS_WALK_MAX, n - 1 + START)
    )
    assert len(event_reader.read()) == 1 + nic.LOSS_WALK_MAX


# ---- loss detection: the head scan (RACK's rule by time) ------------------------------------

# The head scan compares transmit times with the SACK's echo_ts and its round
# trip (now - echo_ts), so these tests send "recently": the SACKed packet left
# a GAP ago, older ones a GAP apart before it; the reorder window is 5 GAPs.
# A test that takes less than 4 GAPs between recording the packets and the
# program reading the clock sees exactly that window: GAP is long enough for a
# loaded machine (a run of this module once took 26 ms there).
GAP = 50_000_000
REO_WND = 5 * GAP


def recent(maps, plan: dict[int, int], acked_psn: int) -> int:
    """Record {psn: ev} as sent GAP ns apart, acked_psn a GAP ago; its tx_ts."""
    echo = time.monotonic_ns() - GAP
    for psn, ev in plan.items():
        maps.record_tx(QP_TX, psn, ev, tx_ts=echo - (acked_psn - psn) * GAP)
    return echo


def test_head_scan_declares_the_old_head_lost_and_blames_its_ev(program, maps, sq, event_reader):
    """START and START + 1 went on C, a blackholed path: no SACK on C ever
    comes, so the per-EV walk cannot see them. A SACK for a packet sent 10
    GAPs later (beyond the reorder window of 5) shows they are lost."""
    setup_sq(maps, reo_wnd_ns=REO_WND)
    plan = {START: EV_C, START + 1: EV_C} | {
        START + i: EV_A if i == 10 else EV_B for i in range(2, 12)
    }
    echo = recent(maps, plan, START + 10)
    got = consumed(program, maps, sack(START + 10, cum=START, bitmap=0b11111111100, echo_ts=echo))
    assert got == {
        "ack_consumed": 1,
        "acked": 9,
        "lost": 2,
        "lost_head": 2,
        "retx_queued": 2,
        "events": 3,
    }
    s = maps.sq(QP_TX)
    assert s.retx_queue == [
        {"psn": START, "ev": EV_C, "cause": nic.RetxCause.LOST, "nack_reason": 0},
        {"psn": START + 1, "ev": EV_C, "cause": nic.RetxCause.LOST, "nack_reason": 0},
    ]
    c = maps.ev(QP_TX, EV_C)
    assert c.state == nic.EvState.ASSUMED_BAD and c.stats["lost_pkts"] == 2
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD, "the echoed EV did nothing wrong"
    events = [e.as_dict() for e in event_reader.read()]
    assert [(e["type"], e["ev"], e["psn"]) for e in events] == [
        (nic.EventType.EV_STATE, EV_C, START),
        (nic.EventType.LOSS, EV_C, START),
        (nic.EventType.LOSS, EV_C, START + 1),
    ]
    assert events[0]["cause"] == nic.EvCause.LOSS
    # Queued PSNs are not declared again by the next SACK.
    echo = time.monotonic_ns() - GAP
    maps.record_tx(QP_TX, START + 11, EV_B, tx_ts=echo)
    got = consumed(
        program, maps, sack(START + 11, cum=START, bitmap=0b111111111100, ev=EV_B, echo_ts=echo)
    )
    assert got == {"ack_consumed": 1, "acked": 1}


def blackholed_head(maps, program, silent_ns: int) -> tuple[int, dict[str, int]]:
    """The head scan's case above, on a QP whose EVs are blamed only for a
    silent loss (silent_ns); returns START's tx_ts and the counters moved."""
    setup_sq(maps, reo_wnd_ns=REO_WND, silent_ns=silent_ns)
    plan = {START: EV_C, START + 1: EV_C} | {
        START + i: EV_A if i == 10 else EV_B for i in range(2, 12)
    }
    echo = recent(maps, plan, START + 10)
    got = consumed(program, maps, sack(START + 10, cum=START, bitmap=0b11111111100, echo_ts=echo))
    assert got["lost_head"] == 2 and got["retx_queued"] == 2, got
    return echo - 10 * GAP, got


def test_overdue_is_suspected_not_blamed_and_a_late_original_clears_it(
    program, maps, sq, event_reader
):
    """docs/nic-program.md, "Blame": with silent_ns, the head scan's losses
    are resent, but their EV only suspected; the late original's own SACK
    (stale by then: its resend was acknowledged) clears it. No EV event."""
    t0, got = blackholed_head(maps, program, silent_ns=80 * GAP)
    assert got["lost_suspect"] == 2 and "suspect_blamed" not in got, got
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD
    assert maps.ev_raw(QP_TX, EV_C).suspect_ts == t0, "the oldest overdue transmission"
    events = [e.as_dict() for e in event_reader.read()]
    assert [e["type"] for e in events] == [nic.EventType.LOSS] * 2, "no EV state change"
    # START arrives late after all: its SACK echoes EV C and START's tx_ts.
    got = consumed(program, maps, sack(START, cum=START + 1, ev=EV_C, echo_ts=t0))
    assert got.get("suspect_cleared") == 1 and "suspect_blamed" not in got, got
    assert maps.ev_raw(QP_TX, EV_C).suspect_ts == 0
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD and event_reader.read() == []


def test_a_suspect_whose_later_packet_is_answered_first_is_blamed(program, maps, sq, event_reader):
    """One path does not reorder: a SACK for a packet sent on the suspected
    EV after the overdue one shows the overdue one was lost on it."""
    blackholed_head(maps, program, silent_ns=80 * GAP)
    event_reader.read()
    later = time.monotonic_ns() - GAP
    maps.record_tx(QP_TX, START + 11, EV_C, tx_ts=later)
    got = consumed(
        program,
        maps,
        sack(START + 11, cum=START, bitmap=0b111111111100, ev=EV_C, echo_ts=later),
    )
    assert got.get("suspect_blamed") == 1, got
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.ASSUMED_BAD
    events = [e.as_dict() for e in event_reader.read()]
    assert [(e["type"], e["ev"], e["cause"]) for e in events] == [
        (nic.EventType.EV_STATE, EV_C, nic.EvCause.LOSS)
    ]


def test_a_later_packet_within_the_reorder_window_decides_nothing(program, maps, sq, event_reader):
    """Two packets of one path sent less than a reorder window apart may swap
    here (two CPUs forward it): the later one's SACK neither blames the
    suspect nor clears it."""
    t0, _ = blackholed_head(maps, program, silent_ns=80 * GAP)
    event_reader.read()
    close = t0 + REO_WND // 2
    maps.record_tx(QP_TX, START + 11, EV_C, tx_ts=close)
    got = consumed(
        program,
        maps,
        sack(START + 11, cum=START, bitmap=0b111111111100, ev=EV_C, echo_ts=close),
    )
    assert "suspect_blamed" not in got and "suspect_cleared" not in got, got
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD
    assert maps.ev_raw(QP_TX, EV_C).suspect_ts == t0, "still suspected"


def test_a_suspect_silent_for_silent_ns_is_blamed_as_a_timeout(program, maps, sq, event_reader):
    """START has gone unanswered 11 GAPs, longer than silent_ns: a silent
    loss by MRC's rule, blamed at once with cause TIMEOUT."""
    _, got = blackholed_head(maps, program, silent_ns=5 * GAP)
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.ASSUMED_BAD
    assert got["suspect_blamed"] >= 1, got
    events = [e.as_dict() for e in event_reader.read()]
    assert [(e["type"], e["ev"], e.get("cause")) for e in events][0] == (
        nic.EventType.EV_STATE,
        EV_C,
        nic.EvCause.TIMEOUT,
    )


def test_head_scan_spares_packets_within_the_reorder_window(program, maps, sq, event_reader):
    setup_sq(maps, reo_wnd_ns=REO_WND)
    # START + 4 is acknowledged; START .. START + 3 left 1 to 4 GAPs before it.
    plan = {START + i: EV_A if i == 4 else EV_B for i in range(5)}
    echo = recent(maps, plan, START + 4)
    got = consumed(program, maps, sack(START + 4, cum=START, bitmap=0b10000, echo_ts=echo))
    assert got == {"ack_consumed": 1, "acked": 1}
    assert maps.retx_queue(QP_TX) == [] and event_reader.read() == []


def test_head_scan_window_grows_with_the_round_trip(program, maps, sq, event_reader):
    """The same packets, but the SACK made a round trip of 50 GAPs: queues
    that long make 10 GAPs between paths no evidence of loss."""
    setup_sq(maps, reo_wnd_ns=REO_WND)
    plan = {START: EV_C} | {START + i: EV_B for i in range(1, 11)}
    echo = time.monotonic_ns() - 50 * GAP
    for psn, ev in plan.items():
        maps.record_tx(QP_TX, psn, ev, tx_ts=echo - (START + 10 - psn) * GAP)
    got = consumed(
        program, maps, sack(START + 10, cum=START, bitmap=1 << 10, ev=EV_B, echo_ts=echo)
    )
    assert "lost_head" not in got and maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD


def test_head_scan_window_remembers_a_recent_long_round_trip(program, maps, sq, event_reader):
    """START came back through a full queue (a round trip of 18 GAPs); START + 2
    then came back through an empty one in 2 GAPs. START + 1, sent 12 GAPs
    before START + 2, may still wait in the full queue: the window is the QP's
    largest recent round trip (nic_sq.rtt_recent_ns), not only this SACK's,
    which would have condemned it (5 GAPs of reorder window + 2). A sample
    counts for at most RTT_RECENT_CAP reorder windows."""
    setup_sq(maps, reo_wnd_ns=REO_WND)
    now = time.monotonic_ns()
    maps.record_tx(QP_TX, START, EV_B, tx_ts=now - 18 * GAP)
    maps.record_tx(QP_TX, START + 1, EV_C, tx_ts=now - 14 * GAP)
    maps.record_tx(QP_TX, START + 2, EV_A, tx_ts=now - 2 * GAP)

    got = consumed(program, maps, sack(START, cum=START + 1, ev=EV_B, echo_ts=now - 18 * GAP))
    assert got == {"ack_consumed": 1, "acked": 1}
    recent_rtt = maps.sq_raw(QP_TX).rtt_recent_ns
    assert 18 * GAP <= recent_rtt < 19 * GAP, "the slow SACK's round trip"

    got = consumed(
        program, maps, sack(START + 2, cum=START + 1, bitmap=0b10, ev=EV_A, echo_ts=now - 2 * GAP)
    )
    assert got == {"ack_consumed": 1, "acked": 1}, "START + 1 is not declared lost"
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD
    # The fast sample pulled the recent RTT 1/64 of the way down, no more.
    after = maps.sq_raw(QP_TX).rtt_recent_ns
    assert recent_rtt - (recent_rtt - 2 * GAP) // 64 - GAP // 10 <= after < recent_rtt

    # A sample of 60 GAPs (a hiccup) counts as 4 reorder windows, 20 GAPs.
    maps.record_tx(QP_TX, START + 3, EV_B, tx_ts=now - 60 * GAP)
    consumed(
        program, maps, sack(START + 3, cum=START + 1, bitmap=0b110, ev=EV_B, echo_ts=now - 60 * GAP)
    )
    assert maps.sq_raw(QP_TX).rtt_recent_ns == nic.RTT_RECENT_CAP * REO_WND


def test_head_scan_skips_recent_retransmissions_and_stops_at_recent_first_sends(
    program, maps, sq, event_reader
):
    setup_sq(maps, reo_wnd_ns=REO_WND)
    echo = recent(maps, {START + i: (EV_A, EV_B)[i % 2] for i in range(20)}, START + 12)
    # START was resent lately (after START + 12): not lost yet, skipped.
    maps.record_tx(QP_TX, START, EV_C, tx_ts=echo + GAP // 2, retx=True)
    # A SACK for START + 12 (echoing EV C, so no walk): START + 1 .. START + 6
    # left more than 5 GAPs before it; START + 7 (a first send) did not: the scan
    # stops there, at NIC_HEAD_SCAN PSNs at most.
    got = consumed(
        program, maps, sack(START + 12, cum=START, bitmap=1 << 12, ev=EV_C, echo_ts=echo)
    )
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START + i for i in range(1, 7)]
    assert got["lost_head"] == 6


def test_head_scan_goes_on_where_the_last_one_stopped(program, maps, sq, event_reader):
    """A path dies under a window of 40 PSNs: every fourth went on C. Each SACK
    looks at the head (NIC_HEAD_SCAN PSNs) and then NIC_HEAD_SCAN more from
    where the last scan stopped, so the losses deep in the window are found
    SACK after SACK, not one head's worth per round trip (the window is not
    clogged by undetected losses until the timeout)."""
    n = 40
    setup_sq(maps, reo_wnd_ns=REO_WND, snd_nxt=START + n)
    evs = {START + i: EV_C if i % 4 == 0 else (EV_B, EV_A)[i % 2] for i in range(n)}
    echo = recent(maps, evs, START + n - 1)
    bitmap = sum(1 << i for i in range(n) if i % 4)
    found = []
    # SACKs of n - 1, n - 2, n - 3, n - 5: each echoes a packet sent a GAP
    # earlier than the one before, so fewer PSNs are old enough for it.
    for back in (1, 2, 3, 5):
        psn = START + n - back
        got = consumed(
            program,
            maps,
            sack(psn, cum=START, bitmap=bitmap, ev=evs[psn], echo_ts=echo - (back - 1) * GAP),
        )
        found.append(got.get("lost_head", 0))
    # 1st: the head (START, START + 4) and the next 8 (START + 8, + 12).
    # 2nd, 3rd: the head is queued; 8 more from where the scan stopped.
    # 4th: START + 32 left less than the window before the SACKed packet.
    assert found == [4, 2, 2, 0]
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START + i for i in range(0, 32, 4)]
    assert maps.ev(QP_TX, EV_C).stats["lost_pkts"] == 8
    assert maps.ev(QP_TX, EV_A).state == maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD
    assert maps.sq_raw(QP_TX).scan_psn == START + 32


def test_no_head_scan_without_a_reorder_window(program, maps, sq):
    echo = recent(maps, {START: EV_C} | {START + i: EV_A for i in range(1, 12)}, START + 10)
    got = consumed(
        program, maps, sack(START + 10, cum=START, bitmap=1 << 10, ev=EV_B, echo_ts=echo)
    )
    assert "lost" not in got and maps.retx_queue(QP_TX) == []


def _dup_sack(program, maps, psn: int, late_ns: int) -> int:
    """A duplicate's SACK for psn echoing a transmission late_ns ago; the
    QP's reo_learned_ns after it."""
    echo = time.monotonic_ns() - late_ns
    maps.record_tx(QP_TX, psn, EV_B, tx_ts=echo)
    consumed(program, maps, sack(psn, cum=START, bitmap=1 << (psn - START), ev=EV_B,
                                 echo_ts=echo, flags=w.AckFlag.DUP))  # fmt: skip
    return maps.sq(QP_TX).reo_learned_ns


def test_a_duplicate_widens_the_reorder_window_once_per_window(program, maps, sq):
    """docs/nic-program.md, "Blame": a duplicate means the window that
    condemned a copy was too short. Its resend's quick round trip says
    nothing of how late the original was: the window grows by half the base
    window, once for a burst; a late original's own round trip is taken as
    it is; never past silent_ns."""
    setup_sq(maps, reo_wnd_ns=REO_WND, silent_ns=12 * GAP)
    assert maps.sq(QP_TX).reo_learned_ns == 0
    step = REO_WND + REO_WND // 2
    assert _dup_sack(program, maps, START + 2, GAP) == step
    # The rest of the burst, within a window of the first: no second step
    # (each SACK forgets a 2^-20 part of it).
    assert step - step // 2**19 <= _dup_sack(program, maps, START + 3, GAP) < step
    # A late original: 9 GAPs on its way (and the time this test took to send
    # its SACK), beyond the window of 7.5 GAPs, learned as it is.
    assert 9 * GAP <= _dup_sack(program, maps, START + 4, 9 * GAP) < 9 * GAP + GAP // 2
    # Later than silent_ns: silent_ns, where a silent EV is blamed anyway.
    assert _dup_sack(program, maps, START + 5, 30 * GAP) == 12 * GAP


def test_the_head_scan_spares_what_a_duplicate_showed_can_be_late(program, maps, sq):
    """START went 10 GAPs before the SACK's packet: lost under a window of 5
    GAPs (test_head_scan_declares_the_old_head_lost...), but not once a
    duplicate showed that packets here come 12 GAPs late."""
    setup_sq(maps, reo_wnd_ns=REO_WND, silent_ns=12 * GAP)
    _dup_sack(program, maps, START + 20, 12 * GAP)
    plan = {START: EV_C} | {START + i: EV_B for i in range(1, 11)}
    echo = recent(maps, plan, START + 10)
    got = consumed(program, maps, sack(START + 10, cum=START, bitmap=1 << 10, echo_ts=echo))
    assert "lost" not in got and maps.retx_queue(QP_TX) == [], got


def test_walk_stops_at_a_psn_resent_on_another_ev(program, maps, sq):
    record(maps, {START: EV_A, START + 1: EV_A, START + 2: EV_A})
    maps.record_tx(QP_TX, START, EV_B, tx_ts=tx_ts(START + 3), retx=True)  # START resent on B
    got = consumed(program, maps, sack(START + 2, cum=START, bitmap=0b100))
    assert got["lost"] == 1
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START + 1]


def test_no_walk_for_another_transmission(program, maps, sq, event_reader):
    # The SACK echoes a tx_ts the table does not hold for its PSN (an older
    # transmission, or one never recorded): its EV's history is not its own.
    record(maps, {START: EV_A, START + 1: EV_A})
    got = consumed(program, maps, sack(START + 1, cum=START, bitmap=0b10, echo_ts=TS + 7))
    assert got == {"ack_consumed": 1, "acked": 1}
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD
    assert event_reader.read() == []


def test_loss_keeps_a_denied_ev_denied(program, maps, sq, event_reader):
    record(maps, {START: EV_A, START + 1: EV_A})
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.DENIED)
    got = consumed(program, maps, sack(START + 1, cum=START, bitmap=0b10))
    assert got == {"ack_consumed": 1, "acked": 1, "lost": 1, "retx_queued": 1, "events": 1}
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.DENIED
    assert [type(e) for e in event_reader.read()] == [nic.LossEvent]


# ---- RTT ------------------------------------------------------------------------------------


def test_rtt_from_the_echoed_timestamp(program, maps, sq):
    t = time.monotonic_ns()
    consumed(program, maps, sack(START, cum=START + 1, echo_ts=t - 50_000))
    elapsed = time.monotonic_ns() - t
    a = maps.ev(QP_TX, EV_A)
    first = a.rtt_last
    assert 50_000 <= first <= 50_000 + elapsed
    assert a.rtt_min == a.srtt == first and a.stats["rtt_samples"] == 1

    # The second sample is made long (2 s) so that a scheduling hiccup of this
    # shared machine during the first run (24 ms seen) cannot make it the shorter.
    t = time.monotonic_ns()
    consumed(program, maps, sack(START + 1, cum=START + 2, echo_ts=t - 2_000_000_000))
    elapsed = time.monotonic_ns() - t
    a = maps.ev(QP_TX, EV_A)
    second = a.rtt_last
    assert 2_000_000_000 <= second <= 2_000_000_000 + elapsed
    assert a.rtt_min == first
    # srtt = 7/8 srtt + 1/8 sample: one eighth of the way to the new sample.
    assert first < a.srtt <= first + (second - first) // 8 + 1
    assert a.stats["rtt_samples"] == 2

    # A timestamp from the future is no sample; the SACK still counts.
    consumed(program, maps, sack(START + 2, START + 3, echo_ts=time.monotonic_ns() + 10**12))
    b = maps.ev(QP_TX, EV_A)
    assert (b.rtt_last, b.srtt, b.stats["rtt_samples"], b.stats["acks"]) == (
        second,
        a.srtt,
        2,
        3,
    )


def test_sack_for_an_unknown_ev(program, maps, sq):
    got = consumed(program, maps, sack(START, cum=START + 1, ev=0x1234))
    assert got == {"ack_consumed": 1, "acked": 1, "unknown_ev": 1}
    assert maps.sq(QP_TX).snd_una == START + 1


# ---- PROBE -> PROBE_REPLY (receiver role) ------------------------------------------------------

RX_PORTS = 0b0110  # the probed host's ports that are up (copied into replies)


@pytest.fixture
def rq(maps, sq):
    """The peer's receive QP, which PROBEs address."""
    maps.set_port_bitmap(RX_HOST, RX_PORTS)
    maps.setup_rq(QP_RX, local_host=RX_HOST, peer_host=TX_HOST, peer_qpn=QP_TX, region=0)
    return QP_RX


def probe(psn: int, **kw) -> Packet:
    return w.probe(
        kw.pop("ends", DATA),
        ev=kw.pop("ev", EV_B),
        dqpn=kw.pop("dqpn", QP_RX),
        psn=psn,
        tx_ts=kw.pop("tx_ts", TS),
        port_bitmap=0b1111,
        **kw,
    )


@pytest.mark.parametrize(
    ("ecn", "flags"), [(w.Ecn.ECT0, 0), (w.Ecn.CE, w.AckFlag.ECN)], ids=["ECT0", "CE"]
)
def test_probe_is_answered_in_place(program, maps, rq, ecn, flags):
    rx_state = bytes(maps.rq_raw(QP_RX))
    before = maps.counters()

    result = run(program, probe(0x123456, tx_ts=0x0102_0304_0506_0708, ecn=ecn))

    assert result.retval == XDP_TX
    expected = w.probe_reply(
        DATA.reversed(),
        ev=EV_B,
        dqpn=QP_TX,
        psn=0x123456,
        echo_ts=0x0102_0304_0506_0708,
        flags=flags,
        port_bitmap=RX_PORTS,
    )
    assert result.data_out == bytes(expected), f"\n{result.data_out.hex()}\n{bytes(expected).hex()}"
    assert delta(before, maps.counters()) == {"probe_reply": 1}
    assert bytes(maps.rq_raw(QP_RX)) == rx_state, "probes use no data PSN"


@pytest.mark.parametrize(
    ("name", "frame", "setup", "counter"),
    [
        ("unknown QP", lambda: probe(1, dqpn=QP_RX + 1), None, "drop_unknown_qp"),
        (
            "spoofed source",
            lambda: probe(1, ends=dataclasses.replace(DATA, src_ip="198.18.2.9")),
            None,
            "drop_spoofed",
        ),
        ("QP in INIT", lambda: probe(1), nic.QpState.INIT, "drop_qp_state"),
        (
            "short",
            lambda: with_udp_payload(probe(1), bytes(probe(1)[UDP].payload)[:-1]),
            None,
            "drop_short",
        ),
        (
            "long",
            lambda: with_udp_payload(probe(1), bytes(probe(1)[UDP].payload) + bytes(4)),
            None,
            "drop_bad_len",
        ),
    ],
)
def test_probe_dropped(program, maps, rq, name, frame, setup, counter):
    if setup is not None:
        maps.set_rq_state(QP_RX, setup)
    assert consumed(program, maps, frame()) == {counter: 1}


# ---- PROBE_REPLY (sender role) -----------------------------------------------------------------


def test_probe_reply_brings_an_assumed_bad_ev_back(program, maps, sq, event_reader):
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)
    t = time.monotonic_ns()
    got = consumed(program, maps, probe_reply(9, echo_ts=t - 30_000))
    t1 = time.monotonic_ns()

    assert got == {"probe_reply_consumed": 1, "events": 1}
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.GOOD
    assert 30_000 <= a.rtt_last <= 30_000 + t1 - t
    assert (a.stats["probe_replies"], a.stats["rtt_samples"]) == (1, 1)
    events = [e.as_dict() for e in event_reader.read()]
    assert len(events) == 1 and t <= events[0].pop("ts") <= t1
    assert events[0] == {
        "type": nic.EventType.EV_STATE,
        "qpn": QP_TX,
        "ev": EV_A,
        "old_state": nic.EvState.ASSUMED_BAD,
        "new_state": nic.EvState.GOOD,
        "cause": nic.EvCause.PROBE_REPLY,
        "psn": 9,
    }
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.acked, s.stats["sacks"]) == (START, [], 0), "probes use no data PSN"


@pytest.mark.parametrize(
    "state", [nic.EvState.GOOD, nic.EvState.DENIED, nic.EvState.UNKNOWN], ids=lambda s: s.name
)
def test_probe_reply_leaves_other_states(program, maps, sq, event_reader, state):
    maps.set_ev_state(QP_TX, EV_A, state)
    assert consumed(program, maps, probe_reply(1)) == {"probe_reply_consumed": 1}
    a = maps.ev(QP_TX, EV_A)
    assert (a.state, a.stats["probe_replies"]) == (state, 1)
    assert event_reader.read() == []


def test_probe_reply_for_an_unknown_ev(program, maps, sq):
    got = consumed(program, maps, probe_reply(1, ev=0x1234))
    assert got == {"probe_reply_consumed": 1, "unknown_ev": 1}


def test_loss_then_probe_reply(program, maps, sq, event_reader):
    # The whole cycle: a hole on B makes it ASSUMED_BAD, a probe brings it back.
    record(maps, {START: EV_B, START + 1: EV_B})
    consumed(program, maps, sack(START + 1, cum=START, bitmap=0b10, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.ASSUMED_BAD
    consumed(program, maps, probe_reply(2, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD
    changes = [
        (e.old_state, e.new_state, e.cause)
        for e in event_reader.read()
        if isinstance(e, nic.EvEvent)
    ]
    assert changes == [
        (nic.EvState.GOOD, nic.EvState.ASSUMED_BAD, nic.EvCause.LOSS),
        (nic.EvState.ASSUMED_BAD, nic.EvState.GOOD, nic.EvCause.PROBE_REPLY),
    ]


def test_assumed_bad_ev_needs_probe_good_replies(program, maps, event_reader):
    # probe_good 3: the first two replies count, the third brings the EV back.
    setup_sq(maps, probe_good=3)
    event_reader.read()
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)
    for n in (1, 2):
        assert consumed(program, maps, probe_reply(n)) == {"probe_reply_consumed": 1}
        a = maps.ev_raw(QP_TX, EV_A)
        assert (a.state, a.good_probes) == (nic.EvState.ASSUMED_BAD, n)
    assert event_reader.read() == []
    assert consumed(program, maps, probe_reply(3)) == {"probe_reply_consumed": 1, "events": 1}
    a = maps.ev_raw(QP_TX, EV_A)
    assert (a.state, a.good_probes) == (nic.EvState.GOOD, 0)
    (event,) = event_reader.read()
    assert (event.old_state, event.new_state, event.psn) == (
        nic.EvState.ASSUMED_BAD,
        nic.EvState.GOOD,
        3,
    )


def test_a_loss_restarts_the_count_of_good_probes(program, maps, event_reader):
    setup_sq(maps, probe_good=2)
    record(maps, {START + i: EV_B for i in range(4)})
    consumed(program, maps, sack(START + 1, cum=START, bitmap=0b10, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.ASSUMED_BAD
    consumed(program, maps, probe_reply(1, ev=EV_B))
    assert maps.ev_raw(QP_TX, EV_B).good_probes == 1
    # START + 2 is lost too (a later SACK's hole): the run of good probes starts again
    consumed(program, maps, sack(START + 3, cum=START, bitmap=0b1010, ev=EV_B))
    a = maps.ev_raw(QP_TX, EV_B)
    assert (a.state, a.good_probes) == (nic.EvState.ASSUMED_BAD, 0)
    consumed(program, maps, probe_reply(2, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.ASSUMED_BAD
    consumed(program, maps, probe_reply(3, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD


# ---- MAC'd probes (a QP with a key, nic_auth.h probe_mac) ------------------------------------


def probe_mac(opcode: int, qpn: int, psn: int, ev: int, tx_ts: int, ports: int) -> int:
    """The MAC of a PROBE or PROBE_REPLY with these fields under KEY."""
    return nicprog.probe_mac(KEY, opcode, qpn, psn, ev, tx_ts, ports)


def test_a_qp_with_a_key_takes_only_probe_replies_with_its_mac(program, maps, event_reader):
    """A forged PROBE_REPLY must not bring back an EV the sender took out."""
    setup_sq(maps, auth_key=KEY)
    event_reader.read()
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)
    mac = probe_mac(w.Opcode.PROBE_REPLY, QP_TX, 9, EV_A, TS, PEER_PORTS)
    forged = [
        probe_reply(9),  # no MAC
        probe_reply(9, icrc=mac ^ 1),
        probe_reply(10, icrc=mac),  # the MAC of another probe number
        probe_reply(9, echo_ts=TS + 1, icrc=mac),  # ... of another time
        probe_reply(9, ev=EV_B, icrc=mac),  # ... of another EV
    ]
    for pkt in forged:
        assert consumed(program, maps, pkt) == {"drop_auth": 1}
    a = maps.ev(QP_TX, EV_A)
    assert (a.state, a.stats["probe_replies"]) == (nic.EvState.ASSUMED_BAD, 0)
    assert event_reader.read() == []

    got = consumed(program, maps, probe_reply(9, icrc=mac))
    assert got == {"probe_reply_consumed": 1, "events": 1}
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD


def test_a_receive_qp_with_a_key_answers_only_probes_with_its_mac(program, maps, sq):
    maps.set_port_bitmap(RX_HOST, RX_PORTS)
    maps.setup_rq(
        QP_RX, local_host=RX_HOST, peer_host=TX_HOST, peer_qpn=QP_TX, region=0, auth_key=KEY
    )
    mac = probe_mac(w.Opcode.PROBE, QP_RX, 0x42, EV_B, TS, 0b1111)
    for icrc in (w.ICRC_UNUSED, mac ^ 0x8000_0000):
        assert consumed(program, maps, probe(0x42, icrc=icrc)) == {"drop_auth": 1}
    before = maps.counters()

    result = run(program, probe(0x42, icrc=mac))

    assert result.retval == XDP_TX
    reply_mac = probe_mac(w.Opcode.PROBE_REPLY, QP_TX, 0x42, EV_B, TS, RX_PORTS)
    expected = w.probe_reply(
        DATA.reversed(),
        ev=EV_B,
        dqpn=QP_TX,
        psn=0x42,
        echo_ts=TS,
        port_bitmap=RX_PORTS,
        icrc=reply_mac,
    )
    assert result.data_out == bytes(expected), "the reply carries the connection's MAC"
    assert delta(before, maps.counters()) == {"probe_reply": 1}


def test_the_probers_frames_carry_the_mac_a_keyed_receive_qp_wants(program, maps, sq):
    """The daemon's probes (transport.prober.probe_frame, from a template) pass
    the NIC's check with the connection's key, and fail it without."""
    maps.set_port_bitmap(RX_HOST, RX_PORTS)
    maps.setup_rq(
        QP_RX, local_host=RX_HOST, peer_host=TX_HOST, peer_qpn=QP_TX, region=0, auth_key=KEY
    )
    template = bytes(w.probe(DATA, ev=1, dqpn=QP_RX, psn=0, tx_ts=0, port_bitmap=0b1111))
    assert consumed(program, maps, prober.probe_frame(template, EV_B, 7, TS)) == {"drop_auth": 1}
    for psn in (7, 0xFFFFFF):
        assert run(program, prober.probe_frame(template, EV_B, psn, TS + psn, KEY)).retval == XDP_TX


# ---- the host's EV event queue (nic_host_ctl.ev_event_cq) --------------------------------------


@pytest.fixture
def ev_queue(maps):
    """A ring buffer made host TX_HOST's EV event queue, as its daemon does (CQ index 5),
    read with an EventReader; taken away after."""
    index = 5
    fd = maps.create_cq_ring(name="ev_events")
    maps.set_cq_ring(index, fd)
    base = maps.cq_lost(index)  # what the index lost before: not this queue's
    maps.set_ev_event_cq(TX_HOST, index + 1)
    reader = nic.EventReader(fd)
    try:
        yield index, reader, base
    finally:
        maps.set_ev_event_cq(TX_HOST, 0)
        maps.clear_cq_ring(index)
        reader.close()
        os.close(fd)


def test_a_quick_flip_leaves_both_records_in_the_hosts_ev_event_queue(
    program, maps, sq, event_reader, ev_queue
):
    """ASSUMED_BAD by a loss and GOOD by a PROBE_REPLY, microseconds apart: no scan
    could see both states, and both records are in the queue, where they happened."""
    _, queue, _ = ev_queue
    record(maps, {START + i: EV_B for i in range(4)})
    before = maps.counters()
    consumed(program, maps, sack(START + 1, cum=START, bitmap=0b10, ev=EV_B))
    consumed(program, maps, probe_reply(8, ev=EV_B))
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD  # all a scan now would see
    got = [(e.qpn, e.ev, e.old_state, e.new_state, e.cause, e.psn) for e in queue.read()]
    assert got == [
        (QP_TX, EV_B, nic.EvState.GOOD, nic.EvState.ASSUMED_BAD, nic.EvCause.LOSS, START),
        (QP_TX, EV_B, nic.EvState.ASSUMED_BAD, nic.EvState.GOOD, nic.EvCause.PROBE_REPLY, 8),
    ]
    moved = delta(before, maps.counters())
    assert (moved["cq_events"], moved.get("cq_overrun", 0)) == (2, 0)
    # The lab's event log has them as well.
    logged = [e for e in event_reader.read() if isinstance(e, nic.EvEvent)]
    assert [(e.old_state, e.new_state) for e in logged] == [r[2:4] for r in got]


def test_another_hosts_ev_changes_stay_out_of_the_queue(program, maps, ev_queue):
    other = (TX_HOST + 2) << 16 | 7
    maps.setup_sq(
        other, local_host=TX_HOST + 2, peer_host=RX_HOST, peer_qpn=QP_RX, ring=RING, evs=EVS,
        mpr=MPR, psn=START, snd_nxt=START + SENT,
    )  # fmt: skip
    try:
        maps.set_ev_state(other, EV_A, nic.EvState.ASSUMED_BAD)
        ends = w.Endpoints(ACK.src_mac, ACK.dst_mac, ACK.src_ip, f"198.18.{PLANE}.{TX_HOST + 3}")
        consumed(program, maps, probe_reply(1, dqpn=other, ends=ends))
        assert maps.ev(other, EV_A).state == nic.EvState.GOOD
        assert ev_queue[1].read() == []
    finally:
        maps.delete_sq(other)


def test_a_full_queue_counts_what_it_lost(program, maps, sq, ev_queue):
    """The queue's drop count is precise: nic_cq_lost of its CQ."""
    index, queue, base = ev_queue
    fits = maps.cq_ring_bytes // (8 + 40)  # a record each: header and 40 bytes
    flips = fits + 5
    for n in range(flips):
        maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)  # no record: user space's
        consumed(program, maps, probe_reply(n))  # ASSUMED_BAD -> GOOD: one record
    kept = queue.read()
    lost = maps.cq_lost(index) - base
    assert len(kept) + lost == flips and lost >= 5
    assert all(e.new_state == nic.EvState.GOOD for e in kept)


# ---- the map client ---------------------------------------------------------------------------


def test_setup_sq_writes_the_profile(program, maps, sq):
    s = maps.sq(QP_TX)
    assert (s.state, s.local_host, s.peer_host, s.peer_qpn, s.mpr, s.ring) == (
        nic.QpState.RTS,
        TX_HOST,
        RX_HOST,
        QP_RX,
        MPR,
        RING,
    )
    assert s.evs == list(EVS) and (s.snd_una, s.snd_nxt) == (START, START + SENT)
    for ev, plane in EVS.items():
        e = maps.ev(QP_TX, ev)
        assert (e.plane, e.state, e.rtt_last) == (plane, nic.EvState.GOOD, 0)


def test_record_tx_writes_the_table_through_mmap(program, maps, sq):
    maps.record_tx(QP_TX, START, EV_A, tx_ts=11, length=100)
    maps.record_tx(QP_TX, START + 1, EV_B, tx_ts=12)
    entry = maps.record_tx(QP_TX, START + 2, EV_A, tx_ts=13, length=300, retx=True)
    assert (entry.prev_psn, entry.flags) == (START, nic.TX_F_PREV | nic.TX_F_RETX)

    raw = bpfsys.map_lookup(
        maps.fd(nic.TX_RING_MAP), RING.to_bytes(4, "little"), ctypes.sizeof(nic.TxRing)
    )
    ring = nic.TxRing.from_buffer_copy(raw)
    got = [
        (e.psn, e.ev, e.tx_ts, e.flags, e.prev_psn, e.len)
        for e in (ring.pkts[p % nic.BITMAP_BITS] for p in range(START, START + 3))
    ]
    assert got == [
        (START, EV_A, 11, 0, 0, 100),
        (START + 1, EV_B, 12, 0, 0, 1024),
        (START + 2, EV_A, 13, nic.TX_F_PREV | nic.TX_F_RETX, START, 300),
    ]
    assert maps.tx_entry(QP_TX, START + 2).prev_psn == START
    a = maps.ev(QP_TX, EV_A)
    assert (a.last_tx_psn, a.last_tx_ts) == (START + 2, 13)
    assert (a.stats["tx_pkts"], a.stats["tx_bytes"], a.stats["retx_pkts"]) == (2, 400, 1)


def test_set_snd_nxt_and_state(program, maps, sq):
    maps.set_snd_nxt(QP_TX, START + WINDOW)
    assert maps.sq(QP_TX).window_free == 0
    with pytest.raises(ValueError, match="outside the window"):
        maps.set_snd_nxt(QP_TX, START + WINDOW + 1)
    maps.set_sq_state(QP_TX, nic.QpState.SQD)
    assert consumed(program, maps, sack(START, START + 1)) == {"ack_consumed": 1, "acked": 1}


def test_delete_sq(program, maps, sq):
    maps.delete_sq(QP_TX)
    with pytest.raises(KeyError):
        maps.sq(QP_TX)
    with pytest.raises(KeyError):
        maps.ev(QP_TX, EV_A)
    with pytest.raises(KeyError):
        maps.delete_sq(QP_TX)
    assert consumed(program, maps, SACK) == {"drop_unknown_qp": 1}


def test_client_refuses_bad_send_values(maps):
    good = dict(local_host=0, peer_host=1, peer_qpn=1, ring=0, evs={1: 0})
    with pytest.raises(ValueError, match="mpr"):
        maps.setup_sq(1, **good, mpr=0)
    with pytest.raises(ValueError, match="ring"):
        maps.setup_sq(1, **(good | {"ring": TX_RINGS}))
    with pytest.raises(ValueError, match="EVs"):
        maps.setup_sq(1, **(good | {"evs": {}}))
    with pytest.raises(ValueError, match="EV 0"):
        maps.setup_sq(1, **(good | {"evs": {0: 0}}))
    with pytest.raises(ValueError, match="plane"):
        maps.setup_sq(1, **(good | {"evs": {1: nic.MAX_PLANES}}))
    with pytest.raises(ValueError, match="snd_nxt"):
        maps.setup_sq(1, **good, psn=10, snd_nxt=10 + WINDOW + 1)
    with pytest.raises(ValueError, match="snd_nxt"):
        maps.setup_sq(1, **good, psn=10, snd_nxt=9)
    with pytest.raises(ValueError, match="ev_min_active"):
        maps.setup_sq(1, **good, ev_min_active=2)
    with pytest.raises(KeyError):
        maps.sq(0xFFFFFF)


def test_pinned_send_maps_have_expected_shape(program):
    expected = {
        nic.TX_QPS_MAP: (bpfsys.BPF_MAP_TYPE_HASH, 4, ctypes.sizeof(nic.SqLayout), MAX_QPS),
        nic.EVS_MAP: (bpfsys.BPF_MAP_TYPE_HASH, 8, ctypes.sizeof(nic.EvStateLayout), MAX_EVS),
        nic.TX_RING_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, ctypes.sizeof(nic.TxRing), TX_RINGS),
    }
    for name, shape in expected.items():
        fd = bpfsys.obj_get(nic.pin_dir(LAB) / name)
        try:
            info = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        assert (info.type, info.key_size, info.value_size, info.max_entries) == shape, name
        assert info.name == name
    fd = bpfsys.obj_get(nic.pin_dir(LAB) / nic.TX_RING_MAP)
    try:
        assert bpfsys.map_info(fd).map_flags & nic.BPF_F_MMAPABLE
    finally:
        os.close(fd)


# ---- layouts and constants against the header ----------------------------------------------------


@pytest.mark.parametrize(
    ("map_name", "key", "view"),
    [
        (nic.TX_QPS_MAP, None, nic.SqLayout),
        (nic.EVS_MAP, nic.EvKey, nic.EvStateLayout),
        (nic.TX_RING_MAP, None, nic.TxRing),
    ],
)
def test_program_send_maps_use_the_pythonstruct_layout(program, map_name, key, view):
    table = program.bpf[map_name.encode()]
    assert struct_layout(table.Leaf) == struct_layout(view)
    if key is not None:
        assert struct_layout(table.Key) == struct_layout(key)
