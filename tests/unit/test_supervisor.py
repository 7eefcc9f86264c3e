"""Send QP supervision without a lab (transport.supervisor, as the daemon runs it for
every application QP): when a stalled ACK clock is restarted, and when the reorder
timer declares what is left in the network lost; and `mrc-nic write`'s source data
(workloads.writeplan)."""

from __future__ import annotations

import dataclasses
import types

import pytest

from mrc_nic import nic
from mrc_nic.transport import supervisor
from mrc_nic.transport.qp import Retry
from mrc_nic.workloads import writeplan


class KickRecorder:
    def __init__(self) -> None:
        self.kicks: list[tuple[int, int]] = []
        self.timeout_kicks: list[dict] = []

    def kick(self, qpn: int, packets: int, **_) -> None:
        self.kicks.append((qpn, packets))

    def timeout_kick(
        self, qpn: int, packets: int, *, max_psns: int, age_ns: int, reorder: bool = False
    ) -> None:
        self.timeout_kicks.append(
            dict(qpn=qpn, packets=packets, max_psns=max_psns, age_ns=age_ns, reorder=reorder)
        )


def fake_sq(**fields) -> types.SimpleNamespace:
    """A stand-in for nic.SqSnapshot with these fields, and in_network derived
    from them as the real one does."""
    sq = types.SimpleNamespace(**({"acked_n": None, "retx_pending_n": None} | fields))
    sq.acked_count = nic.SqSnapshot.acked_count.fget(sq)
    sq.in_network = nic.SqSnapshot.in_network.fget(sq)
    return sq


def snapshot(**kw):
    """The nic.SqSnapshot fields the top-up reads: an idle QP by default."""
    base = dict(in_flight=0, acked=[], retx_pending=[], cwnd=1, window=1024, retx_queue=0)
    return fake_sq(**(base | {"wqe_sent": 0} | kw))


@dataclasses.dataclass(kw_only=True)
class PostingQp(supervisor.Supervised):
    """A supervised send QP and the WQEs its application posted."""

    posted: int = 0


def top_up(maps, sq, snap, now: float) -> None:
    """The top-up as the daemon runs it: work is a WQE posted and not sent."""
    supervisor.top_up(maps, sq, snap, now, work=snap.wqe_sent < sq.posted)


def job_and_qp() -> tuple[None, KickRecorder, PostingQp]:
    """Kicks recorded, and a send QP with one WQE posted."""
    return None, KickRecorder(), PostingQp(qp=types.SimpleNamespace(qpn=0x105), posted=1)


@pytest.mark.parametrize("cwnd", [1, 2, 3, 128])
def test_a_qp_with_nothing_in_flight_and_work_posted_is_kicked_whatever_its_window(cwnd):
    """An ACK clock that stopped (nothing in flight, work posted) restarts,
    also at NSCC's floor of one packet, where half a window rounds to 0."""
    job, maps, sq = job_and_qp()
    top_up(maps, sq, snapshot(cwnd=cwnd), now=1.0)
    assert maps.kicks == [(0x105, cwnd)]
    assert sq.last_kick == 1.0


def test_a_full_window_or_no_work_is_not_kicked():
    job, maps, sq = job_and_qp()
    top_up(maps, sq, snapshot(cwnd=4, in_flight=3), now=1.0)  # 3 of 4 live: the clock runs
    sq.posted = 0
    top_up(maps, sq, snapshot(cwnd=4), now=1.0)  # nothing to send
    assert maps.kicks == []


def test_source_data_is_reproducible_and_differs_per_write_and_block():
    """WRITEs get distinct bytes at every 1 KiB element (a misplaced packet
    shows in --verify), the same for the same seed."""
    size = writeplan.POOL_BYTES + 64 * 1024  # two blocks
    a = writeplan.chunk_data(7, 0, 1, size)
    assert len(a) == size and a == writeplan.chunk_data(7, 0, 1, size)
    others = [
        writeplan.chunk_data(7, 0, 2, size),  # another WRITE
        writeplan.chunk_data(7, 1, 1, size),  # another QP
        writeplan.chunk_data(8, 0, 1, size),  # another seed
        a[writeplan.POOL_BYTES :] + a[: writeplan.POOL_BYTES],  # its other block
    ]
    for other in others:
        same = sum(a[i : i + 1024] == other[i : i + 1024] for i in range(0, 1 << 20, 1024))
        assert same == 0
    assert writeplan.chunk_data(7, 0, 1, 0) == b""


