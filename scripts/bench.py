#!/usr/bin/env python3
"""mrc-nic against real kernel peers, side by side in the same run (issue 7).

Brings up its own default-shape lab (netns/default-1g.toml: 2 hosts, 4 planes,
every link capped at 1 Gbit/s), named bn<pid>, and takes it down by that
exact name at the end, also on an error, Ctrl-C or SIGTERM. Each case runs in
rounds, the peers interleaved and their order turned every round, since the
machine is shared and absolute figures drift (docs/design.md).

1. goodput: the aggregate of 4 planes of 1 Gbit/s. mrc-nic WRITE (one QP,
   on the verbs API: mrc_nic.workloads.rdma_write, what `mrc-nic write` does)
   vs MPTCP with 4 subflows, one per plane, vs single-path TCP on plane 0
   (mrc_nic.workloads.peers: kernel sockets, the receiver counts delivered bytes).
   MPTCP runs twice: over a plain kernel fabric of the same shape (bp<pid>:
   the same namespaces, veths, routes and TBFs, no BPF program anywhere, so
   TCP keeps GSO), which is what a user would run instead and the peer of the
   target; and through this lab's own switches (XDP on the ports turns GSO
   off), as the loss part measures it. Each run gives data packets a second
   and the machine's CPU time per data packet (TCP: payload / MSS).
2. loss: goodput under random loss on every plane (0, 0.1%, 1%, 5%) and 20%
   on one plane, applied as `mrc-nic fail h0.ethP --mode loss --rate R
   --seed S` does: on each of h0's host links, both directions, one seed per
   case and plane. mrc-nic WRITE vs MPTCP. The loss starts before the WRITE
   is posted, and at t = 0 of the MPTCP stream (after its subflows are up:
   a lost SYN would only delay the start).

Output: perftest-style lines (#bytes #iterations BW peak[Gb/s] BW
average[Gb/s] MsgRate[Mpps]) per peer and case, then every figure beside the
peer's and the ratio; bench.json and PNG plots in --out (default out/bench/).
BW peak is the best round, BW average all bytes over all seconds, and the
median of the rounds follows; ratios are of medians (an MPTCP stall in one
round moves an average a lot). A WRITE is one message of #bytes; a stream's
message is one send() of 256 KiB.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench.py [--quick] [--out DIR] [--only goodput|loss] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import nic, resources, units
from mrc_nic.contract import daemonops as ops
from mrc_nic.fabric import faults
from mrc_nic.kernel import cpustat
from mrc_nic.lab import client, topology
from mrc_nic.workloads import peers, rdma_write
from mrc_nic.workloads.benchkit import (
    add_common_args,
    begin,
    cpu_per_packet_and_rate,
    fidelity_of,
    load_avg,
    log,
    median,
    own_lab,
    plain_fabric,
    print_table,
    pyplot,
    ratio,
    save_png,
    stream_packets,
    table_row,
    verdict,
    write_packets,
)

PID = os.getpid()
MIB = 2**20
AGGREGATE_BPS = 4e9  # 4 planes x 1 Gbit/s (checked against the topology)
LOSS_CASES = [  # (label, rate, planes it applies to; None: every plane)
    ("0", None, None),
    ("0.1%", 0.001, None),
    ("1%", 0.01, None),
    ("5%", 0.05, None),
    ("20% on plane 3", 0.2, [3]),
]
PLOT_BIN_S = 0.05  # timelines are drawn in bins of this width (or the run's, if wider)
PEER_LABEL = {
    "mrc": "mrc-nic WRITE",
    "plain": "MPTCP, 4 subflows, plain kernel fabric (no BPF)",
    "mptcp": "MPTCP, 4 subflows, in mrc-nic's lab",
    "tcp": "TCP, plane 0, in mrc-nic's lab",
}
GOODPUT_ORDER = ("mrc", "plain", "mptcp", "tcp")
PLOT_LABEL = {"mrc": "mrc-nic", "plain": "MPTCP\nplain fabric", "mptcp": "MPTCP\nin the lab",
              "tcp": "TCP plane 0\nin the lab"}  # fmt: skip


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


# ---- one run of each peer ----------------------------------------------------------
def run_mrc(name: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One WRITE as `mrc-nic write` makes it (the verbs API), bounded in time (see parse_args)."""
    wait = max(60.0, size * 8 / 0.05e9)  # a WRITE at 5% of one plane's rate still ends
    try:
        r = rdma_write.write(name, "h0", "h1", size, qps=args.qps, mpr=args.mpr, wait=wait)
    except Exception as e:  # reported in the row, the bench goes on
        settled = settle(name)
        return {"peer": "mrc", "ok": False, "error": f"{type(e).__name__}: {e}; {settled}"}
    ok = bool(r.get("completed"))
    return {
        "peer": "mrc",
        "ok": ok,
        "error": r.get("error"),
        "bytes": r["bytes"],
        "seconds": r["seconds"],
        "gbps": round(r["goodput_bps"] / 1e9, 4) if ok else None,
        "retransmits": r.get("retransmits"),
        "timeouts": r.get("timeouts"),
        "per_plane_share": r.get("per_plane_share"),
        "fidelity": r.get("fidelity"),
    }


