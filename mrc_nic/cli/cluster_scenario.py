"""scenario on a cluster lab: its flows and faults through the machines' agents.

`incast` and `permutation` are the local commands, their flows run by the
machines (cluster_flows). `plane-failure` runs as on a local lab
(workloads.experiments.plane_failure: the same WRITE healthy, then with a
whole plane failed --after seconds into it; the goodput ratio), with the
cluster as its site:
- the two WRITEs go over one QP, as locally, its ends one process each on
  its host's machine (cluster_lab.WriteEnds), with the lab's QP timeout and
  reorder window, not checked byte by byte (as locally: checking costs
  both ends CPU); their TCP talk goes over another plane than the one
  that fails;
- the fault goes to every machine owning a link of the plane under one
  cluster id (cluster_lab.apply_fault), what it dropped is read from the
  merged snapshot (every machine's fault counters), and it is healed there
  by that id, also when the WRITE fails;
- the fidelity verdict is each machine's CPU and links (cluster.verdict),
  sampled over and over while a WRITE runs and judged between the first and
  last samples inside its transfer.
The fault is sent --after seconds after the second WRITE is started;
applying it takes a Ray call and a process on each machine, so the report
says when, into the transfer, it was asked and when it was in force (the
machines' wall clocks: synchronised machines, or one box).

`single-ev-loss` keeps one QP open over two WRITEs, as locally: its ends
are one host process per machine (workloads.host_part running
workloads.splitwrite.host_main), each WRITE started by this process; between
the two the QP's EVs are read on the sender's machine (`ev list`), the
fault on one EV goes to that machine (the sender's uplink enforces it) under
a cluster id, and after the lossy WRITE it is healed there and its counts
read. When both hosts are on one machine, the whole command runs there.

`allreduce-failure` runs as locally (workloads.experiments.allreduce_failure)
with the cluster as its site (_ClusterSite): each rank is a process on its
host's machine (hostparts.RemoteHosts), the ranks' credits go over TCP on a
plane the fault spares, the fault goes to its machines under a cluster id
at the same point of the job, and each run is judged on every machine's
samples.
"""

from __future__ import annotations

import functools
import json
import threading
import time

import click

from mrc_nic.cli import cluster_lab, cluster_observe
from mrc_nic.cluster import verdict
from mrc_nic.cluster.record import ClusterRecord
from mrc_nic.fabric.faults import FaultError
from mrc_nic.lab.topology import Topology
from mrc_nic.observe import fidelity

SAMPLE_EVERY_S = 1.0  # between the end of one round of fidelity samples and the next
FLOWS = ("incast", "permutation")  # cluster_flows runs their flows


def scenario(rec: ClusterRecord, args: list[str]) -> int:
    """`mrc-nic scenario NAME ARGS` (the local command's options) on the cluster lab."""
    from mrc_nic.cli import scenario_cmds
    from mrc_nic.cli.app import app_of

    name = args[0] if args else ""
    if name in FLOWS:
        return _flows(rec, name, args[1:])
    if name == "single-ev-loss":
        return _single_ev_loss(rec, args)
    if name == "allreduce-failure":
        return _allreduce_failure(rec, args)
    if name != "plane-failure":
        raise click.UsageError(
            f"no scenario {name!r}; these run on a cluster lab: "
            f"{', '.join((*FLOWS, 'single-ev-loss', 'plane-failure', 'allreduce-failure'))} "
            "(see mrc-nic scenario --help)"
        )
    ctx = scenario_cmds.plane_failure.make_context(name, list(args[1:]))
    with ctx:
        app, p = app_of(ctx), ctx.params
        topo = cluster_lab.topo_of(rec)
        if not 0 <= p["plane"] < topo.planes:
            raise click.BadParameter(
                f"lab {rec.lab} has planes 0..{topo.planes - 1}", param_hint="--plane"
            )
        run = functools.partial(
            plane_failure, rec, topo, size=p["size"], plane=p["plane"], after=p["after"],
            mode=p["mode"],
        )  # fmt: skip
        _show(app, topo, run, p["rounds"], "goodput_ratio", scenario_cmds.plane_failure_lines)
    return 0