REO_WND_NS = 1_000_000


def acks_state(
    sacks: int,
    *,
    out: int = 20,
    rtt: tuple[int, int] = (0, 0),
    reo=REO_WND_NS,
    recent=0,
    learned=0,
):
    """The fields the reorder timer reads: `out` PSNs in the network, none acked."""
    return fake_sq(
        stats={"sacks": sacks, "nacks": 0},
        cc={"rtt_sum_ns": rtt[0], "rtt_samples": rtt[1]},
        reo_wnd_ns=reo,
        rtt_recent_ns=recent,
        reo_learned_ns=learned,
        in_flight=out,
        acked=[],
        retx_pending=[],
    )


def test_reorder_timer_declares_what_is_left_lost_when_the_ack_clock_stops():
    """SACKs flow: nothing. A tick without any: a timeout kick for what was
    sent a reorder window ago, spending no retry budget; one more a window
    later; then the timeout alone (the peer may be gone), until SACKs again."""
    job, maps, sq = job_and_qp()
    for tick, sacks in enumerate((5, 9, 14)):
        supervisor.reorder_timer(maps, sq, acks_state(sacks), now=1.0 + tick * 1e-3)
    assert maps.timeout_kicks == []
    supervisor.reorder_timer(maps, sq, acks_state(14), now=1.003)  # the clock stopped
    # a reorder kick: what it resends is overdue, its EVs only suspected
    assert maps.timeout_kicks == [
        dict(qpn=0x105, packets=20, max_psns=20, age_ns=REO_WND_NS, reorder=True)
    ]
    supervisor.reorder_timer(maps, sq, acks_state(14), now=1.0035)  # within a reorder window of it
    assert len(maps.timeout_kicks) == 1
    for now in (1.004, 1.005, 1.006, 1.5):
        supervisor.reorder_timer(maps, sq, acks_state(14), now=now)
    assert len(maps.timeout_kicks) == 2, "at most two per stall"
    assert sq.reorder_kicks == 2 and sq.timeouts == 0 and sq.attempt == 0
    supervisor.reorder_timer(maps, sq, acks_state(15), now=1.6)  # a SACK: armed again
    supervisor.reorder_timer(maps, sq, acks_state(15), now=1.601)
    assert len(maps.timeout_kicks) == 3


def test_reorder_timer_waits_for_queues_and_stays_off_without_a_window():
    job, maps, sq = job_and_qp()
    # SACKs took 800 us each over the last tick: packets wait twice that.
    supervisor.reorder_timer(maps, sq, acks_state(5, rtt=(1_000_000, 10)), now=1.0)
    supervisor.reorder_timer(maps, sq, acks_state(9, rtt=(5_000_000, 15)), now=1.001)
    supervisor.reorder_timer(maps, sq, acks_state(9, rtt=(5_000_000, 15)), now=1.002)
    assert [k["age_ns"] for k in maps.timeout_kicks] == [1_600_000]
    # A recent round trip of 3 ms (a slower path's queue): its packets may be
    # out that long plus a round trip before they are late.
    job, maps, sq = job_and_qp()
    supervisor.reorder_timer(maps, sq, acks_state(5, rtt=(1_000_000, 10)), now=1.0)
    supervisor.reorder_timer(
        maps, sq, acks_state(9, rtt=(5_000_000, 15), recent=3_000_000), now=1.001
    )
    supervisor.reorder_timer(
        maps, sq, acks_state(9, rtt=(5_000_000, 15), recent=3_000_000), now=1.002
    )
    assert [k["age_ns"] for k in maps.timeout_kicks] == [3_800_000]
    # The NIC learned from duplicates that packets here come 5 ms late: only
    # what went out 5 ms ago or more is resent.
    job, maps, sq = job_and_qp()
    supervisor.reorder_timer(maps, sq, acks_state(5, rtt=(1_000_000, 10)), now=1.0)
    supervisor.reorder_timer(maps, sq, acks_state(9, learned=5_000_000), now=1.001)
    supervisor.reorder_timer(maps, sq, acks_state(9, learned=5_000_000), now=1.002)
    assert [k["age_ns"] for k in maps.timeout_kicks] == [5_000_000]
    job, maps, sq = job_and_qp()
    for now, sacks in ((1.0, 5), (1.001, 5), (1.01, 5)):
        supervisor.reorder_timer(maps, sq, acks_state(sacks, reo=0), now=now)
    supervisor.reorder_timer(maps, sq, acks_state(6, out=0), now=1.02)
    supervisor.reorder_timer(maps, sq, acks_state(6, out=0), now=1.03)  # nothing in the network
    assert maps.timeout_kicks == []


