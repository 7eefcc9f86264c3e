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
    sq = types.SimpleNamespace(**fields)
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
    sacks: int, *, out: int = 20, rtt: tuple[int, int] = (0, 0), reo=REO_WND_NS, recent=0
):
    """The fields the reorder timer reads: `out` PSNs in the network, none acked."""
    return fake_sq(
        stats={"sacks": sacks, "nacks": 0},
        cc={"rtt_sum_ns": rtt[0], "rtt_samples": rtt[1]},
        reo_wnd_ns=reo,
        rtt_recent_ns=recent,
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
    job, maps, sq = job_and_qp()
    for now, sacks in ((1.0, 5), (1.001, 5), (1.01, 5)):
        supervisor.reorder_timer(maps, sq, acks_state(sacks, reo=0), now=now)
    supervisor.reorder_timer(maps, sq, acks_state(6, out=0), now=1.02)
    supervisor.reorder_timer(maps, sq, acks_state(6, out=0), now=1.03)  # nothing in the network
    assert maps.timeout_kicks == []