def _single_ev_loss(rec: ClusterRecord, args: list[str]) -> int:
    """`scenario single-ev-loss` (the local command's options) between h0 and h1."""
    from mrc_nic.cli import scenario_cmds
    from mrc_nic.cli.app import app_of

    topo = cluster_lab.topo_of(rec)
    src, dst = topo.host_names()[:2]
    ms, md = cluster_lab.machine_of_host(rec, src), cluster_lab.machine_of_host(rec, dst)
    if ms == md:  # the local command, on the machine that has both
        return cluster_lab.relay_on(rec, ms, ["scenario", *args])
    cmd = scenario_cmds.single_ev_loss
    ctx = cmd.make_context(args[0], list(args[1:]))
    with ctx:
        app, p = app_of(ctx), ctx.params
        run = functools.partial(
            single_ev_loss, rec, topo, size=p["size"], evs=p["evs"], rate=p["rate"],
            plane=p["plane"], seed=p["seed"], src=src, dst=dst,
        )  # fmt: skip
        _show(app, topo, run, p["rounds"], "goodput_ratio", scenario_cmds.single_ev_loss_lines)
    return 0


def _show(app, topo: Topology, run, rounds: int, key: str, lines) -> None:
    """Run an experiment `rounds` times (scenario_cmds.run_rounds), show its report."""
    from mrc_nic.cli import scenario_cmds

    r = scenario_cmds.run_rounds(run, rounds, key)
    r.setdefault("topology", {"hosts": topo.hosts, "planes": topo.planes})  # no lab here
    scenario_cmds.show_report(r, app, lines)


def single_ev_loss(
    rec: ClusterRecord,
    topo: Topology,
    *,
    size: int,
    evs: int,
    rate: float,
    plane: int,
    seed: int,
    src: str,
    dst: str,
) -> dict:
    """One run between hosts of two machines: experiments.single_ev_loss's
    report, with the cluster's fault (id, machine) and each end's machine."""
    if evs % topo.planes:
        raise ValueError(f"evs must be a multiple of the lab's {topo.planes} planes, not {evs}")
    ms, md = cluster_lab.machine_of_host(rec, src), cluster_lab.machine_of_host(rec, dst)
    gid = None
    with cluster_lab.WriteEnds(rec, topo, (src, ms), (dst, md), size, ev_count=evs) as ends:
        qpn = ends.qpn

        def write(k: int) -> tuple[dict, dict | None]:
            with _Samples(rec) as samples:
                r = ends.write(k)
            return r, samples.judge(topo, r["started_at"], r["ended_at"], True)

        try:
            healthy, healthy_fid = write(0)
            rows = _ev_rows(rec, ms, qpn)
            profile = [e["ev"] for e in rows]
            ev = next(e["ev"] for e in rows if e["plane"] == plane % topo.planes)
            opts = ["--mode", "loss", "--rate", str(rate), "--seed", str(seed)]
            gid, results = cluster_lab.apply_fault(rec, ["qp", hex(qpn), "ev", str(ev)], opts)
            if gid is None:
                why = "; ".join(f"m{m}: {v}" for m, v in results.items())
                raise cluster_lab.ClusterLabError(
                    f"EV {ev} of QP {qpn:#x} could not be faulted: {why}"
                )
            lossy, lossy_fid = write(1)
            now = {e["ev"]: e["state"] for e in _ev_rows(rec, ms, qpn)}
            counts, gid = _heal_ev_fault(rec, gid), None
        finally:
            if gid is not None:
                cluster_lab.heal_fault(rec, gid)
        received = ends.close()
    if ev in now:
        final, replacement = now[ev], None
    else:  # the daemon put a fresh EV in its place in the profile
        final, replacement = "RETIRED", list(now)[profile.index(ev)]
    from mrc_nic.workloads import experiments

    def figures(w: dict) -> dict:
        return {**w, "goodput_bps": w["gbps"] * 1e9, "completed": w["bytes"] == size}

    report = experiments.single_ev_loss_report(
        lab=rec.lab, src=src, dst=dst, size=size, evs=evs, qpn=qpn, ev=ev,
        plane=plane % topo.planes, rate=rate, healthy=figures(healthy), lossy=figures(lossy),
        final=final, replacement=replacement, counts=counts,
        fid={"healthy": healthy_fid, "lossy": lossy_fid},
    )  # fmt: skip
    return report | {"machines": [ms, md], "errors": received["errors"]}


