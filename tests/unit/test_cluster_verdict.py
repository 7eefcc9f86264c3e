"""A cluster lab's fidelity verdict (cluster.verdict): each machine judged
between two of its own samples, then one verdict over the machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrc_nic.cluster import verdict
from mrc_nic.lab import topology
from mrc_nic.observe import fidelity

NETNS = Path(__file__).resolve().parents[2] / "netns"


@pytest.fixture(scope="module")
def topo():
    return topology.load(NETNS / "default.toml")


def _sample(topo, busy: float, seconds: float, link_share: dict[tuple[str, str], float], at: float):
    """An encoded sample `seconds` after a zero one: 2 cores `busy` of the
    time, and each (link, dir) having sent `link_share` of its rate."""
    rates = {(d[0], d[1]): d[4] for d in fidelity.link_directions(topo)}
    total = int(seconds * 100)
    cores = [(int(total * busy), 0, total)] * 2
    queues = {}
    for key, rate in rates.items():
        sent = int(rate * link_share.get(key, 0.0) * seconds / 8)
        queues[key] = (sent, sent // 1000 + (1000 if key in link_share else 0), 0, at)
    raw = (fidelity.CpuSample(cores, [(0, 0)] * 2), fidelity.LinkSample(queues, 0, at))
    return fidelity.raw_to_json(raw, (1.5, 1.0, 0.5))


def _zero(topo):
    return _sample(topo, 0.0, 0.0, {}, 0.0)


def test_a_sample_survives_json(topo):
    import json

    enc = _sample(topo, 0.5, 2.0, {("p0.t0a-h0", "up"): 0.9}, 2.0)
    cpu, links = fidelity.raw_from_json(json.loads(json.dumps(enc)))
    assert cpu.cores[0] == (100, 0, 200)
    assert links.queues[("p0.t0a-h0", "up")][3] == 2.0
    assert enc["load_avg"] == [1.5, 1.0, 0.5]


def test_each_machine_is_judged_on_its_own_links_and_cpu(topo):
    before = {0: _zero(topo), 1: _zero(topo)}
    after = {
        0: _sample(topo, 0.3, 2.0, {("p0.t0a-h0", "up"): 0.95}, 2.0),  # at line rate
        1: _sample(topo, 0.3, 2.0, {("p0.t0b-h1", "down"): 0.4}, 2.0),  # below it, CPU idle
    }
    fid = verdict.judge_machines(topo, before, after)
    assert fid["parts"]["m0"]["verdict"] == "links"
    assert fid["parts"]["m1"]["verdict"] == "application"
    # One machine at line rate beside one that carried less: the lab is link-bound
    # (fidelity.combine, for parts of a run one after the other, would say application).
    assert fid["verdict"] == "links" and fid["busiest_link"] == 0.95
    assert fidelity.combine(fid["parts"])["verdict"] == "application"
    assert fid["parts"]["m1"]["load_avg"] == [1.5, 1.0, 0.5]  # the machine's own
    assert fidelity.summary(fid).startswith("fidelity: links-bound: m0: links")


def test_a_machine_the_cpu_bound_makes_the_lab_cpu_bound(topo):
    before = {0: _zero(topo), 1: _zero(topo)}
    after = {
        0: _sample(topo, 0.3, 2.0, {("p0.t0a-h0", "up"): 0.95}, 2.0),
        1: _sample(topo, 0.97, 2.0, {("p0.t0b-h1", "down"): 0.5}, 2.0),
    }
    fid = verdict.judge_machines(topo, before, after)
    assert fid["parts"]["m1"]["verdict"] == "cpu"
    assert fid["verdict"] == "cpu" and fid["cpu_saturated"]


def test_idle_machines_and_missing_samples(topo):
    idle = verdict.judge_machines(
        topo, {0: _zero(topo), 1: _zero(topo)}, {0: _sample(topo, 0.1, 1.0, {}, 1.0)}
    )
    assert list(idle["parts"]) == ["m0"]  # m1 answered only once: not judged
    assert idle["verdict"] == "application"
    assert verdict.judge_machines(topo, {0: _zero(topo)}, {1: _zero(topo)}) is None
