"""`mrc-nic chaos`: a fault schedule run inside the lab, with verified traffic.

Every `every` seconds the schedule draws a fault (a kind among those asked
for, then a target of that kind in a plane) from a seeded generator, and puts
it in force through the same path as `mrc-nic fail` (fabric.faults.apply);
each fault stays for `hold` seconds and is then healed (faults.heal). At most
`max_planes` planes carry a chaos fault at once, so with fewer than all the
planes the lab always has a way through; a draw that has no room (that many
planes affected, or a link that already has a fault, the user's own say) is
skipped and counted.

With traffic, a thread runs WRITEs from one host to another with --verify,
one after another, for the whole run (workloads.rdma_write): the report
counts the bytes written and verified, the writes that did not complete and
the QPs left in ERR.

Every fault the schedule applied is healed before run() returns, also when
it ends by Ctrl-C or an error: faults are healed by id, so a fault of the
user's own is never touched. The seed makes the schedule (kinds, targets,
times, loss seeds) reproducible; what the traffic sees is not.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from mrc_nic.contract import daemonops as ops
from mrc_nic.errors import MrcNicError
from mrc_nic.fabric import faults
from mrc_nic.lab import client
from mrc_nic.lab.state import open_lab
from mrc_nic.lab.topology import Topology
from mrc_nic.observe import fidelity
from mrc_nic.workloads import rdma_write

# kind -> (what it targets, fault mode, direction)
KINDS = {
    "link-down": ("link", "down", "both"),
    "blackhole": ("link", "blackhole", "both"),
    "blackhole-up": ("link", "blackhole", "up"),
    "blackhole-down": ("link", "blackhole", "down"),
    "loss": ("link", "loss", "both"),
    "flap": ("link", "flap", "both"),
    "switch-down": ("switch", "down", "both"),
    "plane-down": ("plane", "down", "both"),
}
DEFAULT_KINDS = ("link-down", "blackhole-up", "blackhole-down", "loss", "switch-down", "plane-down")
MIN_EVERY = 0.02  # a fault takes a few ms to apply (down: one netlink call per link)
FLAP_PERIOD = 0.1
# A write that has not ended this long after the run is cancelled (its QPs go
# to ERR and are counted): the run's end must not wait on a stuck transfer.
WRITE_GRACE_S = 30.0


class ChaosError(MrcNicError, ValueError):
    """A chaos run was asked for wrongly; nothing was changed."""


@dataclass
class ChaosSpec:
    duration: float
    every: float
    hold: float
    max_planes: int = 1
    kinds: tuple[str, ...] = DEFAULT_KINDS
    seed: int = 1
    loss_rate: float = 0.05
    traffic: bool = True
    src: str | None = None
    dst: str | None = None
    write_size: int = 32 * 2**20

    def validate(self, topo: Topology) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds:
            raise ChaosError(
                f"unknown fault kind {', '.join(unknown) or '(none)'}; "
                f"choose among: {', '.join(KINDS)}"
            )
        if self.duration <= 0:
            raise ChaosError("--duration must be positive (e.g. 10s)")
        if self.every < MIN_EVERY:
            raise ChaosError(f"--every must be at least {MIN_EVERY * 1000:.0f}ms")
        if self.hold <= 0:
            raise ChaosError("--hold must be positive (e.g. 500ms)")
        if not 1 <= self.max_planes < topo.planes:
            raise ChaosError(
                f"--max-planes must be 1..{topo.planes - 1}: this lab has {topo.planes} "
                "planes and one must stay whole for traffic to get through"
            )
        if not 0.0 < self.loss_rate <= 1.0:
            raise ChaosError("--loss-rate must be in (0, 1]")
        hosts = topo.host_names()
        for host in (self.src, self.dst):
            if host is not None and host not in hosts:
                raise ChaosError(f"no host {host!r} in this lab (hosts: {', '.join(hosts)})")


@dataclass
class Traffic:
    """Verified WRITEs in a loop, on a thread of their own."""

    lab: str
    src: str
    dst: str
    size: int
    stop: threading.Event = field(default_factory=threading.Event)
    writes: int = 0
    failed: int = 0
    bytes_written: int = 0
    bytes_verified: int = 0
    errors: list[str] = field(default_factory=list)
    # QPs of its writes that went to ERR (a write releases its QPs as it ends,
    # so the daemons no longer show them)
    qps_in_err: list[dict] = field(default_factory=list)
    conn: rdma_write.Connection | None = None

    def write(self, seed: int) -> dict:
        """One verified WRITE: rdma_write's result (bytes, completed, verified, qps, error)."""
        try:
            with rdma_write.Connection(self.lab, self.src, self.dst, size_hint=self.size) as c:
                self.conn = c
                return c.write(self.size, verify=True, seed=seed, keep_open=False)
        finally:
            self.conn = None

    def run(self) -> None:
        seed = 1
        while not self.stop.is_set():
            try:
                r = self.write(seed)
            except (MrcNicError, OSError) as e:
                self.failed += 1
                self.errors.append(str(e))
                self.stop.wait(0.2)  # a daemon that refuses now may answer in a moment
                continue
            seed += 1
            self.writes += 1
            for q in r.get("qps", []):
                if q.get("state") == "ERR":
                    entry = {"host": self.src, "qpn": q["qpn"], "reason": q.get("err_reason")}
                    self.qps_in_err.append(entry)
            self.bytes_written += r.get("bytes", 0)
            if r.get("completed") and r.get("verified"):
                self.bytes_verified += r["bytes"]
            else:
                self.failed += 1
                self.errors.append(r.get("error") or "not verified")

    def cancel(self) -> None:
        """End the write under way (from another thread: the writer does it)."""
        conn = self.conn
        if conn is not None:
            conn.stop("the chaos run ended")


