"""The chaos schedule without a lab: its checks, its draws, its bound on
planes, and that it heals what it applied (faults.apply/heal replaced by a
recorder that enforces what the real ones do: one fault per link)."""

from __future__ import annotations

import pytest

from mrc_nic.lab import topology
from mrc_nic.workloads import chaos
from tests.helpers.env import NETNS_DIR


@pytest.fixture(scope="module")
def topo():
    return topology.load(NETNS_DIR / "default.toml")


class FakeLab:
    """faults.apply / faults.heal / open_lab for one lab, in memory."""

    def __init__(self, topo):
        self.topo = topo
        self.faults: dict[str, dict] = {}
        self.next_id = 1
        self.max_planes_seen = 0

    def apply(self, lab, target, spec):
        label, links = chaos.faults.resolve_target(self.topo, target)
        busy = {name for f in self.faults.values() for name in f["links"]}
        if busy & {lk.name for lk in links}:
            raise chaos.faults.FaultError("busy")
        fault = {"id": self.next_id, "target": label, "links": [lk.name for lk in links]}
        fault["planes"] = {lk.plane for lk in links}
        self.faults[str(self.next_id)] = fault
        self.next_id += 1
        planes = {p for f in self.faults.values() for p in f["planes"]}
        self.max_planes_seen = max(self.max_planes_seen, len(planes))
        return fault

    def heal(self, lab, ids=None, **kw):
        return [self.faults.pop(str(i)) for i in ids]

    def open_lab(self, lab):
        class Record:
            faults = self.faults

        return Record(), self.topo


@pytest.fixture
def lab(monkeypatch, topo):
    fake = FakeLab(topo)
    monkeypatch.setattr(chaos.faults, "apply", fake.apply)
    monkeypatch.setattr(chaos.faults, "heal", fake.heal)
    monkeypatch.setattr(chaos, "open_lab", fake.open_lab)
    return fake


def spec(**kw):
    return chaos.ChaosSpec(**{"duration": 1.0, "every": 0.1, "hold": 0.3, **kw})


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"kinds": ("meteor",)}, "unknown fault kind meteor"),
        ({"kinds": ()}, "unknown fault kind"),
        ({"max_planes": 4}, "--max-planes must be 1..3"),
        ({"max_planes": 0}, "--max-planes must be 1..3"),
        ({"every": 0.001}, "--every must be at least 20ms"),
        ({"duration": 0}, "--duration must be positive"),
        ({"hold": 0}, "--hold must be positive"),
        ({"loss_rate": 1.5}, "--loss-rate"),
        ({"src": "h7"}, "no host 'h7'"),
    ],
)
def test_bad_specs_are_refused_with_what_to_do(topo, kw, message):
    with pytest.raises(chaos.ChaosError, match=message):
        spec(**kw).validate(topo)


@pytest.mark.parametrize("max_planes", [1, 2, 3])
def test_schedule_keeps_to_max_planes_and_heals_all(lab, topo, max_planes):
    s = chaos.Schedule("x", topo, spec(max_planes=max_planes, kinds=tuple(chaos.KINDS)))
    for step in range(300):
        s.step(step * 0.1)
    assert lab.max_planes_seen == max_planes  # reached, never passed
    assert len(s.applied) > 50 and s.skipped > 0
    assert {f["kind"] for f in s.applied} == set(chaos.KINDS)
    s.heal_all()
    assert lab.faults == {} and s.active == {}


def test_faults_are_healed_after_hold(lab, topo):
    s = chaos.Schedule("x", topo, spec(hold=0.25, max_planes=3))
    s.step(0.0)
    (first,) = s.applied
    s.step(0.2)
    assert str(first["id"]) in lab.faults
    s.step(0.3)
    assert str(first["id"]) not in lab.faults


def test_same_seed_same_schedule(lab, topo):
    def draws(seed):
        lab.faults.clear()
        s = chaos.Schedule("x", topo, spec(seed=seed, max_planes=2))
        for step in range(40):
            s.step(step * 0.1)
        s.heal_all()
        return [(f["kind"], f["target"], f["at_s"]) for f in s.applied]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_a_fault_the_user_healed_meanwhile_is_not_an_error(lab, topo):
    s = chaos.Schedule("x", topo, spec(max_planes=1))
    s.step(0.0)
    lab.faults.clear()  # `mrc-nic heal --all` by hand
    s.heal_all()
    assert s.active == {}


def test_cli_default_kinds_are_the_workloads(monkeypatch):
    from mrc_nic.cli import chaos_cmds

    assert tuple(chaos_cmds.DEFAULT_KINDS.split(",")) == chaos.DEFAULT_KINDS
