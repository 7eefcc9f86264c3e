"""Topology files: parse and validate a lab's TOML, and derive every name.

A topology file describes a multi-plane Clos fabric as MRC deploys it: every
host has one NIC port per plane (port p is the uplink to plane p), and each
plane is an independent network of one switch (tiers = 1) or of T0 leaves and
T1 spines (tiers = 2). From the file this module derives, without touching the
system, everything the builder creates: node and namespace names, links and
their names as the CLI shows them (``p1.t0a-h0``), interface names, addresses,
routes and the id of every switch port in the BPF port program's maps.

Naming (planes and hosts count from 0):
  host            h0, h1, ...            namespace  mrc-<lab>-h0
  switch          p1.t0a, p1.t1b, ...    namespace  mrc-<lab>-p1.t0a
  link            p1.t0a-h0 (upper end first), p1.t1a-t0b
  host port       eth<p> in the host's namespace
  switch port     named after its peer: h0, t1a, t0b
Lab names are [a-z0-9]{1,12}: no dash, so the names of lab "a" are never a
prefix of another lab's names.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mrc_nic.errors import MrcNicError

# links.mtu: at least a 1 KiB payload (a region element) with MRC's 80 bytes
# of IP, UDP and RDMA headers; at most what veth takes with an XDP program
# that is not frags-aware attached (one page less XDP headroom and
# skb_shared_info): above it the NIC cannot attach to the host ports.
# nic.seg_size turns the MTU into the payload per packet.
MTU_MIN = 1024 + 80
MTU_MAX = 3506


NS_PREFIX = "mrc-"
# Cross-machine links of a cluster lab: VXLAN over IPv4 on the IANA port; it
# adds 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14).
VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
LAB_NAME_RE = re.compile(r"[a-z0-9]{1,12}")
MAX_PLANES = 16
MAX_HOSTS = 253  # .1 to .253 in a plane's /24; .254 is the T0 gateway
LETTERS = "abcdefghijklmnopqrstuvwxyz"  # switch letters: t0a, t0b, ...
MAX_SWITCHES_PER_TIER = len(LETTERS)
MAX_TBF_RATE_BPS = 32 * 10**9  # TBF's rate field is a u32 in bytes/s
GATEWAY_HOST_OCTET = 254

RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
# Sizes: SI units (kb = 1000 bytes) and binary ones (kib = 1024), any case
# ("2TiB", "2tib"). The one-letter forms mean what the context counts in:
# queue thresholds decimal ("20k" = 20000 bytes, as tc does), transfer
# sizes binary (rdma_write.WRITE_SIZE_UNITS: "1G" = 1 GiB, as perftest does).
SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
QUEUE_SIZE_UNITS = {**SIZE_UNITS, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
TIME_UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
# The TBF of every capped egress sends this much at line rate after idle (its
# bucket): its hrtimer refills continuously, so ~250 us keeps the CPU cost low
# without shaping coarsely. The BPF queue twin subtracts it (switch_port.h).
TBF_BURST_SECONDS = 250e-6
# Thresholds and buffers the BPF queue twin can hold (switch_port.h SP_Q_BYTES_MAX).
QUEUE_BYTES_MAX = 1 << 30

# Who forwards MRC packets in the switches ([fabric] forwarding; bpf/switch_port.h,
# "Forwarding"): the port program itself, or the IP stack. The IP stack by
# default until the BPF path's failover and 20%-loss figures are shown not to
# regress on a quiet machine (docs/benchmarks.md, "Line rate": 12-17% more
# goodput, but a longer blackhole gap in 3 of 3 loaded runs).
BASE_RTT_NS = 100_000  # [queues] base_rtt default: the design RTT of the shipped labs
# [nic] ack_every / ack_delay_us: ACK coalescing (docs/nic-program.md, "ACK coalescing").
ACK_EVERY_DEFAULT = 4
ACK_EVERY_MAX = 64
ACK_DELAY_US_DEFAULT = 50
FORWARDING_MODES = ("bpf", "kernel")
FORWARDING_DEFAULT = "kernel"

# Every key a topology file may hold, per section, with a short description
# used in error messages.
SCHEMA: dict[str, dict[str, str]] = {
    "lab": {"name": "lab name, [a-z0-9]{1,12}"},
    "fabric": {
        "hosts": f"number of hosts, 1..{MAX_HOSTS}",
        "planes": f"number of planes (NIC ports per host), 1..{MAX_PLANES}",
        "tiers": "switch tiers per plane: 1 (one switch) or 2 (T0 leaves, T1 spines)",
        "t0_per_plane": f"T0 leaves per plane, 1..{MAX_SWITCHES_PER_TIER}",
        "t1_per_plane": f"T1 spines per plane (tiers = 2), 1..{MAX_SWITCHES_PER_TIER}",
        "hosts_per_t0": "hosts attached to each T0 (default: hosts spread evenly)",
        "forwarding": (
            'who forwards MRC packets in the switches: "bpf" (the port program, '
            'bpf_fib_lookup and bpf_redirect) or "kernel" (the IP stack)'
        ),
    },
    "links": {
        "rate": 'host link rate, e.g. "1gbit", "400mbit", or "none" for no cap',
        "fabric_rate": "T0-T1 link rate (default: rate)",
        "mtu": (
            f"IP MTU of every link, {MTU_MIN}..{MTU_MAX}: a data packet carries 1 KiB, "
            "2 KiB from 2128, 3 KiB from 3152"
        ),
        "buffer": 'queue size of every switch egress port, e.g. "256KiB"',
    },
    "nic": {
        "memory": (
            'NIC memory per host (registered memory), e.g. "64MiB" (default), "320MiB": '
            "an MR takes at most half of it; the lab's total is at most 2 GiB"
        ),
        "ack_every": (
            f"ACK coalescing: a receiver answers one data packet in this many, "
            f"1..{ACK_EVERY_MAX} (default {ACK_EVERY_DEFAULT}; 1: every packet)"
        ),
        "ack_delay_us": (
            f"ACK coalescing: the longest a receiver holds an answer, in us "
            f"(default {ACK_DELAY_US_DEFAULT})"
        ),
    },
    "addressing": {
        "hosts": "IPv4 /16 for host addresses: plane p is its p-th /24, host h is .h+1",
        "fabric": "IPv4 /16 for T0-T1 links: plane p is its p-th /24, one /31 per link",
    },
    "cluster": {
        "machines": "how many machines of the cluster a lab spreads over (default: all)",
        "place": 'nodes pinned to machines, e.g. { h1 = 1, "p0.t1a" = "10.0.0.2" }',
    },
    "queues": {
        "base_rtt": 'base RTT of a plane, e.g. "100us": a port\'s BDP is its link rate x base_rtt',
        "ecn": "mark CE on ECT packets between kmin and kmax (true/false)",
        "ecn_last_hop": "also mark on T0 ports facing hosts (default false, as MRC deploys it)",
        "kmin": 'marking starts: a fraction of the BDP (0.2, "0.2bdp") or a size ("20KB")',
        "kmax": 'every ECT packet marked: a fraction of the BDP (0.8) or a size ("80KB")',
        "trim": 'trim MRC data above this backlog: a fraction of the BDP, a size, or "off"',
        "seed": "seed of the marking draws (port p uses seed + p)",
    },
    # Shares of each host's NIC per application session (mrc_nic/transport/shares.py)
    "tenants": {
        "memory": (
            'NIC memory one session may hold: a fraction of the host\'s (0.5, "50%") '
            'or a size ("8MiB")'
        ),
        "qps": 'QPs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
        "cqs": 'CQs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
        "pds": 'PDs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
    },
}


# [nic] memory: per host, in whole pages of NIC memory; the lab's nic_mr holds
# every host's (one BPF array, at most NIC_MEMORY_MAX). By default 64 MiB a
# host, and 1 GiB for the lab at most.
NIC_MEMORY_DEFAULT = 64 * 2**20
NIC_MEMORY_DEFAULT_LAB = 2**30
NIC_MEMORY_MIN = 1 * 2**20
NIC_MEMORY_MAX = 2 * 2**30
NIC_MEMORY_PAGE = 4096


class TopologyError(MrcNicError, ValueError):
    """A topology file is wrong. The message names the file and the key."""


# The value types below are NamedTuples, not frozen dataclasses: the same
# immutable, comparable, hashable records, built at import about 5x faster
# (every CLI command imports this module: issue 19's start-up time).


class Threshold(NamedTuple):
    """A queue threshold: a fraction of a port's BDP, or a number of bytes."""

    bdp: float | None = None
    nbytes: int | None = None

    def resolve(self, bdp_bytes: int) -> int:
        """Bytes at a port whose BDP is bdp_bytes."""
        if self.nbytes is not None:
            return self.nbytes
        return round((self.bdp or 0.0) * bdp_bytes)

    def __str__(self) -> str:
        return f"{self.bdp:g}bdp" if self.nbytes is None else f"{self.nbytes}B"


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

    # ---- names -----------------------------------------------------------
    def netns(self, node: str) -> str:
        return f"{NS_PREFIX}{self.lab}-{node}"

    def all_netns(self) -> list[str]:
        return [self.netns(n) for n in self.nodes if self.is_here(n)]

    def host_names(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.kind == "host"]

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


