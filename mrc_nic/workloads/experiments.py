"""The papers' failure experiments, one function each (`mrc-nic scenario ...`).

- single_ev_loss: "one EV of 16 drops 20% of its packets: it is retired and
  line rate holds". One connection h0 -> h1 on EV profile 0 with 16 EVs; a
  healthy WRITE, then one EV of the QP gets a 20% loss fault on the wire
  (`mrc-nic fail qp QPN ev EV`: that EV's packets only), then the same WRITE
  again. Reports the goodput ratio lossy / healthy of the same run, what the
  fault dropped, and the EV's final state: retired (replaced by a fresh EV,
  transport.evreplace) or its NIC state.
- plane_failure: a WRITE during which a whole plane is blackholed, against
  the same WRITE healthy.

- allreduce_failure: a ring all-reduce over the lab's hosts (collective.MrcRing,
  every step's bytes verified), healthy, then again on the same ring with a
  fault (a plane blackholed or down, a link blackholed) put in force at a
  fraction of the job's steps, timed by the healthy run; job time healthy
  against failed.

Incast and permutation are mrc_nic.workloads.scenario's; scripts/bench_collective.py
sets the all-reduce beside TCP and MPTCP (docs/fidelity.md).

`repeated` runs one of them several times: each run pairs its healthy and
faulty measurement back to back, so the spread over runs is the machine's.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from mrc_nic import nic
from mrc_nic.fabric import faults
from mrc_nic.lab.state import open_lab
from mrc_nic.observe import fidelity
from mrc_nic.workloads import collective, rdma_write

MIB = 2**20


def repeated(run: Callable[[], dict], rounds: int, key: str) -> dict:
    """`rounds` runs of an experiment (run() -> its result): one run's result as
    it is; for more, the median, min and max of `key` (the experiment's ratio)
    over the runs that gave one, whether every run completed, and every run."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    runs = [run() for _ in range(rounds)]
    if rounds == 1:
        return runs[0]
    values = [r[key] for r in runs if r.get(key) is not None]
    verdicts = {f"round {i}": r.get("fidelity") for i, r in enumerate(runs, 1)}
    # The rounds the links bound: the only ones whose ratio says something about MRC
    # (a round the CPU bound measures the machine; observe.fidelity).
    bound = [
        r[key]
        for r in runs
        if r.get(key) is not None and (r.get("fidelity") or {}).get("verdict") == "links"
    ]
    return {
        "fidelity": fidelity.combine(verdicts),
        "links_bound": {
            "rounds": len(bound),
            "median": statistics.median(bound) if bound else None,
            "min": min(bound, default=None),
            "max": max(bound, default=None),
        },
        "scenario": runs[0]["scenario"],
        "lab": runs[0]["lab"],
        "rounds": rounds,
        "key": key,
        "median": statistics.median(values) if values else None,
        "min": min(values, default=None),
        "max": max(values, default=None),
        "completed": all(r["completed"] for r in runs),
        "runs": runs,
    }


def _pick_hosts(lab: str, src: str | None, dst: str | None) -> tuple[str, str]:
    _, topo = open_lab(lab)
    hosts = topo.host_names()
    return src or hosts[0], dst or hosts[1]


def single_ev_loss(
    lab: str,
    *,
    size: int = 256 * MIB,
    evs: int = 16,
    rate: float = 0.2,
    seed: int = 7,
    plane: int = 1,
    src: str | None = None,
    dst: str | None = None,
) -> dict:
    src, dst = _pick_hosts(lab, src, dst)
    _, topo = open_lab(lab)
    if evs % topo.planes:
        raise ValueError(f"evs must be a multiple of the lab's {topo.planes} planes, not {evs}")
    fault = None
    with rdma_write.Connection(lab, src, dst, size_hint=size) as conn:
        healthy = conn.write(size, ev_count=evs, keep_open=True, meter=fidelity.Meter(topo=topo))
        qpn = conn.qpns[0]
        with nic.NicMaps.open(lab) as maps:
            raw = maps.sq_raw(qpn)
            profile = list(raw.evs[: raw.n_evs])
            ev = next(e for e in profile if maps.ev(qpn, e).plane == plane % topo.planes)
        spec = faults.FaultSpec("loss", rate=rate, seed=seed)
        fault = faults.apply(lab, ("qp", hex(qpn), "ev", str(ev)), spec)
        try:
            lossy = conn.write(size, keep_open=True, meter=fidelity.Meter(topo=topo))
            with nic.NicMaps.open(lab) as maps:
                raw = maps.sq_raw(qpn)
                now = list(raw.evs[: raw.n_evs])
                if ev in now:
                    final = nic.EvState(maps.ev(qpn, ev).state).name
                    replacement = None
                else:
                    final = "RETIRED"
                    replacement = now[profile.index(ev)]
            counts = faults.fault_drops(fault, _Maps(lab))
        finally:
            healed = faults.heal(lab, [fault["id"]])
    ev_counts = healed[0].get("ev_counts", {}) if healed else {}
    return single_ev_loss_report(
        lab=lab, src=src, dst=dst, size=size, evs=evs, qpn=qpn, ev=ev,
        plane=plane % topo.planes, rate=rate, healthy=healthy, lossy=lossy, final=final,
        replacement=replacement,
        counts={"pkts": ev_counts.get("pkts"), "dropped": ev_counts.get("dropped", counts)},
        fid={"healthy": healthy.get("fidelity"), "lossy": lossy.get("fidelity")},
    )  # fmt: skip


def single_ev_loss_report(
    *, lab: str, src: str, dst: str, size: int, evs: int, qpn: int, ev: int, plane: int,
    rate: float, healthy: dict, lossy: dict, final: str, replacement: int | None,
    counts: dict, fid: dict,
) -> dict:  # fmt: skip
    """single-ev-loss's report (a local lab's, or a cluster lab's: cli.cluster_scenario).
    healthy, lossy: each WRITE's goodput_bps, completed, retransmits and
    timeouts; counts: the fault's pkts and dropped; fid: each WRITE's verdict."""
    ratio = lossy["goodput_bps"] / healthy["goodput_bps"] if healthy["goodput_bps"] else None
    return {
        "scenario": "single-ev-loss",
        "lab": lab,
        "src": src,
        "dst": dst,
        "size": size,
        "evs": evs,
        "qpn": qpn,
        "lossy_ev": ev,
        "plane": plane,
        "loss_rate": rate,
        "healthy_goodput_bps": healthy["goodput_bps"],
        "lossy_goodput_bps": lossy["goodput_bps"],
        "goodput_ratio": ratio,
        "lossy_ev_final_state": final,
        "replaced_by": replacement,
        "fault_pkts": counts.get("pkts"),
        "fault_dropped": counts.get("dropped"),
        "completed": bool(healthy["completed"] and lossy["completed"]),
        "retransmits": {"healthy": healthy["retransmits"], "lossy": lossy["retransmits"]},
        "timeouts": {"healthy": healthy["timeouts"], "lossy": lossy["timeouts"]},
        "fidelity": fidelity.combine(fid),
    }


class _Maps:
    """SwitchPortMaps for faults.fault_drops, opened for one call."""

    def __init__(self, lab: str) -> None:
        self.lab = lab

    def ev_fault(self, *args):
        from mrc_nic.fabric.switchport import SwitchPortMaps

        with SwitchPortMaps.open(self.lab) as maps:
            return maps.ev_fault(*args)


def plane_failure(
    lab: str,
    *,
    size: int = 256 * MIB,
    plane: int = 1,
    after: float = 0.3,
    mode: str = "blackhole",
    src: str | None = None,
    dst: str | None = None,
) -> dict:
    """The same WRITE healthy, then with plane `plane` failing `after` seconds in."""
    src, dst = _pick_hosts(lab, src, dst)
    _, topo = open_lab(lab)
    with rdma_write.Connection(lab, src, dst, size_hint=size) as conn:
        healthy = conn.write(size, keep_open=True, meter=fidelity.Meter(topo=topo))
        fault: dict = {}

        def fail_later() -> None:
            time.sleep(after)
            fault.update(faults.apply(lab, ("plane", str(plane)), faults.FaultSpec(mode)))

        t = threading.Thread(target=fail_later, daemon=True)
        t.start()
        try:
            # a plane taken down drops at its veths: the fault's doing, not the CPU's
            meter = fidelity.Meter(topo=topo, judge_veth_drops=mode != "down")
            failed = conn.write(size, keep_open=True, meter=meter)
        finally:
            t.join()
            if fault:
                faults.heal(lab, [fault["id"]])
    ratio = failed["goodput_bps"] / healthy["goodput_bps"] if healthy["goodput_bps"] else None
    return {
        "scenario": "plane-failure",
        "lab": lab,
        "src": src,
        "dst": dst,
        "size": size,
        "plane": plane,
        "mode": mode,
        "fail_after_s": after,
        "healthy_goodput_bps": healthy["goodput_bps"],
        "failed_goodput_bps": failed["goodput_bps"],
        "goodput_ratio": ratio,
        "per_plane_share": failed["per_plane_share"],
        "completed": bool(healthy["completed"] and failed["completed"]),
        "retransmits": failed["retransmits"],
        "timeouts": failed["timeouts"],
        "fidelity": fidelity.combine(
            {"healthy": healthy.get("fidelity"), "failed": failed.get("fidelity")}
        ),
    }


def fault_point(healthy: collective.JobResult, at: float) -> tuple[int, float]:
    """(step, seconds into it) at fraction `at` of the job's steps, the part of
    that step timed by the healthy run: 0.4 of 2 steps is 80% into step 0."""
    steps = healthy.steps_planned
    k = min(steps - 1, int(at * steps))
    seconds = healthy.steps[k].seconds if len(healthy.steps) > k else 0.0
    return k, round((at * steps - k) * seconds, 6)


def _verified(job: collective.JobResult) -> bool:
    """Every transfer of every step completed and compared byte for byte."""
    return bool(job.steps) and all(
        e.get("completed") and e.get("verified") is True for s in job.steps for e in s.edges
    )


class LocalSite:
    """Where allreduce_failure runs: a lab of this machine. The ring's ranks
    are its processes, the fault is faults.apply's, each run is judged by a
    fidelity.Meter. (A cluster lab's site: mrc_nic.cli.cluster_scenario.)"""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        _, self.topo = open_lab(lab)

    def ring(self, hosts: list[str], size: int) -> collective.MrcRing:
        return collective.MrcRing(self.lab, hosts, size, topo=self.topo)

    def apply(self, fault: tuple[str, ...], mode: str) -> dict:
        """Put the fault in force: {fault_id, target, links}."""
        record = faults.apply(self.lab, fault, faults.FaultSpec(mode))
        return {"fault_id": record["id"], "target": record["target"], "links": len(record["links"])}

    def heal(self, ids: list) -> None:
        faults.heal(self.lab, ids)

    def meter(self, judge_veth_drops: bool = True) -> fidelity.Meter:
        return fidelity.Meter(topo=self.topo, judge_veth_drops=judge_veth_drops)


def allreduce_failure(
    lab: str,
    *,
    size: int = 64 * MIB,
    fault: tuple[str, ...] = ("plane", "1"),
    mode: str = "blackhole",
    at: float = 0.4,
    limit_s: float = 120.0,
    hosts: list[str] | None = None,
    site=None,
) -> dict:
    """A ring all-reduce of `size` bytes over the lab's hosts (or `hosts`, in
    ring order), healthy, then on the same ring with `fault` (a faults target:
    plane N, a link, a host port) in `mode` put in force at fraction `at` of
    the steps and healed when the job ends. Every step's bytes are verified.
    site: where it runs (LocalSite(lab) by default)."""
    if not 0.0 <= at < 1.0:
        raise ValueError(f"--at is a fraction of the job's steps, 0 <= at < 1, not {at}")
    if mode not in ("blackhole", "down"):
        raise ValueError(f"the fault's mode is blackhole or down, not {mode!r}")
    site = site or LocalSite(lab)
    topo = site.topo
    hosts = list(hosts or topo.host_names())
    faults.resolve_target(topo, fault)  # a bad target is refused before anything runs
    applied: list = []

    def inject() -> dict:
        record = site.apply(fault, mode)
        applied.append(record["fault_id"])
        return record

    with site.ring(hosts, size) as ring:
        with site.meter() as meter:
            healthy = ring.run(limit_s=limit_s, verify=True, seed=1)
            fid_healthy = meter.stop()
        step, into = fault_point(healthy, at)
        try:
            with site.meter(judge_veth_drops=mode != "down") as meter:
                failed = ring.run(
                    limit_s=limit_s, verify=True, seed=2, step_events=[(step, into, inject)]
                )
                fid_failed = meter.stop()
        finally:
            if applied:
                site.heal(applied)
    done = [e for e in failed.events if "done_s" in e and "error" not in e]
    fault_record = {
        "target": " ".join(fault),
        "mode": mode,
        "at": at,
        "step": step,
        "into_step_s": into,
        "in_force_at_s": done[0]["done_s"] if done else None,
        "error": next((e["error"] for e in failed.events if "error" in e), None),
    }
    report = {"scenario": "allreduce-failure", "lab": lab, "hosts": hosts, "size": size}
    fid = fidelity.combine({"healthy": fid_healthy, "failed": fid_failed})
    return report | _healthy_against_failed(healthy, failed, fault_record, fid)


def _healthy_against_failed(healthy, failed, fault_record: dict, fid: dict) -> dict:
    """allreduce_failure's figures: the two runs side by side, and the slowdown."""
    slowdown = (
        failed.job_s / healthy.job_s
        if healthy.completed and failed.completed and healthy.job_s
        else None
    )
    return {
        "steps": healthy.steps_planned,
        "fault": fault_record,
        "healthy_job_s": healthy.job_s,
        "failed_job_s": failed.job_s,
        "slowdown": slowdown,
        "healthy_busbw_gbps": healthy.to_dict()["busbw_gbps"],
        "failed_busbw_gbps": failed.to_dict()["busbw_gbps"],
        "completed": healthy.completed and failed.completed,
        "verified": _verified(healthy) and _verified(failed),
        "step_s": {
            "healthy": [round(s.seconds, 6) for s in healthy.steps],
            "failed": [round(s.seconds, 6) for s in failed.steps],
        },
        "retransmits": {
            "healthy": healthy.detail.get("retransmits"),
            "failed": failed.detail.get("retransmits"),
        },
        "timeouts": {
            "healthy": healthy.detail.get("timeouts"),
            "failed": failed.detail.get("timeouts"),
        },
        "errors": {"healthy": healthy.error, "failed": failed.error},
        "fidelity": fid,
    }
