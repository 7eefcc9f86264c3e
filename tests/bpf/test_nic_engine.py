"""Tests of the send engine of bpf/nic_xdp.c: kicks, the ACK clock, completions.

The program is compiled once for the module (lab ``zeng<pid>``, small maps,
pins removed at teardown). The golden tests run it with plain
BPF_PROG_TEST_RUN (not live: nothing is sent) on kick frames (struct nic_kick
as XDP metadata, nic.run_kick) and on SACKs/NACKs built by mrc_nic.nic.wire. Every
expected data packet is built with wire.data_packet from explicit values;
its tx_ts (the program's clock) is checked against bounds taken around the
run with CLOCK_MONOTONIC, then copied into the expected packet before the
bytes are compared. What the engine recorded is read back from the maps.

Addresses follow the lab's plan: host h on plane p is 198.18.p.(h+1). The
sender is host 0 (send QP 0x000007), the receiver host 1 (QP 0x010005).
Each golden test starts from a fresh engine QP: snd_una = snd_nxt = START,
mpr 1 (a 128-PSN window), four GOOD EVs alternating planes 0 and 1 (A, B, C,
D), both planes up at both ends, a source region of SRC_ELEMS elements with
distinct bytes, an empty send queue and event ring. The devmap holds the
loopback device for the sender's ports: a non-live run only needs the entry
to exist (bpf_redirect_map then says XDP_REDIRECT).

The last tests are live: two namespaces ``zeng-<pid>a`` / ``zeng-<pid>b``
joined by two veth pairs (planes 0 and 1), the program on all four ends, a
1 MiB WRITE kicked with live frames and carried on by the ACK clock.
"""

from __future__ import annotations

import ctypes
import os
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from mrc_nic import nic
from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire as w
from mrc_nic.nic.driver import formats
from mrc_nic.nic.driver.sq import SendQueue
from tests.helpers.engine import (
    CE,
    EV_A,
    EV_B,
    EV_C,
    EV_D,
    EVS,
    LAB,
    LIVE_DST,
    LIVE_ELEMS,
    LIVE_EVS,
    LIVE_SRC,
    MPR,
    PLANES,
    QP_TX,
    REMOTE_VA,
    SIZES,
    SRC_ELEMS,
    SRC_REGION,
    START,
    TX_HOST,
    TX_RINGS,
    WINDOW,
    Run,
    assert_data,
    data_ends,
    expected_data,
    kick,
    live_setup,
    live_transfer,
    mac,
    nh_mac,
    post,
    setup_sq,
)
from tests.helpers.header_probe import (
    struct_layout,
)
from tests.helpers.nicprog import (
    RX_HOST,
    XDP_DROP,
    XDP_PASS,
    XDP_REDIRECT,
    XDP_TX,
    delta,
)

PROGRAM_SIZES = SIZES  # conftest's program fixture (LAB is the engine's too)


def ack_ends(plane: int) -> w.Endpoints:
    """Addresses of an ACK from the receiver to the sender on `plane`."""
    return data_ends(plane).reversed()


def _ack_fields(maps, psn: int, cum: int, plane: int | None, kw: dict) -> dict:
    """What the SACK and the NACK of PSN psn share: the recorded EV and tx_ts echoed,
    on the plane of that EV unless told; port_bitmap is taken out of kw when given."""
    entry = maps.tx_entry(QP_TX, psn)
    return dict(
        ends=ack_ends(EVS[entry.ev] if plane is None else plane),
        ev=entry.ev,
        dqpn=QP_TX,
        psn=psn,
        cum_psn=cum,
        echo_ts=entry.tx_ts,
        port_bitmap=kw.pop("port_bitmap", PLANES),
        mpr=MPR,
    )


def sack(maps, psn: int, cum: int, *, plane: int | None = None, bitmap: int = 0, **kw):
    """The SACK of PSN psn as the receiver sends it: echoes the recorded EV and tx_ts,
    arrives on the plane of that EV unless told."""
    fields = _ack_fields(maps, psn, cum, plane, kw)
    return w.sack_packet(sack_bitmap=bitmap, **fields, **kw)


def nack(maps, psn: int, reason: w.NackReason, cum: int, **kw):
    fields = _ack_fields(maps, psn, cum, None, kw)
    return w.nack_packet(reason=reason, **fields, **kw)


# ---- fixtures -------------------------------------------------------------------------


pytestmark = pytest.mark.usefixtures("one_cpu")  # tests/bpf/conftest.py: why


def run(program, maps, frame: Packet | bytes) -> Run:
    """A received frame (an ACK) through the program."""
    before = maps.counters()
    t0 = time.monotonic_ns()
    result = bpfsys.prog_test_run(program.fd, bytes(frame), data_size_out=4096)
    t1 = time.monotonic_ns()
    return Run(result.retval, result.data_out, t0, t1, delta(before, maps.counters()))


def send(program, maps, n: int) -> list[int]:
    """n kicks that must each send; the tx_ts of each packet."""
    out = []
    for _ in range(n):
        r = kick(program, maps)
        assert r.verdict == XDP_REDIRECT, r.counters
        out.append(int.from_bytes(r.frame[78:86], "big"))
    return out


def set_ev(maps, ev: int, **fields) -> None:
    """Change fields of a stored EV (state, skip_until, ...), under its lock."""
    value = maps.ev_raw(QP_TX, ev)
    for name, v in fields.items():
        setattr(value, name, v)
    bpfsys.map_update(
        maps.fd(nic.EVS_MAP),
        bytes(nic.EvKey(QP_TX, ev)),
        bytes(value),
        flags=nic.BPF_F_LOCK | bpfsys.BPF_EXIST,
    )


# ---- kicks: the first packets ---------------------------------------------------------------


def test_kick_builds_the_first_data_packet(program, maps, sq):
    assert post(maps, 3000, wr_id=77) == 0

    r = kick(program, maps)

    assert r.verdict == XDP_REDIRECT
    tx_ts = assert_data(r.frame, expected_data(START, EV_A, 0, CE, last=False), r.t0, r.t1)
    assert r.counters == {"kick_sent": 1, "tx_data": 1, "tx_bytes": CE}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.snd_nxt, s.wqe_sent, s.wqe_off, s.snd_msn) == (START, START + 1, 0, CE, 0)
    assert (s.tx_stats["data_pkts"], s.tx_stats["data_bytes"]) == (1, CE)
    entry = maps.tx_entry(QP_TX, START)
    assert (entry.psn, entry.ev, entry.tx_ts, entry.flags, entry.len) == (START, EV_A, tx_ts, 0, CE)
    assert (entry.wqe, entry.msg_off) == (0, 0)
    a = maps.ev(QP_TX, EV_A)
    assert (a.last_tx_psn, a.last_tx_ts) == (START, tx_ts)
    assert (a.stats["tx_pkts"], a.stats["tx_bytes"], a.stats["retx_pkts"]) == (1, CE, 0)


def test_a_doorbell_frame_that_does_not_come_in_on_the_doorbell_port_is_no_kick(program, maps, sq):
    # A test run's ingress is lo; without metadata only the doorbell port's
    # ifindex makes a frame a kick: from any other port it goes to the stack.
    assert post(maps, 3000, wr_id=77) == 0

    r = run(program, maps, nic.doorbell_frame(QP_TX, 1514))

    assert r.verdict == XDP_PASS
    assert r.counters == {"pass_not_mrc": 1}
    s = maps.sq(QP_TX)
    assert (s.snd_nxt, s.wqe_sent) == (START, 0)


def test_segments_round_robin_over_evs_and_planes(program, maps, sq):
    post(maps, 3000)
    got = []
    for psn, ev, off, size in [
        (START, EV_A, 0, CE),
        (START + 1, EV_B, CE, CE),
        (START + 2, EV_C, 2 * CE, 3000 - 2 * CE),
    ]:
        r = kick(program, maps)
        last = off + size == 3000
        got.append(assert_data(r.frame, expected_data(psn, ev, off, size, last=last), r.t0, r.t1))
    s = maps.sq(QP_TX)
    assert (s.snd_nxt, s.wqe_sent, s.wqe_off, s.snd_msn, s.wqe_done) == (START + 3, 1, 0, 1, 0)
    c = maps.tx_entry(QP_TX, START + 2)
    assert (c.ev, c.flags, c.wqe, c.msg_off, c.len) == (EV_C, 0, 0, 2 * CE, 952)
    # Nothing left: the next kick is idle.
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1})
    assert maps.sq(QP_TX).snd_nxt == START + 3


