#!/usr/bin/env python3
"""Collective: ring all-reduce on clos-8, mrc-nic vs TCP and MPTCP, with and without a failure.

One lab (netns/clos-8-1g.toml: 8 hosts, 8 planes of 4 T0s and 2 spines, 1 Gbit/s
links), named bcol<pid>, for everything. The job: a ring all-reduce of
--size bytes (default 256 MiB, --quick 64 MiB) among the 8 hosts in the order
h0 -> h1 -> ... -> h7 -> h0 (mrc_nic.workloads.collective: 14 steps, reduce-scatter
then all-gather, each moving S/8 bytes over every ring edge at once, a
barrier after each step). What is modelled and what is not is said in
mrc_nic/workloads/collective.py: the bytes and the step dependency, not the adds.

- mrc-nic: one connection per ring edge (send QP at h_i, receive QP at
  h_i+1, on the verbs API), opened before the job; each step is, on every
  edge, a transfer of the chunk in WRITEs of up to --chunk bytes (default:
  what host memory gives one peer: rdma_write.chunk_bytes(peers=1), the last
  one WRITE_WITH_IMM), sprayed over the 8 planes.
- TCP: a process per host, one connection per ring edge on plane --plane's
  addresses (a single path: what a TCP collective gets), the same steps and
  barrier. MPTCP: the same with one subflow per plane (the next host announces
  its 8 addresses; mrc_nic.workloads.peers.mptcp_setup).

After one unmeasured warm-up job of each transport (S/8; --no-warmup skips
it), each round runs every transport's job healthy, then every transport's
job with the failure (the order of the transports turned every round, as
the shared machine's load drifts): --fault (default: blackhole of every link of
plane 0, TCP's plane, so it hits every ring edge of every transport) put in
force at --fault-at of the job's steps (0.4 of 14 steps: 60% into step 5,
timed by that transport's median healthy time of step 5, so at the same
point of each job's progress however loaded the machine is), and left until
the job ends (or for --fault-duration seconds).
A job that has not ended within max(--min-limit, --limit-factor x its healthy
time; defaults 20 s and 4, --quick 15 s and 3) is stopped and reported as
"did not finish within X s", with the steps it completed.

Figures: job time healthy and with the failure (medians of the rounds), and
the slowdown (failed / healthy), mrc-nic beside each peer with the ratio
(peer/mrc-nic: above 1 is mrc-nic ahead); per-step times, bus bandwidth,
retransmissions and timeouts in the JSON. Output: DIR/collective.json and
DIR/collective.png (progress vs time and per-step time, each transport
healthy and failed, the fault marked), DIR = --out (default out/bench). The
lab is taken down by its exact name at the end, also on an error, Ctrl-C or
SIGTERM; every host process of the peers is ended by its pid.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_collective.py [--quick] [--out DIR] [--size 256M]
        [--rounds 2] [--peers tcp,mptcp] [--fault "plane 0"] [--fault-mode blackhole]
        [--fault-at 0.4] [--fault-duration S] [--verify]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import resources, units
from mrc_nic.fabric import faults
from mrc_nic.kernel import cpustat
from mrc_nic.lab import topology
from mrc_nic.observe import fidelity
from mrc_nic.workloads import collective, collective_sockets
from mrc_nic.workloads.benchkit import (
    add_common_args,
    begin,
    load_avg,
    log,
    own_lab,
    print_table,
    pyplot,
    save_png,
    table_row,
)

MIB = 2**20
NAMES = {"mrc": "mrc-nic", "tcp": "TCP", "mptcp": "MPTCP"}
COLORS = {"mrc": "tab:blue", "tcp": "tab:red", "mptcp": "tab:green"}


# ---- one job -----------------------------------------------------------------------------
def run_job(
    name: str,
    topo,
    transport: str,
    args: argparse.Namespace,
    *,
    limit_s: float,
    fault_at: tuple[int, float] | None = None,
    size: int | None = None,
) -> dict[str, Any]:
    """One all-reduce on `transport`, with the fault put in force at
    fault_at = (step, seconds into that step) (None: healthy); the fault is
    healed when the job ends. size: the all-reduce's (default --size)."""
    hosts, size = topo.host_names(), size or args.size
    applied: list[int] = []
    step_events = []
    if fault_at is not None:

        def inject() -> dict:
            spec = faults.FaultSpec(mode=args.fault_mode, duration=args.fault_duration)
            record = faults.apply(name, tuple(args.fault.split()), spec)
            applied.append(record["id"])
            return {
                "fault_id": record["id"],
                "target": record["target"],
                "links": len(record["links"]),
            }

        inject.__name__ = f"fail {args.fault} {args.fault_mode}"
        step_events.append((*fault_at, inject))
    cpu = cpustat.sample()
    load = load_avg()[0]
    meter = fidelity.Meter(topo=topo, judge_veth_drops=args.fault_mode != "down")
    meter.start()
    try:
        job = _run(name, topo, transport, args, size, limit_s, step_events)
    except Exception as e:  # a ring that could not be set up: said, and the next job runs
        job = collective.JobResult(transport, hosts, size, 2 * (len(hosts) - 1), limit_s)
        job.error = f"{type(e).__name__}: {e}"
    finally:
        if applied:
            with contextlib.suppress(faults.FaultError):  # a --fault-duration one ended itself
                faults.heal(name, applied)
    out = job.to_dict()
    out["fidelity"] = meter.stop()  # which resource bound the job (observe.fidelity)
    out["busy_cpus"] = cpustat.busy_cores(cpu, cpustat.sample())
    out["load_avg_1m"] = load
    out["fault_plan"] = list(fault_at) if fault_at else None
    if transport == "mrc":  # each plane's share of the packets sent, per step (all edges)
        out["plane_share_per_step"] = [plane_share(s.edges) for s in job.steps]
    done = [e["done_s"] for e in job.events if "done_s" in e and "error" not in e]
    out["fault_at_s"] = done[0] if done else None  # in force from then (job time)
    return out


