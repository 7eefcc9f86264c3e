"""Completion queues of bpf/nic_xdp.c (verbs): nic_cq_rings, signaled WQEs, the
receive CQ, QP errors in both places, NIC_KICK_FAIL, and overruns.

The program is compiled once for the module (lab ``zcq<pid>``) with small
maps: CQ rings of one page (NIC_CQ_RING_PAGES = 1) and MAX_CQS entries of
nic_cq_rings. The plan of hosts, QPs and EVs is the send engine's
(tests/helpers/engine.py): send QP QP_TX on host 0, receive QP QP_RX on host
1. Each CQ is a ring buffer the test creates as an application would
(NicMaps.create_cq_ring) and reads with EventReader; records are checked
field by field, and so is what did not go to nic_events.
"""

from __future__ import annotations

import os
import time

import pytest

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire as w
from tests.helpers.engine import (
    CE,
    EVS,
    MPR,
    PLANES,
    QP_RX,
    QP_TX,
    REMOTE_VA,
    RKEY,
    RX_HOST,
    SIZES,
    SRC_REGION,
    START,
    TX_HOST,
    data_ends,
    post,
    setup_sq,
)
from tests.helpers.nicprog import XDP_DROP, XDP_REDIRECT, XDP_TX, delta

LAB = f"zcq{os.getpid()}"
MAX_CQS = 8
CQ_RING_PAGES = 1
PROGRAM_SIZES = SIZES | dict(max_cqs=MAX_CQS, cq_ring_pages=CQ_RING_PAGES)  # conftest's program
QP_TX2 = TX_HOST << 16 | 9  # a second send QP, on ring 2
DST_REGION = 3  # the receiver's memory, at REMOTE_VA
# A full batch of send completions in a CQ's ring: one ring record, 8 bytes of
# header and 40 per completion.
BATCH = 8 + 40 * nic.SQ_DEPTH


pytestmark = pytest.mark.usefixtures("one_cpu")  # tests/bpf/conftest.py: why


class Cq:
    """A CQ as an application holds it: its ring's fd, a reader, its number."""

    def __init__(self, maps, index: int) -> None:
        self.maps, self.index, self.number = maps, index, index + 1
        self.fd = maps.create_cq_ring()
        maps.set_cq_ring(index, self.fd)
        self.lost_base = maps.cq_lost(index)  # as the daemon does for a new CQ
        self.reader = nic.EventReader(self.fd)

    def read(self) -> list[dict]:
        """Its records, without ts (checked separately where it matters)."""
        return [{k: v for k, v in e.as_dict().items() if k != "ts"} for e in self.reader.read()]

    def close(self) -> None:
        self.maps.clear_cq_ring(self.index)
        self.reader.close()
        os.close(self.fd)


@pytest.fixture
def cqs(maps):
    """Two fresh CQs, numbers 1 and 2 (indices 0 and 1); removed after the test."""
    made = [Cq(maps, 0), Cq(maps, 1)]
    yield made
    for cq in made:
        cq.close()


def run(program, maps, frame) -> tuple[int, bytes, dict[str, int]]:
    """A received frame through the program: verdict, frame out, counters moved."""
    before = maps.counters()
    result = bpfsys.prog_test_run(program.fd, bytes(frame), data_size_out=4096)
    return result.retval, result.data_out, delta(before, maps.counters())


def kick(program, maps, qpn: int = QP_TX, packets: int = 1) -> tuple[int, bytes, dict]:
    before = maps.counters()
    result = program.kick(qpn, packets, live=False)
    return result.retval, result.data_out, delta(before, maps.counters())


def sack(maps, psn: int, cum: int, qpn: int = QP_TX, *, fatal: bool = False):
    """The receiver's SACK of psn (fatal: a NACK(UNEXP_EVENT)), echoing what the
    engine recorded for it."""
    entry = maps.tx_entry(qpn, psn)
    kw = dict(ev=entry.ev, dqpn=qpn, psn=psn, cum_psn=cum, echo_ts=entry.tx_ts)
    ends = data_ends(EVS[entry.ev]).reversed()
    if fatal:
        return w.nack_packet(
            ends, reason=w.NackReason.UNEXP_EVENT, port_bitmap=PLANES, mpr=MPR, **kw
        )
    return w.sack_packet(ends, port_bitmap=PLANES, mpr=MPR, **kw)