def test_repeated_runs_send_one_packet_each(program, maps, sq):
    post(maps, 5 * CE)
    r = kick(program, maps, packets=5)
    assert r.counters == {"kick_sent": 5, "tx_data": 5, "tx_bytes": 5 * CE}
    assert_data(r.frame, expected_data(START + 4, EV_A, 4 * CE, CE, last=True), r.t0, r.t1)
    assert [maps.tx_entry(QP_TX, START + i).ev for i in range(5)] == [
        EV_A,
        EV_B,
        EV_C,
        EV_D,
        EV_A,
    ]
    # The second packet on A links to the first (the loss walk's chain, per EV).
    again = maps.tx_entry(QP_TX, START + 4)
    assert (again.prev_psn, again.flags) == (START, nic.TX_F_PREV)
    assert maps.ev(QP_TX, EV_A).stats["tx_pkts"] == 2


def test_write_imm_last_packet_carries_the_immediate(program, maps, sq):
    post(maps, 1500, imm=0xDEADBEEF, src_offset=2 * CE, remote_va=REMOTE_VA + 8 * CE)
    first = kick(program, maps)
    second = kick(program, maps)
    kw = dict(src=2 * CE, va=REMOTE_VA + 8 * CE)
    assert_data(first.frame, expected_data(START, EV_A, 0, CE, last=False, **kw), *_t(first))
    assert_data(
        second.frame,
        expected_data(START + 1, EV_B, CE, 476, last=True, imm=0xDEADBEEF, **kw),
        *_t(second),
    )
    assert Ether(second.frame)[BTH].opcode == w.Opcode.WRITE_IMM


def _t(r: Run) -> tuple[int, int]:
    return r.t0, r.t1


def test_zero_length_write_is_one_empty_last_packet(program, maps, sq):
    post(maps, 0)
    r = kick(program, maps)
    assert_data(r.frame, expected_data(START, EV_A, 0, 0, last=True, payload=b""), r.t0, r.t1)
    assert r.counters == {"kick_sent": 1, "tx_data": 1}
    assert maps.sq(QP_TX).wqe_sent == 1


def test_messages_get_consecutive_msns(program, maps, sq):
    setup_sq(maps, msn=41)
    post(maps, 100)
    post(maps, 100, src_offset=CE, remote_va=REMOTE_VA + CE)
    first, second = kick(program, maps), kick(program, maps)
    assert_data(first.frame, expected_data(START, EV_A, 0, 100, last=True, msn=41), *_t(first))
    assert_data(
        second.frame,
        expected_data(START + 1, EV_B, 0, 100, last=True, msn=42, src=CE, va=REMOTE_VA + CE),
        *_t(second),
    )


@pytest.mark.parametrize(
    ("src", "length"), [(5, 8), (1000, 100), (1, CE), (CE - 1, 3 * CE)],
    ids=["8 at 5", "across an element", "1 KiB at 1", "3 KiB at 1023"],
)  # fmt: skip
def test_a_payload_from_any_byte_is_sent_as_it_is(program, maps, sq, src, length):
    """Byte-granular sends: a source at any offset of its region and a remote
    address at any byte; the packets carry exactly those bytes."""
    post(maps, length, src_offset=src, remote_va=REMOTE_VA + 3)
    seg, off = CE, 0  # this module's lab: MTU 1500, a packet per element
    ev_order = [EV_A, EV_B, EV_C, EV_D]
    while off < length:
        size = min(seg, length - off)
        r = kick(program, maps)
        ev = ev_order[(off // seg) % 4]
        want = expected_data(
            START + off // seg, ev, off, size, last=off + size == length, src=src,
            va=REMOTE_VA + 3,
        )  # fmt: skip
        assert_data(r.frame, want, *_t(r))
        off += size


def test_a_source_past_its_regions_tail_is_a_bad_wqe(program, maps, sq):
    maps.set_region(SRC_REGION, first_elem=0, n_elems=SRC_ELEMS, rkey=0x5555, tail=10)
    post(maps, 20, src_offset=SRC_ELEMS * CE - 20)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1, "tx_bad_wqe": 1, "events": 1})


# ---- EV choice -----------------------------------------------------------------------------


def test_unusable_evs_are_skipped(program, maps, sq):
    post(maps, 8 * CE)
    now = time.monotonic_ns()
    set_ev(maps, EV_A, state=nic.EvState.ASSUMED_BAD)
    set_ev(maps, EV_B, state=nic.EvState.DENIED)
    set_ev(maps, EV_C, state=nic.EvState.SKIP, skip_until=now + 10**10)
    r = kick(program, maps)
    assert_data(r.frame, expected_data(START, EV_D, 0, CE, last=False), *_t(r))

    # A SKIP whose time is over counts as GOOD; UNKNOWN is skipped too.
    set_ev(maps, EV_C, skip_until=now - 1)
    set_ev(maps, EV_D, state=nic.EvState.UNKNOWN)
    r = kick(program, maps)
    assert_data(r.frame, expected_data(START + 1, EV_C, CE, CE, last=False), *_t(r))

    # Nothing usable: nothing sent, nothing changed.
    set_ev(maps, EV_C, state=nic.EvState.ASSUMED_BAD)
    before = maps.sq_raw(QP_TX)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1, "tx_no_ev": 1})
    after = maps.sq_raw(QP_TX)
    assert (after.snd_nxt, after.wqe_off) == (before.snd_nxt, before.wqe_off)


def test_an_ev_another_cpu_sent_on_just_now_is_held(program, maps, sq):
    post(maps, 4 * CE)
    cpu = min(os.sched_getaffinity(0))  # the one_cpu fixture's
    # A's last packet left from another CPU, "now" (50 ms ahead: the hold,
    # ENGINE_EV_HOLD_NS = 200 us from then, must outlast this test's syscalls
    # on a loaded machine).
    a = maps.ev_raw(QP_TX, EV_A)
    a.last_tx_cpu, a.last_tx_ts, a.last_tx_psn = cpu + 1, time.monotonic_ns() + 50_000_000, 7
    a.stats.tx_pkts = 1
    bpfsys.map_update(
        maps.fd(nic.EVS_MAP), bytes(nic.EvKey(QP_TX, EV_A)), bytes(a), flags=nic.BPF_F_LOCK
    )
    r = kick(program, maps)  # held: B instead
    assert_data(r.frame, expected_data(START, EV_B, 0, CE, last=False), *_t(r))
    time.sleep(0.06)  # the hold is over: A's turn comes again, and it is this CPU's
    assert [Ether(kick(program, maps).frame)[UDP].sport for _ in range(3)] == [EV_C, EV_D, EV_A]
    assert maps.ev_raw(QP_TX, EV_A).last_tx_cpu == cpu


def test_a_long_run_of_unusable_evs_moves_the_cursor(program, maps, sq):
    # 40 EVs, the first 36 unusable: one run looks at 32 (ENGINE_EV_TRIES), finds
    # none, and moves the cursor past them; the next run finds EV 36.
    evs = {0xB000 + i: 0 for i in range(40)}
    setup_sq(maps, evs=evs)
    for ev in list(evs)[:36]:
        set_ev(maps, ev, state=nic.EvState.DENIED)
    post(maps, CE)
    assert kick(program, maps).counters == {"kick_idle": 1, "tx_no_ev": 1}
    assert maps.sq(QP_TX).ev_next == 32
    r = kick(program, maps)
    assert r.verdict == XDP_REDIRECT
    assert Ether(r.frame)[UDP].sport == 0xB000 + 36
    assert maps.sq(QP_TX).ev_next == 37


@pytest.mark.parametrize(
    ("local", "peer", "evs"),
    [
        (0b10, PLANES, [EV_B, EV_D, EV_B]),  # our port of plane 0 is down
        (PLANES, 0b01, [EV_A, EV_C, EV_A]),  # the peer's port of plane 1 is down
    ],
    ids=["local port down", "peer port down"],
)
def test_planes_with_a_port_down_are_skipped(program, maps, sq, local, peer, evs):
    maps.set_port_bitmap(TX_HOST, local)
    setup_sq(maps, peer_ports=peer)
    post(maps, 3 * CE)
    for i, ev in enumerate(evs):
        r = kick(program, maps)
        assert_data(r.frame, expected_data(START + i, ev, i * CE, CE, last=i == 2), *_t(r))