def _run(name, topo, transport, args, size, limit_s, step_events) -> collective.JobResult:
    hosts = topo.host_names()
    if transport == "mrc":
        with collective.MrcRing(name, hosts, size, qps=args.qps, chunk=args.chunk) as ring:
            return ring.run(
                limit_s=limit_s,
                verify=args.verify,
                step_events=step_events,
                cc_profile=args.cc_profile,
            )
    return collective_sockets.socket_ring(
        topo, hosts, size, proto=transport, plane=args.plane, limit_s=limit_s,
        step_events=step_events,
    )  # fmt: skip


def plane_share(edges: list[dict]) -> dict[str, float]:
    """Mean share of each plane in the packets the edges' transfers sent."""
    shares = [e.get("per_plane_share") or {} for e in edges]
    planes = sorted({p for sh in shares for p in sh}, key=int)
    return {p: round(sum(sh.get(p, 0.0) for sh in shares) / len(shares), 4) for p in planes}


def fault_point(runs: list[dict[str, Any]], frac: float) -> tuple[int, float]:
    """(step, seconds into it) at `frac` of the job's steps, the part of a step
    timed by the median of that step in the healthy runs: 0.4 of 14 steps is
    60% into step 5."""
    steps = runs[0]["steps_planned"]
    k = min(steps - 1, int(frac * steps))
    times = [r["steps"][k]["seconds"] for r in runs if len(r["steps"]) > k]
    return k, round((frac * steps - k) * statistics.median(times), 4)


def job_line(transport: str, run: dict[str, Any]) -> str:
    if run["completed"]:
        head = f"{run['job_s']:.3f} s, bus bandwidth {run['busbw_gbps']:.3f} Gbit/s"
    elif not run["steps"] and run.get("error") and not run["events"]:
        head = "could not start"
    else:
        head = (
            f"did not finish within {run['limit_s']:g} s "
            f"({len(run['steps'])}/{run['steps_planned']} steps)"
        )
    extra = []
    d = run["detail"]
    if d.get("retransmits") is not None:
        extra.append(f"retransmits {d['retransmits']}")
    if d.get("timeouts") is not None:
        extra.append(f"timeouts {d['timeouts']}")
    if run["fault_plan"] is not None:
        k, dt = run["fault_plan"]
        at = "-" if run["fault_at_s"] is None else f"{run['fault_at_s']:.2f} s"
        extra.append(f"fault in force at {at} ({dt:.2f} s into step {k})")
    extra.append(f"CPUs busy {run['busy_cpus']}")
    tail = f"; {run['error']}" if run.get("error") else ""
    for stuck in d.get("stuck") or []:  # where a stopped mrc-nic transfer stood
        for qp, st in stuck.items():
            if isinstance(st, dict) and "snd_una" in st:
                tail += (
                    f"; {stuck['src']}->{stuck['dst']} QP {qp}: {st['snd_nxt'] - st['snd_una']} "
                    f"in flight, cwnd {st['cwnd']}, WQEs sent {st['wqe_sent']} done "
                    f"{st['wqe_done']}"
                )
    return f"{NAMES[transport]:8} {head} [{', '.join(extra)}]{tail}"


