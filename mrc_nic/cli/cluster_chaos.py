"""chaos on a cluster lab: the local run (workloads.chaos) with the cluster as its site.

The schedule draws over the whole lab (every plane, link and switch, on any
machine) from the same seeded generator as on a local lab; each fault goes
to the machines owning its target's links (cluster_lab.apply_fault) under
one cluster id, and is healed there by that id. A fault that some owner
could not apply (a link of the target with a fault already, on that
machine) is healed where it was applied and the draw counted as skipped,
as locally. The traffic is verified WRITEs between the two hosts, through
their machines (cluster_lab.split_write when they are on two). A fault
takes a Ray call and a process on each machine it touches (about a second
on a loaded box), so a step lasts at least that: `--every` below it
applies faults as fast as the machines do. The fidelity verdict is every
machine's, each judged on its own CPU and links over the run (cluster.verdict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mrc_nic.cli import cluster_lab, output
from mrc_nic.cluster import verdict
from mrc_nic.cluster.record import ClusterRecord
from mrc_nic.fabric import faults
from mrc_nic.workloads import chaos as chaos_mod


class ClusterSchedule(chaos_mod.Schedule):
    """The schedule, its faults applied and healed through the machines' agents."""

    def __init__(self, rec: ClusterRecord, topo, spec: chaos_mod.ChaosSpec) -> None:
        super().__init__(rec.lab, topo, spec)
        self.rec = rec

    def apply(self, target: tuple[str, ...], spec: faults.FaultSpec) -> dict:
        label, _ = faults.resolve_target(self.topo, target)
        gid, results = cluster_lab.apply_fault(self.rec, list(target), _options(spec))
        refused = [_why(result) for result in results.values() if not _applied(result)]
        if refused:
            if gid is not None:  # applied on some machines only: not a fault of the run
                cluster_lab.heal_fault(self.rec, gid)
            raise faults.FaultError(refused[0])
        return {"id": int(gid), "target": label}

    def in_force(self) -> set[str]:
        return set(cluster_lab.load(self.rec.lab).faults)

    def heal_ids(self, ids: list[int]) -> None:
        for gid in ids:
            cluster_lab.heal_fault(self.rec, str(gid))


def _options(spec: faults.FaultSpec) -> list[str]:
    """`mrc-nic fail`'s options for this spec."""
    opts = ["--mode", spec.mode, "--direction", spec.direction]
    for name, value in (("--rate", spec.rate), ("--seed", spec.seed), ("--period", spec.period)):
        if value is not None:
            opts += [name, str(value)]
    return opts


def _applied(result: tuple[bool, object]) -> bool:
    ok, value = result
    return ok and value[0] == 0


def _why(result: tuple[bool, object]) -> str:
    ok, value = result
    if not ok:
        return str(value)
    lines = (value[2] or value[1]).strip().splitlines()
    return lines[-1] if lines else f"exit status {value[0]}"


@dataclass
class ClusterTraffic(chaos_mod.Traffic):
    """Verified WRITEs between two hosts of a cluster lab, through their agents."""

    rec: ClusterRecord | None = None

    def write(self, seed: int) -> dict:
        rec = self.rec
        ms = cluster_lab.machine_of_host(rec, self.src)
        md = cluster_lab.machine_of_host(rec, self.dst)
        if ms == md:
            argv = ["write", self.src, self.dst, "--size", str(self.size), "--verify"]
            ok, value = cluster_lab.run_on(rec, [ms], [*argv, "--format", "json"])[ms]
            if not ok or not value[1].strip():
                raise cluster_lab.ClusterLabError(f"m{ms}: {_why((ok, value))}")
            return json.loads(value[1])
        topo = cluster_lab.topo_of(rec)
        r = cluster_lab.split_write(rec, topo, (self.src, ms), (self.dst, md), self.size, True)
        whole = r["errors"] == 0 and r["verified_bytes"] == self.size
        return {"bytes": self.size, "completed": True, "verified": whole, "qps": []}

    def cancel(self) -> None:
        """Nothing to end from here: the agents' write ends with its bytes."""


class ClusterMeter:
    """The run's fidelity verdict: every machine's CPU and links sampled at
    its start and end, each machine judged on its own (cluster.verdict)."""

    def __init__(self, rec: ClusterRecord, topo) -> None:
        self.rec, self.topo = rec, topo
        self._before: dict[int, dict] = {}

    def start(self) -> None:
        from mrc_nic.cli.cluster_observe import read

        self._before = read(self.rec, stats=False)[1]

    def stop(self) -> dict | None:
        from mrc_nic.cli.cluster_observe import read

        return verdict.judge_machines(self.topo, self._before, read(self.rec, stats=False)[1])


class ClusterSite(chaos_mod.Site):
    """A cluster lab as the run's site."""

    def __init__(self, rec: ClusterRecord) -> None:
        self.rec, self.lab = rec, rec.lab
        self.topo = cluster_lab.topo_of(rec)

    def schedule(self, spec: chaos_mod.ChaosSpec) -> chaos_mod.Schedule:
        return ClusterSchedule(self.rec, self.topo, spec)

    def traffic(self, src: str, dst: str, size: int) -> chaos_mod.Traffic:
        return ClusterTraffic(self.lab, src, dst, size, rec=self.rec)

    def meter(self) -> ClusterMeter:
        return ClusterMeter(self.rec, self.topo)

    def qps_in_err(self) -> list[dict]:
        """The QPs in ERR in the NICs of every machine (the merged snapshot's)."""
        from mrc_nic.cli.cluster_observe import snapshot

        found = []
        for q in snapshot(self.rec)["qps"]:
            sides = [q[s] for s in ("send", "recv") if q.get(s)]
            if any(side["state"] == "ERR" for side in sides):
                found.append({"host": q["host"], "qpn": q["qpn"], "reason": "ERR in the NIC"})
        return found


def chaos(rec: ClusterRecord, args: list[str]) -> int:
    """`mrc-nic chaos ARGS` (the local command's options) on the cluster lab."""
    from mrc_nic.cli import chaos_cmds
    from mrc_nic.cli.app import app_of

    ctx = chaos_cmds.chaos.make_context("chaos", list(args))
    with ctx:
        as_json = app_of(ctx).json
        spec = chaos_cmds.spec_of(**ctx.params)
        log = None if as_json else chaos_cmds.log_fault
        report, code = chaos_cmds.outcome(
            chaos_mod.run(rec.lab, spec, on_fault=log, site=ClusterSite(rec))
        )
    if as_json:
        output.emit_json(report)
    else:
        chaos_cmds.print_report(report, cluster_lab.topo_of(rec))
    return code