def test_peer_port_bitmap_comes_from_its_acks(program, maps, sq):
    post(maps, 4 * CE)
    send(program, maps, 1)  # START on A (plane 0)
    # The SACK says the peer's plane 0 port is down: from now on, plane 1 only.
    r = run(program, maps, sack(maps, START, START + 1, port_bitmap=0b10))
    assert r.verdict == XDP_REDIRECT  # the next packet, on B (plane 1): not this port's
    assert_data(r.frame, expected_data(START + 1, EV_B, CE, CE, last=False), *_t(r))
    assert [kick(program, maps).frame[34:36] for _ in range(2)] == [
        EV_D.to_bytes(2, "big"),
        EV_B.to_bytes(2, "big"),
    ]


def test_a_port_status_update_newer_than_the_last_ack_steers_the_engine(program, maps, sq):
    """The peer's PORT_STATUS_UPDATE (an EP probe recorded in nic_peer_ports) says its
    plane 0 port is down: the engine keeps to plane 1 until an ACK newer than it
    brings the peer's own bitmap again."""
    post(maps, 6 * CE)
    send(program, maps, 1)  # START on A (plane 0)
    update = w.probe(
        ack_ends(1), ev=0xC0FE, dqpn=w.EP_QPN, psn=1, tx_ts=1,
        flags=w.PROBE_F_PORT_STATUS, port_bitmap=0b10,
    )  # fmt: skip
    run(program, maps, update)
    try:
        assert maps.peer_ports(TX_HOST)[RX_HOST].ports == 0b10  # recorded
        ev_of = lambda r: int.from_bytes(r.frame[34:36], "big")  # noqa: E731
        assert [ev_of(kick(program, maps)) for _ in range(2)] == [EV_B, EV_D]  # not C (plane 0)
        # A SACK after the update says both of the peer's ports are up: plane 0 again.
        r = run(program, maps, sack(maps, START, START + 1, port_bitmap=PLANES))
        assert r.verdict in (XDP_TX, XDP_REDIRECT)  # the next packet, out of either port
        assert {ev_of(r), ev_of(kick(program, maps))} & {EV_A, EV_C}
    finally:
        maps.forget_peer_ports(TX_HOST)  # the module's other tests go by ACKs alone


# ---- the window ----------------------------------------------------------------------------


def test_full_window_sends_nothing(program, maps, sq):
    setup_sq(maps, snd_nxt=START + WINDOW)  # as if a window's worth were in flight
    post(maps, CE)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1, "tx_window_full": 1})
    s = maps.sq(QP_TX)
    assert (s.snd_nxt, s.wqe_off, s.tx_stats["window_full"]) == (START + WINDOW, 0, 1)


def test_window_frees_as_snd_una_moves(program, maps, sq):
    setup_sq(maps, snd_nxt=START + WINDOW - 1)
    post(maps, 4 * CE)
    assert kick(program, maps).verdict == XDP_REDIRECT  # the last free PSN
    assert kick(program, maps).counters == {"kick_idle": 1, "tx_window_full": 1}
    maps.record_tx(QP_TX, START, EV_A, tx_ts=1000)
    # A SACK of START frees one PSN: the ACK clock sends the next packet at once.
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.verdict in (XDP_TX, XDP_REDIRECT)
    assert r.counters == {
        "ack_consumed": 1,
        "acked": 1,
        "tx_data": 1,
        "tx_bytes": CE,
        "tx_clocked": 1,
    }
    assert maps.sq(QP_TX).snd_nxt == (START + WINDOW + 1) & w.PSN_MASK


def test_cwnd_counts_packets_in_flight_not_the_psn_range(program, maps, sq):
    setup_sq(maps, cwnd=2)
    post(maps, 8 * CE)
    send(program, maps, 2)  # START (A), START + 1 (B)
    assert kick(program, maps).counters == {"kick_idle": 1, "tx_window_full": 1}
    # START + 1 is acknowledged, START is not: one packet in flight, room for one.
    r = run(program, maps, sack(maps, START + 1, START, bitmap=0b10))
    assert r.verdict == XDP_REDIRECT  # C is on plane 0, the SACK came on plane 1
    # It fills the window: AckReq, so that a coalescing receiver answers it at once.
    frame = expected_data(START + 2, EV_C, 2 * CE, CE, last=False, ackreq=True)
    assert_data(r.frame, frame, *_t(r))
    assert kick(program, maps).counters == {"kick_idle": 1, "tx_window_full": 1}
    maps.set_cwnd(QP_TX, 0)  # 0: the MPR window
    assert kick(program, maps).verdict == XDP_REDIRECT


# ---- OCP QP attributes: max_wimm and dynamic MPR ------------------------------------------


def test_max_wimm_holds_a_write_with_imm_until_one_completes(program, maps, sq):
    setup_sq(maps, max_wimm=1)
    post(maps, CE, imm=1, wr_id=1)
    post(maps, CE, wr_id=2)  # a plain WRITE: not bounded by max_wimm
    post(maps, CE, imm=3, wr_id=3)
    send(program, maps, 2)  # START: the first WRITE_WITH_IMM, START + 1: the WRITE
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1})
    s = maps.sq(QP_TX)
    assert (s.wimm_out, s.wimm_full, s.wqe_sent, s.snd_nxt) == (1, 1, 2, START + 2)
    # The first one's SACK completes it: the ACK clock sends the second at once.
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.verdict in (XDP_TX, XDP_REDIRECT)
    assert Ether(r.frame)[BTH].opcode == w.Opcode.WRITE_IMM
    s = maps.sq(QP_TX)
    assert (s.wimm_out, s.wqe_done, s.wqe_sent, s.snd_nxt) == (1, 1, 3, START + 3)


def test_without_max_wimm_write_with_imms_are_not_held(program, maps, sq):
    setup_sq(maps, max_wimm=0)
    for i in range(3):
        post(maps, CE, imm=i)
    send(program, maps, 3)
    s = maps.sq(QP_TX)
    assert (s.wimm_out, s.wimm_full) == (3, 0)


@pytest.mark.parametrize(("dyn_mpr", "window"), [(True, w.MPR_UNIT), (False, 2 * w.MPR_UNIT)])
def test_dynamic_mpr_follows_the_mpr_the_peer_advertises(program, maps, sq, dyn_mpr, window):
    # mpr 2 here, the peer advertises 1 in its SACKs: with dynamic MPR the
    # engine's window is 128 PSNs, without it 256.
    setup_sq(maps, mpr=2, dyn_mpr=dyn_mpr)
    for _ in range(6):  # more than either window
        post(maps, SRC_ELEMS * CE)
    send(program, maps, 1)
    ack = sack(maps, START, START)  # acknowledges START by its PSN; cum stays
    ack[w.MRCAck].mpr = 1
    run(program, maps, ack)
    s = maps.sq(QP_TX)
    assert (s.peer_mpr, s.window) == (1, window)
    while kick(program, maps).verdict == XDP_REDIRECT:
        pass
    s = maps.sq(QP_TX)
    assert s.snd_nxt - s.snd_una == window
    assert s.tx_stats["window_full"] >= 1


# ---- congestion control's window: NIC_KICK_CWND ----------------------------------------------


def cwnd_kick(program, maps, cwnd: int, packets: int = 1, target: int = 0, qpn: int = QP_TX) -> Run:
    """A non-live window kick of `packets` runs: the last frame, the counters moved."""
    before = maps.counters()
    t0 = time.monotonic_ns()
    result = nic.run_kick(
        program.fd, qpn, packets, live=False, op=nic.KickOp.CWND, arg=cwnd, age_ns=target
    )
    t1 = time.monotonic_ns()
    return Run(result.retval, result.data_out, t0, t1, delta(before, maps.counters()))


def test_cwnd_kick_grows_the_window_and_fills_it_at_once(program, maps, sq):
    setup_sq(maps, cwnd=2)
    post(maps, 8 * CE)
    send(program, maps, 2)  # START (A), START + 1 (B): the window is full
    assert kick(program, maps).counters == {"kick_idle": 1, "tx_window_full": 1}
    before = maps.sq_raw(QP_TX)
    r = cwnd_kick(program, maps, 4, packets=2, target=250_000)
    # Each run sets the window under the lock, then sends like a send kick.
    assert r.verdict == XDP_REDIRECT
    assert r.counters == {"cwnd_kicks": 2, "kick_sent": 2, "tx_data": 2, "tx_bytes": 2 * CE}
    frame = expected_data(START + 3, EV_D, 3 * CE, CE, last=False, ackreq=True)  # fills cwnd
    assert_data(r.frame, frame, *_t(r))
    s = maps.sq(QP_TX)
    assert (s.cwnd, s.snd_una, s.snd_nxt) == (4, START, START + 4)
    assert (s.cc["rtt_target_ns"], s.cc["cwnd_sets"]) == (250_000, 2)
    # Nothing else of the QP moved but what the two packets sent moved.
    after = maps.sq_raw(QP_TX)
    for name, _ in nic.SqLayout._fields_:
        if name not in ("lock", "cwnd", "cc", "snd_nxt", "ev_next", "wqe_off", "tx_stats"):
            assert bytes(getattr(after, name)) == bytes(getattr(before, name)), name
    # The window is full again: one more window kick sets, sends nothing.
    r = cwnd_kick(program, maps, 4, target=250_000)
    assert r.counters == {"cwnd_kicks": 1, "kick_idle": 1, "tx_window_full": 1}


