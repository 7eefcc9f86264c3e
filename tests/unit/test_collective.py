"""The ring all-reduce (workloads.collective): its schedule and its checks, no root
(a small job in a real lab is in tests/lab/test_collective.py)."""

from __future__ import annotations

import threading
import time

import pytest

from mrc_nic.workloads import collective
from mrc_nic.workloads.collective import PHASES, Send

MIB = 2**20

# ---- the schedule, no root -------------------------------------------------------------------


def test_chunks_cover_the_buffer_as_evenly_as_can_be():
    assert collective.chunk_sizes(80, 8) == [10] * 8
    sizes = collective.chunk_sizes(83, 8)
    assert sum(sizes) == 83 and max(sizes) - min(sizes) == 1
    assert sizes[:3] == [11, 11, 11] and sizes[3:] == [10] * 5
    with pytest.raises(ValueError, match="at least 2 hosts"):
        collective.chunk_sizes(100, 1)
    with pytest.raises(ValueError, match="cannot be cut"):
        collective.chunk_sizes(3, 4)


def test_eight_hosts_take_14_steps_each_sending_one_chunk_to_the_next_host():
    n, total = 8, 64 * MIB
    steps = collective.ring_schedule(n, total)
    assert len(steps) == 2 * (n - 1)
    for i, step in enumerate(steps):
        assert [t.step for t in step] == [i] * n
        assert [t.phase for t in step] == [PHASES[0] if i < n - 1 else PHASES[1]] * n
        assert [t.src for t in step] == list(range(n))
        assert [t.dst for t in step] == [(r + 1) % n for r in range(n)]
        assert sorted(t.chunk for t in step) == list(range(n))  # every chunk moves once
        assert all(t.size == total // n for t in step)


def test_which_chunk_goes_where():
    steps = collective.ring_schedule(4, 4000)
    chunks = [[t.chunk for t in step] for step in steps]  # chunk sent by rank 0..3
    assert chunks == [
        [0, 1, 2, 3],  # reduce-scatter: rank r sends its own chunk r first,
        [3, 0, 1, 2],  # then the chunk it has just received and added to
        [2, 3, 0, 1],
        [1, 2, 3, 0],  # all-gather: rank r sends chunk r+1, the one it completed,
        [0, 1, 2, 3],  # then the completed chunk it has just received
        [3, 0, 1, 2],
    ]
    # Each rank sends in step s+1 what it received in step s (the ring's dependency).
    for s in range(len(steps) - 1):
        for t in steps[s]:
            assert steps[s + 1][t.dst].chunk == t.chunk


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_every_host_ends_with_every_chunk_reduced_from_every_host(n):
    steps = collective.ring_schedule(n, 1000 * n)
    everyone = frozenset(range(n))
    held = collective.simulate(n, steps[: n - 1])
    for r in range(n):  # after reduce-scatter: rank r holds chunk r+1 complete
        assert held[r][(r + 1) % n] == everyone
        assert sum(held[r][c] == everyone for c in range(n)) == 1
    held = collective.simulate(n, steps)
    assert all(held[r][c] == everyone for r in range(n) for c in range(n))


def test_a_wrong_schedule_is_caught():
    n = 4
    steps = collective.ring_schedule(n, 4000)
    # All-gather one step early: a chunk reduced from 3 of 4 hosts would be gathered.
    early = steps[: n - 2] + steps[n - 1 :]
    with pytest.raises(ValueError, match="gathers chunk"):
        collective.simulate(n, early)
    # The same reduce-scatter step twice: contributions added twice.
    twice = [steps[0], [Send(1, PHASES[0], t.src, t.dst, t.chunk, t.size) for t in steps[0]]]
    with pytest.raises(ValueError, match="twice"):
        collective.simulate(n, twice)


def test_each_host_sends_2_n_minus_1_over_n_of_the_buffer():
    assert collective.bytes_sent(8, 64 * MIB) == [64 * MIB * 14 // 8] * 8
    assert collective.bytes_sent(3, 10) == [14, 13, 13]  # chunks 4, 3, 3: rank 0 sends 0 twice


def test_ring_edges():
    assert collective.ring_edges(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    with pytest.raises(ValueError, match="twice"):
        collective.ring_edges(["a", "b", "a"])


def test_events_fire_at_their_time_or_step_and_the_rest_are_said():
    fired: list[str] = []
    lock = threading.Lock()

    def mark(label: str):
        def fn() -> str:
            with lock:
                fired.append(label)
            return label

        return fn

    ev = collective.EventTimer(
        [(0.05, mark("t0.05"))],
        [(1, 0.02, mark("step1+0.02")), (5, 0.0, mark("step5"))],
    )
    t0 = time.monotonic()
    ev.start(t0)
    time.sleep(0.1)
    ev.anchor(1, time.monotonic())
    time.sleep(0.1)
    log = ev.stop()
    assert fired == ["t0.05", "step1+0.02"]
    done = [e for e in log if "result" in e]
    assert done[0]["done_s"] >= 0.05 and done[1]["called_s"] >= 0.12
    (missed,) = [e for e in log if e.get("not_reached")]
    assert missed["step"] == 5


def test_a_job_that_did_not_finish_says_so():
    job = collective.JobResult("tcp", ["h0", "h1", "h2"], 3000, 4, 20.0)
    job.steps.append(collective.StepResult(0, PHASES[0], 0.0, 1.5, 3000))
    assert job.algbw_bps is None
    assert job.progress() == [(0.0, 0), (1.5, 3000)]
    assert "did not finish within 20 s (1/4 steps)" in job.summary()
    job.steps += [collective.StepResult(i, PHASES[i // 2], i, i + 1.0, 3000) for i in (1, 2, 3)]
    job.completed, job.job_s = True, 4.0
    assert job.algbw_bps == 3000 * 8 / 4.0
    assert job.busbw_bps == pytest.approx(job.algbw_bps * 4 / 3)
    assert job.to_dict()["steps"][0]["seconds"] == 1.5
