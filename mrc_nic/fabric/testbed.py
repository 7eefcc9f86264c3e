"""Bring a lab up and take it down.

`up` is all-or-nothing: it checks the machine, compiles the switch port
program, writes the state (listing every namespace it will make) and only
then creates namespaces, links, addresses, routes, queues and BPF hooks. If
anything fails, or the process is interrupted, it removes what it made
before the error is reported. `down` removes exactly the lab's namespaces,
workers and state, by exact name, and every pin in the lab's own pin
directory, also after a kill -9 of `up`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mrc_nic import nic
from mrc_nic.contract import devices, framing
from mrc_nic.errors import MrcNicError
from mrc_nic.fabric import preflight, queues, switchport
from mrc_nic.fabric.builder import Fabric
from mrc_nic.kernel import netns, pins
from mrc_nic.lab import access, client, state, workers
from mrc_nic.lab.topology import NS_PREFIX, Topology


class LabError(MrcNicError, RuntimeError):
    """A lab operation cannot be done; the message says why and what to do."""


@dataclass
class UpReport:
    lab: str
    seconds: float
    namespaces: int
    links: int


# ---- up ----------------------------------------------------------------------
def up(topo: Topology, cluster: dict | None = None) -> UpReport:
    """cluster: on a machine of a lab spread over several (mrc_nic.cluster),
    the record of its shard (topo.shard): this machine builds that part."""
    preflight.require_all()
    gid = access.group_id(topo)  # the lab's [tenants] group exists: before anything is made
    with state.locked(topo.lab, wait=0.5):
        refuse_if_present(topo.lab, topo)
        record = state.LabState(
            lab=topo.lab,
            topology_file=str(topo.path.resolve()),
            topology=topo.raw,
            namespaces=topo.all_netns(),
            cluster=cluster,
        )
        record.save()  # before anything exists: a crash from here on is recoverable
        started = time.monotonic()
        try:
            state.make_lab_dir(topo.lab, gid is not None)  # the group reaches its sockets
            program = switchport.SwitchPortProgram.load(topo.lab, len(topo.switch_ports()))
            nic_program = nic.NicProgram.load(
                topo.lab,
                host_net=str(topo.host_net),
                mr_elems=nic.memory_elems(topo.hosts, topo.nic_memory_bytes),
                skip_ns=nic_skip_ns(topo),
                mtu=topo.mtu,  # the payload per packet follows it (nic.seg_size)
                ack_every=topo.ack_every,  # ACK coalescing (docs/nic-program.md)
                ack_delay_ns=topo.ack_delay_us * 1000,
            )
            with Fabric(topo) as fabric:
                fabric.build(program, nic_program)
            # The BPF twin of every capped egress queue: ECN, trimming, buffer.
            queues.configure(topo)
            with switchport.SwitchPortMaps.open(topo.lab) as maps:
                maps.set_forwarding(topo.forwarding)  # bpf/switch_port.h, "Forwarding"
            record.phase = "up"  # the daemons read the lab from its state
            record.save()
            start_daemons(topo)
        except BaseException:
            _remove_everything(topo.lab, record)
            state.lock_path(topo.lab).unlink(missing_ok=True)
            raise
        record.bringup_seconds = round(time.monotonic() - started, 3)
        record.save()
    return UpReport(topo.lab, record.bringup_seconds, len(topo.nodes), len(topo.links))


DAEMON_START_S = 10.0  # a daemon imports pyroute2 and opens the maps: well under 1 s
# ... alone. They all start at once, sharing the cores: a 32-host lab's 33
# daemons on 2 busy cores took more than 10 s in all (scale-32x8.toml).
DAEMON_START_EACH_S = 1.0


def start_daemons(topo: Topology, hosts: list[str] | None = None) -> list[str]:
    """Start what runs in the background of a lab and is not running: the
    transport daemon of each host (mrc_nic.transport.daemon) and the lab's event log
    (mrc_nic.observe.eventlog, named client.EVENTS_SERVICE), and wait until each answers
    on its control socket; then the lab's NICs are open to applications (its
    device registry, contract.devices). Returns the names started. One that
    does not come up is a LabError."""
    names = hosts or [client.EVENTS_SERVICE, *filter(topo.is_here, topo.host_names())]
    started = []
    for name in names:
        if daemon_pid(topo.lab, name) is None:
            workers.spawn_service(topo.lab, name)
            started.append(name)
    deadline = time.monotonic() + DAEMON_START_S + DAEMON_START_EACH_S * len(started)
    for name in started:
        while True:
            try:
                client.call(topo.lab, name, framing.Ping(), timeout=1.0)
                break
            except client.DaemonError:
                if time.monotonic() > deadline or daemon_pid(topo.lab, name) is None:
                    raise LabError(
                        f"the {name} daemon did not start "
                        f"(python -m {workers.service_module(name)} "
                        f"{topo.lab} {name} shows why)"
                    ) from None
                time.sleep(0.02)
    here = tuple(h for h in topo.host_names() if topo.is_here(h))
    restart = f"mrc-nic up --reuse -t {topo.path.resolve()} --name {topo.lab}"
    devices.publish(devices.Devices(lab=topo.lab, hosts=here, restart=restart))
    return started


def daemon_pid(lab: str, name: str) -> int | None:
    """The pid of a host's running daemon, or of the event log (name
    client.EVENTS_SERVICE), found by its command line."""
    return next((pid for pid in workers.find(lab) if workers.is_service(pid, lab, name)), None)


def nic_skip_ns(topo: Topology) -> int:
    """How long an EV stays in SKIP (NIC_SKIP_NS): the NIC's default (100 us,
    about two RTTs of the default lab), or the lab's design RTT ([queues]
    base_rtt) when that is longer: on slow links a queue takes that long to
    drain, and a SKIP shorter than an RTT ends before any reaction could."""
    return max(nic.DEFAULT_SKIP_NS, topo.queues.base_rtt_ns)


def refuse_if_present(lab: str, topo: Topology | None = None) -> None:
    """LabError if anything of the lab exists: `up` checks before it says
    what it will build, and again under the lab's lock. On a machine of a lab
    spread over several (topo.shard), only this machine's namespaces count."""
    record = state.LabState.load(lab)
    if record is not None and record.phase == "up":
        raise LabError(
            f"lab {lab!r} is already up ({len(record.namespaces)} namespaces, from "
            f"{record.topology_file}); keep it with `mrc-nic up --reuse` (same topology), "
            f"or take it down first: mrc-nic down -l {lab}"
        )
    leftovers = leftover_namespaces(
        lab, topo.all_netns() if topo is not None and topo.shard else None
    )
    if record is not None or leftovers:
        raise LabError(
            f"lab {lab!r} has leftovers of an interrupted run ({len(leftovers)} namespaces); "
            f"clean them with: mrc-nic down -l {lab}"
        )
    if switchport.pin_dir(lab).exists():
        raise LabError(
            f"lab {lab!r} has leftover BPF pins in {switchport.pin_dir(lab)}; "
            f"clean them with: mrc-nic down -l {lab}"
        )


