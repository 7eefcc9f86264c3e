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

from dataclasses import dataclass

from mrc_nic.topology import Topology

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


def paths(defs: list[PathDef], links: list[dict]) -> list[dict]:
    """One record per path from the snapshot's link records."""
    by_name = {lk["name"]: lk for lk in links}
    out = []
    for d in defs:
        on_path = [by_name[name] for name in d.links]
        leg = by_name[d.leg]
        states = [lk["state"] for lk in on_path]
        out.append(
            {
                "path": d.name,
                "host": d.host,
                "plane": d.plane,
                "t0": d.t0,
                "t1": d.t1,
                "links": list(d.links),
                "shared_by": list(d.shared_by),
                "state": None if None in states else _all_up(states),
                "faults": sorted({lk["fault"] for lk in on_path if lk["fault"] is not None}),
                "up": leg["up"],
                "down": leg["down"],
                "rates": None,
            }
        )
    return out


def planes(
    planes_count: int, links: list[dict], kernel_info: dict, ports: list[dict] = ()
) -> list[dict]:
    """One record per plane from the snapshot's link records, kernel info
    ({} when the kernel was not read: queue drops and link states are then None)
    and switch port records (their egress counters: the queues)."""
    out = []
    for plane in range(planes_count):
        mine = [lk for lk in links if lk["plane"] == plane]
        host_links = [lk for lk in mine if lk["kind"] == "host"]
        egress = [p["egress"] for p in ports if p["plane"] == plane]
        queue = {f: sum(c[f] for c in egress) for f in QUEUE_FIELDS}
        queue["backlog_hwm"] = max((c["backlog_hwm"] for c in egress), default=0)
        states = [lk["state"] for lk in mine]
        out.append(
            {
                "plane": plane,
                "links": len(mine),
                "links_down": None if None in states else sum(s != "up" for s in states),
                "faults": sorted({lk["fault"] for lk in mine if lk["fault"] is not None}),
                "offered": {
                    "pkts": sum(lk["up"]["pkts"] for lk in host_links),
                    "bytes": sum(lk["up"]["bytes"] for lk in host_links),
                },
                "delivered": {
                    "pkts": sum(lk["down"]["passed_pkts"] for lk in host_links),
                    "bytes": sum(lk["down"]["passed_bytes"] for lk in host_links),
                },
                "drops": {
                    "blackhole": _sum_both(mine, "drop_blackhole"),
                    "loss": _sum_both(mine, "drop_loss"),
                    "buffer": queue["drop_buffer"],
                    "queue": _queue_drops(mine, kernel_info) if kernel_info else None,
                },
                "queue": queue,
                "rates": None,
            }
        )
    return out


def _all_up(states: list[str]) -> str:
    return "up" if all(s == "up" for s in states) else "down"


def _sum_both(links: list[dict], field: str) -> int:
    return sum(lk[d][field] for lk in links for d in ("up", "down"))


def _queue_drops(links: list[dict], kernel_info: dict) -> int:
    total = 0
    for lk in links:
        for end in (lk["upper"], lk["lower"]):
            node, _, ifname = end.partition(":")
            total += (kernel_info.get(node, {}).get(ifname) or {}).get("queue_drops", 0)
    return total
