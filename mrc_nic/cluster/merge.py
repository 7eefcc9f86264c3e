"""One snapshot of a cluster lab from its machines' snapshots (docs/stats-schema.md).

Each machine's `stats --format json` counts what that machine holds: its
switch ports' BPF counters (a cut link's up direction on one machine, its
down direction on the other), its hosts' NICs and QPs, the kernel state of
its own interfaces. A record is taken from the machine that owns it; a
link's counters are added up over the machines; and everything the lab
derives from links and ports (link states, planes, paths) is worked out
again over the merged records with the same code as a local snapshot
(observe.aggregate), so that no section is one machine's view.
"""

from __future__ import annotations

import time

from mrc_nic.lab.topology import Topology
from mrc_nic.observe import aggregate
from mrc_nic.observe.stats import _link_state as link_state


def merge(
    topo: Topology,
    node_machine: dict[str, int],
    snaps: dict[int, dict],
    fault_ids: dict[tuple[int, int], int],
) -> dict:
    """The lab's snapshot from {machine: its snapshot} (the machines that
    answered). fault_ids: (machine, its fault id) -> the cluster's fault id."""
    first = snaps[min(snaps)]
    kernel: dict[str, dict] = {}  # node -> ifname -> the kernel's record, from the node's machine
    hosts, ports, qps = _owned(node_machine, snaps, kernel)
    links = _links(topo, snaps, kernel, fault_ids)
    kernel_read = any(s.get("kernel_monotonic_ns") is not None for s in snaps.values())
    now = time.monotonic_ns()
    return {
        **first,
        "time": time.time(),
        # The machines are read at once; rates divide by this machine's clock
        # (another machine's monotonic clock has another origin).
        "monotonic_ns": now,
        "kernel_monotonic_ns": now if kernel_read else None,
        "interval_s": None,
        "hosts": hosts,
        "links": links,
        "ports": ports,
        "planes": aggregate.planes(topo.planes, links, kernel if kernel_read else {}, ports),
        "paths": aggregate.paths(aggregate.path_defs(topo), links),
        "qps": qps,
        "nic": {"counters": _nic_counters(snaps), "rates": None},
        "filter": {"host": None, "plane": None},
    }


def _owned(
    node_machine: dict[str, int], snaps: dict[int, dict], kernel: dict[str, dict]
) -> tuple[list[dict], list[dict], list[dict]]:
    """(hosts, switch ports, QPs), each from the machine that holds it; fills
    `kernel` with the kernel records of their interfaces."""
    hosts, ports, qps = [], [], []
    for m, snap in sorted(snaps.items()):
        for port in snap.get("ports", []):
            if node_machine.get(port["node"]) == m:
                ports.append(port)
                kernel.setdefault(port["node"], {})[port["ifname"]] = port.get("kernel")
        for host in snap.get("hosts", []):
            if node_machine.get(host["name"]) == m:
                hosts.append({**host, "machine": m})
                for port in host["ports"]:
                    kernel.setdefault(host["name"], {})[port["ifname"]] = port.get("kernel")
        qps += [dict(q, machine=m) for q in snap.get("qps", []) if node_machine.get(q["host"]) == m]
    order = {name: i for i, name in enumerate(node_machine)}
    hosts.sort(key=lambda h: order.get(h["name"], 0))
    return hosts, ports, qps


def _links(
    topo: Topology,
    snaps: dict[int, dict],
    kernel: dict[str, dict],
    fault_ids: dict[tuple[int, int], int],
) -> list[dict]:
    """Every link of the lab, counters added up over the machines; its state
    from the kernel records of its two ends (each read on its own machine);
    its fault under the cluster's id."""
    by_machine = {m: {lk["name"]: lk for lk in s.get("links", [])} for m, s in snaps.items()}
    out = []
    for link in topo.links.values():
        found = [(m, lk[link.name]) for m, lk in sorted(by_machine.items()) if link.name in lk]
        if not found:
            continue
        record = dict(found[0][1], machines=[m for m, _ in found], rates=None)
        for _, lk in found[1:]:
            for d in ("up", "down"):
                record[d] = add(record[d], lk[d])
        ends = [(p.node, p.ifname) for p in link.ends()]
        record["state"] = link_state(kernel, ends)
        faulted = [(m, lk["fault"]) for m, lk in found if lk.get("fault") is not None]
        record["fault"] = fault_ids.get(faulted[0], faulted[0][1]) if faulted else None
        out.append(record)
    return out


def _nic_counters(snaps: dict[int, dict]) -> dict | None:
    total = None
    for snap in snaps.values():
        counters = (snap.get("nic") or {}).get("counters")
        if counters is not None:
            total = counters if total is None else add(total, counters)
    return total


def add(a: object, b: object) -> object:
    """Counters added up, field by field (flags and names: the first's)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: add(a.get(k), b.get(k)) for k in [*a, *(k for k in b if k not in a)]}
    if isinstance(a, bool) or isinstance(b, bool):
        return a if a is not None else b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a + b
    return a if a is not None else b
