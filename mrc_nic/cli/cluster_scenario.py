"""scenario on a cluster lab: its flows and faults through the machines' agents.

`incast` and `permutation` are the local commands, their flows run by the
machines (cluster_flows). `plane-failure` runs as on a local lab
(workloads.experiments.plane_failure: the same WRITE healthy, then with a
whole plane failed --after seconds into it; the goodput ratio), with the
cluster as its site:
- each WRITE is one process per end, on its host's machine
  (cluster_lab.split_write), with the lab's QP timeout and reorder window,
  not checked byte by byte (as locally: checking costs both ends CPU); its
  TCP talk goes over another plane than the one that fails;
- the fault goes to every machine owning a link of the plane under one
  cluster id (cluster_lab.apply_fault), what it dropped is read from the
  merged snapshot (every machine's fault counters), and it is healed there
  by that id, also when the WRITE fails;
- the fidelity verdict is each machine's CPU and links (cluster.verdict),
  sampled over and over while a WRITE runs and judged between the first and
  last samples inside its transfer.
A WRITE's processes start and connect before its first byte (a second or
more); the healthy run measures how long that takes, and the fault is
applied that long plus --after after the failed WRITE is started. The
report says when, into the transfer, the fault landed (the machines' wall
clocks: synchronised machines, or one box).

single-ev-loss and allreduce-failure are refused (REFUSED says why): their
QP or ranks are one machine's processes.
"""

from __future__ import annotations

import functools
import threading
import time

import click

from mrc_nic.cli import cluster_lab, cluster_observe
from mrc_nic.cluster import verdict
from mrc_nic.cluster.record import ClusterRecord
from mrc_nic.lab.topology import Topology
from mrc_nic.observe import fidelity

SAMPLE_EVERY_S = 1.0  # between the end of one round of fidelity samples and the next
_LOCAL = "run it on a lab of its own: mrc-nic scenario ... --topology FILE"
FLOWS = ("incast", "permutation")  # cluster_flows runs their flows
REFUSED = {
    "single-ev-loss": "it faults one EV of a QP that one process keeps open over two "
    "WRITEs, and a WRITE between machines is two processes; " + _LOCAL,
    "allreduce-failure": "its ring's ranks are processes of one machine; " + _LOCAL,
}


def scenario(rec: ClusterRecord, args: list[str]) -> int:
    """`mrc-nic scenario NAME ARGS` (the local command's options) on the cluster lab."""
    from mrc_nic.cli import scenario_cmds
    from mrc_nic.cli.app import app_of

    name = args[0] if args else ""
    if name in REFUSED:
        raise cluster_lab.ClusterLabError(
            f"`mrc-nic scenario {name}` does not run on a cluster lab: {REFUSED[name]}"
        )
    if name in FLOWS:
        return _flows(rec, name, args[1:])
    if name != "plane-failure":
        raise click.UsageError(
            f"no scenario {name!r} on a cluster lab; these run there: "
            f"{', '.join((*FLOWS, 'plane-failure'))} (see mrc-nic scenario --help)"
        )
    ctx = scenario_cmds.plane_failure.make_context(name, list(args[1:]))
    with ctx:
        app, p = app_of(ctx), ctx.params
        topo = cluster_lab.topo_of(rec)
        if not 0 <= p["plane"] < topo.planes:
            raise click.BadParameter(
                f"lab {rec.lab} has planes 0..{topo.planes - 1}", param_hint="--plane"
            )
        r = scenario_cmds.run_rounds(
            lambda: plane_failure(
                rec, topo, size=p["size"], plane=p["plane"], after=p["after"], mode=p["mode"]
            ),
            p["rounds"],
            "goodput_ratio",
        )
        r.setdefault("topology", {"hosts": topo.hosts, "planes": topo.planes})
        scenario_cmds.show_report(r, app, scenario_cmds.plane_failure_lines)
    return 0


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

    def write(judge_veth_drops: bool = True) -> tuple[dict, dict | None]:
        with _Samples(rec) as samples:
            r = cluster_lab.split_write(rec, topo, *ends, size, False, cm_plane)
        return r, samples.judge(topo, r["started_at"], r["ended_at"], judge_veth_drops)

    called = time.time()
    healthy, healthy_fid = write()
    setup = max(0.0, healthy["started_at"] - called)  # process starts, connection
    fault: dict = {}
    t = threading.Thread(target=_fail_later, args=(rec, plane, mode, setup + after, fault))
    t.start()
    try:
        # a plane taken down drops at its veths: the fault's doing, not the CPU's
        failed, failed_fid = write(judge_veth_drops=mode != "down")
    finally:
        t.join()
        done = _end_fault(rec, fault)
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

    def __enter__(self) -> _Samples:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            asked = time.time()
            _, got = cluster_observe.read(self.rec, stats=False)
            self.taken.append((asked, time.time(), got))
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