# ---- parsing helpers -------------------------------------------------------
def parse_rate(value: object) -> int | None:
    """'1gbit' -> 10**9 bits/s; 'none', 0 -> None (no cap)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value or None
    if not isinstance(value, str):
        raise ValueError('must be a string such as "1gbit"')
    text = value.strip().lower()
    if text in ("none", "unlimited", "0"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if not m or m.group(2) not in RATE_UNITS:
        units = ", ".join(RATE_UNITS)
        raise ValueError(f'cannot read {value!r}: use a number and a unit ({units}) or "none"')
    return round(float(m.group(1)) * RATE_UNITS[m.group(2)])


def parse_size(value: object, units: dict[str, int] = SIZE_UNITS) -> int:
    """'256KiB' -> 262144 bytes, '1.5MiB' -> 1572864; a bare number is bytes.
    units: lower-case unit -> bytes (the topology's by default). A fraction
    must come to a whole number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError('must be a size such as "256KiB"')
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", value.strip())
    unit = (m.group(2) or "b").lower() if m else ""
    if not m or unit not in units:
        raise ValueError(f"cannot read {value!r}: use a number and a unit ({', '.join(units)})")
    if "." not in m.group(1):
        return int(m.group(1)) * units[unit]
    from fractions import Fraction  # only for fractions: a short command reads whole sizes

    size = Fraction(m.group(1)) * units[unit]  # exact: 1.1 GiB is not rounded through a float
    if size.denominator != 1:
        raise ValueError(f"{value!r} is {float(size):g} bytes: a size is a whole number of bytes")
    return int(size)


def format_size(nbytes: int) -> str:
    """1099511627776 -> '1 TiB'; what no binary unit near its size divides,
    in bytes: 10**12 -> '1,000,000,000,000 bytes'."""
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= div:
            return f"{nbytes // div} {unit}" if nbytes % div == 0 else f"{nbytes:,} bytes"
    return f"{nbytes} bytes"


def parse_threshold(value: object, *, allow_off: bool = False) -> Threshold | None:
    """0.2 or "0.2bdp" -> a fraction of the BDP; "20KB", "20k", "20000" -> bytes;
    "off" (allow_off) -> None."""
    if isinstance(value, bool):
        raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}")
    if isinstance(value, int | float):
        fraction = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if allow_off and text in ("off", "none"):
            return None
        if not text.endswith("bdp"):
            try:
                nbytes = parse_size(text, QUEUE_SIZE_UNITS)
            except ValueError:
                raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}") from None
            if nbytes > QUEUE_BYTES_MAX:
                raise ValueError(
                    f"{value!r} is over the limit of {format_size(QUEUE_BYTES_MAX)} "
                    "(the most a switch queue's BPF twin holds)"
                )
            return Threshold(nbytes=nbytes)
        try:
            fraction = float(text.removesuffix("bdp"))
        except ValueError:
            raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}") from None
    else:
        raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}")
    if not 0.0 <= fraction <= 1000.0:  # NaN fails too
        raise ValueError(
            f"a fraction of the BDP must be 0..1000, got {value!r} "
            '(a size needs a unit: "20KB", "20000b")'
        )
    return Threshold(bdp=fraction)


