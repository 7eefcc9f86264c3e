"""Which machine runs each node of a lab, and the VXLAN of each link it cuts.

A host and its T0 leaves (one per plane) stay on one machine: the NIC's XDP
program needs veth host ports, and a host's traffic then leaves its machine
only over T0-T1 links. Groups (a T0 index with its hosts) fill the machines in
contiguous blocks; T1 spines go round-robin, so each machine carries part of
every plane. A topology's [cluster] section may say how many machines to use
(`machines`) and pin nodes (`place`: a node to a machine index or address); a
pinned host or T0 takes its whole group along.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from mrc_nic.errors import MrcNicError
from mrc_nic.lab.topology import Topology

VNI_SPAN = 4096  # VNIs a lab may use: more than its links (16 planes x 128 T0-T1 links)
VNI_BLOCKS = 4000  # 4000 x 4096 < 2^24 (a VNI is 24 bits)


class PlacementError(MrcNicError, ValueError):
    """A placement cannot be made: the message names the node and the fix."""


@dataclass
class Placement:
    machines: list[str]  # underlay address of each machine, index = machine number
    node_machine: dict[str, int]
    vnis: dict[str, int] = field(default_factory=dict)  # cross-machine link -> VNI

    def nodes_of(self, machine: int) -> list[str]:
        return sorted(n for n, m in self.node_machine.items() if m == machine)

    def machines_of_link(self, topo: Topology, link: str) -> set[int]:
        lk = topo.links[link]
        return {self.node_machine[lk.upper.node], self.node_machine[lk.lower.node]}

    def shard_record(self, topo: Topology, machine: int) -> dict:
        """What machine `machine` keeps in its lab state (state.shard_from_record)."""
        tunnels = {}
        for name, vni in self.vnis.items():
            ends = [self.node_machine[p.node] for p in topo.links[name].ends()]
            if machine in ends:
                other = ends[1] if ends[0] == machine else ends[0]
                tunnels[name] = {
                    "vni": vni,
                    "local": self.machines[machine],
                    "remote": self.machines[other],
                }
        return {
            "machine": machine,
            "machines": self.machines,
            "nodes": self.nodes_of(machine),
            "tunnels": tunnels,
        }

    def as_dict(self) -> dict:
        return {"machines": self.machines, "place": self.node_machine, "vnis": self.vnis}

    @classmethod
    def from_dict(cls, d: dict) -> Placement:
        return cls(list(d["machines"]), dict(d["place"]), dict(d["vnis"]))


def groups(topo: Topology) -> list[list[str]]:
    """Group k: the hosts under T0 number k and that T0 of every plane."""
    out = []
    for k in range(topo.t0_per_plane):
        hosts = [f"h{h}" for h in range(topo.hosts) if h // topo.hosts_per_t0 == k]
        t0s = [n.name for n in topo.nodes.values() if n.kind == "t0" and n.index == k]
        out.append(hosts + t0s)
    return out


def place(topo: Topology, addresses: list[str]) -> Placement:
    """Place the lab on machines with these underlay addresses (in this order)."""
    cfg = topo.raw.get("cluster", {})
    wanted = cfg.get("machines", len(addresses))
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise PlacementError(f"{topo.path}: cluster.machines: must be an integer >= 1")
    if wanted > len(addresses):
        raise PlacementError(
            f"{topo.path}: cluster.machines = {wanted}, but the cluster has "
            f"{len(addresses)} machine(s) alive; start more Ray nodes or lower it"
        )
    machines = addresses[:wanted]
    pins = {node: _machine_index(topo, node, where, machines) for node, where in _pins(topo)}
    node_machine: dict[str, int] = {}
    grps = groups(topo)
    for k, members in enumerate(grps):
        pinned = {pins[n] for n in members if n in pins}
        if len(pinned) > 1:
            raise PlacementError(
                f"{topo.path}: cluster.place puts {', '.join(n for n in members if n in pins)} "
                "on different machines: a host and its T0s share a machine (the NIC's XDP "
                "needs veth host ports); pin them to one"
            )
        m = pinned.pop() if pinned else k * len(machines) // len(grps)
        node_machine.update(dict.fromkeys(members, m))
    spines = [n for n in topo.nodes.values() if n.kind == "t1"]
    for i, node in enumerate(spines):
        node_machine[node.name] = pins.get(node.name, i % len(machines))
    base = 1 + (zlib.crc32(topo.lab.encode()) % VNI_BLOCKS) * VNI_SPAN
    cut = [
        lk.name
        for lk in topo.links.values()
        if node_machine[lk.upper.node] != node_machine[lk.lower.node]
    ]
    return Placement(machines, node_machine, {name: base + i for i, name in enumerate(cut)})


def _pins(topo: Topology) -> list[tuple[str, object]]:
    pins = topo.raw.get("cluster", {}).get("place", {})
    if not isinstance(pins, dict):
        raise PlacementError(f"{topo.path}: cluster.place: must be a table {{ node = machine }}")
    for node in pins:
        if node not in topo.nodes:
            raise PlacementError(
                f"{topo.path}: cluster.place: no node {node!r} in this topology "
                "(nodes are named like h0, p0.t0a, p1.t1b)"
            )
    return list(pins.items())


def _machine_index(topo: Topology, node: str, where: object, machines: list[str]) -> int:
    if isinstance(where, int) and not isinstance(where, bool) and 0 <= where < len(machines):
        return where
    if isinstance(where, str) and where in machines:
        return machines.index(where)
    raise PlacementError(
        f"{topo.path}: cluster.place.{node}: {where!r} is not a machine of the cluster "
        f"(use 0..{len(machines) - 1} or one of {', '.join(machines)})"
    )


def describe(topo: Topology, placement: Placement) -> list[str]:
    """One line per machine: its address, hosts, switches and links to others."""
    lines = []
    for m, address in enumerate(placement.machines):
        nodes = placement.nodes_of(m)
        hosts = [n for n in nodes if not topo.nodes[n].is_switch]
        tunnels = [name for name in placement.vnis if m in placement.machines_of_link(topo, name)]
        lines.append(
            f"m{m} {address}: {len(nodes)} namespaces (hosts {', '.join(hosts) or 'none'}), "
            f"{len(tunnels)} VXLAN links"
        )
    return lines