def test_cwnd_kick_shrinks_the_window_and_the_ack_clock_waits(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 3)  # START .. START + 2, cwnd 0: the MPR window
    r = cwnd_kick(program, maps, 1)
    assert r.verdict == XDP_DROP
    assert r.counters == {"cwnd_kicks": 1, "kick_idle": 1, "tx_window_full": 1}
    assert maps.sq(QP_TX).cwnd == 1
    # Two in flight after this SACK, more than the window of 1: it sends nothing.
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.verdict == XDP_DROP and "tx_data" not in r.counters
    r = run(program, maps, sack(maps, START + 1, START + 2))
    assert r.verdict == XDP_DROP and "tx_data" not in r.counters
    # One in flight: the next SACK clocks out one packet.
    r = run(program, maps, sack(maps, START + 2, START + 3))
    assert r.counters["tx_data"] == 1
    assert maps.sq(QP_TX).snd_nxt == START + 4
    # 0 is the MPR window again.
    assert cwnd_kick(program, maps, 0, packets=3).counters["kick_sent"] == 3


def test_ackreq_only_where_an_answer_is_needed_at_once(program, maps, sq):
    """ACK coalescing's sender half: AckReq on the packet that fills the window
    (cwnd here) and on a message's last packet, not on the others."""
    setup_sq(maps, cwnd=3)
    post(maps, 8 * CE)
    frames = [kick(program, maps).frame for _ in range(3)]
    assert [bool(Ether(f)[BTH].ackreq) for f in frames] == [False, False, True]
    setup_sq(maps)
    post(maps, 2 * CE)
    frames = [kick(program, maps).frame for _ in range(2)]
    assert [bool(Ether(f)[BTH].ackreq) for f in frames] == [False, True]  # LAST


def test_sack_of_several_psns_becomes_that_many_kicks(program, maps, sq):
    """A SACK that acknowledges k > 1 PSNs of an engine QP (a coalescing
    receiver's) is turned into a kick of the QP and broadcast to the host's
    fan-out devmap of k entries (XDP_REDIRECT: k engine runs on the doorbell);
    one that acknowledges a single PSN runs the engine in its own frame."""
    post(maps, 16 * CE)
    send(program, maps, 4)  # START .. START + 3
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.counters.get("tx_data") == 1, "one PSN, no fan-out maps: in place"
    maps.set_fanout(TX_HOST, 1)  # lo: the broadcast itself is the live test's
    try:
        r = run(program, maps, sack(maps, START + 3, START + 4))  # acks 1 .. 3
        assert r.verdict == XDP_REDIRECT
        assert r.counters == {"ack_consumed": 1, "acked": 3, "ack_fanout": 1}
        eth = Ether(r.frame)
        assert eth.type == defs.NIC_KICK_ETHERTYPE
        kick_rec = nic.Kick.from_buffer_copy(r.frame[14 : 14 + ctypes.sizeof(nic.Kick)])
        assert (kick_rec.qpn, kick_rec.op) == (QP_TX, nic.KickOp.SEND)
        assert maps.sq(QP_TX).snd_una == START + 4
        # one PSN again: in place, as before
        send(program, maps, 1)
        r = run(program, maps, sack(maps, START + 4, START + 5))
        assert "ack_fanout" not in r.counters and r.counters.get("tx_data") == 1
    finally:
        maps.set_fanout(TX_HOST, 0)
    # without the maps a SACK of several PSNs runs the engine once, in place
    send(program, maps, 2)
    r = run(program, maps, sack(maps, START + 7, START + 8))
    assert "ack_fanout" not in r.counters and r.counters.get("tx_data") == 1


def test_cwnd_kick_resends_queued_packets_first(program, maps, sq):
    setup_sq(maps, cwnd=1)
    post(maps, 8 * CE)
    send(program, maps, 1)  # START on A
    run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    # The NACK's engine run resent START on B already; trim it again, from B,
    # with the engine off so that it stays queued.
    set_engine(maps, False)
    run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    set_engine(maps, True)
    r = cwnd_kick(program, maps, 2, packets=2)
    assert r.counters["tx_retx"] == 1 and r.counters["tx_data"] == 1


def test_acks_count_congestion_signals_by_nscc_case(program, maps, sq):
    """struct nic_sq_cc: each ACK's feedback, once, by ECN and RTT vs the target."""
    setup_sq(maps, cwnd=4)
    post(maps, 16 * CE)
    tx = send(program, maps, 4)  # START .. START + 3
    target = 10**10  # 10 s: every RTT is low
    cwnd_kick(program, maps, 4, target=target)

    def cc() -> dict:
        return maps.sq(QP_TX).cc

    r = run(program, maps, sack(maps, START, START + 1))
    got = cc()
    rtt = got["rtt_sum_ns"]
    assert r.t0 - tx[0] <= rtt <= r.t1 - tx[0]
    assert got == dict(
        got,
        acks=1,
        ecn_acks=0,
        pkts_lo=1,
        pkts_hi=0,
        pkts_ecn_lo=0,
        pkts_ecn_hi=0,
        headroom=target - rtt,
        rtt_samples=1,
        rtt_min_ns=rtt,
        trims=0,
        trims_lasthop=0,
    )
    run(program, maps, sack(maps, START + 1, START + 2, flags=w.AckFlag.ECN))
    got = cc()
    assert (got["acks"], got["ecn_acks"], got["pkts_ecn_lo"], got["headroom"]) == (
        2,
        1,
        1,
        target - rtt,  # an ECN-marked SACK adds no headroom
    )
    # Target 1 ns: every RTT is high.
    cwnd_kick(program, maps, 4, target=1)
    run(program, maps, sack(maps, START + 2, START + 3))
    run(program, maps, sack(maps, START + 3, START + 4, flags=w.AckFlag.ECN))
    got = cc()
    assert (got["pkts_lo"], got["pkts_hi"], got["pkts_ecn_lo"], got["pkts_ecn_hi"]) == (1, 1, 1, 1)
    assert (got["acks"], got["ecn_acks"], got["rtt_samples"]) == (4, 2, 4)
    assert got["rtt_min_ns"] <= rtt and got["rtt_sum_ns"] > 3 * got["rtt_min_ns"]
    # A duplicate is no feedback; a SACK whose cumulative PSN covers more counts them all.
    run(program, maps, sack(maps, START + 3, START + 4))
    assert cc()["acks"] == 4
    s = maps.sq(QP_TX)
    assert s.snd_nxt == START + 8  # the four SACKs clocked out START + 4 .. + 7
    run(program, maps, sack(maps, START + 6, START + 7))  # acknowledges + 4, + 5, + 6
    assert cc()["pkts_hi"] == 1 + 3
    # Trims: NACKs count there, and only there.
    run(program, maps, nack(maps, START + 7, w.NackReason.TRIMMED, cum=START + 7))
    run(program, maps, nack(maps, START + 8, w.NackReason.TRIMMED_LASTHOP, cum=START + 7))
    got = cc()
    assert (got["trims"], got["trims_lasthop"], got["acks"]) == (1, 1, 5)


def test_cwnd_kick_for_a_qp_that_is_not_there(program, maps, sq):
    r = cwnd_kick(program, maps, 8, qpn=QP_TX + 1)
    assert r.verdict == XDP_DROP
    assert r.counters == {"drop_unknown_qp": 1}


# ---- EV replacement: NIC_KICK_EV_REPLACE ---------------------------------------------------