# ---- stalled queues: the head counters live in the application's memory --------------------


def stall_qp(timeout_s: float = 0.004, linear: int = 1, exp: int = 1) -> supervisor.Supervised:
    attrs = types.SimpleNamespace(timeout_s=timeout_s, retry=Retry(linear, exp))
    return supervisor.Supervised(qp=types.SimpleNamespace(qpn=0x105, attrs=attrs))


def queue(sent: int, done: int, una: int = 0, in_flight: int = 0):
    return types.SimpleNamespace(
        wqe_sent=sent, wqe_done=done, snd_una=una, snd_nxt=una + in_flight, in_flight=in_flight
    )


@pytest.mark.parametrize(
    ("head", "sent", "done", "fault"),
    [
        ((10, 10), 10, 10, None),  # idle
        ((14, 10), 12, 10, None),  # 4 posted, 2 sent
        ((10, 7), 10, 10, None),  # done read before the NIC wrote it: a later tick mends it
        ((50, 10), 12, 10, "posted 50 is not within the queue's 32 WQEs past done 10"),
        ((10, 15), 10, 10, "posted 10 is not within"),  # done past posted wraps: far ahead
        ((12, 11), 12, 10, "done 11 is past the 10 WQEs the NIC completed"),
    ],
)
def test_a_head_that_cannot_be_right_is_named(head, sent, done, fault):
    got = supervisor.head_fault(head, queue(sent, done), 32, same=False)
    assert got == fault if fault is None else fault in got


def test_a_lagging_done_or_posted_is_a_fault_only_when_nothing_moved():
    lag = ((10, 7), queue(10, 10))
    assert supervisor.head_fault(*lag, 32, same=False) is None
    assert "done 7 is not the 10 WQEs the NIC completed" in supervisor.head_fault(*lag, 32, True)
    behind = ((11, 10), queue(12, 10))  # posted 11, the NIC sent 12
    assert supervisor.head_fault(*behind, 32, same=False) is None
    assert "behind the 12 WQEs" in supervisor.head_fault(*behind, 32, same=True)


def test_an_inconsistent_queue_fails_after_its_timeout_and_a_good_one_never():
    bad, good = stall_qp(), stall_qp()
    for t in range(20):  # 1 ms ticks
        now = 1.0 + t / 1000
        assert supervisor.stalled(good, queue(10, 10), (10, 10), now, 32) is None
        why = supervisor.stalled(bad, queue(10, 10), (10, 40), now, 32)
        if why is not None:
            break
    assert why is not None and 0.004 < now - 1.0 <= 0.006, "failed one timeout after"
    assert why.startswith("send queue stalled: its head counters are inconsistent")
    assert "(posted 10, done 40; the NIC sent 10, completed 10)" in why


def test_posted_work_that_never_moves_fails_after_the_whole_retry_budget():
    sq = stall_qp(timeout_s=0.01, linear=1, exp=2)  # 10 + 20 + 40 ms
    assert supervisor.retry_budget_s(sq.qp.attrs.retry, 0.01) == pytest.approx(0.07)
    now, why = 1.0, None
    while why is None and now < 2.0:
        why = supervisor.stalled(sq, queue(10, 10), (12, 10), now, 32)  # 2 posted, none sent
        now += 0.001
    assert 1.07 < now < 1.075
    assert "2 WQEs posted and not sent" in why
    out = stall_qp(timeout_s=0.01, linear=1, exp=2)  # packets out: the timeout's case
    assert all(
        supervisor.stalled(out, queue(10, 10, in_flight=5), (12, 10), 1 + i / 100, 32) is None
        for i in range(50)
    )
    forever = stall_qp(linear=7, exp=25)  # 25: retry for ever
    assert supervisor.retry_budget_s(forever.qp.attrs.retry, 0.01) is None
    assert all(
        supervisor.stalled(forever, queue(10, 10), (12, 10), 1 + i, 32) is None for i in range(9)
    )


def test_progress_resets_the_stall_clock():
    sq = stall_qp(timeout_s=0.01, linear=1, exp=0)  # budget 10 ms
    for i in range(100):  # a WQE sent every 5 ms: never stalled
        assert supervisor.stalled(sq, queue(10 + i // 5, 10), (40, 10), 1 + i / 1000, 32) is None
