"""Switch egress queues: ECN marking, trimming and buffer drops, per port.

Every switch egress port of a capped link has two queues at the link rate:
the real one (a TBF, so queueing delay is real; fabric.py) and its twin in
the BPF port program (struct sp_queue, bpf/switch_port.h), which decides
marks, trims and drops from the backlog it computes. This module derives each
port's twin from the topology ([queues], [links].buffer), writes it at `up`,
and changes it at run time (`mrc-nic port set`).

Thresholds are per port: a fraction of its BDP (its link's rate x the base
RTT of [queues]) or bytes. Ports that face a host (T0 -> host, the last hop)
trim with the TRIMMED_LASTHOP DSCP and, unless [queues].ecn_last_hop, do not
mark: in MRC a mark then means path imbalance, never incast at the receiver.
"""

from __future__ import annotations

import dataclasses
import difflib
import time

from mrc_nic.errors import MrcNicError
from mrc_nic.fabric.switchport import EGRESS, QueueSettings, SwitchPortMaps, twin_backlog
from mrc_nic.lab import state
from mrc_nic.lab.topology import Link, Port, Topology, tbf_burst_bytes
from mrc_nic.units import Threshold

QUEUE_COUNTERS = ("enqueued", "ecn_marked", "trimmed", "drop_buffer", "backlog_hwm")


class QueueError(MrcNicError, ValueError):
    """A queue setting or a port name is wrong; nothing was changed."""


@dataclasses.dataclass(frozen=True)
class PortRef:
    """A switch port and its link."""

    port: Port
    link: Link

    @property
    def name(self) -> str:
        return f"{self.port.node}:{self.port.ifname}"

    @property
    def lasthop(self) -> bool:
        """It faces a host: the last hop of traffic going down."""
        return self.link.kind == "host" and self.port == self.link.upper


def port_settings(topo: Topology, ref: PortRef) -> QueueSettings | None:
    """The twin the topology gives a port; None for an uncapped link (no queue)."""
    rate = ref.link.rate_bps
    if rate is None:
        return None
    q = topo.queues
    bdp = q.bdp_bytes(rate)
    return QueueSettings(
        rate_bps=rate,
        buffer=topo.buffer_bytes,
        kmin=q.kmin.resolve(bdp),
        kmax=q.kmax.resolve(bdp),
        trim=None if q.trim is None else q.trim.resolve(bdp),
        ecn=q.ecn and (q.ecn_last_hop or not ref.lasthop),
        lasthop=ref.lasthop,
        burst=tbf_burst_bytes(rate, topo.mtu),
        seed=(q.seed + ref.port.port_id) % (1 << 64),
    )


def switch_ports(topo: Topology) -> list[PortRef]:
    """Every switch port with its link, by port id."""
    refs = [
        PortRef(port, link)
        for link in topo.links.values()
        for port in link.ends()
        if port.port_id is not None
    ]
    return sorted(refs, key=lambda r: r.port.port_id)


def configure(topo: Topology) -> None:
    """Write every switch port's twin from the topology (at `up`)."""
    with SwitchPortMaps.open(topo.lab) as maps:
        for ref in switch_ports(topo):
            settings = port_settings(topo, ref)
            if settings is None:
                maps.clear_queue(ref.port.port_id, EGRESS)
            else:
                maps.set_queue(ref.port.port_id, EGRESS, settings)


# ---- targets -------------------------------------------------------------------

TARGET_HELP = (
    "give a switch port (p0.t1a:t0a), a link (p0.t1a-t0a: its switch ends), a switch "
    "(p0.t0a), 'plane N' or 'all'; `mrc-nic port show` lists the ports"
)