def test_replace_ev_swaps_a_profile_slot_while_packets_are_in_flight(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 2)  # START on A (slot 0), START + 1 on B (slot 1)
    maps.set_ev_state(QP_TX, EV_A, nic.EvState.ASSUMED_BAD)
    before_counters = maps.counters()
    fresh = 0xC0A1
    assert maps.replace_ev(QP_TX, 0, EV_A, fresh)
    assert delta(before_counters, maps.counters()) == {"ev_replaced": 1}
    s = maps.sq(QP_TX)
    assert s.evs[:4] == [fresh, EV_B, EV_C, EV_D]
    new = maps.ev(QP_TX, fresh)
    assert (new.plane, new.state, new.stats["tx_pkts"]) == (EVS[EV_A], nic.EvState.GOOD, 0)
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.ASSUMED_BAD  # kept until deleted
    maps.delete_ev(QP_TX, EV_A)
    with pytest.raises(KeyError):
        maps.ev(QP_TX, EV_A)
    # START's SACK echoes the old EV: feedback for no EV, the PSN acked all the same.
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.counters.get("unknown_ev") == 1
    assert maps.sq(QP_TX).snd_una == START + 1
    # The round robin reaches slot 0 again: the new EV carries the packet.
    sent = []
    for _ in range(4):
        r = kick(program, maps)
        assert r.verdict == XDP_REDIRECT, r.counters
        sent.append(int.from_bytes(r.frame[34:36], "big"))  # the UDP source port: the EV
    assert fresh in sent and EV_A not in sent
    assert maps.ev(QP_TX, fresh).stats["tx_pkts"] == 1


def test_replace_ev_changes_nothing_when_the_slot_moved_on(program, maps, sq):
    before = maps.sq_raw(QP_TX)
    counters = maps.counters()
    assert not maps.replace_ev(QP_TX, 1, EV_A, 0xC0A2)  # slot 1 holds EV_B, not EV_A
    assert delta(counters, maps.counters()) == {"kick_idle": 1}
    assert bytes(maps.sq_raw(QP_TX)) == bytes(before)
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD
    with pytest.raises(KeyError):
        maps.ev(QP_TX, 0xC0A2)  # the entry made for it went again
    with pytest.raises(ValueError, match="already"):
        maps.replace_ev(QP_TX, 0, EV_A, EV_C)
    with pytest.raises(KeyError):
        maps.replace_ev(QP_TX + 1, 0, EV_A, 0xC0A3)


# ---- the ACK clock -------------------------------------------------------------------------


def test_sack_becomes_the_next_data_packet(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 2)  # START on A (plane 0), START + 1 on B (plane 1)

    # The SACK of START comes in on plane 0; the next EV, C, is on plane 0 too:
    # the same frame goes back out of the same port (XDP_TX).
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.verdict == XDP_TX
    assert_data(r.frame, expected_data(START + 2, EV_C, 2 * CE, CE, last=False), *_t(r))
    assert r.counters == {
        "ack_consumed": 1,
        "acked": 1,
        "tx_data": 1,
        "tx_bytes": CE,
        "tx_clocked": 1,
    }

    # The SACK of START + 1 comes in on plane 1: D, on plane 1, XDP_TX again.
    r = run(program, maps, sack(maps, START + 1, START + 2))
    assert r.verdict == XDP_TX
    assert_data(r.frame, expected_data(START + 3, EV_D, 3 * CE, CE, last=False), *_t(r))

    # A stale SACK also clocks (it is one more frame to send with): A, on plane 0,
    # leaves through the devmap since this SACK came in on plane 1.
    r = run(program, maps, sack(maps, START + 1, START + 2))
    assert r.verdict == XDP_REDIRECT
    assert_data(r.frame, expected_data(START + 4, EV_A, 4 * CE, CE, last=False), *_t(r))
    assert r.counters == {"ack_stale": 1, "tx_data": 1, "tx_bytes": CE, "tx_clocked": 1}
    s = maps.sq(QP_TX)
    assert (s.snd_una, s.snd_nxt) == (START + 2, START + 5)


def test_sack_with_nothing_to_send_is_consumed(program, maps, sq):
    post(maps, CE)
    send(program, maps, 1)
    r = run(program, maps, sack(maps, START, START + 1))
    assert r.verdict == XDP_DROP
    assert r.counters == {"ack_consumed": 1, "acked": 1, "send_done": 1, "events": 1}


def test_acks_of_a_qp_without_the_engine_are_only_consumed(program, maps, sq):
    setup_sq(maps, engine=False, snd_nxt=START + 2)
    maps.record_tx(QP_TX, START, EV_A, tx_ts=1000)
    r = run(program, maps, sack(maps, START, START + 1))
    assert (r.verdict, r.counters) == (XDP_DROP, {"ack_consumed": 1, "acked": 1})


# ---- retransmissions -----------------------------------------------------------------------


def test_trimmed_packet_is_resent_first_on_another_ev(program, maps, sq, event_reader):
    post(maps, 8 * CE)
    send(program, maps, 3)  # START on A, START + 1 on B, START + 2 on C

    # A NACK(TRIMMED) of START (on A, plane 0): queued, A skipped, and the
    # engine resends it at once, before new data, on the next usable EV: D.
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED, cum=START))
    assert r.verdict == XDP_REDIRECT  # D is on plane 1, the NACK came on plane 0
    assert_data(r.frame, expected_data(START, EV_D, 0, CE, last=False, retx=True), *_t(r))
    assert r.counters == {
        "ack_consumed": 1,
        "retx_queued": 1,
        "tx_retx": 1,
        "tx_bytes": CE,
        "tx_clocked": 1,
    }
    s = maps.sq(QP_TX)
    assert (s.retx_queue, s.retx_pending, s.snd_nxt) == ([], [], START + 3)
    assert s.tx_stats["retx_pkts"] == 1
    entry = maps.tx_entry(QP_TX, START)
    assert (entry.ev, entry.flags, entry.wqe, entry.msg_off) == (EV_D, nic.TX_F_RETX, 0, 0)
    d = maps.ev(QP_TX, EV_D)
    assert (d.stats["tx_pkts"], d.stats["retx_pkts"], d.last_tx_psn) == (1, 1, START)
    raw = maps.sq_raw(QP_TX)
    pos = START % nic.BITMAP_BITS
    assert not raw.echoed[pos // 64] >> (pos % 64) & 1, "the resent PSN's feedback bit is clear"
    # A, which the packet was trimmed on, is in SKIP for NIC_SKIP_NS (100 us,
    # shorter than this test's steps: it is stretched below): the next
    # packets go around it until its SKIP is over, then it is used again.
    a = maps.ev(QP_TX, EV_A)
    assert a.state == nic.EvState.SKIP and a.stats["nack_trimmed"] == 1
    assert r.t0 + nic.DEFAULT_SKIP_NS <= a.skip_until <= r.t1 + nic.DEFAULT_SKIP_NS
    set_ev(maps, EV_A, skip_until=time.monotonic_ns() + 10**10)
    assert [Ether(kick(program, maps).frame)[UDP].sport for _ in range(3)] == [EV_B, EV_C, EV_D]
    set_ev(maps, EV_A, skip_until=1)
    assert Ether(kick(program, maps).frame)[UDP].sport == EV_A


def test_resent_on_another_ev_even_when_the_lost_one_is_next(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 4)  # A, B, C, D: the round robin is back at A
    # TRIMMED_LASTHOP does not skip A, which is next in the round robin: B instead.
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    assert r.verdict == XDP_REDIRECT
    assert_data(r.frame, expected_data(START, EV_B, 0, CE, last=False, retx=True), *_t(r))
    # A, passed over, is the next EV of the round robin.
    assert Ether(kick(program, maps).frame)[UDP].sport == EV_A


def test_resent_on_another_plane_than_the_one_that_lost_it(program, maps, sq):
    """The round robin's next EV, C, is on the plane that lost the packet (A's,
    plane 0): the retransmission goes to plane 1 (D) instead, and C keeps its
    turn for the next new packet."""
    post(maps, 8 * CE)
    send(program, maps, 2)  # A, B: the round robin is at C
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    assert r.verdict == XDP_REDIRECT
    assert_data(r.frame, expected_data(START, EV_D, 0, CE, last=False, retx=True), *_t(r))
    assert [Ether(kick(program, maps).frame)[UDP].sport for _ in range(2)] == [EV_C, EV_D]


def test_resent_on_the_same_plane_when_no_other_is_usable(program, maps, sq):
    """Plane 1's EVs are DENIED: the retransmission stays on plane 0, on an EV
    other than the one that lost it."""
    post(maps, 8 * CE)
    send(program, maps, 2)  # A, B
    set_ev(maps, EV_B, state=nic.EvState.DENIED)
    set_ev(maps, EV_D, state=nic.EvState.DENIED)
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    assert_data(r.frame, expected_data(START, EV_C, 0, CE, last=False, retx=True), *_t(r))


def test_resent_last_packet_of_a_write_imm_keeps_its_immediate(program, maps, sq):
    post(maps, 100, imm=0xFEED)
    send(program, maps, 1)
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    want = expected_data(START, EV_B, 0, 100, last=True, imm=0xFEED, retx=True)
    assert_data(r.frame, want, *_t(r))
    assert Ether(r.frame)[BTH].opcode == w.Opcode.WRITE_IMM


def test_lost_packets_from_a_sack_hole_are_resent(program, maps, sq, event_reader):
    post(maps, 8 * CE)
    send(program, maps, 3)  # START on A, START + 1 on B, START + 2 on C (A's plane)
    # The SACK of START + 2 (on C) with START unacknowledged: no loss (another EV).
    # Put START + 2 on A instead, so that the loss walk finds START lost.
    maps.record_tx(QP_TX, START + 2, EV_A, tx_ts=maps.tx_entry(QP_TX, START + 2).tx_ts)
    r = run(program, maps, sack(maps, START + 2, START, plane=0, bitmap=0b100))
    assert r.counters["lost"] == 1 and r.counters["tx_retx"] == 1
    # A is ASSUMED_BAD now; the next EV in the round robin is D.
    assert_data(r.frame, expected_data(START, EV_D, 0, CE, last=False, retx=True), *_t(r))
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.ASSUMED_BAD


def set_engine(maps, on: bool) -> None:
    """Switch the engine of the QP on or off, keeping the rest (tests only)."""
    value = maps.sq_raw(QP_TX)
    value.engine = int(on)
    bpfsys.map_update(maps.fd(nic.TX_QPS_MAP), QP_TX.to_bytes(4, "little"), bytes(value))


def test_stale_retransmissions_are_skipped(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 2)
    # The engine off for a moment: a NACK queues START, a later SACK acknowledges
    # it, and the queue entry is stale when the engine next runs.
    set_engine(maps, False)
    run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    run(program, maps, sack(maps, START + 1, START + 2))
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START]
    set_engine(maps, True)

    r = kick(program, maps)  # skips the stale entry, sends new data
    assert_data(r.frame, expected_data(START + 2, EV_C, 2 * CE, CE, last=False), *_t(r))
    t = maps.sq(QP_TX)
    assert (t.retx_queue, t.tx_stats["retx_stale"], t.tx_stats["retx_pkts"]) == ([], 1, 0)