def _ev_rows(rec: ClusterRecord, m: int, qpn: int) -> list[dict]:
    """`ev list QPN` on machine m: the send QP's EVs, in its profile's order."""
    ok, value = cluster_lab.run_on(rec, [m], ["ev", "list", hex(qpn), "--format", "json"])[m]
    if not ok or value[0] != 0:
        why = value if not ok else (value[2].strip() or value[1].strip())
        raise cluster_lab.ClusterLabError(f"m{m}: the EVs of QP {qpn:#x}: {why}")
    return json.loads(value[1])["evs"]


def _heal_ev_fault(rec: ClusterRecord, gid: str) -> dict:
    """Heal a cluster fault on one EV: {pkts, dropped} that its machine counted."""
    counts: dict = {}
    for m, (ok, value) in cluster_lab.heal_fault(rec, gid, ("--format", "json")).items():
        if not ok or value[0] != 0:
            raise cluster_lab.ClusterLabError(f"m{m}: fault #{gid} was not healed: {value}")
        for healed in json.loads(value[1]):
            counts = healed.get("ev_counts") or counts
    return counts


def _allreduce_failure(rec: ClusterRecord, args: list[str]) -> int:
    """`scenario allreduce-failure` (the local command's options) on the cluster lab."""
    from mrc_nic.cli import scenario_cmds
    from mrc_nic.cli.app import app_of
    from mrc_nic.workloads import experiments

    cmd = scenario_cmds.allreduce_failure
    ctx = cmd.make_context(args[0], list(args[1:]))
    with ctx:
        app, p = app_of(ctx), ctx.params
        topo = cluster_lab.topo_of(rec)
        target = tuple(p["fault_target"].split())
        try:
            site = _ClusterSite(rec, topo, target)
        except (FaultError, ValueError) as e:
            raise click.BadParameter(str(e), param_hint="--fault") from None
        run = functools.partial(
            experiments.allreduce_failure, rec.lab, size=p["size"], fault=target,
            mode=p["mode"], at=p["at"], limit_s=p["limit"], site=site,
        )  # fmt: skip
        _show(app, topo, run, p["rounds"], "slowdown", scenario_cmds.allreduce_failure_lines)
    return 0


class _ClusterSite:
    """Where experiments.allreduce_failure runs on a cluster lab: the ring's
    ranks are processes on their hosts' machines (hostparts.RemoteHosts), their
    credit sockets TCP over a plane the fault does not touch (or the credits
    would stall with the data); the fault goes to its machines under a
    cluster id; each run is judged on every machine's samples taken while it
    ran (_SampledMeter)."""

    def __init__(self, rec: ClusterRecord, topo: Topology, fault: tuple[str, ...]) -> None:
        from mrc_nic.fabric import faults

        self.rec, self.topo = rec, topo
        _, links = faults.resolve_target(topo, fault)
        spared = [p for p in range(topo.planes) if p not in {lk.plane for lk in links}]
        if not spared:
            raise ValueError(
                f"{' '.join(fault)} touches every plane: the ranks' credits need one it spares"
            )
        self.credit_plane, self.links = spared[0], len(links)

    def ring(self, hosts: list[str], size: int):
        from mrc_nic.cluster.hostparts import RemoteHosts
        from mrc_nic.workloads import collective, collective_ranks, host_part

        _, handles = cluster_lab.agents(self.rec)

        def start(args: dict[str, dict]) -> RemoteHosts:
            return RemoteHosts(
                handles, host_part.__name__, self.rec.lab, collective_ranks.__name__,
                {h: {**a, "credit_plane": self.credit_plane} for h, a in args.items()},
                {h: cluster_lab.machine_of_host(self.rec, h) for h in args},
                clock_keys=("recv_done_ns", "deadline_ns"),
            )  # fmt: skip

        return collective.MrcRing(self.rec.lab, hosts, size, topo=self.topo, start_ranks=start)

    def apply(self, fault: tuple[str, ...], mode: str) -> dict:
        gid, results = cluster_lab.apply_fault(self.rec, list(fault), ["--mode", mode])
        if gid is None:
            why = "; ".join(f"m{m}: {v}" for m, v in results.items())
            raise cluster_lab.ClusterLabError(f"{' '.join(fault)} could not be failed: {why}")
        parts = cluster_lab.load(self.rec.lab).faults[gid]["parts"]
        return {
            "fault_id": gid,
            "target": " ".join(fault),
            "links": self.links,
            "machines": sorted(int(m) for m in parts),
        }

    def heal(self, ids: list) -> None:
        for gid in ids:
            cluster_lab.heal_fault(self.rec, gid)

    def meter(self, judge_veth_drops: bool = True) -> _SampledMeter:
        return _SampledMeter(self.rec, self.topo, judge_veth_drops)