def send_and_ack(program, maps, n: int, qpn: int = QP_TX) -> dict[str, int]:
    """n kicks that each send, then one SACK of them all; the SACK's counters."""
    first = maps.sq(qpn).snd_nxt
    for _ in range(n):
        verdict, _, moved = kick(program, maps, qpn)
        assert verdict == XDP_REDIRECT, moved
    last = first + n - 1
    verdict, _, moved = run(program, maps, sack(maps, last, last + 1, qpn))
    assert verdict in (XDP_DROP, XDP_TX, XDP_REDIRECT)
    return moved


def done(psn: int, wr_id: int, length: int, wqe: int, msn: int, qpn: int = QP_TX) -> dict:
    return dict(
        type=nic.EventType.SEND_DONE,
        qpn=qpn,
        msn=msn,
        last_psn=psn,
        wr_id=wr_id,
        len=length,
        wqe=wqe,
    )


# ---- the maps ---------------------------------------------------------------------------------


def test_cq_maps_are_pinned_with_their_sizes(program, maps):
    assert {nic.CQ_RINGS_MAP, nic.CQ_TEMPLATE_MAP} <= {p.name for p in nic.pin_dir(LAB).iterdir()}
    rings = bpfsys.map_info(maps.fd(nic.CQ_RINGS_MAP))
    assert (rings.type, rings.key_size, rings.value_size, rings.max_entries) == (
        nic.BPF_MAP_TYPE_ARRAY_OF_MAPS,
        4,
        4,
        MAX_CQS,
    )
    assert (maps.max_cqs, maps.cq_ring_bytes) == (
        MAX_CQS,
        CQ_RING_PAGES * os.sysconf("SC_PAGE_SIZE"),
    )
    fd = maps.create_cq_ring()
    try:
        info = bpfsys.map_info(fd)
        assert (info.type, info.max_entries, info.name) == (
            nic.BPF_MAP_TYPE_RINGBUF,
            maps.cq_ring_bytes,
            "mrc_cq",
        )
    finally:
        os.close(fd)


def test_set_and_clear_a_cq_ring(program, maps):
    fd = maps.create_cq_ring()
    try:
        assert maps.cq_ring_id(MAX_CQS - 1) is None
        maps.set_cq_ring(MAX_CQS - 1, fd)
        assert maps.cq_ring_id(MAX_CQS - 1) == bpfsys.map_info(fd).id
        maps.clear_cq_ring(MAX_CQS - 1)
        assert maps.cq_ring_id(MAX_CQS - 1) is None
        maps.clear_cq_ring(MAX_CQS - 1)  # nothing there: quiet
        # The kernel's check of an inner ring buffer leaves its size out: any size goes.
        other = bpfsys.ringbuf_create(2 * maps.cq_ring_bytes)
        try:
            maps.set_cq_ring(MAX_CQS - 1, other)
            assert maps.cq_ring_id(MAX_CQS - 1) == bpfsys.map_info(other).id
            maps.clear_cq_ring(MAX_CQS - 1)
        finally:
            os.close(other)
        with pytest.raises(ValueError, match="index"):
            maps.set_cq_ring(MAX_CQS, fd)
        with pytest.raises(ValueError, match="not a BPF ring buffer"):
            maps.set_cq_ring(0, maps.fd(nic.COUNTERS_MAP))
        with pytest.raises(ValueError, match="cq"):
            setup_sq(maps, cq=MAX_CQS + 1)
    finally:
        os.close(fd)


# ---- send completions -------------------------------------------------------------------------