_THRESHOLD_HELP = (
    'use a fraction of the BDP (0.2, "0.2bdp") or a size with a unit ("20KB", "20k"; '
    f"units: {', '.join(QUEUE_SIZE_UNITS)})"
)


def parse_time_ns(value: object) -> int:
    """'100us', '0.1ms', '50000ns' -> nanoseconds."""
    text = value.strip().lower() if isinstance(value, str) else ""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)", text)
    if not m:
        raise ValueError(f"cannot read {value!r}: use a number and a unit (ns, us, ms, s)")
    return round(float(m.group(1)) * TIME_UNITS_NS[m.group(2)])


def format_rate(bps: int | None) -> str:
    if bps is None:
        return "none"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bps % RATE_UNITS[unit] == 0:
            return f"{bps // RATE_UNITS[unit]}{unit}"
    return f"{bps}bit"


class _Reader:
    """Reads typed values out of the parsed TOML, naming file and key on error."""

    def __init__(self, path: Path, data: dict):
        self.path = path
        self.data = data

    def fail(self, key: str, why: str) -> TopologyError:
        return TopologyError(f"{self.path}: {key}: {why}")

    def check_keys(self) -> None:
        for section, body in self.data.items():
            if section not in SCHEMA:
                raise self.fail(section, f"unknown section; allowed: {', '.join(SCHEMA)}")
            if not isinstance(body, dict):
                raise self.fail(section, "must be a table ([section])")
            for key in body:
                if key not in SCHEMA[section]:
                    allowed = ", ".join(SCHEMA[section])
                    raise self.fail(
                        f"{section}.{key}", f"unknown key; allowed in [{section}]: {allowed}"
                    )

    def get(self, dotted: str, default: object = None) -> object:
        section, key = dotted.split(".")
        return self.data.get(section, {}).get(key, default)

    def integer(self, dotted: str, lo: int, hi: int, default: int | None = None) -> int:
        value = self.get(dotted, default)
        if value is None:
            raise self.fail(dotted, f"is required: {self._describe(dotted)}")
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise self.fail(dotted, f"must be an integer {lo}..{hi}, got {value!r}")
        return value

    def mtu(self, dotted: str) -> int:
        value = self.integer(dotted, 1, 65535, default=1500)
        if value < MTU_MIN:
            raise self.fail(
                dotted,
                f"must be {MTU_MIN}..{MTU_MAX}, got {value}: a data packet carries 1024 bytes "
                "of payload and 80 of IP, UDP and RDMA headers",
            )
        if value > MTU_MAX:
            raise self.fail(
                dotted,
                f"must be {MTU_MIN}..{MTU_MAX}, got {value}: veth takes the NIC's XDP program "
                f"only up to an MTU of {MTU_MAX} (one page per frame)",
            )
        return value

    def rate(self, dotted: str, default: object) -> int | None:
        try:
            bps = parse_rate(self.get(dotted, default))
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None
        if bps is not None and not 10**5 <= bps <= MAX_TBF_RATE_BPS:
            raise self.fail(dotted, 'must be between 100kbit and 32gbit, or "none"')
        return bps

    def size(self, dotted: str, default: object, lo: int, hi: int) -> int:
        try:
            size = parse_size(self.get(dotted, default))
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None
        if not lo <= size <= hi:
            raise self.fail(dotted, f"must be between {lo} and {hi} bytes, got {size}")
        return size

    def choice(self, dotted: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.get(dotted, default)
        if value not in allowed:
            raise self.fail(dotted, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def boolean(self, dotted: str, default: bool) -> bool:
        value = self.get(dotted, default)
        if not isinstance(value, bool):
            raise self.fail(dotted, f"must be true or false, got {value!r}")
        return value

    def threshold(self, dotted: str, default: Threshold | None) -> Threshold | None:
        value = self.get(dotted)
        if value is None:
            return default
        try:
            return parse_threshold(value, allow_off=dotted == "queues.trim")
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None

    def queues(self) -> QueueParams:
        d = QueueParams()
        base_rtt = self.get("queues.base_rtt")
        rtt_ns = d.base_rtt_ns
        if base_rtt is not None:
            try:
                rtt_ns = parse_time_ns(base_rtt)
            except ValueError as e:
                raise self.fail("queues.base_rtt", str(e)) from None
            if not 1_000 <= rtt_ns <= 10**9:
                raise self.fail("queues.base_rtt", f"must be 1us..1s, got {base_rtt!r}")
        seed = self.get("queues.seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 63:
            raise self.fail("queues.seed", f"must be an integer 0..2^63-1, got {seed!r}")
        return QueueParams(
            base_rtt_ns=rtt_ns,
            ecn=self.boolean("queues.ecn", d.ecn),
            ecn_last_hop=self.boolean("queues.ecn_last_hop", d.ecn_last_hop),
            kmin=self.threshold("queues.kmin", d.kmin),
            kmax=self.threshold("queues.kmax", d.kmax),
            trim=self.threshold("queues.trim", d.trim),
            seed=seed,
        )

    def network(self, dotted: str, default: str) -> ipaddress.IPv4Network:
        value = self.get(dotted, default)
        try:
            net = ipaddress.IPv4Network(value)
        except (ValueError, TypeError):
            raise self.fail(
                dotted, f"must be an IPv4 network like {default!r}, got {value!r}"
            ) from None
        if net.prefixlen > 16:
            raise self.fail(
                dotted, f"must be a /16 or larger (one /24 per plane), got /{net.prefixlen}"
            )
        return net

    def _describe(self, dotted: str) -> str:
        section, key = dotted.split(".")
        return SCHEMA[section][key]


def _nic_memory(r, hosts: int) -> int:
    """[nic] memory: bytes of NIC memory per host, whole pages."""
    share = NIC_MEMORY_DEFAULT_LAB // hosts // NIC_MEMORY_PAGE * NIC_MEMORY_PAGE
    default = min(NIC_MEMORY_DEFAULT, share)
    size = r.size("nic.memory", default, NIC_MEMORY_MIN, NIC_MEMORY_MAX // hosts)
    if size % NIC_MEMORY_PAGE:
        raise r.fail("nic.memory", f"must be whole pages ({NIC_MEMORY_PAGE} bytes), got {size}")
    return size


def load(path: str | Path, lab: str | None = None) -> Topology:
    """Parse and validate a topology file; ``lab`` overrides [lab].name."""
    import tomllib  # here: a running lab's topology comes from its JSON record

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TopologyError(f"{path}: no such topology file (see netns/ for examples)") from None
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{path}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyError(
            f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}"
        ) from None
    return from_dict(path, data, lab)


def from_dict(path: Path, data: dict, lab: str | None = None) -> Topology:
    r = _Reader(path, data)
    r.check_keys()

    name = lab if lab is not None else r.get("lab.name", path.stem.replace("-", ""))
    if not isinstance(name, str) or not LAB_NAME_RE.fullmatch(name):
        raise r.fail("lab.name", f"must match [a-z0-9]{{1,12}} (no dash), got {name!r}")

    hosts = r.integer("fabric.hosts", 1, MAX_HOSTS)
    planes = r.integer("fabric.planes", 1, MAX_PLANES)
    tiers = r.integer("fabric.tiers", 1, 2, default=2)
    if tiers == 1:
        t0 = r.integer("fabric.t0_per_plane", 1, 1, default=1)
        if r.get("fabric.t1_per_plane") is not None:
            raise r.fail("fabric.t1_per_plane", "only allowed with tiers = 2")
        t1 = 0
    else:
        t0 = r.integer("fabric.t0_per_plane", 1, MAX_SWITCHES_PER_TIER, default=2)
        t1 = r.integer("fabric.t1_per_plane", 1, MAX_SWITCHES_PER_TIER, default=2)
        if t0 * t1 > 128:
            raise r.fail(
                "fabric",
                f"t0_per_plane x t1_per_plane = {t0 * t1}: at most 128 "
                "T0-T1 links per plane fit the fabric addressing",
            )
    per_t0 = r.integer("fabric.hosts_per_t0", 1, MAX_HOSTS, default=math.ceil(hosts / t0))
    if per_t0 * t0 < hosts:
        raise r.fail(
            "fabric.hosts_per_t0",
            f"{per_t0} hosts on each of {t0} T0s cannot hold "
            f"{hosts} hosts; raise it to {math.ceil(hosts / t0)}",
        )
    if per_t0 * (t0 - 1) >= hosts:
        if r.get("fabric.hosts_per_t0") is None:
            raise r.fail(
                "fabric.t0_per_plane",
                f"{hosts} hosts, {per_t0} per T0, leave T0 number {t0} empty; use fewer T0s",
            )
        raise r.fail(
            "fabric.hosts_per_t0",
            f"with {per_t0} hosts per T0, T0 number {t0} would have no host; lower hosts_per_t0",
        )

    rate = r.rate("links.rate", "1gbit")
    topo = Topology(
        path=path,
        lab=name,
        hosts=hosts,
        planes=planes,
        tiers=tiers,
        t0_per_plane=t0,
        t1_per_plane=t1,
        hosts_per_t0=per_t0,
        rate_bps=rate,
        fabric_rate_bps=r.rate("links.fabric_rate", format_rate(rate)),
        mtu=r.mtu("links.mtu"),
        buffer_bytes=r.size("links.buffer", "256KiB", 16 * 1024, 64 * 2**20),
        host_net=r.network("addressing.hosts", "198.18.0.0/16"),
        fabric_net=r.network("addressing.fabric", "198.19.0.0/16"),
        queues=r.queues(),
        nic_memory_bytes=_nic_memory(r, hosts),
        ack_every=r.integer("nic.ack_every", 1, ACK_EVERY_MAX, ACK_EVERY_DEFAULT),
        ack_delay_us=r.integer("nic.ack_delay_us", 1, 1_000_000, ACK_DELAY_US_DEFAULT),
        forwarding=r.choice("fabric.forwarding", FORWARDING_MODES, FORWARDING_DEFAULT),
        raw=data,
    )
    if topo.host_net.overlaps(topo.fabric_net):
        raise r.fail("addressing", f"hosts {topo.host_net} and fabric {topo.fabric_net} overlap")
    _check_queues(r, topo)
    _check_tenants(r)
    _build(topo)
    return topo


def with_forwarding(topo: Topology, forwarding: str, lab: str | None = None) -> Topology:
    """The same topology with [fabric] forwarding set (kept in its raw TOML,
    so the lab's state records it)."""
    data = {section: dict(body) for section, body in topo.raw.items()}
    data.setdefault("fabric", {})["forwarding"] = forwarding
    return from_dict(topo.path, data, lab)


def _check_tenants(r: _Reader) -> None:
    """[tenants]: each share parses (the daemons read them from the lab's record)."""
    from mrc_nic.transport import shares  # pure; here to keep the import of topology light

    for key, value in r.data.get("tenants", {}).items():
        try:
            shares.parse(key, value)
        except ValueError as e:
            raise r.fail(f"tenants.{key}", str(e)) from None


def _check_queues(r: _Reader, topo: Topology) -> None:
    """Thresholds resolve per link rate: each must fit the BPF twin, and kmin <= kmax."""
    q = topo.queues
    for rate in sorted({x for x in (topo.rate_bps, topo.fabric_rate_bps) if x is not None}):
        bdp = q.bdp_bytes(rate)
        kmin, kmax = q.kmin.resolve(bdp), q.kmax.resolve(bdp)
        on = f"on {format_rate(rate)} links (BDP {bdp} bytes)"
        for key, value in (
            ("kmin", kmin),
            ("kmax", kmax),
            ("trim", q.trim and q.trim.resolve(bdp)),
        ):
            if value is not None and value > QUEUE_BYTES_MAX:
                raise r.fail(f"queues.{key}", f"{value} bytes {on}: at most {QUEUE_BYTES_MAX}")
        if kmin > kmax:
            raise r.fail("queues.kmin", f"{kmin} bytes is above kmax ({kmax} bytes) {on}")


def _build(topo: Topology) -> None:
    """Derive nodes, links, addresses and switch port ids."""
    port_ids = iter(range(1 << 20))

    def switch_port(node: str, ifname: str, addr=None) -> Port:
        return Port(node, ifname, addr, next(port_ids))

    for h in range(topo.hosts):
        topo.nodes[f"h{h}"] = Node(f"h{h}", "host", None, h)
    for p in range(topo.planes):
        t0s = [Node(f"p{p}.t0{switch_letter(i)}", "t0", p, i) for i in range(topo.t0_per_plane)]
        t1s = [Node(f"p{p}.t1{switch_letter(j)}", "t1", p, j) for j in range(topo.t1_per_plane)]
        for n in t0s + t1s:
            topo.nodes[n.name] = n
        gateway = ipaddress.IPv4Interface(f"{topo.gateway_address(p)}/32")
        for h in range(topo.hosts):
            t0 = t0s[h // topo.hosts_per_t0]
            host_ip = ipaddress.IPv4Interface(f"{topo.host_address(h, p)}/24")
            name = f"p{p}.{t0.local_name}-h{h}"
            topo.links[name] = Link(
                name,
                p,
                "host",
                upper=switch_port(t0.name, f"h{h}", gateway),
                lower=Port(f"h{h}", f"eth{p}", host_ip, None),
                rate_bps=topo.rate_bps,
            )
        fabric = plane_subnet(topo.fabric_net, p).network_address
        for i, t0 in enumerate(t0s):
            for j, t1 in enumerate(t1s):
                k = i * topo.t1_per_plane + j
                name = f"p{p}.{t1.local_name}-{t0.local_name}"
                topo.links[name] = Link(
                    name,
                    p,
                    "fabric",
                    upper=switch_port(
                        t1.name, t0.local_name, ipaddress.IPv4Interface(f"{fabric + 2 * k}/31")
                    ),
                    lower=switch_port(
                        t0.name, t1.local_name, ipaddress.IPv4Interface(f"{fabric + 2 * k + 1}/31")
                    ),
                    rate_bps=topo.fabric_rate_bps,
                )