class _SampledMeter:
    """A fidelity meter over every machine (fidelity.Meter's with, stop()):
    _Samples from its start until stop(), judged between them."""

    def __init__(self, rec: ClusterRecord, topo: Topology, judge_veth_drops: bool) -> None:
        self.rec, self.topo, self.judge_veth_drops = rec, topo, judge_veth_drops
        self.samples: _Samples | None = None
        self.verdict: dict | None = None

    def __enter__(self) -> _SampledMeter:
        self.t0 = time.time()
        self.samples = _Samples(self.rec)
        self.samples.start()
        return self

    def stop(self) -> dict | None:
        if self.samples is not None:
            self.samples.stop()  # with a last sample, taken now
            self.verdict = self.samples.judge(
                self.topo, self.t0, time.time(), self.judge_veth_drops
            )
            self.samples = None
        return self.verdict

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _flows(rec: ClusterRecord, name: str, args: list[str]) -> int:
    """incast or permutation: the local command, its flows run by the machines
    (cluster_flows.run_flows: scenario_cmds.SITE)."""
    from mrc_nic.cli import cluster_flows, scenario_cmds

    cmd = scenario_cmds.scenario.commands[name]
    ctx = cmd.make_context(name, list(args))
    topo = cluster_lab.topo_of(rec)
    runner = functools.partial(cluster_flows.run_flows, rec, topo)
    ctx.meta[scenario_cmds.SITE] = {"lab": rec.lab, "topo": topo, "runner": runner}
    with ctx:
        cmd.invoke(ctx)
    return 0


def plane_failure(
    rec: ClusterRecord,
    topo: Topology,
    *,
    size: int,
    plane: int,
    after: float,
    mode: str,
    src: str | None = None,
    dst: str | None = None,
) -> dict:
    """One run: the report of experiments.plane_failure, with the cluster's
    fault (id, machines, drops, when it landed, healed) and bytes verified."""
    hosts = topo.host_names()
    src, dst = src or hosts[0], dst or hosts[1]
    ends = (
        (src, cluster_lab.machine_of_host(rec, src)),
        (dst, cluster_lab.machine_of_host(rec, dst)),
    )
    cm_plane = (plane + 1) % topo.planes  # the WRITE's own TCP talk: not on the failing plane

    with cluster_lab.WriteEnds(rec, topo, *ends, size, plane=cm_plane) as w:

        def write(k: int, judge_veth_drops: bool = True) -> tuple[dict, dict | None]:
            with _Samples(rec) as samples:
                r = w.write(k)
            return r, samples.judge(topo, r["started_at"], r["ended_at"], judge_veth_drops)

        healthy, healthy_fid = write(0)
        fault: dict = {}
        t = threading.Thread(target=_fail_later, args=(rec, plane, mode, after, fault))
        t.start()
        try:
            # a plane taken down drops at its veths: the fault's doing, not the CPU's
            failed, failed_fid = write(1, judge_veth_drops=mode != "down")
        finally:
            t.join()
            done = _end_fault(rec, fault)
        w.close()
    if "error" in fault:
        raise cluster_lab.ClusterLabError(f"plane {plane} could not be failed: {fault['error']}")
    gbps = healthy["gbps"], failed["gbps"]
    return {
        "scenario": "plane-failure",
        "lab": rec.lab,
        "src": src,
        "dst": dst,
        "machines": [ends[0][1], ends[1][1]],
        "size": size,
        "plane": plane,
        "mode": mode,
        "fail_after_s": after,
        "healthy_goodput_bps": gbps[0] * 1e9,
        "failed_goodput_bps": gbps[1] * 1e9,
        "goodput_ratio": gbps[1] / gbps[0] if gbps[0] else None,
        "per_plane_share": _shares(failed["plane_pkts"]),
        "completed": all(_whole(r, size) for r in (healthy, failed)),
        # what the sender's WRITEs completed (the receiver's NIC acknowledged)
        "bytes": {"healthy": healthy["bytes"], "failed": failed["bytes"]},
        "retransmits": failed["retransmits"],
        "timeouts": failed["timeouts"],
        "max_completion_gap_ms": failed["max_completion_gap_ms"],
        # asked: the fault sent to its machines; applied: every machine done
        "fault": {
            **done,
            "asked_into_transfer_s": round(fault["asked"] - failed["started_at"], 3),
            "into_transfer_s": round(fault["at"] - failed["started_at"], 3),
        },
        "fidelity": fidelity.combine({"healthy": healthy_fid, "failed": failed_fid}),
        "topology": {"hosts": topo.hosts, "planes": topo.planes},
    }


