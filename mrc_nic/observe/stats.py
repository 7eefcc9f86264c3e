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
10 Hz costs little (scripts/bench_stats.py measures it): what never changes
about a record is worked out once, and counter records (links[].up/down,
ports[].ingress/egress, the kernel's, idle rates) are read-only dicts
(jsonenc.Frozen), the same object from one snapshot to the next while their
numbers stay, so that the stream's JSON encoder reuses their text. Copy one
(dict(record)) to change it.
"""

from __future__ import annotations

import operator
import os
import time
from typing import TYPE_CHECKING

from mrc_nic.fabric import faults
from mrc_nic.fabric.switchport import EGRESS, INGRESS, port_key
from mrc_nic.kernel.pins import MapsMissing
from mrc_nic.lab import state
from mrc_nic.lab.topology import Link, Port, Topology
from mrc_nic.observe import aggregate
from mrc_nic.observe.jsonenc import Frozen
from mrc_nic.observe.linkstats import LinkStatsReader
from mrc_nic.observe.port_table import ZERO, PortCounterTable

if TYPE_CHECKING:
    from mrc_nic.nic import NicMaps

SCHEMA_VERSION = 1
# A stream reads the kernel at most about this often (see Sampler's kernel_every).
KERNEL_PERIOD = 0.5


def kernel_every(interval: float) -> int:
    """Every how many snapshots a stream at `interval` reads the kernel."""
    return max(1, round(KERNEL_PERIOD / interval))


def snapshot(lab: str, *, kernel: bool = True, ev_detail: bool = False, nic: bool = True) -> dict:
    """One snapshot of a lab's counters (rates null). nic=False: without the
    NIC's counters and QPs (`status`'s tables: the NIC maps' code is a third
    of a short command's time)."""
    with Sampler(lab, kernel=kernel, ev_detail=ev_detail, nic=nic) as sampler:
        return sampler.snapshot()


class Sampler:
    """Reads a lab's counters again and again through maps and sockets it keeps open.

    kernel: also read link state and counters from the kernel (netlink).
    kernel_every: read the kernel on every n-th snapshot only, reusing the last
    reading in between (`kernel_monotonic_ns` says when it was taken). At
    10 Hz the kernel's dumps cost more than all the BPF maps together.
    ev_detail: per-EV records in the QP section (`--by ev`).
    nic: read the NIC's counters and QPs (False: the section is empty).
    """

    def __init__(
        self,
        lab: str,
        *,
        kernel: bool = True,
        kernel_every: int = 1,
        ev_detail: bool = False,
        nic: bool = True,
    ) -> None:
        if kernel_every < 1:
            raise ValueError(f"kernel_every must be at least 1, not {kernel_every}")
        self.lab = lab
        self.ev_detail = ev_detail
        self.kernel_every = kernel_every
        self._taken = 0
        self._kernel_info: dict = {}
        self._kernel_ns: int | None = None
        self.record, self.topo = state.open_lab(lab)
        self._record_stamp = _file_stamp(state.state_path(lab))
        # What never changes, worked out once: the static fields of every record
        # and where its counters are (port keys, kernel interfaces).
        self._paths = aggregate.path_defs(self.topo)
        self._links = [_link_layout(link) for link in self.topo.links.values()]
        self._port_layout = [_port_layout(self.topo, port) for port in self.topo.switch_ports()]
        self._host_layout = _host_layout(self.topo)
        self._summary = self.topo.summary()
        # From the last kernel reading (see _from_kernel): link states, each port's
        # record, the queue drops of each plane. Without the kernel: all None.
        self._kernel_of: object = None  # that reading
        self._states: list[str | None] = [None] * len(self._links)
        self._port_kernel: list[dict | None] = [None] * len(self._port_layout)
        self._host_kernel: list[dict | None] = [None] * sum(len(p) for _, _, p in self._host_layout)
        self._queue_drops: dict[int, int] | None = None
        self._statics = [static for static, _, _, _ in self._links]
        self._path_positions = aggregate.path_positions(
            self._paths, [static["name"] for static in self._statics]
        )
        self._plane_groups = aggregate.plane_groups(
            self.topo.planes, self._statics, [static for static, *_ in self._port_layout]
        )
        # Per record, what it was made of and the record (see _same_or_new).
        self._made_links: list = [None] * len(self._links)
        self._made_ports: list = [None] * len(self._port_layout)
        self._made_host_ports: list = [None] * len(self._host_kernel)
        self._made_paths: list = [None] * len(self._paths)
        self._made_planes: list = [None] * self.topo.planes
        self._ports = PortCounterTable(lab)
        self._nic = self._nic_counters = self._qps = None
        try:
            if nic:
                from mrc_nic.observe import qpstats  # the NIC maps' code, only when read

                self._nic = _open_nic(lab)
                self._nic_counters = qpstats.NicCounterReader(self._nic) if self._nic else None
                self._qps = qpstats.QpReader(self._nic) if self._nic else None
        except BaseException:
            self._ports.close()
            if getattr(self, "_nic", None) is not None:
                self._nic.close()
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
                raise state.LabNotUp(f"lab {self.lab!r} is not up any more")
            self.record, self._record_stamp = record, stamp

    def _from_kernel(self, kernel_info: dict) -> None:
        """What the records take from a new kernel reading, worked out once for it."""
        self._states = [_link_state(kernel_info, ends) for _, ends, _, _ in self._links]
        self._port_kernel = [
            kernel_info.get(node, {}).get(ifname) for *_, node, ifname in self._port_layout
        ]
        self._host_kernel = [
            kernel_info.get(name, {}).get(static["ifname"])
            for name, _, ports in self._host_layout
            for static in ports
        ]
        self._queue_drops = aggregate.plane_queue_drops(
            self.topo.planes, self._statics, kernel_info
        )
        self._kernel_of = kernel_info

    def _hosts(self) -> list[dict]:
        hosts = []
        at = 0
        for name, netns, ports in self._host_layout:
            records = []
            for static in ports:
                parts = (self._host_kernel[at],)
                records.append(
                    _same_or_new(
                        self._made_host_ports, at, parts, static, _HOST_PORT_PARTS, _NO_RATES
                    )
                )
                at += 1
            hosts.append({"name": name, "netns": netns, "ports": records})
        return hosts

    def snapshot(self) -> dict:
        self._refresh_record()
        record = self.record
        rows = self._ports.read().rows
        # Rates divide by the time between two reads of the BPF counters.
        wall, mono_ns = time.time(), time.monotonic_ns()
        kernel = self._kernel is not None
        if kernel and self._taken % self.kernel_every == 0:
            self._kernel_info = self._kernel.read_all()
            self._kernel_ns = time.monotonic_ns()
        self._taken += 1
        kernel_info = self._kernel_info
        if kernel and kernel_info is not self._kernel_of:
            self._from_kernel(kernel_info)
        link_fault = {name: f["id"] for f in record.faults.values() for name in f["links"]}
        # Records are read-only and stay the same object while what they are made
        # of does: an idle link costs neither its rates nor its JSON text again.
        links = []
        made = self._made_links
        for i, ((static, _, up_key, down_key), link_state) in enumerate(
            zip(self._links, self._states, strict=True)
        ):
            parts = (
                link_state,
                link_fault.get(static["name"]) if link_fault else None,
                rows.get(up_key, ZERO),
                rows.get(down_key, ZERO),
            )
            links.append(_same_or_new(made, i, parts, static, _LINK_PARTS, _NO_RATES))
        ports = []
        made = self._made_ports
        for i, ((static, ingress, egress, _, _), port_kernel) in enumerate(
            zip(self._port_layout, self._port_kernel, strict=True)
        ):
            parts = (rows.get(ingress, ZERO), rows.get(egress, ZERO), port_kernel)
            ports.append(_same_or_new(made, i, parts, static, _PORT_PARTS))
        fault_rows = [
            dict(
                f,
                text=faults.describe(f),
                worker_alive=faults.worker_alive(f, self.lab),
                drops=faults.fault_drops(f, self._ports),
                drops_counted=f["mode"] in faults.BPF_MODES,
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
            "hosts": self._hosts(),
            "links": links,
            "ports": ports,
            "faults": fault_rows,
            "planes": aggregate.planes(
                self.topo.planes,
                links,
                kernel_info,
                ports,
                queue_drops=self._queue_drops,
                made=self._made_planes,
                groups=self._plane_groups,
            ),
            "paths": aggregate.paths(self._paths, links, self._made_paths, self._path_positions),
            "qps": self._qps.read(ev_detail=self.ev_detail) if self._qps else [],
            "nic": {
                "counters": self._nic_counters.read() if self._nic_counters else None,
                "rates": None,
            },
            "filter": {"host": None, "plane": None},
        }


def _open_nic(lab: str) -> NicMaps | None:
    """The lab's NIC maps; None for a lab brought up without the NIC."""
    from mrc_nic.nic import NicMaps

    try:
        return NicMaps.open(lab)
    except MapsMissing:
        return None


def _file_stamp(path: os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _link_layout(link: Link) -> tuple[dict, list[tuple[str, str]], int, int]:
    """What never changes about a link's record: its static fields, its two ends,
    and the port keys where each direction is counted: the same place where a
    fault on that direction drops (faults.enforcement_points)."""
    static = {
        "name": link.name,
        "plane": link.plane,
        "kind": link.kind,
        "upper": f"{link.upper.node}:{link.upper.ifname}",
        "lower": f"{link.lower.node}:{link.lower.ifname}",
        "rate": link.rate_bps,
    }
    ends = [(p.node, p.ifname) for p in link.ends()]
    up, down = (port_key(*faults.enforcement_points(link, d)[0]) for d in ("up", "down"))
    return static, ends, up, down


def _port_layout(topo: Topology, port: Port) -> tuple[dict, int, int, str, str]:
    static = {
        "node": port.node,
        "ifname": port.ifname,
        "port_id": port.port_id,
        "plane": topo.nodes[port.node].plane,
    }
    ingress, egress = port_key(port.port_id, INGRESS), port_key(port.port_id, EGRESS)
    return static, ingress, egress, port.node, port.ifname


def _link_state(kernel_info: dict, ends: list[tuple[str, str]]) -> str:
    info = [kernel_info.get(node, {}).get(ifname) for node, ifname in ends]
    if not all(info):
        return "missing"
    if all(e["admin_up"] and e["carrier"] for e in info):
        return "up"
    return "down"


def _host_layout(topo: Topology) -> list[tuple[str, str, list[dict]]]:
    """(name, namespace, the static fields of each port) of every host."""
    return [
        (
            name,
            topo.netns(name),
            [
                {
                    "ifname": f"eth{p}",
                    "plane": p,
                    "address": str(topo.host_address(topo.nodes[name].index, p)),
                }
                for p in range(topo.planes)
            ],
        )
        for name in topo.host_names()
    ]


_LINK_PARTS = ("state", "fault", "up", "down")
_PORT_PARTS = ("ingress", "egress", "kernel")
_HOST_PORT_PARTS = ("kernel",)
_NO_RATES = {"rates": None}
_NO_TAIL: dict = {}


def _same_or_new(
    made: list, i: int, parts: tuple, static: dict, names: tuple[str, ...], tail: dict = _NO_TAIL
) -> Frozen:
    """Record i: {**static, names: parts, **tail}, read-only; the same object as
    the last time if every part is the same object as then (made[i] remembers)."""
    last = made[i]
    if last is not None and all(map(operator.is_, parts, last[0])):
        return last[1]
    record = Frozen({**static, **dict(zip(names, parts, strict=True)), **tail})
    made[i] = (parts, record)
    return record
