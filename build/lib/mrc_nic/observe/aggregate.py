"""Per-plane and per-path views of a snapshot's link counters.

A plane is everything with one plane number: what its host links took from
the hosts (offered: counted at the T0 port where the host link's upward
faults drop, before them) and handed to the hosts (delivered: passed by the
T0 port towards the host), and what it dropped, by reason; and what its
switch egress queues did (`queue`: packets enqueued, ECN-marked, trimmed,
dropped for want of buffer, and the highest backlog of any of them).

A path is what one host port can take through one plane: host port -> T0 ->
T1 (just host port -> T0 with one tier). Paths of one host port share its
host link and differ only in the T0-T1 link, so a path's counters are those
of that T0-T1 link. When several hosts sit under one T0 their paths through
a spine share that link too: `shared_by` names them, and the numbers are the
link's, not one host's (port counters cannot tell the hosts apart).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from mrc_nic.lab.topology import Topology
from mrc_nic.observe.jsonenc import EMPTY_LIST, Frozen, FrozenList

# blackhole, loss: BPF faults; buffer: the BPF queue twin (switch egress
# ports); queue: the kernel's real queues (TBF drops).
DROP_REASONS = ("blackhole", "loss", "buffer", "queue")
# The egress queue counters of struct sp_counters a plane adds up (backlog_hwm: max).
QUEUE_FIELDS = ("enqueued", "ecn_marked", "trimmed", "drop_buffer")


@dataclass(frozen=True)
class PathDef:
    name: str  # h0.eth2>t0a>t1b
    host: str
    plane: int
    t0: str  # p2.t0a
    t1: str | None  # p2.t1b; None with one tier
    links: tuple[str, ...]  # host link first, then the T0-T1 link
    shared_by: tuple[str, ...]  # hosts whose traffic the path's counters hold

    @property
    def leg(self) -> str:
        """The link whose counters are the path's."""
        return self.links[-1]


def path_defs(topo: Topology) -> list[PathDef]:
    """Every path of the lab, by host, plane, then spine."""
    out = []
    for host in topo.host_names():
        for plane in range(topo.planes):
            host_link = topo.host_port_link(host, f"eth{plane}")
            t0 = host_link.upper.node
            t0_local = topo.nodes[t0].local_name
            port = f"{host}.eth{plane}"
            uplinks = [lk for lk in topo.links_of(t0) if lk.kind == "fabric"]
            if not uplinks:
                out.append(
                    PathDef(f"{port}>{t0_local}", host, plane, t0, None, (host_link.name,), (host,))
                )
                continue
            under_t0 = tuple(lk.lower.node for lk in topo.links_of(t0) if lk.kind == "host")
            for up in uplinks:
                t1 = up.upper.node
                out.append(
                    PathDef(
                        f"{port}>{t0_local}>{topo.nodes[t1].local_name}",
                        host,
                        plane,
                        t0,
                        t1,
                        (host_link.name, up.name),
                        under_t0,
                    )
                )
    return out


def paths(
    defs: list[PathDef],
    links: list[dict],
    made: list | None = None,
    positions: list[tuple[int, ...]] | None = None,
) -> list[dict]:
    """One record per path from the snapshot's link records: read-only
    (jsonenc.Frozen). made: a list of len(defs) the caller keeps between
    calls, for read-only link records; a path whose T0-T1 link is the same
    record as the last time, and its host link in the same state with the
    same fault, is then the same record as then. positions: where each path's
    links are in links (path_positions), if they are always there."""
    by_name = {lk["name"]: lk for lk in links} if positions is None else {}
    out = []
    for i, d in enumerate(defs):
        if positions is None:
            on_path = tuple(by_name[name] for name in d.links)
        else:
            on_path = tuple(links[at] for at in positions[i])
        leg = on_path[-1]
        # What the record is made of: the state and fault of each link, and the
        # leg's counters (the host link's traffic is not the path's).
        parts = (*(x for lk in on_path[:-1] for x in (lk["state"], lk["fault"])), leg)
        last = made[i] if made is not None else None
        if last is not None and all(map(operator.is_, parts, last[0])):
            out.append(last[1])
            continue
        states = [lk["state"] for lk in on_path]
        fault_ids = [lk["fault"] for lk in on_path if lk["fault"] is not None]
        all_up = states.count("up") == len(states)
        record = Frozen(
            {
                "path": d.name,
                "host": d.host,
                "plane": d.plane,
                "t0": d.t0,
                "t1": d.t1,
                "links": _shared_list(d.links),
                "shared_by": _shared_list(d.shared_by),
                "state": None if None in states else ("up" if all_up else "down"),
                "faults": FrozenList(sorted(set(fault_ids))) if fault_ids else EMPTY_LIST,
                "up": leg["up"],
                "down": leg["down"],
                "rates": None,
            }
        )
        if made is not None:
            made[i] = (parts, record)
        out.append(record)
    return out


def path_positions(defs: list[PathDef], link_names: list[str]) -> list[tuple[int, ...]]:
    """For paths(): where each path's links are in a list of links with these names."""
    at = {name: i for i, name in enumerate(link_names)}
    return [tuple(at[name] for name in d.links) for d in defs]