# ---- the figures ---------------------------------------------------------------------------
def job_time(run: dict[str, Any]) -> float:
    """A job's time; +inf when it did not finish (so that a median says so)."""
    return run["job_s"] if run["completed"] else math.inf


def median_time(runs: list[dict[str, Any]]) -> float | None:
    """Median job time over rounds, a job that did not finish counting as
    infinitely long; None when there is no run or the median did not finish."""
    if not runs:
        return None
    m = statistics.median(job_time(r) for r in runs)
    return None if math.isinf(m) else m


def case_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One transport, one case (healthy or failure) over its rounds. The
    median counts a job that did not finish as infinitely long: with one of
    two rounds unfinished there is no median (the range still says both)."""
    times = [job_time(r) for r in runs]
    return {
        "median_s": median_time(runs),
        "range_s": [None if math.isinf(x) else round(x, 3) for x in (min(times), max(times))]
        if times
        else [None, None],
        "rounds": len(runs),
        "unfinished": sum(not r["completed"] for r in runs),
        "limit_s": max((r["limit_s"] for r in runs), default=None),
    }


def summarize(runs: dict[str, dict[str, list]]) -> dict[str, dict[str, Any]]:
    out = {}
    for t, cases in runs.items():
        healthy, fault = case_summary(cases["healthy"]), case_summary(cases["fault"])
        h, f = healthy["median_s"], fault["median_s"]
        out[t] = {"healthy": healthy, "fault": fault, "slowdown": f / h if h and f else None}
    return out


def unfinished_note(who: str, c: dict[str, Any]) -> str:
    """'' when every round finished; else what did not, as the table says it."""
    if not c["rounds"]:
        return f"{who} not run (no healthy job finished)"
    if not c["unfinished"]:
        return ""
    return (
        f"{who} did not finish within {c['limit_s']:g} s in {c['unfinished']} of "
        f"{c['rounds']} round(s)"
    )


def table_rows(summary: dict[str, dict[str, Any]], args: argparse.Namespace, topo) -> list[dict]:
    size = f"{args.size / MIB:g} MiB"
    fault = f"{args.fault} {args.fault_mode} at {args.fault_at:.0%} of the job"
    case = f"ring all-reduce, {topo.hosts} hosts, {size}"
    mrc = summary["mrc"]
    rows = []
    for peer in args.peers:
        p = summary[peer]
        name = NAMES[peer] + (
            f" (plane {args.plane})" if peer == "tcp" else f" ({topo.planes} subflows)"
        )
        notes = {}
        for key in ("healthy", "fault"):
            said = [unfinished_note("mrc-nic", mrc[key]), unfinished_note(NAMES[peer], p[key])]
            notes[key] = "".join(f"; {x}" for x in said if x)
        rows += [
            table_row(
                "collective", f"{case}, healthy{notes['healthy']}", "job time", "s",
                mrc["healthy"]["median_s"], name, p["healthy"]["median_s"], ratio_is="peer/mrc",
            ),
            table_row(
                "collective", f"{case}, {fault}{notes['fault']}", "job time", "s",
                mrc["fault"]["median_s"], name, p["fault"]["median_s"], ratio_is="peer/mrc",
            ),
            table_row(
                "collective", f"{case}, {fault}{notes['fault']}", "slowdown (failed / healthy)",
                "x", mrc["slowdown"], name, p["slowdown"], ratio_is="peer/mrc",
            ),
        ]  # fmt: skip
    return rows


def slowdown_text(x: dict[str, Any]) -> str:
    """'1.10x', or a lower bound when the failed job did not finish."""
    if x["slowdown"]:
        return f"{x['slowdown']:.2f}x"
    healthy, fault = x["healthy"]["median_s"], x["fault"]
    if healthy and fault["rounds"] and fault["median_s"] is None:
        return f"over {fault['limit_s'] / healthy:.1f}x (did not finish)"
    return "-"


def report_lines(summary: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[str]:
    def t(c: dict[str, Any]) -> str:
        lo, hi = (f"{x:.3f}" if x is not None else "DNF" for x in c["range_s"])
        spread = f" [{lo} .. {hi}]" if c["rounds"] > c["unfinished"] else ""
        if c["median_s"] is not None:
            return f"{c['median_s']:.3f} s{spread}"
        return (unfinished_note("", c).strip() or "-") + spread

    def ratio(a: float | None, b: float | None) -> str:
        return f"{b / a:.2f}" if a and b else "-"

    m = summary["mrc"]
    lines = []
    for peer in args.peers:
        p = summary[peer]
        for label, key in (("healthy", "healthy"), ("with the failure", "fault")):
            lines.append(
                f"  job time {label:17} mrc-nic {t(m[key])} vs {NAMES[peer]} {t(p[key])}: "
                f"ratio {NAMES[peer]}/mrc-nic {ratio(m[key]['median_s'], p[key]['median_s'])}"
            )
        slow = [slowdown_text(x) for x in (m, p)]
        lines.append(
            f"  slowdown from the failure  mrc-nic {slow[0]} vs {NAMES[peer]} {slow[1]}: "
            f"ratio {NAMES[peer]}/mrc-nic {ratio(m['slowdown'], p['slowdown'])}"
        )
    return lines


# ---- the plot -------------------------------------------------------------------------------
def plot(result: dict[str, Any], out: Path) -> str | None:
    plt = pyplot("plot")
    if plt is None:
        return None
    runs = result["runs"]
    n = len(result["schedule"]["hosts"])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for t, cases in runs.items():
        for case, style in (("healthy", "-"), ("fault", "--")):
            if not cases[case]:
                continue
            run = cases[case][-1]
            xs = [0.0] + [s["end_s"] for s in run["steps"]]
            done = [0]
            for s in run["steps"]:
                done.append(done[-1] + s["bytes"])
            total = sum(collective.bytes_sent(len(run["hosts"]), run["total_bytes"]))
            ys = [100 * d / total for d in done]
            label = f"{NAMES[t]} {'healthy' if case == 'healthy' else 'failure'}"
            if not run["completed"]:
                label += f" (did not finish in {run['limit_s']:g} s)"
                xs.append(run["limit_s"])
                ys.append(ys[-1])
            ax.plot(xs, ys, style, color=COLORS[t], marker=".", label=label)
            if run["fault_at_s"] is not None:
                ax.axvline(run["fault_at_s"], color=COLORS[t], ls=":", lw=1)
            if run["fault_plan"] is not None:
                k, _ = run["fault_plan"]
                ax2.axvline(k, color=COLORS[t], ls=":", lw=1)
            ax2.plot(
                [s["step"] for s in run["steps"]],
                [s["seconds"] for s in run["steps"]],
                style,
                color=COLORS[t],
                marker=".",
                label=label,
            )
    ax.set_xlabel("time since the job's start [s] (dotted: the fault, per transport)")
    ax.set_ylabel("all-reduce bytes delivered [%]")
    ax.set_title(f"ring all-reduce of {result['args']['size'] / MIB:g} MiB, {n} hosts", fontsize=9)
    ax.legend(fontsize=7)
    ax2.set_xlabel(
        f"step (0-{n - 2} reduce-scatter, {n - 1}-{2 * n - 3} all-gather; dotted: the fault's step)"
    )
    ax2.set_ylabel("step time [s]")
    ax2.set_yscale("log")
    ax2.set_title(f"per step; failure: {result['fault']}", fontsize=9)
    ax2.legend(fontsize=7)
    return save_png(fig, out / "collective.png")


# ---- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, __file__, quick_help="64 MiB, one round (2-3.5 minutes)")
    p.add_argument("--size", help="the all-reduce's size (default 256M, quick 64M)")
    p.add_argument("--rounds", type=int, help="jobs per transport and case (default 2, quick 1)")
    p.add_argument("--peers", default="tcp,mptcp", help="kernel peers: tcp, mptcp or both")
    p.add_argument("--plane", type=int, default=0, help="TCP's plane (default 0)")
    p.add_argument("--fault", default="plane 0", help="target, as `mrc-nic fail` takes it")
    p.add_argument("--fault-mode", default="blackhole", choices=("blackhole", "down"))
    p.add_argument("--fault-at", type=float, default=0.4, help="fraction of the job's steps (0.4)")
    p.add_argument("--fault-duration", type=float, help="seconds (default: until the job ends)")
    p.add_argument("--limit-factor", type=float, help="x healthy time (4, quick 3)")
    p.add_argument("--min-limit", type=float, help="seconds (20, quick 15)")
    p.add_argument("--qps", type=int, default=1, help="mrc-nic QPs per ring edge (1)")
    p.add_argument("--chunk", help="mrc-nic WRITE size (default: hostmem, one peer per host)")
    p.add_argument("--verify", action="store_true", help="mrc-nic compares every byte placed")
    p.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the unmeasured first job (size/8) of each transport",
    )
    p.add_argument(
        "--cc-profile", type=int, help="mrc-nic QPs' CC profile (default the daemons': 1, NSCC)"
    )
    p.add_argument(
        "--healthy-limit", type=float, help="seconds per healthy job (default 0.5 s per MiB, >= 60)"
    )
    p.add_argument("--topology", default=str(resources.TOPOLOGY_DIR / "clos-8-1g.toml"))
    args = p.parse_args(argv)
    args.size = units.parse_transfer_size(args.size or ("64M" if args.quick else "256M"))
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.limit_factor = args.limit_factor or (3.0 if args.quick else 4.0)
    args.min_limit = args.min_limit or (15.0 if args.quick else 20.0)
    args.chunk = units.parse_transfer_size(args.chunk) if args.chunk else None
    args.healthy_limit = args.healthy_limit or max(60.0, 0.5 * args.size / MIB)
    args.peers = [x for x in args.peers.split(",") if x]
    for x in args.peers:
        if x not in collective_sockets.PROTOS:
            p.error(f"--peers: {x!r} is not one of {', '.join(collective_sockets.PROTOS)}")
    if not 0 < args.fault_at < 1:
        p.error("--fault-at is a fraction of the job's steps, 0 < f < 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result: dict[str, Any] = begin(__file__, argv)
    name = f"bcol{os.getpid()}"[:12]
    topo = topology.load(args.topology, lab=name)
    faults.resolve_target(topo, tuple(args.fault.split()))  # a wrong target fails now
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transports = ["mrc", *args.peers]
    runs: dict[str, dict[str, list]] = {t: {"healthy": [], "fault": []} for t in transports}
    result.update(
        lab=name,
        topology=args.topology,
        args={k: v for k, v in vars(args).items() if k != "out"},
        schedule={
            "hosts": topo.host_names(),
            "steps": 2 * (topo.hosts - 1),
            "chunk_bytes": collective.chunk_sizes(args.size, topo.hosts),
            "bytes_sent_per_host": collective.bytes_sent(topo.hosts, args.size),
        },
        fault=f"{args.fault} {args.fault_mode}"
        + (f" for {args.fault_duration:g} s" if args.fault_duration else ", until the job ends"),
        runs=runs,
        warmup=[],
    )
    started = time.monotonic()
    with own_lab(topo) as up_seconds:  # never takes down a lab this run did not make
        result["lab_up_seconds"] = round(up_seconds, 1)
        log(
            f"lab {name} up in {result['lab_up_seconds']} s "
            f"({topo.hosts} hosts, {topo.planes} planes)"
        )
        if args.warmup:  # the first job after bring-up, of each transport, is not measured
            for t in transports:
                run = run_job(name, topo, t, args, limit_s=args.healthy_limit, size=args.size // 8)
                result["warmup"].append({k: run[k] for k in ("transport", "completed", "job_s")})
                log(f"  warm-up ({args.size // 8 / MIB:g} MiB) {job_line(t, run)}")
        for r in range(args.rounds):  # healthy then failure, each round: the same drift
            order = transports[r % len(transports) :] + transports[: r % len(transports)]
            for t in order:
                run = run_job(name, topo, t, args, limit_s=args.healthy_limit)
                run["round"] = r
                runs[t]["healthy"].append(run)
                log(f"  healthy round {r + 1}/{args.rounds} {job_line(t, run)}")
            for t in order:
                done = [x for x in runs[t]["healthy"] if x["completed"]]
                if not done:
                    log(f"  {NAMES[t]}: no healthy job finished; the failure case is not run")
                    continue
                healthy = median_time(done)
                limit = round(max(args.min_limit, args.limit_factor * healthy), 1)
                run = run_job(
                    name, topo, t, args, limit_s=limit, fault_at=fault_point(done, args.fault_at)
                )
                run["round"] = r
                runs[t]["fault"].append(run)
                log(f"  failure round {r + 1}/{args.rounds} {job_line(t, run)}")
    result["seconds"] = round(time.monotonic() - started, 1)
    result["summary"] = summary = summarize(runs)
    result["table"] = table_rows(summary, args, topo)
    path = out / "collective.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    result["plots"] = [p for p in [plot(result, out)] if p]
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"Ring all-reduce of {args.size / MIB:g} MiB among {topo.hosts} hosts "
        f"({2 * (topo.hosts - 1)} steps), {args.rounds} round(s); failure: {result['fault']} "
        f"at {args.fault_at:.0%} of the job's steps; medians [min .. max]; load average "
        f"{result['machine']['load_avg'][0]} at the start, {os.getloadavg()[0]:.2f} at the end"
    )
    for line in report_lines(summary, args):
        print(line)
    print()
    print_table(result["table"])
    print(f"\nJSON: {path}" + "".join(f"\nPNG: {p}" for p in result["plots"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