def test_signaled_completion_lands_in_its_cq(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=cqs[0].number)
    assert post(maps, 1500, wr_id=11) == 0  # START, START + 1
    assert maps.wq(QP_TX).wqes[0].flags == nic.WQE_F_SIGNALED
    for _ in range(2):
        kick(program, maps)
    t0 = time.monotonic_ns()
    verdict, _, moved = run(program, maps, sack(maps, START + 1, START + 2))
    t1 = time.monotonic_ns()

    assert verdict == XDP_DROP
    assert moved == {"ack_consumed": 1, "acked": 2, "send_done": 1, "cq_events": 1}
    (record,) = cqs[0].reader.read()
    assert isinstance(record, nic.SendEvent) and t0 <= record.ts <= t1
    assert cqs[0].read() == []
    fields = {k: v for k, v in record.as_dict().items() if k != "ts"}
    assert fields == done(START + 1, 11, 1500, 0, 0)
    assert event_reader.read() == [] and cqs[1].read() == []
    assert maps.wq(QP_TX).done == 1
    assert maps.sq(QP_TX).send_cq == cqs[0].number


def test_unsignaled_completion_writes_nothing_but_frees_its_slot(
    program, maps, sq, event_reader, cqs
):
    setup_sq(maps, cq=cqs[0].number)
    post(maps, CE, wr_id=1, signaled=False)
    post(maps, CE, wr_id=2, signaled=False, src_offset=CE, remote_va=REMOTE_VA + CE)
    assert [maps.wq(QP_TX).wqes[i].flags for i in range(2)] == [0, 0]

    # The two unsignaled WQEs complete: no record anywhere, the slots free.
    moved = send_and_ack(program, maps, 2)
    assert (moved.get("send_done"), moved.get("cq_events"), moved.get("events")) == (2, None, None)
    assert cqs[0].read() == [] and event_reader.read() == []
    assert maps.wq(QP_TX).done == 2
    assert maps.sq(QP_TX).wqe_done == 2
    # A signaled one reports, with its own index and MSN.
    post(maps, CE, wr_id=3, src_offset=2 * CE, remote_va=REMOTE_VA + 2 * CE)
    moved = send_and_ack(program, maps, 1)
    assert (moved["send_done"], moved["cq_events"]) == (1, 1)
    assert cqs[0].read() == [done(START + 2, 3, CE, 2, 2)]
    assert maps.wq(QP_TX).done == 3


def test_a_batch_keeps_only_its_signaled_records_in_order(program, maps, sq, cqs):
    setup_sq(maps, cq=cqs[0].number)
    signaled = [False, True, False, False, True, True]
    for i, s in enumerate(signaled):
        post(maps, 0, wr_id=100 + i, signaled=s)
    moved = send_and_ack(program, maps, len(signaled))  # one SACK completes all six
    assert (moved["send_done"], moved["cq_events"]) == (6, 3)
    assert cqs[0].read() == [done(START + i, 100 + i, 0, i, i) for i in (1, 4, 5)]
    assert maps.wq(QP_TX).done == 6


def test_two_qps_on_two_cqs_do_not_mix(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=cqs[0].number)
    maps.setup_sq(
        QP_TX2,
        local_host=TX_HOST,
        peer_host=RX_HOST,
        peer_qpn=QP_RX,
        ring=2,
        evs=EVS,
        mpr=MPR,
        psn=START,
        engine=True,
        cq=cqs[1].number,
    )
    try:
        post(maps, 0, wr_id=0xA)
        maps.post_write(
            QP_TX2, length=0, src_region=SRC_REGION, remote_va=REMOTE_VA, rkey=RKEY, wr_id=0xB
        )
        send_and_ack(program, maps, 1, QP_TX2)
        send_and_ack(program, maps, 1, QP_TX)
        assert cqs[0].read() == [done(START, 0xA, 0, 0, 0)]
        assert cqs[1].read() == [done(START, 0xB, 0, 0, 0, qpn=QP_TX2)]
        assert event_reader.read() == []
    finally:
        maps.delete_sq(QP_TX2)


def test_a_qp_without_a_cq_reports_every_wqe_to_nic_events(program, maps, sq, event_reader, cqs):
    # cq 0 (the sq fixture's): signaled or not, every completion is a nic_events record.
    post(maps, 0, wr_id=1, signaled=False)
    post(maps, 0, wr_id=2)
    moved = send_and_ack(program, maps, 2)
    assert (moved["send_done"], moved["events"], moved.get("cq_events")) == (2, 2, None)
    got = [{k: v for k, v in e.as_dict().items() if k != "ts"} for e in event_reader.read()]
    assert got == [done(START, 1, 0, 0, 0), done(START + 1, 2, 0, 1, 1)]
    assert cqs[0].read() == [] and cqs[1].read() == []
    assert maps.wq(QP_TX).done == 2