def resolve_ports(topo: Topology, words: tuple[str, ...]) -> list[PortRef]:
    """The switch ports a target names (see TARGET_HELP)."""
    refs = switch_ports(topo)
    words = tuple(w for w in words if w)
    if words in ((), ("all",)):
        return refs
    if len(words) == 2 and words[0] == "plane":
        try:
            plane = int(words[1])
        except ValueError:
            raise QueueError(f"plane must be a number, got {words[1]!r}") from None
        if not 0 <= plane < topo.planes:
            raise QueueError(f"no plane {plane}: this lab has planes 0..{topo.planes - 1}")
        return [r for r in refs if r.link.plane == plane]
    if len(words) != 1:
        raise QueueError(f"cannot read target {' '.join(words)!r}: {TARGET_HELP}")
    name = words[0]
    by_port = {r.name: r for r in refs}
    if name in by_port:
        return [by_port[name]]
    node, sep, ifname = name.partition(":")
    if sep and node in topo.nodes and not topo.nodes[node].is_switch:
        raise QueueError(f"{name} is a host port: hosts have no switch queue; {TARGET_HELP}")
    link = topo.links.get(name) or topo.links.get(_reversed_link(name))
    if link is not None:
        return [r for r in refs if r.link == link]
    if name in topo.nodes and topo.nodes[name].is_switch:
        return [r for r in refs if r.port.node == name]
    close = difflib.get_close_matches(name, list(by_port) + list(topo.links), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise QueueError(f"unknown port {name!r}{hint}: {TARGET_HELP}")


def _reversed_link(name: str) -> str:
    plane, _, rest = name.partition(".")
    a, _, b = rest.partition("-")
    return f"{plane}.{b}-{a}" if a and b else name


# ---- run time --------------------------------------------------------------------

OFF = "off"  # QueueChange.trim: stop trimming
NOTHING_TO_CHANGE = (
    "nothing to change: give --kmin, --kmax, --trim, --buffer, --ecn/--no-ecn, --seed or --defaults"
)


@dataclasses.dataclass(frozen=True)
class QueueChange:
    """What `mrc-nic port set` changes; None leaves a setting as it is."""

    ecn: bool | None = None
    kmin: Threshold | None = None
    kmax: Threshold | None = None
    trim: Threshold | str | None = None  # OFF: no trimming
    buffer: Threshold | None = None
    seed: int | None = None
    defaults: bool = False  # start from the topology's settings

    def is_empty(self) -> bool:
        return self == QueueChange()

    def applied(self, settings: QueueSettings, bdp: int) -> QueueSettings:
        out = dataclasses.replace(settings)
        if self.ecn is not None:
            out = dataclasses.replace(out, ecn=self.ecn)
        for name in ("kmin", "kmax", "buffer"):
            value = getattr(self, name)
            if value is not None:
                out = dataclasses.replace(out, **{name: value.resolve(bdp)})
        if self.trim == OFF:
            out = dataclasses.replace(out, trim=None)
        elif isinstance(self.trim, Threshold):
            out = dataclasses.replace(out, trim=self.trim.resolve(bdp))
        if self.seed is not None:
            out = dataclasses.replace(out, seed=self.seed)
        return out


def set_ports(lab: str, words: tuple[str, ...], change: QueueChange) -> list[dict]:
    """Change the twins of the target's ports, all or none; return their rows.

    Writing a twin empties it and restarts its marking draws. A new buffer
    also resizes the port's real queue (its TBF limit)."""
    from mrc_nic.fabric.builder import Fabric

    if change.is_empty():
        raise QueueError(NOTHING_TO_CHANGE)
    with state.locked(lab):
        _, topo = state.open_lab(lab)
        refs = resolve_ports(topo, words)
        with SwitchPortMaps.open(lab) as maps:
            plan = []
            for ref in refs:
                current = maps.queue(ref.port.port_id, EGRESS)
                if current is None:
                    if len(refs) > 1:
                        continue  # a switch or plane target: skip its uncapped links
                    raise QueueError(
                        f"{ref.name} has no queue: its link {ref.link.name} is uncapped (rate none)"
                    )
                base = port_settings(topo, ref) if change.defaults else current
                new = change.applied(base, topo.queues.bdp_bytes(current.rate_bps))
                try:
                    new.check()
                except ValueError as e:
                    raise QueueError(f"{ref.name}: {e}") from None
                plan.append((ref, current, new))
            if not plan:
                raise QueueError(f"no queue on {' '.join(words)}: its links are uncapped")
            resized = [(ref, new.buffer) for ref, cur, new in plan if new.buffer != cur.buffer]
            if resized:
                with Fabric(topo) as fabric:
                    for ref, buffer in resized:
                        fabric.set_queue_buffer(ref.link, ref.port, buffer)
            for ref, _, new in plan:
                maps.set_queue(ref.port.port_id, EGRESS, new)
            return [_row(topo, maps, ref) for ref, _, _ in plan]


def show_ports(lab: str, words: tuple[str, ...]) -> list[dict]:
    """The twin of each of the target's ports: settings, backlog now, counters."""

    _, topo = state.open_lab(lab)
    refs = resolve_ports(topo, words)
    with SwitchPortMaps.open(lab) as maps:
        return [_row(topo, maps, ref) for ref in refs]


def _row(topo: Topology, maps: SwitchPortMaps, ref: PortRef) -> dict:
    pid = ref.port.port_id
    raw = maps.queue_layout(pid, EGRESS)
    settings = maps.queue(pid, EGRESS)
    counters = maps.counters(pid, EGRESS).as_dict()
    row: dict = {
        "port": ref.name,
        "port_id": pid,
        "link": ref.link.name,
        "plane": ref.link.plane,
        "lasthop": ref.lasthop,
        "queue": None,
        "counters": {k: counters[k] for k in QUEUE_COUNTERS},
    }
    if settings is not None:
        row["queue"] = {
            **dataclasses.asdict(settings),
            "bdp": topo.queues.bdp_bytes(settings.rate_bps),
            "backlog": twin_backlog(raw, time.monotonic_ns()),
        }
    return row
