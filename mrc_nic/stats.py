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
queue and holds its BPF twin: packets the twin drops for want of buffer count
there as `drop_buffer`; the few the TBF itself may then drop count as passed
there, and the kernel's `queue_drops` of that port (in `ports[].kernel`)
counts them. Every switch port's egress counters also say what its queue
marked and trimmed (docs/queues.md).
Each fault reports `drops`: what it dropped since it was applied.

On top of the raw counters a snapshot holds per-plane and per-path
aggregates (aggregate.py), every QP of the NIC maps (qpstats.py) and the
NIC's outcome counters. `rates` fields are null in one snapshot; a stream
(stream.py) fills them from the previous one. docs/stats-schema.md is the
schema. A Sampler keeps maps and netlink sockets open so that a stream at
10 Hz costs little (scripts/bench_stats.py measures it).
"""

from __future__ import annotations

import os
import time

from mrc_nic import aggregate, faults, nic, qpstats, state
from mrc_nic.linkstats import LinkStatsReader
from mrc_nic.pins import MapsMissing
from mrc_nic.port_table import PortCounterTable
from mrc_nic.switchport import EGRESS, INGRESS
from mrc_nic.topology import Link, Topology

SCHEMA_VERSION = 1
# A stream reads the kernel at most about this often (see Sampler's kernel_every).
KERNEL_PERIOD = 0.5


def kernel_every(interval: float) -> int:
    """Every how many snapshots a stream at `interval` reads the kernel."""
    return max(1, round(KERNEL_PERIOD / interval))


def snapshot(lab: str, *, kernel: bool = True, ev_detail: bool = False) -> dict:
    """One snapshot of a lab's counters (rates null)."""
    with Sampler(lab, kernel=kernel, ev_detail=ev_detail) as sampler:
        return sampler.snapshot()


class Sampler:
    """Reads a lab's counters again and again through maps and sockets it keeps open.

    kernel: also read link state and counters from the kernel (netlink).
    kernel_every: read the kernel on every n-th snapshot only, reusing the last
    reading in between (`kernel_monotonic_ns` says when it was taken). At
    10 Hz the kernel's dumps cost more than all the BPF maps together.
    ev_detail: per-EV records in the QP section (`--by ev`).
    """

    def __init__(
        self, lab: str, *, kernel: bool = True, kernel_every: int = 1, ev_detail: bool = False
    ) -> None:
        if kernel_every < 1:
            raise ValueError(f"kernel_every must be at least 1, not {kernel_every}")
        self.lab = lab
        self.ev_detail = ev_detail
        self.kernel_every = kernel_every
        self._taken = 0
        self._kernel_info: dict = {}
        self._kernel_ns: int | None = None
        self.record, self.topo = faults.load_lab(lab)
        self._record_stamp = _file_stamp(state.state_path(lab))
        self._paths = aggregate.path_defs(self.topo)
        self._links = [_link_layout(link) for link in self.topo.links.values()]
        self._switch_ports = self.topo.switch_ports()
        self._summary = self.topo.summary()
        self._ports = PortCounterTable(lab)
        try:
            self._nic = _open_nic(lab)
        except BaseException:
            self._ports.close()
            raise
        nodes = {node: self.topo.netns(node) for node in self.topo.nodes}
        self._kernel = LinkStatsReader(nodes) if kernel else None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._ports.close()
        if self._nic is not None:
            self._nic.close()
        if self._kernel is not None:
            self._kernel.close()

    def _refresh_record(self) -> None:
        """Faults come and go while we read: reload the lab record when it changed."""
        stamp = _file_stamp(state.state_path(self.lab))
        if stamp != self._record_stamp:
            record = state.LabState.load(self.lab)
            if record is None or record.phase != "up":
                raise faults.FaultError(f"lab {self.lab!r} is not up any more")
            self.record, self._record_stamp = record, stamp

    def snapshot(self) -> dict:
        self._refresh_record()
        record = self.record
        counters = self._ports.read()
        # Rates divide by the time between two reads of the BPF counters.
        wall, mono_ns = time.time(), time.monotonic_ns()
        kernel = self._kernel is not None
        if kernel and self._taken % self.kernel_every == 0:
            self._kernel_info = self._kernel.read_all()
            self._kernel_ns = time.monotonic_ns()
        self._taken += 1
        kernel_info = self._kernel_info
        link_fault = {name: f["id"] for f in record.faults.values() for name in f["links"]}
        links = []
        for static, ends, (up, down) in self._links:
            end_info = [kernel_info.get(node, {}).get(ifname, {}) for node, ifname in ends]
            links.append(
                {
                    **static,
                    "state": _link_state(end_info) if kernel else None,
                    "fault": link_fault.get(static["name"]),
                    "up": counters.as_dict(*up),
                    "down": counters.as_dict(*down),
                    "rates": None,
                }
            )
        ports = [
            {
                "node": port.node,
                "ifname": port.ifname,
                "port_id": port.port_id,
                "plane": self.topo.nodes[port.node].plane,
                "ingress": counters.as_dict(port.port_id, INGRESS),
                "egress": counters.as_dict(port.port_id, EGRESS),
                "kernel": kernel_info.get(port.node, {}).get(port.ifname),
            }
            for port in self._switch_ports
        ]
        fault_rows = [
            dict(
                f,
                text=faults.describe(f),
                worker_alive=faults.worker_alive(f, self.lab),
                drops=faults.fault_drops(f, counters),
            )
            for f in record.faults.values()
        ]
        return {
            "schema": SCHEMA_VERSION,
            "lab": self.lab,
            "time": wall,
            "monotonic_ns": mono_ns,
            "kernel_monotonic_ns": self._kernel_ns,
            "interval_s": None,
            "topology": self._summary,
            "bringup_seconds": record.bringup_seconds,
            "hosts": _hosts(self.topo, kernel_info),
            "links": links,
            "ports": ports,
            "faults": fault_rows,
            "planes": aggregate.planes(self.topo.planes, links, kernel_info, ports),
            "paths": aggregate.paths(self._paths, links),
            "qps": qpstats.read(self._nic, ev_detail=self.ev_detail) if self._nic else [],
            "nic": {
                "counters": qpstats.nic_counters(self._nic) if self._nic else None,
                "rates": None,
            },
            "filter": {"host": None, "plane": None},
        }


def _open_nic(lab: str) -> nic.NicMaps | None:
    """The lab's NIC maps; None for a lab brought up without the NIC."""
    try:
        return nic.NicMaps.open(lab)
    except MapsMissing:
        return None


def _file_stamp(path: os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _link_layout(link: Link) -> tuple[dict, list[tuple[str, str]], list[tuple[int, int]]]:
    """What never changes about a link's record: its static fields, its two ends,
    and the (port_id, hook) where each direction is counted: the same place
    where a fault on that direction drops (faults.enforcement_points)."""
    static = {
        "name": link.name,
        "plane": link.plane,
        "kind": link.kind,
        "upper": f"{link.upper.node}:{link.upper.ifname}",
        "lower": f"{link.lower.node}:{link.lower.ifname}",
        "rate": link.rate_bps,
    }
    ends = [(p.node, p.ifname) for p in link.ends()]
    points = [faults.enforcement_points(link, d)[0] for d in ("up", "down")]
    return static, ends, points


def _link_state(ends: list[dict]) -> str:
    if not all(ends):
        return "missing"
    if all(e["admin_up"] and e["carrier"] for e in ends):
        return "up"
    return "down"


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
                        "rates": None,
                    }
                    for p in range(topo.planes)
                ],
            }
        )
    return hosts