def planes(
    planes_count: int,
    links: list[dict],
    kernel_info: dict,
    ports: list[dict] = (),
    *,
    queue_drops: dict[int, int] | None = None,
    made: list | None = None,
    groups: tuple[list[list[int]], list[list[int]]] | None = None,
) -> list[dict]:
    """One record per plane from the snapshot's link records, kernel info
    ({} when the kernel was not read: queue drops and link states are then None)
    and switch port records (their egress counters: the queues). queue_drops:
    plane_queue_drops(planes_count, links, kernel_info) if the caller has it
    already. made: a list of planes_count the caller keeps between calls, for
    read-only link and port records (jsonenc.Frozen): a plane whose records are
    the same objects as the last time is not added up again. groups:
    plane_groups(planes_count, links, ports) if the caller has it already."""
    if queue_drops is None and kernel_info:
        queue_drops = plane_queue_drops(planes_count, links, kernel_info)
    if groups is None:
        groups = plane_groups(planes_count, links, ports)
    link_at, port_at = groups
    out = []
    for plane in range(planes_count):
        mine = [links[i] for i in link_at[plane]]
        my_ports = [ports[i] for i in port_at[plane]]
        parts = (*mine, *my_ports)
        last = made[plane] if made is not None else None
        if (
            last is not None
            and len(last[0]) == len(parts)
            and all(map(operator.is_, parts, last[0]))
        ):
            numbers = last[1]
        else:
            numbers = _plane_numbers(mine, [p["egress"] for p in my_ports])
            if made is not None:
                made[plane] = (parts, numbers)
        count, down, fault_ids, offered, delivered, blackhole, loss, queue = numbers
        out.append(
            {
                "plane": plane,
                "links": count,
                "links_down": down,
                "faults": list(fault_ids),
                "offered": dict(offered),
                "delivered": dict(delivered),
                "drops": {
                    "blackhole": blackhole,
                    "loss": loss,
                    "buffer": queue["drop_buffer"],
                    "queue": queue_drops[plane] if kernel_info else None,
                },
                "queue": dict(queue),
                "rates": None,
            }
        )
    return out


def plane_groups(
    planes_count: int, links: list[dict], ports: list[dict]
) -> tuple[list[list[int]], list[list[int]]]:
    """For planes(): the positions of each plane's links in links and its switch
    ports in ports."""
    link_at: list[list[int]] = [[] for _ in range(planes_count)]
    port_at: list[list[int]] = [[] for _ in range(planes_count)]
    for at, records in ((link_at, links), (port_at, ports)):
        for i, record in enumerate(records):
            if 0 <= record["plane"] < planes_count:
                at[record["plane"]].append(i)
    return link_at, port_at


def _plane_numbers(links: list[dict], egress: list[dict]) -> tuple:
    """(links, links_down, fault ids, offered, delivered, blackhole, loss, queue) of a plane."""
    queue = dict.fromkeys(QUEUE_FIELDS, 0)
    hwm = 0
    for c in egress:
        for f in QUEUE_FIELDS:
            queue[f] += c[f]
        if c["backlog_hwm"] > hwm:
            hwm = c["backlog_hwm"]
    queue["backlog_hwm"] = hwm
    offered_pkts = offered_bytes = delivered_pkts = delivered_bytes = 0
    blackhole = loss = 0
    states = []
    fault_ids = set()
    for lk in links:
        up, down = lk["up"], lk["down"]
        if lk["kind"] == "host":
            offered_pkts += up["pkts"]
            offered_bytes += up["bytes"]
            delivered_pkts += down["passed_pkts"]
            delivered_bytes += down["passed_bytes"]
        blackhole += up["drop_blackhole"] + down["drop_blackhole"]
        loss += up["drop_loss"] + down["drop_loss"]
        states.append(lk["state"])
        if lk["fault"] is not None:
            fault_ids.add(lk["fault"])
    return (
        len(links),
        None if None in states else sum(s != "up" for s in states),
        tuple(sorted(fault_ids)),
        {"pkts": offered_pkts, "bytes": offered_bytes},
        {"pkts": delivered_pkts, "bytes": delivered_bytes},
        blackhole,
        loss,
        queue,
    )


@functools.cache
def _shared_list(names: tuple[str, ...]) -> FrozenList:
    """The same read-only list for the same names, snapshot after snapshot (jsonenc)."""
    return FrozenList(names)


def plane_queue_drops(planes_count: int, links: list[dict], kernel_info: dict) -> dict[int, int]:
    """{plane: the kernel's root queue drops at both ends of every link of the plane}."""
    totals = dict.fromkeys(range(planes_count), 0)
    for lk in links:
        if lk["plane"] not in totals:
            continue
        for end in (lk["upper"], lk["lower"]):
            node, _, ifname = end.partition(":")
            info = kernel_info.get(node, {}).get(ifname) or {}
            totals[lk["plane"]] += info.get("queue_drops", 0)
    return totals