# ---- completions ---------------------------------------------------------------------------


def test_send_completions_when_snd_una_passes_the_last_psn(program, maps, sq, event_reader):
    post(maps, 1500, wr_id=11)  # START, START + 1
    post(maps, 100, wr_id=22, imm=7, src_offset=4 * CE, remote_va=REMOTE_VA + 4 * CE)  # + 2
    send(program, maps, 3)

    # START acknowledged: nothing complete yet.
    assert run(program, maps, sack(maps, START, START + 1)).counters.get("send_done") is None
    assert event_reader.read() == []
    # START + 2 acknowledged out of order: still nothing (START + 1 is a hole).
    r = run(program, maps, sack(maps, START + 2, START + 1, bitmap=0b10))
    assert "send_done" not in r.counters
    # The hole filled: both WQEs complete, in posting order.
    r = run(program, maps, sack(maps, START + 1, START + 3))
    assert r.counters["send_done"] == 2
    events = event_reader.read()
    assert [type(e) for e in events] == [nic.SendEvent, nic.SendEvent]
    got = [{k: v for k, v in e.as_dict().items() if k != "ts"} for e in events]
    assert got == [
        dict(type=5, qpn=QP_TX, msn=0, last_psn=START + 1, wr_id=11, len=1500, wqe=0),
        dict(type=5, qpn=QP_TX, msn=1, last_psn=START + 2, wr_id=22, len=100, wqe=1),
    ]
    assert all(r.t0 <= e.ts <= r.t1 for e in events)
    s = maps.sq(QP_TX)
    assert (s.wqe_done, s.tx_stats["wqes_done"]) == (2, 2)


def test_send_queue_depth(program, maps, sq):
    for i in range(nic.SQ_DEPTH):
        assert post(maps, 0, wr_id=i) == i
    with pytest.raises(BlockingIOError, match="full"):
        post(maps, 0)
    send(program, maps, 2)
    run(program, maps, sack(maps, START + 1, START + 2))  # two WQEs complete
    assert post(maps, 0) == nic.SQ_DEPTH
    assert maps.wq(QP_TX).posted == nic.SQ_DEPTH + 1


# ---- refusals and errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "counter"),
    [
        (dict(qpn=QP_TX + 1), "drop_unknown_qp"),
        (dict(engine=False), "drop_qp_config"),
        (dict(state=nic.QpState.RTR), "drop_qp_state"),
        (dict(state=nic.QpState.ERR), "drop_qp_state"),
    ],
    ids=["unknown QP", "QP without the engine", "RTR", "ERR"],
)
def test_kicks_that_send_nothing(program, maps, sq, change, counter):
    qpn = change.pop("qpn", QP_TX)
    if change:
        setup_sq(maps, snd_nxt=START, **change)
    before = maps.counters()
    result = program.kick(qpn, 1, live=False)
    assert result.retval == XDP_DROP
    assert delta(before, maps.counters()) == {counter: 1}


def test_sqd_resends_but_sends_no_new_data(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 2)
    maps.set_sq_state(QP_TX, nic.QpState.SQD)
    assert kick(program, maps).counters == {"kick_idle": 1}
    r = run(program, maps, nack(maps, START, w.NackReason.TRIMMED_LASTHOP, cum=START))
    assert r.counters["tx_retx"] == 1


def test_wqe_whose_source_is_gone_moves_the_qp_to_err(program, maps, sq, event_reader):
    post(maps, 2 * CE)
    maps.clear_region(SRC_REGION)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1, "tx_bad_wqe": 1, "events": 1})
    assert maps.sq(QP_TX).state == nic.QpState.ERR
    (event,) = event_reader.read()
    assert isinstance(event, nic.QpErrEvent)
    assert (event.qpn, event.psn, event.syndrome, event.reason) == (QP_TX, START, 0, 0)


# ---- protection domains: a WQE reads only from a region of its QP's PD and host ----------------


def pd_source(maps, **region) -> None:
    maps.set_region(SRC_REGION, first_elem=0, n_elems=SRC_ELEMS, rkey=0x5555, **region)


@pytest.mark.parametrize(
    ("region", "qp"),
    [
        (dict(owner=TX_HOST + 1, pd=2), dict(pd=1)),
        (dict(owner=TX_HOST + 2, pd=1), dict(pd=1)),
        (dict(owner=TX_HOST + 1, pd=1), dict()),
        (dict(), dict(pd=1)),
    ],
    ids=["another PD", "the same PD number on another host", "a PD-0 QP", "a PD-0 region"],
)
def test_wqe_whose_source_is_of_another_pd_is_a_local_protection_error(
    program, maps, sq, event_reader, region, qp
):
    pd_source(maps, **region)
    setup_sq(maps, **qp)
    post(maps, 2 * CE, wr_id=5)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (XDP_DROP, {"kick_idle": 1, "tx_bad_wqe": 1, "events": 1})
    s = maps.sq(QP_TX)
    assert (s.state, s.wqe_done) == (nic.QpState.ERR, 0)
    (event,) = event_reader.read()
    assert isinstance(event, nic.QpErrEvent)
    assert (event.qpn, event.psn, event.syndrome, event.error) == (
        QP_TX,
        START,
        0,
        nic.QpError.LOC_PROT,
    )
    assert maps.ev(QP_TX, EV_A).stats["tx_pkts"] == 0, "nothing read from that memory went out"


def test_wqe_whose_source_is_of_its_qps_pd_is_sent(program, maps, sq):
    pd_source(maps, owner=TX_HOST + 1, pd=7)
    setup_sq(maps, pd=7)
    post(maps, CE)
    r = kick(program, maps)
    assert r.verdict == XDP_REDIRECT
    assert_data(r.frame, expected_data(START, EV_A, 0, CE, last=True), r.t0, r.t1)
    assert r.counters == {"kick_sent": 1, "tx_data": 1, "tx_bytes": CE}


def test_no_device_for_the_plane(program, maps, sq):
    maps.set_port(TX_HOST, 0, ifindex=0, mac=mac(TX_HOST, 0), nh_mac=nh_mac(0, 0))
    post(maps, CE)
    r = kick(program, maps)
    assert (r.verdict, r.counters) == (
        XDP_DROP,
        {"kick_idle": 1, "tx_data": 1, "tx_bytes": CE, "tx_redirect_err": 1},
    )


