"""Placement of a lab over machines, and which command lines go to a cluster lab."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrc_nic.cluster import placement, route
from mrc_nic.lab import state, topology

NETNS = Path(__file__).resolve().parents[2] / "netns"
TWO = ["10.0.0.1", "10.0.0.2"]


def topo(name: str = "default.toml", **cluster) -> topology.Topology:
    t = topology.load(NETNS / name, lab="pl")
    if cluster:
        raw = {**t.raw, "cluster": cluster}
        t = topology.from_dict(t.path, raw, "pl")
    return t


def test_a_host_and_its_t0s_share_a_machine_and_only_t0_t1_links_are_cut():
    t = topo()
    p = placement.place(t, TWO)
    for h in ("h0", "h1"):
        m = p.node_machine[h]
        for lk in t.links_of(h):
            assert p.node_machine[lk.upper.node] == m
    assert {p.node_machine["h0"], p.node_machine["h1"]} == {0, 1}
    assert p.vnis and all(t.links[name].kind == "fabric" for name in p.vnis)
    cut = {lk.name for lk in t.links.values() if len(p.machines_of_link(t, lk.name)) == 2}
    assert cut == set(p.vnis)
    assert len(set(p.vnis.values())) == len(p.vnis)
    assert all(0 < v < 2**24 for v in p.vnis.values())


def test_shard_records_pair_up_the_tunnel_ends():
    t = topo()
    p = placement.place(t, TWO)
    a, b = (p.shard_record(t, m) for m in (0, 1))
    assert set(a["tunnels"]) == set(b["tunnels"]) == set(p.vnis)
    for name, end in a["tunnels"].items():
        assert (end["local"], end["remote"]) == (TWO[0], TWO[1])
        assert b["tunnels"][name]["vni"] == end["vni"]
    assert sorted(a["nodes"] + b["nodes"]) == sorted(t.nodes)
    shard = state.shard_from_record(a)
    t.shard = shard
    assert t.is_here("h0") and not t.is_here("h1")
    assert t.all_netns() == [t.netns(n) for n in t.nodes if n in shard.nodes]
    assert t.host_names() == ["h0", "h1"]  # a peer on another machine is still a host


def test_one_machine_cuts_nothing():
    p = placement.place(topo(), TWO[:1])
    assert p.vnis == {} and set(p.node_machine.values()) == {0}


def test_a_pinned_host_takes_its_t0s_and_a_spine_goes_where_pinned():
    t = topo(place={"h0": 1, "p0.t1a": "10.0.0.2"})
    p = placement.place(t, TWO)
    assert p.node_machine["h0"] == 1 and p.node_machine["p3.t0a"] == 1
    assert p.node_machine["p0.t1a"] == 1


@pytest.mark.parametrize(
    ("cluster", "fragment"),
    [
        ({"place": {"h0": 0, "p1.t0a": 1}}, "share a machine"),
        ({"place": {"h9": 0}}, "no node 'h9'"),
        ({"place": {"h0": 5}}, "not a machine of the cluster"),
        ({"machines": 3}, "3, but the cluster has 2"),
    ],
)
def test_bad_placements_say_what_to_fix(cluster, fragment):
    with pytest.raises(placement.PlacementError, match=fragment):
        placement.place(topo(**cluster), TWO)


def test_the_cluster_section_is_checked_like_any_other():
    with pytest.raises(topology.TopologyError, match="cluster.nodes: unknown key"):
        topo(nodes=2)


def test_commands_go_to_a_cluster_lab_only_when_its_record_is_here(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "RUN_DIR", tmp_path)
    monkeypatch.delenv(route.AGENT_ENV, raising=False)
    monkeypatch.delenv("MRC_NIC_LAB", raising=False)
    assert route.cluster_command(["status", "-l", "big"]) is None
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / route.FILE).write_text("{}")
    assert route.cluster_command(["status", "-l", "big"]) == ("big", ["status"])
    assert route.cluster_command(["exec", "h0", "--", "ls", "-l", "x"]) == (
        "big",
        ["exec", "h0", "--", "ls", "-l", "x"],
    )
    assert route.cluster_command(["status", "--help"]) is None
    assert route.cluster_command(["up", "-l", "big"]) is None
    # A scenario with --topology brings up a lab of its own here.
    assert route.cluster_command(["scenario", "incast", "-l", "big"])[0] == "big"
    assert route.cluster_command(["scenario", "incast", "--topology", "clos-8"]) is None
    monkeypatch.setenv(route.AGENT_ENV, "1")  # an agent: the machine's own shard
    assert route.cluster_command(["status", "-l", "big"]) is None


def test_a_cluster_lab_is_routed_with_l_before_or_after_the_command(tmp_path, monkeypatch):
    from mrc_nic.cluster import route
    from mrc_nic.lab import state

    monkeypatch.setattr(state, "RUN_DIR", tmp_path)
    monkeypatch.delenv(route.AGENT_ENV, raising=False)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / route.FILE).write_text("{}")
    assert route.cluster_command(["status", "-l", "big"]) == ("big", ["status"])
    assert route.cluster_command(["-l", "big", "status"]) == ("big", ["status"])
    assert route.cluster_command(["--lab=big", "status"]) == ("big", ["status"])
    # --format before the command too (mrc_nic.cli.app): it follows the command
    assert route.cluster_command(["--format", "json", "-l", "big", "status"]) == (
        "big",
        ["status", "--format", "json"],
    )
    assert route.cluster_command(["-l", "other", "status"]) is None  # a local lab
    assert route.cluster_command(["up", "-l", "big"]) is None  # up builds; never routed
