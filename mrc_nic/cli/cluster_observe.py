"""status and stats on a cluster lab: the machines' snapshots merged (cluster.merge).

Every snapshot asks every machine at once for its own (the stats
snapshot and fidelity sample of cluster.probe, run by its agent) and
merges them; `stats` then runs the
local command's code (cli.stats_cmds.show: tables, --watch, jsonl, prom,
--listen, --host/--plane) over a sampler that takes such merged snapshots.
A merged snapshot costs each machine a process start and a full read, so
a cluster watch or stream goes no faster than the machines answer (the
stream skips ahead when a snapshot takes longer than --interval).
"""

from __future__ import annotations

from mrc_nic.cli import cluster_lab, output
from mrc_nic.cli.status_view import render_status
from mrc_nic.cluster import machines, merge, verdict
from mrc_nic.cluster.record import ClusterRecord

SNAPSHOT_TIMEOUT_S = 120.0


def snapshot(rec: ClusterRecord, ev_detail: bool = False) -> dict:
    """Every machine's snapshot merged, with a `cluster` part: each machine,
    its agent, and what could not be read."""
    return read(rec, ev_detail)[0]


def read(
    rec: ClusterRecord, ev_detail: bool = False, stats: bool = True
) -> tuple[dict, dict[int, dict]]:
    """(the merged snapshot, {machine: its fidelity sample}) read from every
    machine at once (cluster.probe); stats=False: the samples only."""
    plan, handles = cluster_lab.agents(rec)
    n = len(plan.machines)
    calls = [(h, "probe", (stats, ev_detail, True)) for h in handles]
    if stats:  # the agents' own facts, for the machines' rows
        calls += [(h, "info", ()) for h in handles]
    answers = machines.call_many(calls, timeout=SNAPSHOT_TIMEOUT_S)
    probes, infos = answers[:n], answers[n:]
    snaps, samples, rows = {}, {}, []
    for m, address in enumerate(plan.machines):
        reached, value = probes[m]
        if reached:
            samples[m] = value["meter"]
            if stats:
                snaps[m] = value["snapshot"]
        if not stats:
            continue
        ok, info = infos[m]
        why = None if ok else info
        if why is None and not reached:
            why = str(value).strip().splitlines()[-1] if str(value).strip() else "no snapshot"
        rows.append(
            {
                "machine": m,
                "address": address,
                "agent": "alive" if ok else "dead",
                "agent_pid": info.get("pid") if ok else None,
                "namespaces": len(plan.nodes_of(m)),
                "hosts": [n for n in plan.nodes_of(m) if not n.startswith("p")],
                "error": why,
            }
        )
    if not stats:
        return {}, samples
    cluster_lab.note_lost(rec, {r["machine"]: r["error"] for r in rows if r["agent"] == "dead"})
    rec = cluster_lab.load(rec.lab)  # with the faults and events noted meanwhile
    ids = {(int(m), i): int(g) for g, f in rec.faults.items() for m, i in f["parts"].items()}
    if snaps:
        merged = merge.merge(cluster_lab.topo_of(rec), plan.node_machine, snaps, ids)
    else:
        merged = {"lab": rec.lab, "hosts": [], "links": [], "faults": []}
    merged["faults"] = _merge_faults(rec, [f for m, s in snaps.items() for f in _tag(s, m)])
    merged["cluster"] = {
        "address": rec.address,
        "machines": rows,
        "vxlan_links": plan.vnis,
        "placement": plan.node_machine,
        "faults": rec.faults,
        "bringup_seconds": rec.bringup_seconds,
    }
    merged["bringup_seconds"] = rec.bringup_seconds
    return merged, samples


def _tag(snap: dict, machine: int) -> list[dict]:
    return [dict(f, machine=machine) for f in snap.get("faults", [])]


def _merge_faults(rec: ClusterRecord, faults: list[dict]) -> list[dict]:
    """One entry per cluster fault (its id, its machines' drops added up),
    then faults applied on one machine directly, as that machine has them."""
    out, claimed = [], set()
    for gid, cf in rec.faults.items():
        parts = [
            f
            for f in faults
            if str(f["machine"]) in cf["parts"] and f["id"] == cf["parts"][str(f["machine"])]
        ]
        if not parts:
            continue
        claimed.update(id(f) for f in parts)
        counted = [f["drops"] for f in parts if f.get("drops") is not None]
        merged = dict(parts[0], id=int(gid), machines=[f["machine"] for f in parts])
        merged["drops"] = sum(counted) if counted else None
        merged["links"] = sorted({lk for f in parts for lk in f.get("links", [])})
        merged.pop("machine", None)
        out.append(merged)
    return out + [f for f in faults if id(f) not in claimed]


class ClusterSampler:
    """stats_cmds.show's sampler over a cluster lab: each snapshot merged
    from every machine's, with the fidelity verdict since the snapshot
    before, each machine judged on its own CPU and links (cluster.verdict).
    kernel_every does not apply: each machine reads its kernel on every
    snapshot (a snapshot is one process run there)."""

    judges_fidelity = False  # its snapshots carry their verdict: no Meter of this machine

    def __init__(self, rec: ClusterRecord, *, kernel_every: int = 1, ev_detail: bool = False):
        self.rec, self.ev_detail = rec, ev_detail
        self.topo = cluster_lab.topo_of(rec)
        self._samples: dict[int, dict] = {}

    def __enter__(self) -> ClusterSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def snapshot(self) -> dict:
        snap, samples = read(self.rec, ev_detail=self.ev_detail)
        if self._samples:
            snap["fidelity"] = verdict.judge_machines(self.topo, self._samples, samples)
        self._samples = samples
        return snap


def stats(rec: ClusterRecord, args: list[str]) -> int:
    """`mrc-nic stats ARGS` (the local command's options and views) on the cluster lab."""
    from mrc_nic.cli import stats_cmds
    from mrc_nic.cli.app import app_of

    ctx = stats_cmds.stats.make_context("stats", list(args))
    p = ctx.params
    with ctx:
        stats_cmds.show(
            app_of(ctx).format,
            lambda **kw: ClusterSampler(rec, **kw),
            p["watch"],
            p["view"],
            p["host"],
            p["plane"],
            p["interval"],
            p["count"],
            p["duration"],
            p["listen"],
        )
    return 0


def status(rec: ClusterRecord, args: list[str]) -> int:
    snap = snapshot(rec)
    if cluster_lab.format_of(args) == "json":
        output.emit_json(snap)
    else:
        _render_cluster(snap)
        if snap.get("topology"):
            render_status(snap)
    return 0 if all(r["error"] is None for r in snap["cluster"]["machines"]) else 1


def _render_cluster(snap: dict) -> None:
    c = snap["cluster"]
    rows = [
        [
            f"m{r['machine']}",
            r["address"],
            output.styled(r["agent"], "green" if r["agent"] == "alive" else "red"),
            r["namespaces"],
            ", ".join(r["hosts"]),
            r["error"] or "",
        ]
        for r in c["machines"]
    ]
    output.table(
        f"machines (Ray cluster {c['address']}, {len(c['vxlan_links'])} VXLAN links)",
        ["machine", "underlay", "agent", "#namespaces", "hosts", "problem"],
        rows,
    )