# ---- receive completions ----------------------------------------------------------------------


def test_write_imm_completes_to_the_receive_cq(program, maps, sq, event_reader, cqs):
    maps.set_region(DST_REGION, first_elem=2048, n_elems=16, rkey=RKEY, base_va=REMOTE_VA)
    maps.set_port_bitmap(RX_HOST, PLANES)
    maps.setup_rq(
        QP_RX,
        local_host=RX_HOST,
        peer_host=TX_HOST,
        peer_qpn=QP_TX,
        region=DST_REGION,
        mpr=MPR,
        psn=START,
        msn=0,
        cq=cqs[1].number,
    )
    setup_sq(maps, cq=cqs[0].number)
    try:
        assert maps.rq(QP_RX).recv_cq == cqs[1].number
        post(maps, 100, wr_id=5, imm=0xFEEDF00D)
        verdict, frame, _ = kick(program, maps)
        assert verdict == XDP_REDIRECT
        # The data packet reaches the receiver (the same program): placed, SACKed,
        # and its completion is the receive CQ's record, not nic_events'.
        verdict, answer, moved = run(program, maps, frame)
        assert verdict == XDP_TX
        assert (moved["msg_done"], moved["cq_events"], moved.get("events")) == (1, 1, None)
        assert cqs[1].read() == [
            dict(
                type=nic.EventType.RECV_IMM,
                qpn=QP_RX,
                msn=0,
                imm=0xFEEDF00D,
                va=REMOTE_VA,
                len=100,
            )
        ]
        # Its SACK back at the sender completes the WQE in the send CQ.
        verdict, _, moved = run(program, maps, answer)
        assert (verdict, moved["send_done"], moved["cq_events"]) == (XDP_DROP, 1, 1)
        assert cqs[0].read() == [done(START, 5, 100, 0, 0)]
        assert event_reader.read() == []
    finally:
        maps.delete_rq(QP_RX)


# ---- QP errors --------------------------------------------------------------------------------


def test_fatal_nack_reports_to_the_cq_and_to_nic_events(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=cqs[0].number)
    post(maps, 2 * CE)
    for _ in range(2):
        kick(program, maps)
    verdict, _, moved = run(program, maps, sack(maps, START + 1, START, fatal=True))
    assert verdict == XDP_DROP
    assert (moved["events"], moved["cq_events"]) == (1, 1)
    assert maps.sq(QP_TX).state == nic.QpState.ERR
    (in_log,) = event_reader.read()
    (in_cq,) = cqs[0].reader.read()
    assert isinstance(in_cq, nic.QpErrEvent) and bytes(in_cq) == bytes(in_log)
    assert (in_cq.qpn, in_cq.psn, in_cq.reason, in_cq.error) == (
        QP_TX,
        START + 1,
        w.NackReason.UNEXP_EVENT,
        nic.QpError.NONE,
    )
    assert cqs[1].read() == []


def test_bad_wqe_error_reports_to_both(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=cqs[0].number)
    post(maps, CE)
    maps.clear_region(SRC_REGION)
    verdict, _, moved = kick(program, maps)
    assert (verdict, moved["tx_bad_wqe"], moved["events"], moved["cq_events"]) == (
        XDP_DROP,
        1,
        1,
        1,
    )
    (in_log,) = event_reader.read()
    (in_cq,) = cqs[0].reader.read()
    assert bytes(in_cq) == bytes(in_log)
    assert (in_cq.type, in_cq.psn, in_cq.error) == (
        nic.EventType.QP_ERR,
        START,
        nic.QpError.BAD_WQE,
    )


