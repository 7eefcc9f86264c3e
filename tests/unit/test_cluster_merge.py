"""A cluster lab's snapshot merged from its machines' (cluster.merge), without Ray.

Each machine's snapshot is made as a machine's Sampler makes it: every link
and switch port of the lab listed, counters only at the ports it holds (a
cut link's up direction on one machine, its down direction on the other),
kernel records only for its own interfaces.
"""

from __future__ import annotations

from pathlib import Path

from mrc_nic.cluster import merge, placement
from mrc_nic.lab import topology
from mrc_nic.observe import aggregate
from mrc_nic.observe.port_table import ZERO

NETNS = Path(__file__).resolve().parents[2] / "netns"
UP = {"admin_up": True, "carrier": True, "queue_drops": 0}


def _machine_snapshot(t, plan, m: int, counted: dict[str, tuple[int, int]]) -> dict:
    """Machine m's snapshot: counted = {link: (up pkts, down pkts)} that m's ports saw."""
    here = {n for n, at in plan.node_machine.items() if at == m}
    links = []
    for lk in t.links.values():
        up, down = counted.get(lk.name, (0, 0))
        links.append(
            {
                "name": lk.name,
                "plane": lk.plane,
                "kind": lk.kind,
                "upper": f"{lk.upper.node}:{lk.upper.ifname}",
                "lower": f"{lk.lower.node}:{lk.lower.ifname}",
                "state": "missing",  # the far end's namespace is on another machine
                "fault": 7 if (lk.name == "p1.t1b-t0a" and m == 0) else None,
                "up": dict(ZERO, pkts=up, bytes=up * 100),
                "down": dict(ZERO, pkts=down, passed_pkts=down, passed_bytes=down * 100),
                "rates": None,
            }
        )
    ports = [
        {
            "node": p.node,
            "ifname": p.ifname,
            "plane": t.nodes[p.node].plane,
            "egress": dict(ZERO, enqueued=1 if p.node in here else 0),
            "kernel": UP if p.node in here else None,
        }
        for p in t.switch_ports()
    ]
    hosts = [
        {
            "name": h,
            "ports": [
                {"ifname": f"eth{i}", "kernel": UP if h in here else None} for i in range(t.planes)
            ],
        }
        for h in t.host_names()
    ]
    qps = [
        {"qpn": 0x10001 + i, "host": h, "send": None, "recv": None}
        for i, h in enumerate(here & {"h0", "h1"})
    ]
    return {
        "schema": 1,
        "lab": "mg",
        "kernel_monotonic_ns": 1,
        "hosts": hosts,
        "links": links,
        "ports": ports,
        "qps": qps,
        "nic": {"counters": {"placed": 10 * (m + 1)}, "rates": None},
    }


def test_merge_takes_each_record_from_its_machine_and_derives_planes_and_paths():
    t = topology.load(NETNS / "default.toml", lab="mg")
    plan = placement.place(t, ["10.0.0.1", "10.0.0.2"])
    cut = next(name for name in plan.vnis)
    snaps = {
        0: _machine_snapshot(t, plan, 0, {cut: (5, 0), "p0.t0a-h0": (9, 0)}),
        1: _machine_snapshot(t, plan, 1, {cut: (0, 3)}),
    }
    snap = merge.merge(t, plan.node_machine, snaps, {(0, 7): 2})
    links = {lk["name"]: lk for lk in snap["links"]}
    # A cut link: its up direction from one machine, its down from the other.
    assert (links[cut]["up"]["pkts"], links[cut]["down"]["pkts"]) == (5, 3)
    # States from both ends' kernel records, each read on its own machine.
    assert {lk["state"] for lk in links.values()} == {"up"}
    assert links["p1.t1b-t0a"]["fault"] == 2  # the cluster's id, not m0's
    # Every switch port and host once, from the machine holding it.
    assert len(snap["ports"]) == len(list(t.switch_ports()))
    assert all(p["egress"]["enqueued"] == 1 for p in snap["ports"])
    assert [(h["name"], h["machine"]) for h in snap["hosts"]] == [
        ("h0", plan.node_machine["h0"]),
        ("h1", plan.node_machine["h1"]),
    ]
    assert sorted(q["host"] for q in snap["qps"]) == ["h0", "h1"]
    assert snap["nic"]["counters"] == {"placed": 30}
    # Planes and paths over the merged links, as a local snapshot works them out.
    assert snap["planes"] == aggregate.planes(t.planes, snap["links"], {"x": {}}, snap["ports"])
    assert snap["planes"][0]["offered"]["pkts"] == 9
    assert snap["planes"][0]["queue"]["enqueued"] == sum(p["plane"] == 0 for p in snap["ports"])
    assert snap["planes"][0]["drops"]["queue"] == 0  # read: both ends' kernel records
    paths = {p["path"]: p for p in snap["paths"]}
    assert len(paths) == len(aggregate.path_defs(t))
    leg = [p for p in paths.values() if p["links"][-1] == cut]
    assert leg and all((p["up"]["pkts"], p["down"]["pkts"]) == (5, 3) for p in leg)


def test_counters_add_field_by_field():
    assert merge.add({"a": 1, "b": {"c": 2}}, {"a": 2, "b": {"c": 3}, "d": 4}) == {
        "a": 3,
        "b": {"c": 5},
        "d": 4,
    }
    assert merge.add(True, False) is True and merge.add(None, 3) == 3
