"""Faults: break links on purpose, live, and heal them.

A fault targets a link, a switch (all its links), a host port, a host (all
its ports) or a whole plane, in one of four modes:

  down       admin down on both ends, so both lose carrier; routes through
             the link are flushed by the kernel and restored by heal.
  blackhole  silent drop with carrier up (the gray failure MRC is built for),
             in the BPF switch port program, one direction or both.
  loss       random drop at a rate, reproducible from a seed, also in BPF.
  flap       down and up every period/2, driven by a worker process.

Where a drop happens: traffic going up a link (host->T0, T0->T1) is dropped
on ingress of the upper switch port; traffic going down on ingress of the
lower port when that is a switch, else on egress of the upper port (hosts
carry no fault program). Timed faults end on their own: BPF ignores a
blackhole or loss past its until_ns, and a worker process heals the record
(and the carrier, for down and flap) when the time is up.

A link carries at most one fault at a time, which keeps heal unambiguous.

A fault on one EV of one QP (`mrc-nic fail qp QPN ev EV --mode loss --rate
0.2`) drops, or blackholes, only the data packets of that QP sent with that
EV (UDP source port) where they enter the fabric: at ingress of the T0 port
facing the sender on the EV's plane (struct sp_ev_fault, bpf/switch_port.h).
It holds no link, so other faults can share the path. An EV that the NIC
replaces (transport.evreplace) leaves it: the fresh EV's packets pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from mrc_nic.errors import MrcNicError
from mrc_nic.fabric.switchport import EGRESS, INGRESS, FaultMode, SwitchPortMaps
from mrc_nic.lab import state
from mrc_nic.lab.topology import Link, Topology

# mrc_nic.lab.client (sockets, the event protocol) and mrc_nic.lab.workers
# (subprocess) are imported where an event is posted or a worker run: `status`
# and a `heal` with nothing to heal start faster without them (issue 19).

MODES = ("down", "blackhole", "loss", "flap")
DIRECTIONS = ("both", "up", "down")
BPF_MODES = {"blackhole": FaultMode.BLACKHOLE, "loss": FaultMode.LOSS}
MIN_FLAP_PERIOD = 0.02


class FaultError(MrcNicError, ValueError):
    """A fault request is wrong or cannot be applied; nothing was changed."""


@dataclass
class FaultSpec:
    mode: str
    direction: str = "both"
    rate: float | None = None
    seed: int | None = None
    period: float | None = None
    duration: float | None = None

    def validate(self) -> None:
        if self.mode not in MODES:
            raise FaultError(f"unknown mode {self.mode!r}; choose one of: {', '.join(MODES)}")
        if self.direction not in DIRECTIONS:
            raise FaultError(f"--direction must be one of {', '.join(DIRECTIONS)}")
        if self.mode in ("down", "flap") and self.direction != "both":
            raise FaultError(
                f"--mode {self.mode} takes the carrier away in both directions; "
                "drop --direction, or use --mode blackhole for one direction"
            )
        if self.mode == "loss":
            if self.rate is None or not 0.0 < self.rate <= 1.0:
                raise FaultError("--mode loss needs --rate R with 0 < R <= 1 (0.2 = 20%)")
        elif self.rate is not None:
            raise FaultError("--rate goes with --mode loss only")
        if self.seed is not None and self.mode != "loss":
            raise FaultError("--seed goes with --mode loss only")
        if self.mode == "flap":
            if self.period is None or self.period < MIN_FLAP_PERIOD:
                raise FaultError(
                    f"--mode flap needs --period T of at least "
                    f"{MIN_FLAP_PERIOD * 1000:.0f}ms (e.g. --period 200ms)"
                )
        elif self.period is not None:
            raise FaultError("--period goes with --mode flap only")
        if self.duration is not None and self.duration <= 0:
            raise FaultError("--duration must be positive (e.g. 2s, 500ms)")


# ---- targets ---------------------------------------------------------------
def resolve_target(topo: Topology, words: tuple[str, ...]) -> tuple[str, list[Link]]:
    """('plane', '2') | ('p1.t0a-h0',) | ('p1.t0a',) | ('h0.eth1',) | ('h0',)."""
    words = tuple(w for w in words if w)
    if words and words[0] in ("link", "switch", "port", "host"):
        words = words[1:]  # optional kind word: 'fail switch p1.t0a'
    if len(words) == 2 and words[0] == "plane":
        try:
            plane = int(words[1])
        except ValueError:
            raise FaultError(
                f"plane must be a number 0..{topo.planes - 1}, got {words[1]!r}"
            ) from None
        if not 0 <= plane < topo.planes:
            raise FaultError(f"no plane {plane}: this lab has planes 0..{topo.planes - 1}")
        return f"plane {plane}", topo.links_of_plane(plane)
    if len(words) != 1:
        raise FaultError(f"cannot read target {' '.join(words)!r}: {TARGET_HELP}")
    name = words[0]
    if name in topo.links:
        return name, [topo.links[name]]
    reversed_name = _reverse_link_name(name)
    if reversed_name in topo.links:
        return reversed_name, [topo.links[reversed_name]]
    if name in topo.nodes:
        node = topo.nodes[name]
        links = topo.links_of(name)
        return (f"switch {name}" if node.is_switch else f"host {name}"), links
    host, _, ifname = name.replace(":", ".").partition(".")
    if host in topo.nodes and not topo.nodes[host].is_switch and ifname:
        try:
            return name, [topo.host_port_link(host, ifname)]
        except KeyError:
            pass
    choices = list(topo.links) + list(topo.nodes)
    import difflib  # only to suggest a name after a typo

    close = difflib.get_close_matches(name, choices, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise FaultError(f"unknown target {name!r}{hint}: {TARGET_HELP}")


TARGET_HELP = (
    "give a link (p1.t0a-h0), a switch (p1.t0a), a host port (h0.eth1), a host (h0) "
    "or 'plane N'; `mrc-nic status` lists them"
)


def _reverse_link_name(name: str) -> str:
    plane, _, rest = name.partition(".")
    a, _, b = rest.partition("-")
    return f"{plane}.{b}-{a}" if a and b else name


def enforcement_points(link: Link, direction: str) -> list[tuple[int, int]]:
    """(port_id, INGRESS|EGRESS) where each direction of the link is dropped."""
    points = []
    if direction in ("both", "up"):
        points.append((link.upper.port_id, INGRESS))
    if direction in ("both", "down"):
        if link.lower.port_id is not None:
            points.append((link.lower.port_id, INGRESS))
        else:
            points.append((link.upper.port_id, EGRESS))
    return points


def resolve_ev_target(topo: Topology, words: tuple[str, ...]) -> dict | None:
    """('qp', QPN, 'ev', EV): where a fault on one EV of one send QP applies;
    None for other targets."""
    words = tuple(w for w in words if w)
    if not words or words[0] != "qp":
        return None
    usage = "give 'qp QPN ev EV' (e.g. qp 0x10001 ev 49153; `mrc-nic ev list QPN` lists its EVs)"
    if len(words) != 4 or words[2] != "ev":
        raise FaultError(f"cannot read target {' '.join(words)!r}: {usage}")
    try:
        qpn, ev = int(words[1], 0), int(words[3], 0)
    except ValueError:
        raise FaultError(f"QPN and EV are numbers: {usage}") from None
    from mrc_nic import nic

    with nic.NicMaps.open(topo.lab) as maps:
        try:
            dqpn = maps.sq_raw(qpn).peer_qpn
        except KeyError:
            raise FaultError(
                f"no send QP {qpn:#x} in lab {topo.lab!r} (see mrc-nic qp list)"
            ) from None
        try:
            plane = maps.ev(qpn, ev).plane
        except KeyError:
            raise FaultError(f"QP {qpn:#x} has no EV {ev} (see mrc-nic ev list {qpn:#x})") from None
    host = topo.host_of_qpn(qpn)
    if host is None:
        raise FaultError(f"QP {qpn:#x} belongs to no host of lab {topo.lab!r}")
    link = topo.host_port_link(host, f"eth{plane}")
    port_id, direction = enforcement_points(link, "up")[0]
    return {
        "qpn": qpn,
        "dqpn": dqpn,
        "ev": ev,
        "plane": plane,
        "link": link.name,
        "port_id": port_id,
        "direction": direction,
    }


# ---- apply and heal ----------------------------------------------------------
def apply(lab: str, target: tuple[str, ...], spec: FaultSpec) -> dict:
    """Put a fault in force; return its record (with its id)."""
    spec.validate()
    with state.locked(lab):
        record, topo = state.open_lab(lab)
        ev_target = resolve_ev_target(topo, target)
        if ev_target is not None:
            if spec.mode not in BPF_MODES or spec.direction != "both":
                raise FaultError(
                    "a fault on one EV is --mode loss or blackhole on the packets it "
                    "carries (no --direction): e.g. --mode loss --rate 0.2"
                )
            label = f"QP {ev_target['qpn']:#x} EV {ev_target['ev']}"
            links = []
            for f in record.faults.values():
                other = f.get("ev_target") or {}
                if (other.get("qpn"), other.get("ev")) == (ev_target["qpn"], ev_target["ev"]):
                    raise FaultError(
                        f"{label} already has fault {f['id']}; heal it first: "
                        f"mrc-nic heal {f['id']}"
                    )
        else:
            label, links = resolve_target(topo, target)
        busy = {name: fid for fid, f in record.faults.items() for name in f["links"]}
        for link in links:
            if link.name in busy:
                other = record.faults[busy[link.name]]
                raise FaultError(
                    f"link {link.name} already has fault {busy[link.name]} "
                    f"({other['mode']} on {other['target']}); heal it first: "
                    f"mrc-nic heal {busy[link.name]}"
                )
        fault_id = record.next_fault_id
        now_wall, now_mono = time.time(), time.monotonic_ns()
        seed = spec.seed if spec.seed is not None else int.from_bytes(os.urandom(4))
        fault = {
            "id": fault_id,
            "target": label,
            "mode": spec.mode,
            "direction": spec.direction,
            "links": [lk.name for lk in links],
            "rate": spec.rate,
            "seed": seed if spec.mode == "loss" else None,
            "period": spec.period,
            "duration": spec.duration,
            "started": now_wall,
            "until": now_wall + spec.duration if spec.duration else None,
            "until_ns": now_mono + int(spec.duration * 1e9) if spec.duration else 0,
            "worker_pid": None,
            "drop_baseline": {},
        }
        if ev_target is not None:
            fault["ev_target"] = ev_target
        # Record first, then act: a crash in between leaves a fault that
        # `heal` and `down` can see and undo (lifting is idempotent).
        record.faults[str(fault_id)] = fault
        record.next_fault_id = fault_id + 1
        record.save()
        # The event log hears of it before it acts: the fault's record comes
        # before the EV changes it causes (the log numbers what the NIC wrote
        # before the post first).
        from mrc_nic.lab import client

        client.post_event(lab, {"type": "fault", **_event_fields(fault)})  # timed by the log
        try:
            _enforce(topo, links, fault)
        except BaseException as e:
            _lift(topo, fault)
            del record.faults[str(fault_id)]
            record.save()
            undone = {"type": "heal", "note": f"not applied: {e}"}
            client.post_event(lab, {**undone, **_event_fields(fault)})
            raise
        if spec.duration or spec.mode == "flap":
            from mrc_nic.lab import workers

            fault["worker_pid"] = workers.spawn(lab, fault_id)
        record.save()
    return fault


def _event_fields(fault: dict) -> dict:
    keys = ("id", "target", "mode", "direction", "links", "rate", "seed", "period", "duration")
    return {k: fault[k] for k in keys if fault.get(k) is not None}


def _enforce(topo: Topology, links: list[Link], fault: dict) -> None:
    mode = fault["mode"]
    if fault.get("ev_target"):
        t = fault["ev_target"]
        with SwitchPortMaps.open(topo.lab) as maps:
            maps.set_ev_fault(
                t["port_id"],
                t["direction"],
                t["dqpn"],
                t["ev"],
                BPF_MODES[mode],
                loss_rate=fault["rate"] or 0.0,
                seed=fault["seed"] or 0,
                until_ns=fault["until_ns"],
                fault_id=fault["id"],
            )
    elif mode in BPF_MODES:
        with SwitchPortMaps.open(topo.lab) as maps:
            for link in links:
                for port_id, direction in enforcement_points(link, fault["direction"]):
                    # Drops so far at this point, so the fault's own count is
                    # what it adds (stats.fault_drops).
                    fault["drop_baseline"][point_key(port_id, direction)] = maps.counters(
                        port_id, direction
                    ).fault_drops
                    maps.set_fault(
                        port_id,
                        direction,
                        BPF_MODES[mode],
                        loss_rate=fault["rate"] or 0.0,
                        seed=fault["seed"] or 0,
                        until_ns=fault["until_ns"],
                        fault_id=fault["id"],
                    )
    elif mode == "down":
        from mrc_nic.fabric.builder import Fabric  # pyroute2: only where carrier changes

        # Links go down here one at a time (a few ms each on a loaded machine)
        # where an outage takes them at once. Host links first: the hosts'
        # ports see it first, as they would, and their NICs leave the plane
        # at once (port-down signalling) instead of first meeting a partial
        # failure that is only an artefact of the order.
        with Fabric(topo) as fabric:
            for link in sorted(links, key=lambda link: link.kind != "host"):
                fabric.set_link_state(link, up=False)
    # flap: the worker starts toggling as soon as it runs.


def heal(
    lab: str,
    ids: list[int] | None = None,
    target: tuple[str, ...] = (),
    *,
    from_worker: bool = False,
) -> list[dict]:
    """Heal faults by id, by target (every fault on those links), or all of them."""
    with state.locked(lab):
        record, topo = state.open_lab(lab)
        if target:
            _, links = resolve_target(topo, target)
            names = {lk.name for lk in links}
            chosen = [f for f in record.faults.values() if names & set(f["links"])]
            if not chosen:
                raise FaultError(f"no fault in force on {' '.join(target)}")
        elif ids is not None:
            missing = [i for i in ids if str(i) not in record.faults]
            if missing and not from_worker:
                have = ", ".join(record.faults) or "none"
                raise FaultError(f"no fault with id {missing[0]} (faults in force: {have})")
            chosen = [record.faults[str(i)] for i in ids if str(i) in record.faults]
        else:
            chosen = list(record.faults.values())
        from mrc_nic.lab import client

        for fault in chosen:
            if not from_worker:
                from mrc_nic.lab import workers

                workers.stop(fault.get("worker_pid"), lab)
            # Like a fault's, a heal's record goes to the log (which times it)
            # before it acts: what the daemons do once the links carry again
            # comes after it.
            fault["healed"] = time.time()
            event = {"type": "heal", **_event_fields(fault)}
            client.post_event(lab, event, source="fault_worker" if from_worker else "cli")
            _lift(topo, fault)
            del record.faults[str(fault["id"])]
            record.save()  # per fault: if a later one fails, the record matches the kernel
    return chosen


def _lift(topo: Topology, fault: dict) -> None:
    links = [topo.links[name] for name in fault["links"]]
    if fault.get("ev_target"):
        t = fault["ev_target"]
        with SwitchPortMaps.open(topo.lab) as maps:
            last = maps.clear_ev_fault(t["port_id"], t["direction"], t["dqpn"], t["ev"])
        if last is not None:
            fault["ev_counts"] = {"pkts": last["pkts"], "dropped": last["dropped"]}
    elif fault["mode"] in BPF_MODES:
        with SwitchPortMaps.open(topo.lab) as maps:
            for link in links:
                for port_id, direction in enforcement_points(link, fault["direction"]):
                    if maps.fault(port_id, direction).get("fault_id") == fault["id"]:
                        maps.clear_fault(port_id, direction)
    else:
        from mrc_nic.fabric.builder import Fabric  # pyroute2: only where carrier changes

        with Fabric(topo) as fabric:
            for link in links:
                fabric.set_link_state(link, up=True)
            fabric.restore_routes({n for lk in links for n in (lk.upper.node, lk.lower.node)})


def describe(fault: dict) -> str:
    """'blackhole up' / 'loss 20% seed 7' / 'flap 200ms' (+ time left)."""
    words = [fault["mode"]]
    if fault["mode"] == "loss":
        words.append(f"{fault['rate'] * 100:g}% seed {fault['seed']}")
    if fault["mode"] == "flap":
        words.append(f"{fault['period'] * 1000:g}ms")
    if fault["direction"] != "both":
        words.append(fault["direction"])
    if fault.get("until"):
        left = fault["until"] - time.time()
        words.append(f"{left:.1f}s left" if left > 0 else "expired")
    return " ".join(words)


def worker_alive(fault: dict, lab: str) -> bool | None:
    pid = fault.get("worker_pid")
    from mrc_nic.lab import workers

    return None if not pid else workers.is_worker(pid, lab, fault["id"])


def point_key(port_id: int, direction: int) -> str:
    return f"{port_id}/{direction}"


def fault_drops(fault: dict, maps: SwitchPortMaps) -> int | None:
    """Packets this fault dropped so far (BPF modes; buffer drops at the same
    point are not its); None for down and flap, whose drops happen in the
    kernel when carrier is gone, and are counted nowhere."""
    if fault["mode"] not in BPF_MODES:
        return None
    if fault.get("ev_target"):
        t = fault["ev_target"]
        if not hasattr(maps, "ev_fault"):
            return None
        counts = maps.ev_fault(t["port_id"], t["direction"], t["dqpn"], t["ev"])
        return counts["dropped"] if counts else None
    total = 0
    for key, baseline in fault.get("drop_baseline", {}).items():
        port_id, direction = (int(x) for x in key.split("/"))
        total += maps.counters(port_id, direction).fault_drops - baseline
    return total