def test_fail_kick_moves_the_qp_to_err_and_reports_it(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=cqs[0].number)
    post(maps, 3 * CE)
    for _ in range(2):
        kick(program, maps)
    run(program, maps, sack(maps, START, START + 1))  # snd_una: START + 1
    before = maps.counters()
    t0 = time.monotonic_ns()
    maps.fail_qp(QP_TX, nic.QpError.RETRY_EXCEEDED)
    t1 = time.monotonic_ns()

    assert delta(before, maps.counters()) == {"fail_kicks": 1, "events": 1, "cq_events": 1}
    assert maps.sq(QP_TX).state == nic.QpState.ERR
    (in_log,) = event_reader.read()
    (in_cq,) = cqs[0].reader.read()
    assert bytes(in_cq) == bytes(in_log) and t0 <= in_cq.ts <= t1
    fields = {k: v for k, v in in_cq.as_dict().items() if k != "ts"}
    assert fields == dict(
        type=nic.EventType.QP_ERR,
        qpn=QP_TX,
        psn=START + 1,
        ev=0,
        syndrome=0,
        reason=0,
        error=nic.QpError.RETRY_EXCEEDED,
    )
    # An ERR QP sends nothing more, and failing it again reports nothing.
    assert kick(program, maps)[2] == {"drop_qp_state": 1}
    before = maps.counters()
    maps.fail_qp(QP_TX)
    assert delta(before, maps.counters()) == {"kick_idle": 1}
    assert event_reader.read() == [] and cqs[0].read() == []


def test_fail_kick_without_a_cq_reports_to_nic_events_only(program, maps, sq, event_reader, cqs):
    before = maps.counters()
    maps.fail_qp(QP_TX)
    assert delta(before, maps.counters()) == {"fail_kicks": 1, "events": 1}
    (record,) = event_reader.read()
    assert (record.type, record.error) == (nic.EventType.QP_ERR, nic.QpError.RETRY_EXCEEDED)
    assert cqs[0].read() == []


def test_fail_kick_of_an_unknown_qp_is_counted(program, maps):
    before = maps.counters()
    maps.fail_qp(0xABCDE)
    assert delta(before, maps.counters()) == {"drop_unknown_qp": 1}


# ---- overruns ---------------------------------------------------------------------------------


def test_a_cq_without_a_ring_counts_overruns(program, maps, sq, event_reader, cqs):
    setup_sq(maps, cq=MAX_CQS)  # index MAX_CQS - 1: no ring there
    post(maps, 0, wr_id=1)
    post(maps, 0, wr_id=2)
    moved = send_and_ack(program, maps, 2)
    assert (moved["send_done"], moved["cq_overrun"], moved.get("cq_events")) == (2, 2, None)
    assert event_reader.read() == [] and cqs[0].read() == []
    assert maps.wq(QP_TX).done == 2  # the queue goes on all the same
    # Its error is still in nic_events.
    before = maps.counters()
    maps.fail_qp(QP_TX)
    assert delta(before, maps.counters()) == {"fail_kicks": 1, "events": 1, "cq_overrun": 1}
    assert len(event_reader.read()) == 1


def test_a_full_cq_ring_counts_overruns_and_never_blocks(program, maps, sq, cqs):
    setup_sq(maps, cq=cqs[0].number)
    batches = maps.cq_ring_bytes // BATCH  # 3 in one page: the 4th does not fit
    fit = batches * nic.SQ_DEPTH
    rounds = batches + 1
    total = rounds * nic.SQ_DEPTH
    moved_all: dict[str, int] = {}
    for r in range(rounds):
        for i in range(nic.SQ_DEPTH):
            post(maps, 0, wr_id=r * nic.SQ_DEPTH + i)
        for k, v in send_and_ack(program, maps, nic.SQ_DEPTH).items():
            moved_all[k] = moved_all.get(k, 0) + v
    assert moved_all["send_done"] == total
    assert (moved_all["cq_events"], moved_all["cq_overrun"]) == (fit, total - fit)
    lost = maps.cq_lost(cqs[0].number - 1) - cqs[0].lost_base  # the CQ's own: in error
    assert lost == total - fit
    assert [e.wr_id for e in cqs[0].reader.read()] == list(range(fit))
    # Read, the ring takes records again.
    post(maps, 0, wr_id=999)
    assert send_and_ack(program, maps, 1)["cq_events"] == 1
    assert [e.wr_id for e in cqs[0].reader.read()] == [999]