def settle(name: str, limit: float = 60.0) -> str:
    """After a WRITE that did not answer in time: wait until h0's daemon has no
    QP sending (its job ends in ERR once the receive QPs are closed), so that
    it does not run under the next measurement."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            qps = client.call(name, "h0", ops.QpList()).qps
        except client.DaemonError as e:
            return f"qp_list: {e}"
        if not any(q["state"] == "RTS" for q in qps):
            return "its QPs ended"
        time.sleep(0.5)
    return f"its QPs still sending after {limit:g} s"


def run_peer(
    topo, proto: str, args: argparse.Namespace, events=(), *, plain: bool = False
) -> dict[str, Any]:
    """A kernel stream; `plain`: over the plain fabric (no per-plane BPF counters there)."""
    try:
        res = peers.run_stream(
            topo, "h0", "h1", proto, args.seconds, args.bin_s, events=events,
            count_planes=not plain,
        )  # fmt: skip
    except Exception as e:
        return {"peer": proto, "ok": False, "error": f"{type(e).__name__}: {e}"}
    retx = sum(s.get("bytes_retrans", 0) for s in res.subflows) if res.subflows else None
    return {
        "peer": proto,
        # A late start or a drain cut short is said in `error`; the window's count stands.
        "ok": res.bytes_window > 0,
        "error": "; ".join(res.errors) or None,
        "bytes": res.bytes_window,
        "bytes_total": res.bytes_total,  # warm-up and drain included
        "seconds": res.seconds,
        "gbps": round(res.goodput_bps / 1e9, 4),
        "subflows": len(res.subflows) if proto == "mptcp" else 1,
        "retrans_bytes": retx,
        "longest_gap_s": res.longest_gap_s,
        "plane_bytes": res.plane_bytes,
        "bin_s": res.bin_s,
        "bins": res.bins,
        "events": res.events,
    }


def summarize(runs: list[dict[str, Any]], msg_bytes: int) -> dict[str, Any]:
    """perftest's figures over the rounds: peak = best round, average = all
    bytes / all seconds, message rate at `msg_bytes` per message."""
    ok = [r for r in runs if r.get("ok") and r.get("gbps") is not None]
    total_b = sum(r["bytes"] for r in ok)
    total_s = sum(r["seconds"] for r in ok)
    avg = total_b * 8 / total_s / 1e9 if total_s else None
    return {
        "msg_bytes": msg_bytes,
        "iterations": round(total_b / msg_bytes) if ok else 0,
        "bw_peak_gbps": max((r["gbps"] for r in ok), default=None),
        "bw_average_gbps": round(avg, 4) if avg is not None else None,
        "bw_median_gbps": median([r["gbps"] for r in ok]),
        "msg_rate_mpps": total_b / msg_bytes / total_s / 1e6 if total_s else None,
        "runs_ok": f"{len(ok)}/{len(runs)}",
        "machine_busy_cpus": median([r.get("machine_busy_cpus") for r in runs]),
        "mpps_median": median([r.get("mpps") for r in ok]),
        "cpu_us_per_packet_median": median([r.get("cpu_us_per_packet") for r in ok]),
        "fidelity": fidelity_of(runs),
    }


def msg_bytes_of(peer: str, write_size: int) -> int:
    return write_size if peer == "mrc" else peers.SEND_BUF


# ---- the two parts -----------------------------------------------------------------
def data_packets(peer: str, run: dict[str, Any], topo) -> tuple[int, int]:
    """Data packets of a run: (in its measured seconds, in all). A WRITE's
    segments and resends; a stream's TCP segments, and in all also its
    warm-up, drain and retransmissions, which its CPU time includes."""
    if not run.get("ok"):
        return 0, 0
    if peer == "mrc":
        n = write_packets(run["bytes"], nic.seg_size(topo.mtu), run.get("retransmits"))
        return n, n
    return stream_packets(run["bytes"], run["bytes_total"], run.get("retrans_bytes"), topo.mtu)


def part_goodput(name: str, topo, plain, args: argparse.Namespace) -> dict[str, Any]:
    order = list(GOODPUT_ORDER)
    runs: dict[str, list] = {p: [] for p in order}
    for r in range(args.rounds):
        k = r % len(order)
        for peer in order[k:] + order[:k]:  # a different peer first each round
            cpu = cpustat.sample()
            if peer == "mrc":
                run = run_mrc(name, args.size, args)
            elif peer == "plain":
                run = run_peer(plain, "mptcp", args, plain=True)
            else:
                run = run_peer(topo, peer, args)
            cpu_end = cpustat.sample()
            in_window, in_all = data_packets(peer, run, topo)
            figures = cpu_per_packet_and_rate(cpu, cpu_end, in_window, in_all, run.get("seconds"))
            run["machine_busy_cpus"] = figures.pop("busy_cores")
            run.update(figures)
            run["round"] = r
            runs[peer].append(run)
            log(
                f"  goodput round {r + 1}/{args.rounds} {peer}: {fmt(run.get('gbps'))} Gbit/s, "
                f"{fmt(run.get('mpps'), '.4f')} Mpps, {fmt(run.get('cpu_us_per_packet'), '.2f')} "
                "us CPU a packet"
            )
    rows = {p: summarize(runs[p], msg_bytes_of(p, args.size)) for p in order}
    mrc = rows["mrc"]["bw_median_gbps"]
    for p in order:
        rows[p]["of_aggregate"] = ratio(rows[p]["bw_median_gbps"], AGGREGATE_BPS / 1e9)
        rows[p]["mrc_ratio"] = ratio(mrc, rows[p]["bw_median_gbps"]) if p != "mrc" else None
    return {"rows": rows, "runs": runs}


def loss_faults(name: str, topo, rate: float, planes: list[int] | None, case: int) -> list[int]:
    ids = []
    try:
        for p in planes if planes is not None else range(topo.planes):
            spec = faults.FaultSpec(mode="loss", rate=rate, seed=1000 * (case + 1) + p)
            ids.append(faults.apply(name, (f"h0.eth{p}",), spec)["id"])
    except BaseException:
        if ids:
            faults.heal(name, ids)
        raise
    return ids


def part_loss(name: str, topo, args: argparse.Namespace) -> dict[str, Any]:
    cases = []
    for c, (label, rate, planes) in enumerate(LOSS_CASES):
        runs: dict[str, list] = {"mrc": [], "mptcp": []}
        for r in range(args.rounds):
            order = ["mrc", "mptcp"] if r % 2 == 0 else ["mptcp", "mrc"]
            for peer in order:
                cpu = cpustat.sample()
                if peer == "mrc":
                    ids = loss_faults(name, topo, rate, planes, c) if rate else []
                    try:
                        run = run_mrc(name, args.loss_size, args)
                    finally:
                        if ids:
                            faults.heal(name, ids)
                else:
                    holder: list[int] = []

                    def inject(holder=holder, rate=rate, planes=planes, c=c) -> dict:
                        holder.extend(loss_faults(name, topo, rate, planes, c))
                        return {"fault_ids": list(holder)}

                    try:
                        run = run_peer(topo, "mptcp", args, [(0.0, inject)] if rate else ())
                    finally:
                        if holder:
                            faults.heal(name, holder)
                run["machine_busy_cpus"] = cpustat.busy_cores(cpu, cpustat.sample())
                run["round"] = r
                runs[peer].append(run)
                log(f"  loss {label} round {r + 1}/{args.rounds} {peer}: {fmt(run.get('gbps'))}")
        rows = {p: summarize(runs[p], msg_bytes_of(p, args.loss_size)) for p in runs}
        cases.append({"case": label, "rate": rate, "planes": planes, "rows": rows, "runs": runs})
    base = {p: cases[0]["rows"][p]["bw_median_gbps"] for p in ("mrc", "mptcp")}
    for case in cases:
        rows = case["rows"]
        case["mrc_ratio"] = ratio(rows["mrc"]["bw_median_gbps"], rows["mptcp"]["bw_median_gbps"])
        for p in ("mrc", "mptcp"):
            rows[p]["of_no_loss"] = ratio(rows[p]["bw_median_gbps"], base[p])
            if case["planes"] is not None:  # issue 4: >= 0.95 of healthy minus the plane's share
                share = 1 - len(case["planes"]) / topo.planes
                rows[p]["of_healthy_minus_share"] = ratio(
                    rows[p]["bw_median_gbps"], base[p] * share if base[p] else None
                )
    return {"cases": cases}


# ---- the results table (bench_all.py puts it in the README) --------------------------
GOODPUT_TARGET = 0.97  # of the 4 Gbit/s aggregate, and ahead of MPTCP
LOSS_ONE_PLANE_TARGET = 0.95  # of (no-loss goodput minus the lossy plane's share)


def loss_case_text(case: dict[str, Any]) -> str:
    """'no loss', '1% random loss on every plane', '20% random loss on plane 3'."""
    if not case["rate"]:
        return "no loss"
    where = (
        "every plane" if case["planes"] is None else f"plane {', '.join(map(str, case['planes']))}"
    )
    return f"{case['rate'] * 100:g}% random loss on {where} (h0's host links)"


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    if "goodput" in result:
        g = result["goodput"]["rows"]
        fair = "plain"  # the target's peer: what a user would run instead
        mrc, peer_bw = g["mrc"]["bw_median_gbps"], g[fair]["bw_median_gbps"]
        bar = GOODPUT_TARGET * AGGREGATE_BPS / 1e9
        met = None if mrc is None else mrc >= bar and (peer_bw is None or mrc > peer_bw)
        case = "4 planes x 1 Gbit/s, median of rounds"
        for peer in GOODPUT_ORDER[1:]:
            judged = verdict(met, g["mrc"].get("fidelity"))
            target = f">= {bar:.2f} Gbit/s and ahead of MPTCP (plain fabric): {judged}"
            rows.append(
                table_row(
                    "goodput",
                    case,
                    "aggregate goodput",
                    "Gbit/s",
                    mrc,
                    PEER_LABEL[peer],
                    g[peer]["bw_median_gbps"],
                    target=target if peer == fair else "-",
                )
            )
        for figure, key, unit, ratio_is in (
            ("data packets a second", "mpps_median", "Mpps", "mrc/peer"),
            ("machine CPU per data packet", "cpu_us_per_packet_median", "us", "peer/mrc"),
        ):
            rows.append(
                table_row(
                    "goodput",
                    case,
                    figure,
                    unit,
                    g["mrc"][key],
                    PEER_LABEL[fair],
                    g[fair][key],
                    ratio_is=ratio_is,
                )
            )
    for case in result.get("loss", {}).get("cases", []):
        r, text = case["rows"], loss_case_text(case)
        rows.append(
            table_row(
                "loss",
                text,
                "goodput, median of rounds",
                "Gbit/s",
                r["mrc"]["bw_median_gbps"],
                PEER_LABEL["mptcp"],
                r["mptcp"]["bw_median_gbps"],
            )
        )
        if "of_healthy_minus_share" in r["mrc"]:
            m = r["mrc"]["of_healthy_minus_share"]
            met = None if m is None else m >= LOSS_ONE_PLANE_TARGET
            rows.append(
                table_row(
                    "loss",
                    text,
                    "goodput / (no-loss goodput minus the plane's share)",
                    "",
                    m,
                    PEER_LABEL["mptcp"],
                    r["mptcp"]["of_healthy_minus_share"],
                    target=f"mrc-nic >= {LOSS_ONE_PLANE_TARGET}: "
                    + verdict(met, r["mrc"].get("fidelity")),
                )
            )
    return rows


# ---- output ------------------------------------------------------------------------
PERFTEST_HEAD = (
    f"{'':22} {'#bytes':>10} {'#iterations':>12} {'BW peak[Gb/s]':>14} "
    f"{'BW average[Gb/s]':>17} {'MsgRate[Mpps]':>14}   median[Gb/s] runs"
)


def perftest_line(label: str, row: dict[str, Any]) -> str:
    return (
        f"{label:22} {row['msg_bytes']:>10} {row['iterations']:>12} "
        f"{fmt(row['bw_peak_gbps'], '.2f'):>14} {fmt(row['bw_average_gbps'], '.2f'):>17} "
        f"{fmt(row['msg_rate_mpps'], '.6f'):>14}   {fmt(row['bw_median_gbps']):>12} "
        f"{row['runs_ok']}"
    )


def report_goodput(res: dict[str, Any], args: argparse.Namespace) -> str:
    rows = res["rows"]
    lines = [
        f"1. Aggregate goodput h0 -> h1, 4 planes x 1 Gbit/s, {args.rounds} round(s): "
        f"WRITE of {args.size // MIB} MiB ({args.qps} QP, mpr {args.mpr}), streams of "
        f"{args.seconds:g} s",
        PERFTEST_HEAD,
    ]
    lines += [perftest_line(p, rows[p]) for p in rows]
    lines += [f"  {p}: {PEER_LABEL[p]}" for p in rows]
    m = rows["mrc"]["bw_median_gbps"]
    for p in GOODPUT_ORDER[1:]:
        lines.append(
            f"  mrc-nic {fmt(m)} Gb/s vs {PEER_LABEL[p]} {fmt(rows[p]['bw_median_gbps'])} "
            f"Gb/s: ratio {fmt(rows[p]['mrc_ratio'], '.2f')} (medians)"
        )
    lines.append(
        "  share of the 4 Gbit/s aggregate: "
        + ", ".join(f"{PEER_LABEL[p]} {fmt(rows[p]['of_aggregate'], '.2f')}" for p in rows)
        + f" (target for mrc-nic: {GOODPUT_TARGET})"
    )
    lines.append(busy_line(rows))
    lines.append(
        "  data packets a second (Mpps) and the machine's CPU per data packet (us), medians: "
        + ", ".join(
            f"{p} {fmt(r['mpps_median'], '.4f')} / {fmt(r['cpu_us_per_packet_median'], '.2f')}"
            for p, r in rows.items()
        )
    )
    return "\n".join(lines)


def busy_line(rows: dict[str, dict]) -> str:
    """How loaded the machine was while each peer ran (its own work included)."""
    cpus = ", ".join(f"{PEER_LABEL[p]} {fmt(rows[p]['machine_busy_cpus'], '.2f')}" for p in rows)
    return f"  machine CPUs busy during the runs (median, of {os.cpu_count()}): {cpus}"


def report_loss(res: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"2. Goodput under random loss on h0's 4 host links (both directions), {args.rounds} "
        f"round(s): WRITE of {args.loss_size // MIB} MiB vs MPTCP for {args.seconds:g} s",
        PERFTEST_HEAD,
    ]
    short = {"mrc": "mrc-nic", "mptcp": "MPTCP"}
    for case in res["cases"]:
        for p in ("mrc", "mptcp"):
            lines.append(perftest_line(f"{case['case']:>14} {short[p]}", case["rows"][p]))
    head = f"{'loss':>16} {'mrc-nic[Gb/s]':>14} {'MPTCP[Gb/s]':>12} {'ratio':>6} "
    lines += ["", head + f"{'mrc-nic/no loss':>16} {'MPTCP/no loss':>14} {'mrc retx':>9}"]
    for case in res["cases"]:
        m, t = case["rows"]["mrc"], case["rows"]["mptcp"]
        retx = [r["retransmits"] for r in case["runs"]["mrc"] if r.get("ok")]
        retx_median = median(retx)
        lines.append(
            f"{case['case']:>16} {fmt(m['bw_median_gbps']):>14} {fmt(t['bw_median_gbps']):>12} "
            f"{fmt(case['mrc_ratio'], '.2f'):>6} {fmt(m['of_no_loss'], '.2f'):>16} "
            f"{fmt(t['of_no_loss'], '.2f'):>14} {fmt(retx_median, '.0f'):>9}"
        )
        if "of_healthy_minus_share" in m:
            lines.append(
                f"{'':16} of (no-loss goodput minus the plane's share): mrc-nic "
                f"{fmt(m['of_healthy_minus_share'], '.2f')} "
                f"(target {LOSS_ONE_PLANE_TARGET}), MPTCP "
                f"{fmt(t['of_healthy_minus_share'], '.2f')}"
            )
    lines.append("  (medians of the rounds; ratio = mrc-nic / MPTCP)")
    lines.append(busy_line(res["cases"][0]["rows"]) + " (no loss)")
    return "\n".join(lines)


def plots(result: dict[str, Any], out: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    made = []
    if "goodput" in result:
        rows, runs = result["goodput"]["rows"], result["goodput"]["runs"]
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=[1, 2])
        names = list(rows)
        ax.bar(range(len(names)), [rows[p]["bw_median_gbps"] or 0 for p in names])
        for i, p in enumerate(names):
            ax.plot([i] * len(runs[p]), [r.get("gbps") or 0 for r in runs[p]], "k.")
        ax.axhline(AGGREGATE_BPS / 1e9, ls="--", c="gray", label="4 x 1 Gbit/s")
        ax.set_xticks(range(len(names)), [PLOT_LABEL[p] for p in names], fontsize=7)
        ax.set_ylabel("goodput [Gbit/s]")
        ax.set_title("aggregate goodput (bars: median, dots: rounds)", fontsize=9)
        ax.legend(fontsize=7)
        for p in GOODPUT_ORDER[1:]:
            for run in runs[p][-1:]:
                if run.get("bins"):
                    k = max(1, round(PLOT_BIN_S / run["bin_s"]))  # bins merged by k
                    bins, w = run["bins"], k * run["bin_s"]
                    sums = [sum(bins[i : i + k]) for i in range(0, len(bins) - k + 1, k)]
                    xs = [i * w for i in range(len(sums))]
                    ax2.plot(xs, [v * 8 / w / 1e9 for v in sums], label=PEER_LABEL[p])
        ax2.set_xlabel("time [s]")
        ax2.set_ylabel(f"delivered [Gbit/s], {PLOT_BIN_S * 1e3:g} ms bins")
        ax2.set_title("kernel peers over time (last round)", fontsize=9)
        ax2.legend(fontsize=7)
        made.append(save_png(fig, out / "goodput.png"))
    if "loss" in result:
        cases = result["loss"]["cases"]
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = range(len(cases))
        for p in ("mrc", "mptcp"):
            ax.plot(
                xs, [c["rows"][p]["bw_median_gbps"] or 0 for c in cases], "o-", label=PEER_LABEL[p]
            )
        ax.set_xticks(list(xs), [c["case"] for c in cases], fontsize=8)
        ax.set_xlabel("random loss (every plane, unless said)")
        ax.set_ylabel("goodput [Gbit/s]")
        ax.set_ylim(bottom=0)
        ax.set_title("goodput vs loss, same lab, same run", fontsize=9)
        ax.legend(fontsize=8)
        made.append(save_png(fig, out / "loss.png"))
    return made


# ---- main --------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, __file__, quick_help="one round, shorter runs (~1 minute)")
    p.add_argument("--only", choices=("goodput", "loss"), help="run one part only")
    p.add_argument("--rounds", type=int, help="rounds per case (default 5, quick 1)")
    p.add_argument("--seconds", type=float, help="each stream (default 3, quick 2)")
    p.add_argument("--size", help="each WRITE of part 1 (default 256M, quick 128M)")
    p.add_argument("--loss-size", help="each WRITE of part 2 (default 32M, quick 16M)")
    p.add_argument("--qps", type=int, default=1, help="QPs of each WRITE (default 1)")
    p.add_argument(
        "--mpr", type=int, default=8, help="mrc-nic WRITE's MPR (default 8, as mrc-nic write)"
    )
    p.add_argument("--bin-ms", type=float, default=10.0, help="peers' time bins (default 10)")
    p.add_argument("--topology", default=str(resources.TOPOLOGY_DIR / "default-1g.toml"))
    args = p.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.seconds = args.seconds or (2.0 if args.quick else 3.0)
    args.size = units.parse_transfer_size(args.size or ("128M" if args.quick else "256M"))
    args.loss_size = units.parse_transfer_size(args.loss_size or ("16M" if args.quick else "32M"))
    args.bin_s = args.bin_ms / 1e3
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    header = begin(__file__, argv)
    name = f"bn{PID}"[:12]
    topo = topology.load(args.topology, lab=name)
    plain = topology.load(args.topology, lab=f"bp{PID}"[:12])
    if topo.planes * (topo.rate_bps or 0) != AGGREGATE_BPS:
        print(f"bench: {args.topology} is not 4 planes x 1 Gbit/s", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    result: dict[str, Any] = {
        "version": 1,
        **header,
        "lab": name,
        "topology": args.topology,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    texts = []
    with own_lab(topo) as up_seconds:
        up_seconds = round(up_seconds, 2)
        result["lab_up_seconds"] = up_seconds
        log(f"lab {name} up in {up_seconds} s")
        result["mptcp_setup"] = peers.mptcp_setup(topo, "h0", "h1")
        if args.only in (None, "goodput"):
            log("1. aggregate goodput: mrc-nic vs MPTCP (plain fabric and in-lab) vs TCP")
            with plain_fabric(plain):
                result["plain_fabric"] = plain.lab
                result["mptcp_setup_plain"] = peers.mptcp_setup(plain, "h0", "h1")
                result["goodput"] = part_goodput(name, topo, plain, args)
            texts.append(report_goodput(result["goodput"], args))
        if args.only in (None, "loss"):
            log("2. goodput under loss: mrc-nic vs MPTCP")
            result["loss"] = part_loss(name, topo, args)
            texts.append(report_loss(result["loss"], args))
    result["seconds"] = round(time.monotonic() - started, 1)
    result["load_avg_end"] = load_avg()
    print(
        f"mrc-nic vs kernel peers ({os.cpu_count()} CPUs, kernel {platform.release()}, "
        f"lab {name}, {result['seconds']} s; load average {result['machine']['load_avg']} at "
        f"the start, {result['load_avg_end']} at the end)\n"
    )
    print("\n\n".join(texts))
    result["table"] = table_rows(result)
    print("\nResults table (README rows):")
    print_table(result["table"])
    path = out / "bench.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    result["plots"] = plots(result, out)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {path}" + "".join(f"\nPNG: {p}" for p in result["plots"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
