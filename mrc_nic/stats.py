"""Counter snapshots of a lab: per link, per switch port, per fault.

Two sources: the BPF switch port program's per-CPU counters (packets and
bytes seen on each port and direction, and drops by fault reason), and the
kernel's link statistics and carrier state of every interface. A snapshot
is a plain dict with stable keys; `mrc-nic stats --format json` prints it.

Per link and direction the BPF numbers come from the same place where a
fault on that direction drops (faults.enforcement_points): what `up` counts
is what reached the upper switch, so a blackhole shows as pkts rising with
drops rising by the same amount. For the downward direction of a host link
that place is the T0 port's egress hook, which runs before the port's TBF
queue: packets the queue then drops count as passed there; the kernel's
`queue_drops` of that port (in `ports[].kernel`) counts them.
Each fault reports `drops`: what it dropped since it was applied.
"""

from __future__ import annotations

import time

from mrc_nic import faults
from mrc_nic.fabric import Fabric
from mrc_nic.switchport import EGRESS, INGRESS, SwitchPortMaps
from mrc_nic.topology import Link, Topology

SCHEMA_VERSION = 1


def _direction_counters(maps: SwitchPortMaps, link: Link, direction: str) -> dict:
    ((port_id, hook),) = faults.enforcement_points(link, direction)
    return maps.counters(port_id, hook).as_dict()


def snapshot(lab: str, *, kernel: bool = True) -> dict:
    record, topo = faults.load_lab(lab)
    link_fault = {name: f["id"] for f in record.faults.values() for name in f["links"]}
    kernel_info = _kernel_info(topo) if kernel else {}
    links, ports = [], []
    with SwitchPortMaps.open(lab) as maps:
        for link in topo.links.values():
            ends = [kernel_info.get(p.node, {}).get(p.ifname, {}) for p in link.ends()]
            links.append(
                {
                    "name": link.name,
                    "plane": link.plane,
                    "kind": link.kind,
                    "upper": f"{link.upper.node}:{link.upper.ifname}",
                    "lower": f"{link.lower.node}:{link.lower.ifname}",
                    "rate": link.rate_bps,
                    "state": _link_state(ends) if kernel else None,
                    "fault": link_fault.get(link.name),
                    "up": _direction_counters(maps, link, "up"),
                    "down": _direction_counters(maps, link, "down"),
                }
            )
        for port in topo.switch_ports():
            ports.append(
                {
                    "node": port.node,
                    "ifname": port.ifname,
                    "port_id": port.port_id,
                    "ingress": maps.counters(port.port_id, INGRESS).as_dict(),
                    "egress": maps.counters(port.port_id, EGRESS).as_dict(),
                    "kernel": kernel_info.get(port.node, {}).get(port.ifname),
                }
            )
        fault_rows = [
            dict(
                f,
                text=faults.describe(f),
                worker_alive=faults.worker_alive(f, lab),
                drops=faults.fault_drops(f, maps),
            )
            for f in record.faults.values()
        ]
    return {
        "schema": SCHEMA_VERSION,
        "lab": lab,
        "time": time.time(),
        "monotonic_ns": time.monotonic_ns(),
        "topology": topo.summary(),
        "bringup_seconds": record.bringup_seconds,
        "hosts": _hosts(topo, kernel_info),
        "links": links,
        "ports": ports,
        "faults": fault_rows,
    }


def _link_state(ends: list[dict]) -> str:
    if not all(ends):
        return "missing"
    if all(e["admin_up"] and e["carrier"] for e in ends):
        return "up"
    return "down"


def _kernel_info(topo: Topology) -> dict[str, dict[str, dict]]:
    with Fabric(topo) as fabric:
        return {node: fabric.link_info(node) for node in topo.nodes}


def _hosts(topo: Topology, kernel_info: dict) -> list[dict]:
    hosts = []
    for name in topo.host_names():
        h = topo.nodes[name].index
        hosts.append(
            {
                "name": name,
                "netns": topo.netns(name),
                "ports": [
                    {
                        "ifname": f"eth{p}",
                        "plane": p,
                        "address": str(topo.host_address(h, p)),
                        "kernel": kernel_info.get(name, {}).get(f"eth{p}"),
                    }
                    for p in range(topo.planes)
                ],
            }
        )
    return hosts