def test_post_write_refuses_an_unknown_qp(maps):
    with pytest.raises(KeyError):
        maps.post_write(0xFFFFFF, length=1, src_region=0, remote_va=0, rkey=0)


def test_post_write_checks(program, maps, sq):
    with pytest.raises(ValueError, match="remote_va"):
        post(maps, CE, remote_va=-1)
    with pytest.raises(ValueError, match="outside region"):
        post(maps, SRC_ELEMS * CE + 1)
    with pytest.raises(ValueError, match="imm"):
        post(maps, CE, imm=1 << 32)
    setup_sq(maps, engine=False)
    with pytest.raises(ValueError, match="not served by the send engine"):
        post(maps, CE)


# ---- the map client and layouts ----------------------------------------------------------------


def test_set_port_writes_both_maps(program, maps, sq):
    assert maps.port(TX_HOST, 1) == {"mac": mac(0, 1), "nh_mac": nh_mac(0, 1), "ifindex": 1}
    raw = bpfsys.map_lookup(maps.fd(nic.TX_PORTS_MAP), (TX_HOST * 16 + 1).to_bytes(4, "little"), 4)
    assert int.from_bytes(raw, "little") == 1
    with pytest.raises(ValueError, match="MAC"):
        maps.set_port(TX_HOST, 1, ifindex=1, mac="02:00", nh_mac=nh_mac(0, 1))


def test_program_and_engine_maps_are_pinned(program):
    directory = nic.pin_dir(LAB)
    assert sorted(p.name for p in directory.iterdir()) == sorted(nic.PINNED_MAPS)
    fd = bpfsys.obj_get(directory / nic.PROG_PIN)
    try:
        # The pinned program is the loaded one: a kick through it works.
        result = nic.run_kick(fd, 0xABCDE, 1, live=False)
        assert result.retval == XDP_DROP
    finally:
        os.close(fd)
    expected = {
        # a map of its own per send queue (struct nic_wq), per region's memory
        nic.WQ_MAP: (nic.BPF_MAP_TYPE_ARRAY_OF_MAPS, 4, 4, TX_RINGS),
        nic.MEMS_MAP: (nic.BPF_MAP_TYPE_ARRAY_OF_MAPS, 4, 4, program.config.max_regions),
        nic.PORTS_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, 4, ctypes.sizeof(nic.Port), 256 * 16),
        nic.TX_PORTS_MAP: (14, 4, 4, 256 * 16),  # BPF_MAP_TYPE_DEVMAP
    }
    for name, shape in expected.items():
        fd = bpfsys.obj_get(directory / name)
        try:
            info = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        assert (info.type, info.key_size, info.value_size, info.max_entries) == shape, name


@pytest.mark.parametrize(
    ("map_name", "view"), [("nic_wq_template", nic.Wq), (nic.PORTS_MAP, nic.Port)]
)
def test_program_engine_maps_use_the_pythonstruct_layout(program, map_name, view):
    assert struct_layout(program.bpf[map_name.encode()].Leaf) == struct_layout(view)


# ---- cost of one engine run ------------------------------------------------------------------


@pytest.mark.parametrize("auth", [False, True], ids=["plain", "macd"])
def test_engine_run_time(program, maps, sq, capsys, auth):
    """ns per engine run, from BPF_PROG_TEST_RUN's duration (not live: no
    transmission); with a key, each packet's SipHash MAC included (its cost is
    the difference: docs/nic-program.md, "Per-packet authentication")."""
    maps.set_region(SRC_REGION, first_elem=0, n_elems=SRC_ELEMS, rkey=0x5555)
    key = bytes(range(16)) if auth else None
    setup_sq(maps, mpr=nic.MPR_MAX, evs={0xD000 + i: i % 2 for i in range(16)}, auth_key=key)
    for _ in range(16):
        post(maps, SRC_ELEMS * CE)
    runs = nic.MPR_MAX * w.MPR_UNIT
    before = maps.counters()
    sending = program.kick(QP_TX, runs, live=False).duration
    assert delta(before, maps.counters())["kick_sent"] == runs
    before = maps.counters()
    idle = program.kick(QP_TX, runs, live=False).duration  # window full
    assert delta(before, maps.counters())["kick_idle"] == runs
    with capsys.disabled():
        print(
            f"\n  engine run (kick, not live{', MAC' if auth else ''}): {sending} ns sending "
            f"a 1 KiB packet, {idle} ns idle"
        )


# ---- live: two namespaces, two planes ---------------------------------------------------------


@pytest.mark.netns
def test_live_1mib_write_kicked_then_ack_clocked(program, maps, live_pair, event_reader, capsys):
    event_reader.read()
    length = LIVE_ELEMS * CE
    live_setup(maps, live_pair, length=length)
    got = live_transfer(maps, wqes=1, deadline_s=10)
    s, c = got["sq"], got["counters"]

    assert s.wqe_done == 1, f"not complete in 10 s: {s.snd_una - START} PSNs acked, {c}"
    assert s.snd_una == START + LIVE_ELEMS
    assert maps.read_region(LIVE_DST, 0, length) == maps.read_region(LIVE_SRC, 0, length)
    done = [e for e in event_reader.read() if isinstance(e, nic.SendEvent)]
    assert [(e.qpn, e.len, e.last_psn) for e in done] == [(QP_TX, length, START + LIVE_ELEMS - 1)]
    per_plane = [
        sum(maps.ev(QP_TX, ev).stats["tx_pkts"] for ev, p in LIVE_EVS.items() if p == plane)
        for plane in (0, 1)
    ]
    assert all(per_plane), f"both planes carry data: {per_plane}"
    pkts = c.get("tx_data", 0) + c.get("tx_retx", 0)
    with capsys.disabled():
        print(
            f"\n  live 1 MiB WRITE, 2 planes: {got['elapsed'] * 1e3:.2f} ms, "
            f"{length * 8 / got['elapsed'] / 1e9:.2f} Gbit/s goodput, "
            f"{pkts / got['elapsed'] / 1e6:.3f} Mpps; kicked {c.get('kick_sent', 0)}, "
            f"clocked {c.get('tx_clocked', 0)}, retransmitted {c.get('tx_retx', 0)}, "
            f"top-up kicks {got['top_ups']}, per plane {per_plane}"
        )


@pytest.mark.netns
def test_live_32mib_throughput(program, maps, live_pair, capsys):
    """32 WQEs of 1 MiB each (the whole send queue), same source and destination."""
    length = LIVE_ELEMS * CE
    live_setup(maps, live_pair, length=length, wqes=nic.SQ_DEPTH)
    got = live_transfer(maps, wqes=nic.SQ_DEPTH, deadline_s=30)
    s, c = got["sq"], got["counters"]
    assert s.wqe_done == nic.SQ_DEPTH, f"not complete in 30 s: {c}"
    assert maps.read_region(LIVE_DST, 0, length) == maps.read_region(LIVE_SRC, 0, length)
    total = length * nic.SQ_DEPTH
    pkts = c.get("tx_data", 0) + c.get("tx_retx", 0)
    with capsys.disabled():
        print(
            f"\n  live 32 MiB (32 WQEs), 2 planes: {got['elapsed'] * 1e3:.1f} ms, "
            f"{total * 8 / got['elapsed'] / 1e9:.2f} Gbit/s goodput, "
            f"{pkts / got['elapsed'] / 1e6:.3f} Mpps; clocked {c.get('tx_clocked', 0)}, "
            f"retransmitted {c.get('tx_retx', 0)}, top-up kicks {got['top_ups']}"
        )


# ---- the retransmission timeout: a timeout kick queues, a send kick resends ----


def timeout_kick(program, maps, max_psns: int = nic.TIMEOUT_MAX, age_ns: int = 0) -> Run:
    """A timeout kick alone (non-live): what it queued, in the counters."""
    before = maps.counters()
    result = nic.run_kick(
        program.fd, QP_TX, 1, live=False, op=nic.KickOp.TIMEOUT, arg=max_psns, age_ns=age_ns
    )
    return Run(result.retval, result.data_out, 0, 0, delta(before, maps.counters()))


