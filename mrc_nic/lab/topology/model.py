"""A topology's value types and the Topology itself: names, addresses and routes of a lab."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mrc_nic.errors import MrcNicError
from mrc_nic.lab.topology.schema import (
    ACK_DELAY_US_DEFAULT,
    ACK_EVERY_DEFAULT,
    BASE_RTT_NS,
    FORWARDING_DEFAULT,
    GATEWAY_HOST_OCTET,
    LETTERS,
    NIC_MEMORY_DEFAULT,
    NS_PREFIX,
    PATH_HOPS_PER_TIER,
    TBF_BURST_SECONDS,
)
from mrc_nic.units import Threshold, format_rate


class TopologyError(MrcNicError, ValueError):
    """A topology file is wrong. The message names the file and the key."""


# The value types below are NamedTuples, not frozen dataclasses: the same
# immutable, comparable, hashable records, built at import about 5x faster
# (every CLI command imports this module: issue 19's start-up time).


class QueueParams(NamedTuple):
    """[queues]: how every capped switch egress port marks, trims and drops.

    Thresholds resolve per port against its BDP (its link's rate x base_rtt);
    the buffer is [links].buffer. trim None: no trimming."""

    base_rtt_ns: int = BASE_RTT_NS
    ecn: bool = True
    ecn_last_hop: bool = False
    kmin: Threshold = Threshold(bdp=0.2)
    kmax: Threshold = Threshold(bdp=0.8)
    trim: Threshold | None = Threshold(bdp=2.0)
    seed: int = 0

    def bdp_bytes(self, rate_bps: int) -> int:
        return rate_bps * self.base_rtt_ns // (8 * 10**9)


def design_rtt_ns(rate_bps: int | None, mtu: int, tiers: int = 2) -> int:
    """The [queues] base_rtt a lab gets when its file names none: a full
    frame's time on each link of a host-to-host path at the slowest rate, at
    least BASE_RTT_NS. Below that, a path's own serialisation reads as
    queueing: switch queues mark and trim at a BDP under one packet, NSCC's
    window stays a few packets, and the reorder window is shorter than the
    spread between planes, so healthy packets are taken for lost."""
    if not rate_bps:
        return BASE_RTT_NS
    frames_ns = PATH_HOPS_PER_TIER * tiers * (mtu + 14) * 8 * 10**9 // rate_bps
    return max(BASE_RTT_NS, -(-frames_ns // 1000) * 1000)  # whole microseconds


# A host daemon's loop wakes every quarter of the lab's design RTT while its
# QPs send, within these: every timer of a sending QP (its timeout, reorder
# window, probes' replies) is some RTTs long, and a 1 ms tick on a 2 Mbit/s
# lab (51 ms RTT) woke each of its 32 daemons 1,000 times a second and took
# the cores its links needed.
SENDING_TICK_MIN_S = 0.001
SENDING_TICK_MAX_S = 0.02


def sending_tick_s(base_rtt_ns: int) -> float:
    """The host daemons' tick while QPs send, on a lab of this design RTT."""
    return min(SENDING_TICK_MAX_S, max(SENDING_TICK_MIN_S, base_rtt_ns / 4 / 1e9))


def tbf_burst_bytes(rate_bps: int, mtu: int) -> int:
    """The bucket of a link's TBF: ~250 us at line rate, at least two frames."""
    return max(int(rate_bps / 8 * TBF_BURST_SECONDS), 2 * (mtu + 14))


class Node(NamedTuple):
    name: str  # h0, p1.t0a
    kind: str  # host, t0, t1
    plane: int | None  # None for hosts
    index: int  # host number, or switch number within its tier and plane

    @property
    def local_name(self) -> str:
        """Name without the plane, as the peer's interface is called: h0, t0a."""
        return self.name.split(".", 1)[-1]

    @property
    def is_switch(self) -> bool:
        return self.kind != "host"


class Port(NamedTuple):
    node: str
    ifname: str
    address: ipaddress.IPv4Interface | None
    port_id: int | None  # id in the switch port program's maps; None on hosts


class Link(NamedTuple):
    name: str  # p1.t0a-h0
    plane: int
    kind: str  # "host" (host-T0) or "fabric" (T0-T1)
    upper: Port  # the end nearer the spine: always a switch
    lower: Port  # host or T0
    rate_bps: int | None  # None: no cap

    def ends(self) -> tuple[Port, Port]:
        return (self.upper, self.lower)


class Tunnel(NamedTuple):
    """This machine's end of a cross-machine link: a VXLAN device from this
    machine's underlay address to the peer machine's (docs/cluster.md)."""

    vni: int
    local: str  # underlay addresses
    remote: str


class Shard(NamedTuple):
    """The part of a lab one machine of a cluster builds and runs: its nodes,
    and the links it shares with other machines (by link name)."""

    machine: int
    nodes: frozenset[str]
    tunnels: dict[str, Tunnel]


class Route(NamedTuple):
    node: str
    dst: ipaddress.IPv4Network
    via: tuple[ipaddress.IPv4Address, ...] = ()  # several: ECMP
    dev: str | None = None  # set for directly attached (scope link) routes
    links: tuple[str, ...] = ()  # the link behind each next hop (or behind dev)

    def avoiding(self, dead_links: set[str]) -> Route | None:
        """This route without the next hops over `dead_links`; None if none is
        left. The kernel refuses a next hop whose device is down."""
        if not dead_links & set(self.links):
            return self
        if self.dev is not None:
            return None
        alive = [
            (gw, lk) for gw, lk in zip(self.via, self.links, strict=True) if lk not in dead_links
        ]
        if not alive:
            return None
        return Route(
            self.node, self.dst, tuple(g for g, _ in alive), None, tuple(lk for _, lk in alive)
        )


@dataclass
class Topology:
    path: Path
    lab: str
    hosts: int
    planes: int
    tiers: int
    t0_per_plane: int
    t1_per_plane: int
    hosts_per_t0: int
    rate_bps: int | None
    fabric_rate_bps: int | None
    mtu: int
    buffer_bytes: int
    host_net: ipaddress.IPv4Network
    fabric_net: ipaddress.IPv4Network
    queues: QueueParams = field(default_factory=QueueParams)
    nic_memory_bytes: int = NIC_MEMORY_DEFAULT  # [nic] memory: registered memory per host
    ack_every: int = ACK_EVERY_DEFAULT  # [nic] ack_every: one SACK per this many packets
    ack_delay_us: int = ACK_DELAY_US_DEFAULT  # [nic] ack_delay_us: longest hold of a SACK
    forwarding: str = FORWARDING_DEFAULT  # who forwards MRC packets in the switches
    tenant_group: str | None = None  # [tenants] group: who may open the NICs besides root
    raw: dict = field(default_factory=dict)  # the TOML as parsed, kept in the lab state
    nodes: dict[str, Node] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    # A lab spread over machines (mrc_nic.cluster): this machine's part.
    # all_netns() is then this machine's namespaces; the other names stay the
    # lab's (a QP's peer may be a host of another machine).
    shard: Shard | None = None

    def is_here(self, node: str) -> bool:
        """Whether this machine runs the node (always, on a lab of one machine)."""
        return self.shard is None or node in self.shard.nodes

    def tenant_shares(self) -> dict:
        """[tenants]' shares as written (contract.shares parses them): every key
        but group, which says who may open the NICs (tenant_group)."""
        return {k: v for k, v in self.raw.get("tenants", {}).items() if k != "group"}

    # ---- names -----------------------------------------------------------
    def netns(self, node: str) -> str:
        return f"{NS_PREFIX}{self.lab}-{node}"

    def all_netns(self) -> list[str]:
        return [self.netns(n) for n in self.nodes if self.is_here(n)]

    def host_names(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.kind == "host"]

    def host_of_qpn(self, qpn: int) -> str | None:
        """The host a QP number belongs to: its index above NIC_QPN_HOST_SHIFT (None: no host)."""
        from mrc_nic.abi.nic_const_defs import NIC_QPN_HOST_SHIFT

        index = qpn >> NIC_QPN_HOST_SHIFT
        return next((h for h in self.host_names() if self.nodes[h].index == index), None)

    def switch_names(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.is_switch]

    def host_address(self, host: int, plane: int) -> ipaddress.IPv4Address:
        return plane_subnet(self.host_net, plane).network_address + host + 1

    def gateway_address(self, plane: int) -> ipaddress.IPv4Address:
        return plane_subnet(self.host_net, plane).network_address + GATEWAY_HOST_OCTET

    def switch_ports(self) -> list[Port]:
        """Every switch port, ordered by port id."""
        ports = [p for link in self.links.values() for p in link.ends() if p.port_id is not None]
        return sorted(ports, key=lambda p: p.port_id)

    def ports_of(self, node: str) -> list[Port]:
        return [p for link in self.links.values() for p in link.ends() if p.node == node]

    def links_of(self, node: str) -> list[Link]:
        return [lk for lk in self.links.values() if node in (lk.upper.node, lk.lower.node)]

    def links_of_plane(self, plane: int) -> list[Link]:
        return [lk for lk in self.links.values() if lk.plane == plane]

    def host_port_link(self, host: str, ifname: str) -> Link:
        for lk in self.links_of(host):
            if lk.lower.ifname == ifname:
                return lk
        raise KeyError(f"{host}.{ifname}")

    # ---- routes ------------------------------------------------------------
    def routes(self) -> list[Route]:
        """Static routes of every switch. Hosts need none: each port's /24 is
        on-link and the T0 answers ARP for the other hosts (proxy ARP)."""
        routes: list[Route] = []
        for plane in range(self.planes):
            subnet = plane_subnet(self.host_net, plane)
            for node in self._switches(plane, "t0"):
                host_links = [lk for lk in self.links_of(node.name) if lk.kind == "host"]
                for lk in host_links:
                    dst = ipaddress.IPv4Network(lk.lower.address.ip)
                    routes.append(Route(node.name, dst, dev=lk.upper.ifname, links=(lk.name,)))
                if self.tiers == 2:
                    up = [lk for lk in self.links_of(node.name) if lk.kind == "fabric"]
                    routes.append(
                        Route(
                            node.name,
                            subnet,
                            via=tuple(lk.upper.address.ip for lk in up),
                            links=tuple(lk.name for lk in up),
                        )
                    )
            for node in self._switches(plane, "t1"):
                for lk in self.links_of(node.name):
                    t0 = lk.lower.node
                    for host_link in self.links_of(t0):
                        if host_link.kind == "host":
                            dst = ipaddress.IPv4Network(host_link.lower.address.ip)
                            routes.append(
                                Route(node.name, dst, via=(lk.lower.address.ip,), links=(lk.name,))
                            )
        return routes

    def _switches(self, plane: int, kind: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.plane == plane and n.kind == kind]

    def summary(self) -> dict:
        return {
            "lab": self.lab,
            "file": str(self.path),
            "hosts": self.hosts,
            "planes": self.planes,
            "tiers": self.tiers,
            "t0_per_plane": self.t0_per_plane,
            "t1_per_plane": self.t1_per_plane if self.tiers == 2 else 0,
            "hosts_per_t0": self.hosts_per_t0,
            "rate": format_rate(self.rate_bps),
            "fabric_rate": format_rate(self.fabric_rate_bps),
            "mtu": self.mtu,
            "buffer_bytes": self.buffer_bytes,
            "nic_memory_bytes": self.nic_memory_bytes,
            "ack_every": self.ack_every,
            "ack_delay_us": self.ack_delay_us,
            "queues": {
                "base_rtt_ns": self.queues.base_rtt_ns,
                "ecn": self.queues.ecn,
                "ecn_last_hop": self.queues.ecn_last_hop,
                "kmin": str(self.queues.kmin),
                "kmax": str(self.queues.kmax),
                "trim": "off" if self.queues.trim is None else str(self.queues.trim),
            },
            "namespaces": len(self.nodes),
            "links": len(self.links),
        }


def plane_subnet(net: ipaddress.IPv4Network, plane: int) -> ipaddress.IPv4Network:
    """The p-th /24 of a /16 (or larger) network: plane p's addresses."""
    return ipaddress.IPv4Network((int(net.network_address) + (plane << 8), 24))


def switch_letter(index: int) -> str:
    return LETTERS[index]
