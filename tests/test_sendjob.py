"""sendjob's decisions that need no lab: here, when a stalled ACK clock is restarted."""

from __future__ import annotations

import types

import pytest

from mrc_nic import sendjob


class KickRecorder:
    def __init__(self) -> None:
        self.kicks: list[tuple[int, int]] = []

    def kick(self, qpn: int, packets: int, **_) -> None:
        self.kicks.append((qpn, packets))


def snapshot(**kw):
    """The nic.SqSnapshot fields _top_up reads: an idle QP by default."""
    base = dict(in_flight=0, acked=[], retx_pending=[], cwnd=1, window=1024, retx_queue=0)
    return types.SimpleNamespace(**(base | {"wqe_sent": 0} | kw))


def job_and_qp() -> tuple[sendjob.Job, KickRecorder, types.SimpleNamespace]:
    """A Job that records its kicks, and a send QP with one WQE posted."""
    maps = KickRecorder()
    job = sendjob.Job.__new__(sendjob.Job)
    job.maps = maps
    sq = types.SimpleNamespace(qp=types.SimpleNamespace(qpn=0x105), wqe_base=0, posted=1)
    sq.last_kick = 0.0
    return job, maps, sq


@pytest.mark.parametrize("cwnd", [1, 2, 3, 128])
def test_a_qp_with_nothing_in_flight_and_work_posted_is_kicked_whatever_its_window(cwnd):
    """An ACK clock that stopped (nothing in flight, work posted) restarts,
    also at NSCC's floor of one packet, where half a window rounds to 0."""
    job, maps, sq = job_and_qp()
    job._top_up(sq, snapshot(cwnd=cwnd), now=1.0)
    assert maps.kicks == [(0x105, cwnd)]
    assert sq.last_kick == 1.0


def test_a_full_window_or_no_work_is_not_kicked():
    job, maps, sq = job_and_qp()
    job._top_up(sq, snapshot(cwnd=4, in_flight=3), now=1.0)  # 3 of 4 live: the clock runs
    sq.posted = 0
    job._top_up(sq, snapshot(cwnd=4), now=1.0)  # nothing to send
    assert maps.kicks == []


def test_source_data_is_reproducible_and_differs_per_write_and_block():
    """WRITEs get distinct bytes at every 1 KiB element (a misplaced packet
    shows in --verify), the same for the same seed."""
    size = sendjob.POOL_BYTES + 64 * 1024  # two blocks
    a = sendjob.chunk_data(7, 0, 1, size)
    assert len(a) == size and a == sendjob.chunk_data(7, 0, 1, size)
    others = [
        sendjob.chunk_data(7, 0, 2, size),  # another WRITE
        sendjob.chunk_data(7, 1, 1, size),  # another QP
        sendjob.chunk_data(8, 0, 1, size),  # another seed
        a[sendjob.POOL_BYTES :] + a[: sendjob.POOL_BYTES],  # its other block
    ]
    for other in others:
        same = sum(a[i : i + 1024] == other[i : i + 1024] for i in range(0, 1 << 20, 1024))
        assert same == 0
    assert sendjob.chunk_data(7, 0, 1, 0) == b""