class Schedule:
    """Draws faults and keeps the ones in force, with their planes and ends."""

    def __init__(self, lab: str, topo: Topology, spec: ChaosSpec) -> None:
        self.lab, self.topo, self.spec = lab, topo, spec
        self.rng = random.Random(spec.seed)
        self.active: dict[int, tuple[int, float]] = {}  # fault id -> (plane, heal at)
        self.applied: list[dict] = []
        self.skipped = 0
        self.by_kind: dict[str, int] = {}

    def _target(self, what: str, plane: int) -> tuple[str, ...]:
        if what == "plane":
            return ("plane", str(plane))
        if what == "switch":
            names = [n for n in self.topo.switch_names() if self.topo.nodes[n].plane == plane]
            return (self.rng.choice(names),)
        return (self.rng.choice(self.topo.links_of_plane(plane)).name,)

    def step(self, now: float) -> None:
        """Heal what is due, then apply one new fault if there is room."""
        for fault_id, (_, heal_at) in list(self.active.items()):
            if heal_at <= now:
                self.heal([fault_id])
        kind = self.rng.choice(self.spec.kinds)
        plane = self.rng.randrange(self.topo.planes)
        what, mode, direction = KINDS[kind]
        target = self._target(what, plane)
        spec = faults.FaultSpec(
            mode,
            direction,
            rate=self.spec.loss_rate if mode == "loss" else None,
            seed=self.rng.getrandbits(32) if mode == "loss" else None,
            period=FLAP_PERIOD if mode == "flap" else None,
        )
        busy = {p for p, _ in self.active.values()}
        if plane not in busy and len(busy) >= self.spec.max_planes:
            self.skipped += 1
            return
        try:
            fault = self.apply(target, spec)
        except faults.FaultError:  # a link of the target has a fault already
            self.skipped += 1
            return
        self.active[fault["id"]] = (plane, now + self.spec.hold)
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        self.applied.append(
            {"id": fault["id"], "kind": kind, "target": fault["target"], "at_s": now}
        )

    def apply(self, target: tuple[str, ...], spec: faults.FaultSpec) -> dict:
        """Put a fault in force: its {id, target}; FaultError if a link of the
        target has one already. (A cluster lab's: mrc_nic.cli.cluster_chaos.)"""
        return faults.apply(self.lab, target, spec)

    def in_force(self) -> set[str]:
        """The ids of the lab's faults in force."""
        record, _ = open_lab(self.lab)
        return set(record.faults)

    def heal_ids(self, ids: list[int]) -> None:
        faults.heal(self.lab, ids=ids)

    def heal(self, ids: list[int]) -> None:
        # A fault the user healed meanwhile is gone: not an error of the run.
        in_force = self.in_force()
        present = [i for i in ids if str(i) in in_force]
        if present:
            self.heal_ids(present)
        for fault_id in ids:
            self.active.pop(fault_id, None)

    def heal_all(self) -> None:
        # The faults this run applied, by id: never a fault of the user's own.
        if self.active:
            self.heal(list(self.active))


def qps_in_err(lab: str, topo: Topology) -> list[dict]:
    """The QPs of every host's daemon that are in ERR now."""
    found = []
    for host in topo.host_names():
        for q in client.call(lab, host, ops.QpList()).qps:
            if q["state"] == "ERR":
                found.append({"host": host, "qpn": q["qpn"], "reason": q["err_reason"]})
    return found


