"""The ring all-reduce in a real lab, on MRC and on TCP, through a plane
blackhole (the schedule and its checks are in tests/unit/test_collective.py)."""

from __future__ import annotations

import pytest

from mrc_nic.workloads import collective, collective_sockets

MIB = 2**20

RING4_TOML = """
[lab]
name = "ring4"

[fabric]
hosts = 4
planes = 2
tiers = 2
t0_per_plane = 2
t1_per_plane = 2
hosts_per_t0 = 2

[links]
rate = "1gbit"
mtu = 1500
buffer = "256KiB"
"""


@pytest.fixture
def ring_lab(make_lab, tmp_path):
    path = tmp_path / "ring4.toml"
    path.write_text(RING4_TOML)
    return make_lab("ar", str(path))


def _check_complete(job: collective.JobResult, n: int, total: int) -> None:
    assert job.completed, job.summary()
    assert job.error is None
    assert [s.step for s in job.steps] == list(range(2 * (n - 1)))
    sizes = collective.chunk_sizes(total, n)
    for step, planned in zip(job.steps, collective.ring_schedule(n, total), strict=True):
        assert [(e["src"], e["dst"], e["chunk"]) for e in step.edges] == [
            (t.src, t.dst, t.chunk) for t in planned
        ]
        assert [e["bytes"] for e in step.edges] == [sizes[t.chunk] for t in planned]
        assert step.end_s >= step.start_s
    assert job.bytes_moved == sum(collective.bytes_sent(n, total))
    assert job.job_s == job.steps[-1].end_s


@pytest.mark.slow
def test_small_all_reduce_is_byte_exact_on_mrc_and_tcp_and_survives_a_plane_blackhole(ring_lab):
    from mrc_nic.fabric import faults

    topo, hosts = ring_lab, ring_lab.host_names()
    n, total = len(hosts), 8 * MIB + 3 * 1024 + 1  # uneven chunks
    with collective.MrcRing(topo.lab, hosts, total) as ring:
        job = ring.run(limit_s=120, verify=True)
    _check_complete(job, n, total)
    for step in job.steps:
        for e in step.edges:
            assert e["completed"] and e["verified"] is True, e  # compared byte for byte

    tcp = collective_sockets.socket_ring(topo, hosts, total, proto="tcp", limit_s=120)
    _check_complete(tcp, n, total)

    # Plane 0 blackholed from step 2 on, until the job ends: mrc-nic sprays over
    # plane 1 as well and ends byte-exact; TCP's only path is plane 0.
    applied: list[int] = []

    def fail() -> int:
        applied.append(faults.apply(topo.lab, ("plane", "0"), faults.FaultSpec("blackhole"))["id"])
        return applied[-1]

    try:
        with collective.MrcRing(topo.lab, hosts, total) as ring:
            job = ring.run(limit_s=120, verify=True, step_events=[(2, 0.0, fail)])
    finally:
        faults.heal(topo.lab, applied)
    assert [e.get("step") for e in job.events if "result" in e] == [2]
    _check_complete(job, n, total)
    assert all(e["verified"] is True for s in job.steps for e in s.edges)
    after = [e["per_plane_share"] for s in job.steps[3:] for e in s.edges]
    assert all(share.get("0", 0.0) < 0.25 for share in after), after  # plane 1 carried it

    applied.clear()
    try:
        tcp = collective_sockets.socket_ring(
            topo, hosts, total, proto="tcp", limit_s=6, step_events=[(2, 0.0, fail)]
        )
    finally:
        faults.heal(topo.lab, applied)
    # A TCP step moves 2 MiB in tens of ms, so the fault can land after step 2
    # is already done: every step that started after it landed must stall.
    landed = [e["done_s"] for e in tcp.events if "result" in e]
    assert len(landed) == 1, tcp.events
    assert not tcp.completed and tcp.error, tcp.summary()
    assert 2 <= len(tcp.steps) < 2 * (n - 1), tcp.summary()
    assert all(s.start_s < landed[0] for s in tcp.steps), (landed, tcp.summary())
    assert f"did not finish within 6 s ({len(tcp.steps)}/6 steps)" in tcp.summary()