def _fail_later(rec: ClusterRecord, plane: int, mode: str, delay: float, fault: dict) -> None:
    """Fail the plane on its machines `delay` seconds from now; fault: what happened."""
    time.sleep(delay)
    fault["asked"] = time.time()
    try:
        gid, results = cluster_lab.apply_fault(rec, ["plane", str(plane)], ["--mode", mode])
    except Exception as e:  # noqa: BLE001 (reported by the run, after its WRITE)
        fault["error"] = str(e)
        return
    fault["at"] = time.time()
    if gid is None:
        fault["error"] = "; ".join(f"m{m}: {v}" for m, v in results.items())
    else:
        fault["gid"] = gid


def _end_fault(rec: ClusterRecord, fault: dict) -> dict:
    """What the fault dropped on its machines (the merged snapshot's), then heal it."""
    gid = fault.get("gid")
    if gid is None:
        return {}
    snap = cluster_observe.snapshot(rec)
    found = next((f for f in snap["faults"] if f["id"] == int(gid)), {})
    cluster_lab.heal_fault(rec, gid)
    return {
        "id": int(gid),
        "target": found.get("target"),
        "machines": found.get("machines", []),
        "drops": found.get("drops"),
        "healed": gid not in cluster_lab.load(rec.lab).faults,
    }


def _whole(r: dict, size: int) -> bool:
    return r["errors"] == 0 and r["bytes"] == size


def _shares(pkts: dict) -> dict[str, float]:
    total = sum(pkts.values())
    return {str(p): round(n / total, 3) for p, n in pkts.items()} if total else {}


class _Samples:
    """Every machine's fidelity sample, taken again and again while a WRITE
    runs, each with the wall times it was asked for and answered: a WRITE is
    judged over the samples inside its transfer (as a local scenario is over
    its window), and over all of them when fewer than two fall inside."""

    def __init__(self, rec: ClusterRecord) -> None:
        self.rec = rec
        self.taken: list[tuple[float, float, dict[int, dict]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._take()  # the end: a run shorter than SAMPLE_EVERY_S has two samples

    def __enter__(self) -> _Samples:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _take(self) -> None:
        asked = time.time()
        _, got = cluster_observe.read(self.rec, stats=False)
        self.taken.append((asked, time.time(), got))

    def _loop(self) -> None:
        while True:
            self._take()
            if self._stop.wait(SAMPLE_EVERY_S):
                return

    def judge(
        self, topo: Topology, start: float, end: float, judge_veth_drops: bool
    ) -> dict | None:
        inside = [s for s in self.taken if s[0] >= start and s[1] <= end]
        over = "transfer"
        if len(inside) < 2:
            inside, over = self.taken, "call"
        if len(inside) < 2:
            return None
        fid = verdict.judge_machines(
            topo, inside[0][2], inside[-1][2], judge_veth_drops=judge_veth_drops
        )
        return fid and {**fid, "over": over}