class Site:
    """Where a run puts its faults and traffic: a lab of this machine. A
    cluster lab's (mrc_nic.cli.cluster_chaos) reaches its machines' agents."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        _, self.topo = open_lab(lab)

    def schedule(self, spec: ChaosSpec) -> Schedule:
        return Schedule(self.lab, self.topo, spec)

    def traffic(self, src: str, dst: str, size: int) -> Traffic:
        return Traffic(self.lab, src, dst, size)

    def meter(self) -> fidelity.Meter | None:
        # Which resource bound the run's traffic: a link taken down drops at its
        # veths, the fault's doing, so those drops are not judged.
        return fidelity.Meter(topo=self.topo, judge_veth_drops=False)

    def qps_in_err(self) -> list[dict]:
        return qps_in_err(self.lab, self.topo)


def run(lab: str, spec: ChaosSpec, *, on_fault=None, site: Site | None = None) -> dict:
    """Run the schedule (and its traffic) for spec.duration, or until Ctrl-C
    (the report then says interrupted); heal every fault it applied, whatever
    happens; return the report. on_fault(entry) is called after each fault
    is applied (a live log). site: the lab's (default: Site(lab), this machine's)."""
    site = site or Site(lab)
    topo = site.topo
    spec.validate(topo)
    hosts = topo.host_names()
    src = spec.src or hosts[0]
    dst = spec.dst or next(h for h in hosts if h != src)
    if src == dst:
        raise ChaosError("--src and --dst must be different hosts")
    schedule = site.schedule(spec)
    traffic = site.traffic(src, dst, spec.write_size) if spec.traffic else None
    thread = threading.Thread(target=traffic.run, daemon=True) if traffic else None
    stop = threading.Event()
    meter = site.meter()
    if meter:
        meter.start()
    start = time.monotonic()
    with _ctrl_c_sets(stop):
        try:
            if thread:
                thread.start()
            next_tick = start
            while not stop.is_set() and (now := time.monotonic()) - start < spec.duration:
                before = len(schedule.applied)
                schedule.step(now - start)
                if on_fault and len(schedule.applied) > before:
                    on_fault(schedule.applied[-1])
                next_tick += spec.every
                stop.wait(max(0.0, min(next_tick, start + spec.duration) - time.monotonic()))
        finally:
            try:
                schedule.heal_all()
            finally:
                if traffic and thread:
                    traffic.stop.set()
                    thread.join(WRITE_GRACE_S)
                    if thread.is_alive():
                        traffic.cancel()
                        thread.join(10)
    fid = meter.stop() if meter else None
    interrupted = stop.is_set()
    seconds = time.monotonic() - start
    left = faults_left(schedule)
    report = {
        "lab": lab,
        "seed": spec.seed,
        "seconds": round(seconds, 3),
        "interrupted": interrupted,
        "every_s": spec.every,
        "hold_s": spec.hold,
        "max_planes": spec.max_planes,
        "kinds": list(spec.kinds),
        "faults_applied": len(schedule.applied),
        "faults_by_kind": schedule.by_kind,
        "faults_skipped": schedule.skipped,
        "faults_left": left,
        "faults": schedule.applied,
        "traffic": None,
        "qps_in_err": site.qps_in_err() + (traffic.qps_in_err if traffic else []),
        "fidelity": fid,
    }
    if traffic:
        report["traffic"] = {
            "src": src,
            "dst": dst,
            "write_size": spec.write_size,
            "writes": traffic.writes,
            "writes_failed": traffic.failed,
            "bytes_written": traffic.bytes_written,
            "bytes_verified": traffic.bytes_verified,
            "errors": traffic.errors[:10],
        }
    return report


@contextlib.contextmanager
def _ctrl_c_sets(stop: threading.Event) -> Iterator[None]:
    """While the run lasts, Ctrl-C sets `stop` instead of raising.

    A KeyboardInterrupt can land anywhere, and some places swallow it: pyroute2
    forks to reach a namespace (a `down` fault), and an interrupt that arrives
    in the fork's handlers is printed and dropped, so the run went on. A flag
    the loop checks ends it at the next step, and the faults are healed."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals go to the main thread only; its caller handles them
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def faults_left(schedule: Schedule) -> list[int]:
    """Ids of this run's faults still in the lab's record (none, unless a heal failed)."""
    ours = {str(f["id"]) for f in schedule.applied}
    return sorted(int(i) for i in schedule.in_force() if i in ours)