def test_timeout_kick_queues_the_oldest_unacked_psns_and_sends_nothing(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 4)  # START .. START + 3 on A, B, C, D
    # START + 1 is SACKed (bitmap), the others are not; the SACK clocks out START + 4.
    run(program, maps, sack(maps, START + 1, START, plane=1, bitmap=0b10))
    assert maps.sq(QP_TX).snd_nxt == START + 5
    r = timeout_kick(program, maps, max_psns=2)
    assert r.verdict == XDP_DROP
    assert r.counters == {
        "timeout_kicks": 1,
        "timeout_queued": 2,
        "retx_queued": 2,
        "lost": 2,
        "events": 2,  # EV state changes
    }
    queue = maps.retx_queue(QP_TX)
    assert [(e["psn"], e["ev"], e["cause"]) for e in queue] == [
        (START, EV_A, nic.RetxCause.TIMEOUT),
        (START + 2, EV_C, nic.RetxCause.TIMEOUT),
    ]
    # Queued already, or acked: a second kick queues only the rest.
    r = timeout_kick(program, maps)
    assert r.counters["timeout_queued"] == 2
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START, START + 2, START + 3, START + 4]
    assert maps.sq(QP_TX).snd_nxt == START + 5, "a timeout kick sends nothing"


def test_psns_queued_by_a_timeout_are_resent_on_another_ev(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 1)  # START on A
    assert timeout_kick(program, maps).counters["timeout_queued"] == 1
    r = kick(program, maps)
    assert r.verdict == XDP_REDIRECT
    assert r.counters["tx_retx"] == 1
    # B is the next EV of the round robin, and not A, the one that lost it.
    assert_data(r.frame, expected_data(START, EV_B, 0, CE, last=False, retx=True), *_t(r))


def test_timeout_kick_with_nothing_in_flight_queues_nothing(program, maps, sq):
    r = timeout_kick(program, maps)
    assert r.verdict == XDP_DROP
    assert r.counters == {"timeout_kicks": 1}
    assert maps.retx_queue(QP_TX) == []


def test_timeout_marks_the_evs_that_lost_packets_assumed_bad(program, maps, sq, event_reader):
    post(maps, 8 * CE)
    send(program, maps, 2)  # START on A, START + 1 on B
    timeout_kick(program, maps)
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.ASSUMED_BAD
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.ASSUMED_BAD
    assert maps.ev(QP_TX, EV_C).state == nic.EvState.GOOD
    assert maps.ev(QP_TX, EV_A).stats["lost_pkts"] == 1
    changes = [e for e in event_reader.read() if isinstance(e, nic.EvEvent)]
    assert [(e.ev, e.new_state, e.cause, e.psn) for e in changes] == [
        (EV_A, nic.EvState.ASSUMED_BAD, nic.EvCause.TIMEOUT, START),
        (EV_B, nic.EvState.ASSUMED_BAD, nic.EvCause.TIMEOUT, START + 1),
    ]


def test_a_reorder_kick_resends_and_blames_no_ev(program, maps, sq, event_reader):
    """The reorder timer's kick (NIC_TIMEOUT_F_REORDER): what it queues is
    overdue, not timed out; it is resent, and its EVs are left to the head
    scan and the silence rule (docs/nic-program.md, "Blame")."""
    post(maps, 8 * CE)
    send(program, maps, 2)  # START on A, START + 1 on B
    r = timeout_kick(program, maps, max_psns=nic.TIMEOUT_F_REORDER | nic.TIMEOUT_MAX)
    assert r.counters == {"timeout_kicks": 1, "timeout_queued": 2, "retx_queued": 2, "lost": 2}
    assert [e["psn"] for e in maps.retx_queue(QP_TX)] == [START, START + 1]
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD
    assert maps.ev(QP_TX, EV_B).state == nic.EvState.GOOD
    assert not [e for e in event_reader.read() if isinstance(e, nic.EvEvent)]


def test_timeout_leaves_packets_younger_than_the_timeout(program, maps, sq):
    post(maps, 8 * CE)
    send(program, maps, 2)
    r = timeout_kick(program, maps, age_ns=10**12)  # nothing is 1000 s old
    assert r.counters == {"timeout_kicks": 1}
    assert maps.ev(QP_TX, EV_A).state == nic.EvState.GOOD


def test_timeout_kick_of_an_unknown_qp_is_counted(program, maps):
    before = maps.counters()
    result = nic.run_kick(program.fd, QP_TX + 99, 1, live=False, op=nic.KickOp.TIMEOUT)
    assert result.retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_unknown_qp": 1}


# ---- isolation: maps of their own, the applications' doorbell --------------------------------
# (docs/api.md, "Isolation")


def _doorbell_run(maps, qpn: int, op: nic.KickOp, arg: int = 0) -> Run:
    """One non-live run of the applications' doorbell program on a kick frame."""
    fd = maps.doorbell_program_fd()
    try:
        before = maps.counters()
        t0 = time.monotonic_ns()
        data = nic.kick_frame(qpn, op, arg)
        ctx = bytes(bpfsys.XdpMd(data=ctypes.sizeof(nic.Kick), data_end=len(data)))
        result = bpfsys.prog_test_run(
            fd, data, data_size_out=4096, ctx_in=ctx, ctx_size_out=ctypes.sizeof(bpfsys.XdpMd)
        )
        start = bpfsys.XdpMd.from_buffer_copy(result.ctx_out).data
        return Run(result.retval, result.data_out[start:], t0, time.monotonic_ns(),
                   delta(before, maps.counters()))  # fmt: skip
    finally:
        os.close(fd)


def test_the_doorbell_program_turns_every_kick_into_a_send_kick(program, maps, sq):
    """What an application kicks with runs the send engine and nothing else: a
    FAIL kick through it sends the QP's next packet instead of failing it."""
    post(maps, 3000)

    r = _doorbell_run(maps, QP_TX, nic.KickOp.FAIL, int(nic.QpError.RETRY_EXCEEDED))

    assert r.verdict == XDP_REDIRECT
    assert_data(r.frame, expected_data(START, EV_A, 0, CE, last=False), r.t0, r.t1)
    assert maps.sq(QP_TX).state == nic.QpState.RTS
    assert r.counters == {"kick_sent": 1, "tx_data": 1, "tx_bytes": CE}


def test_the_doorbell_program_drops_a_frame_that_is_no_kick(program, maps, sq):
    """A frame without a kick's metadata is never parsed as a packet from the wire."""
    post(maps, 3000)
    fd = maps.doorbell_program_fd()
    try:
        before = maps.counters()
        result = bpfsys.prog_test_run(fd, bytes(nic.doorbell_frame(QP_TX, 1514)))
        moved = delta(before, maps.counters())
    finally:
        os.close(fd)
    assert result.retval == XDP_DROP
    assert moved == {"drop_not_kick": 1}
    assert maps.sq(QP_TX).snd_nxt == START


def test_a_send_queue_is_a_map_of_its_own_that_a_new_qp_replaces(program, maps, sq):
    """The engine reads the queue at its ring's entry of nic_wqs; a new queue
    there (the daemon's create_qp) leaves a holder of the old one writing into
    nothing the NIC reads."""
    import mmap

    ring = maps.sq_raw(QP_TX).ring
    old_fd = maps.send_queue_fd(ring)
    old = mmap.mmap(old_fd, formats.WQ_SIZE)
    os.close(old_fd)
    new_fd = maps.new_send_queue(ring)
    os.close(new_fd)
    try:
        stale = SendQueue(old)
        stale.write(0, (1, REMOTE_VA, 0x1111, 3000, SRC_REGION, 0, 0, int(w.Opcode.WRITE), 1))
        stale.publish(1)  # the old queue: the engine does not read it any more
        assert kick(program, maps).counters == {"kick_idle": 1}
        post(maps, 3000)  # the new queue, through NicMaps
        assert kick(program, maps).verdict == XDP_REDIRECT
    finally:
        old.close()


def test_a_region_of_its_own_memory_is_sent_from_that_map(program, maps, sq):
    """An application's MR is a map of its own at its region's entry of nic_mems:
    the engine reads its payload there, not from nic_mr."""
    import mmap

    fd = maps.new_region_memory(4)
    try:
        maps.set_region(SRC_REGION, first_elem=0, n_elems=4, rkey=0x5555, memory_fd=fd)
        own = mmap.mmap(fd, 4 * CE)
    finally:
        os.close(fd)
    try:
        own[:CE] = bytes([0xA5]) * CE
        post(maps, CE)
        r = kick(program, maps)
        assert r.verdict == XDP_REDIRECT
        assert r.frame[-CE - 4 : -4] == bytes([0xA5]) * CE  # the payload, before the ICRC slot
        assert maps.read_region(SRC_REGION, 0, 4) == bytes([0xA5]) * 4  # NicMaps reads that map
    finally:
        maps.set_region(SRC_REGION, first_elem=0, n_elems=SRC_ELEMS, rkey=0x5555)
        own.close()