# ---- down --------------------------------------------------------------------
def leftover_namespaces(lab: str, only: list[str] | None = None) -> list[str]:
    """Namespaces named like this lab's: mrc-<lab>-<node>, node without a dash;
    with `only` (a machine of a cluster lab: its shard's), those of them only.

    Neither lab names ([a-z0-9]) nor node names (h0, p1.t0a: see topology's
    naming) contain a dash, so the first dash after the prefix ends the lab
    name: lab "a" never matches lab "ab"'s mrc-ab-h0, nor "a-b" anything.
    """
    prefix = f"{NS_PREFIX}{lab}-"
    names = [n for n in netns.list_names() if n.startswith(prefix) and "-" not in n[len(prefix) :]]
    return names if only is None else [n for n in names if n in only]


def down(lab: str, only: list[str] | None = None) -> list[str]:
    """Remove the lab; return the namespaces removed. Safe to repeat. only: a
    machine of a cluster lab names its shard's namespaces (others of the lab
    may be another machine's), also when its record is gone."""
    preflight.require_root()
    with state.locked(lab):
        record = state.LabState.load(lab)
        removed = _remove_everything(lab, record, only)
        # Unlinked while held: a waiter on this file sees the path gone and
        # retries on a new file (state.locked), so no two holders at once.
        state.lock_path(lab).unlink(missing_ok=True)
    return removed


def labs_present() -> list[str]:
    """Every lab with state, pins or namespaces on this machine."""
    labs = set(state.labs_on_disk()) | set(_pinned_labs())
    for name in netns.list_names():
        if name.startswith(NS_PREFIX):
            rest = name[len(NS_PREFIX) :]
            if rest.count("-") == 1:
                labs.add(rest.split("-")[0])
    return sorted(labs)


def _pinned_labs() -> list[str]:
    root = switchport.PIN_ROOT
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _remove_everything(
    lab: str, record: state.LabState | None, only: list[str] | None = None
) -> list[str]:
    devices.withdraw(lab)  # applications find no NIC here from now on
    workers.stop_all(lab)  # found by command line: also those no record names
    # A machine of a cluster lab removes its shard's namespaces only: others of
    # the same lab may be another machine's (on one box, in tests).
    if only is None and record is not None and record.cluster is not None:
        only = record.namespaces
    names = set(record.namespaces if record else []) | set(leftover_namespaces(lab, only))
    removed = [n for n in sorted(names) if netns.remove(n)]
    pins.unpin_all(lab)  # the NIC's and switches' pins, and any another build made
    state.forget(lab)
    return removed
