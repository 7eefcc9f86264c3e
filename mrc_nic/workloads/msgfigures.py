"""The figures of the message-size benchmark (scripts/bench_msgsize.py): latency
percentiles, peak windows, NIC completions matched to kicks, buffer plans, and
the perftest-style report and README rows.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mrc_nic import nic, units
from mrc_nic.workloads import rdma_write
from mrc_nic.workloads.benchkit import (
    table_row,
)

KIB, MIB = 2**10, 2**20
PEAK_WINDOW_NS = 100_000_000  # BW peak: the best window of this length
MRC_LABEL = "mrc-nic WRITE"
PEER_LABEL = {"tcp": "TCP, plane 0", "mptcp": "MPTCP, 4 subflows"}
U32 = 0xFFFFFFFF
# perftest's columns: (key of the figures, heading, width, format)
BW_COLS = (
    ("iterations", "#iterations", 12, "d"),
    ("bw_peak_gbps", "BW peak[Gb/s]", 14, ".2f"),
    ("bw_average_gbps", "BW average[Gb/s]", 17, ".2f"),
    ("msg_rate_mpps", "MsgRate[Mpps]", 14, ".6f"),
)
LAT_COLS = (
    ("iterations", "#iterations", 12, "d"),
    ("t_min", "t_min[usec]", 12, ".2f"),
    ("t_max", "t_max[usec]", 12, ".2f"),
    ("t_typical", "t_typical[usec]", 16, ".2f"),
    ("t_avg", "t_avg[usec]", 12, ".2f"),
    ("t_stdev", "t_stdev[usec]", 14, ".2f"),
    ("p99", "99% percentile[usec]", 21, ".2f"),
    ("p99_9", "99.9% percentile[usec]", 23, ".2f"),
)


def size_name(n: int) -> str:
    for unit, div in (("MiB", MIB), ("KiB", KIB)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def parse_sizes(text: str) -> list[int]:
    return [units.parse_transfer_size(part.strip()) for part in text.split(",") if part.strip()]


# ---- figures -------------------------------------------------------------------------
def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank: the smallest sample with at least q of the samples at or below it."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lat_stats(samples_ns: list[int]) -> dict[str, Any] | None:
    """perftest's latency figures, in microseconds (t_typical: the median)."""
    if not samples_ns:
        return None
    us = sorted(s / 1e3 for s in samples_ns)
    return {
        "iterations": len(us),
        "t_min": us[0],
        "t_max": us[-1],
        "t_typical": statistics.median(us),
        "t_avg": statistics.fmean(us),
        "t_stdev": statistics.pstdev(us),
        "p99": percentile(us, 0.99),
        "p99_9": percentile(us, 0.999),
    }


def peak_bps(bins: dict[int, int], bin_ns: int, t0_ns: int, t1_ns: int) -> float | None:
    """The best PEAK_WINDOW_NS (whole bins, non-overlapping) inside [t0, t1):
    bits per second; None when the run is shorter than one window."""
    per = max(1, round(PEAK_WINDOW_NS / bin_ns))
    first, last = -(-t0_ns // bin_ns), t1_ns // bin_ns  # whole bins only
    best = None
    for b in range(first, last - per + 1, per):
        got = sum(bins.get(i, 0) for i in range(b, b + per))
        rate = got * 8 / (per * bin_ns / 1e9)
        best = rate if best is None else max(best, rate)
    return best


def bw_stats(size: int, nbytes: int, seconds: float, peak: float | None) -> dict[str, Any]:
    """perftest's bandwidth figures: iterations are whole messages, the rate
    counts a message in part (a stream's window may end inside one)."""
    return {
        "bytes": nbytes,
        "seconds": seconds,
        "iterations": nbytes // size,
        "bw_peak_gbps": None if peak is None else peak / 1e9,
        "bw_average_gbps": nbytes * 8 / seconds / 1e9 if seconds > 0 else None,
        "msg_rate_mpps": nbytes / size / seconds / 1e6 if seconds > 0 else None,
    }


# ---- mrc-nic ---------------------------------------------------------------------------
def chunk_room(topo) -> int:
    """The largest chunk host memory gives one QP between two hosts of this lab."""
    return rdma_write.default_chunk(topo)


def plan(size: int, room: int) -> dict[str, int]:
    """The connection's chunk and the depths: WQEs of at most `room` bytes, in
    slots of 1 KiB multiples; as many slots as the send queue (SQ_DEPTH)
    when memory allows."""
    write = min(size, room)
    slot = -(-write // KIB) * KIB
    chunk = min(room, max(slot, -(-nic.SQ_DEPTH * slot // 2 // KIB) * KIB))
    return {
        "chunk": chunk,
        "wqe_bytes": write,
        "wqes_per_msg": -(-size // write),
        "bw_depth": min(nic.SQ_DEPTH, 2 * chunk // slot),
        "lat_depth": 1 if size <= room else 2,
    }


def match_latencies(result: dict) -> dict[str, Any]:
    """Per message of a write with timing (one QP): the post of its first
    WRITE -> the NIC's send completion of its last (round trip) and -> the
    receiver NIC's completion of its last (one way, with imm), in ns. The
    completion times are the NICs' (WC timestamps, CLOCK_MONOTONIC), the
    post's this process's: one clock."""
    (timing,) = result["timing"]
    per_msg, kicks = timing["per_msg"], timing["kick_ns"]
    done, recv = timing["done_ns"], timing["recv_ns"]
    n = len(kicks)
    rtt, one_way, missing = [], [], 0
    for m in range(-(-n // per_msg)):
        first, last = m * per_msg, min(n, (m + 1) * per_msg) - 1
        if done[last]:
            rtt.append(done[last] - kicks[first])
        else:
            missing += 1
        if recv[last]:
            one_way.append(recv[last] - kicks[first])
    return {
        "rtt_ns": rtt,
        "one_way_ns": one_way,
        "wqes": n,
        "send_done_matched": sum(1 for t in done if t),
        "recv_imm_matched": sum(1 for t in recv if t),
        "messages_missing": missing,
        "not_positive": sum(1 for x in rtt if x <= 0),
    }


# ---- output --------------------------------------------------------------------------
def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def perftest_head(cols: tuple) -> str:
    return f"{'':20} {'#bytes':>10} " + " ".join(f"{head:>{w}}" for _, head, w, _ in cols)


def perftest_line(label: str, size: int, figures: dict | None, cols: tuple) -> str:
    cells = [f"{fmt(None if figures is None else figures[k], spec):>{w}}" for k, _, w, spec in cols]
    return f"{label:20} {size:>10} " + " ".join(cells)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.3g}"


def get(entry: dict, transport: str, part: str, key: str) -> float | None:
    block = (entry.get(transport) or {}).get(part)
    return None if block is None else block.get(key)


def report(sizes: list[dict], transports: list[str]) -> str:
    labels = {"mrc": MRC_LABEL, **PEER_LABEL}
    lat_head, bw_head = perftest_head(LAT_COLS), perftest_head(BW_COLS)
    lines = ["Latency (round trip; mrc-nic: kick -> SEND_DONE; peers: ping-pong)", lat_head]
    for t in transports:
        lines += [perftest_line(labels[t], e["size"], e[t].get("lat"), LAT_COLS) for e in sizes]
    lines += ["", "mrc-nic one way (kick -> the receiver's RECV_IMM)", lat_head]
    for e in sizes:
        lines.append(perftest_line("mrc-nic one way", e["size"], e["mrc"].get("one_way"), LAT_COLS))
    lines += [
        "",
        f"Goodput (mrc-nic: {nic.SQ_DEPTH} WQEs in flight at most; peers: send() of #bytes)",
        bw_head,
    ]
    for t in transports:
        lines += [perftest_line(labels[t], e["size"], e[t].get("bw"), BW_COLS) for e in sizes]
    peers_here = [t for t in transports if t != "mrc"]
    head = f"{'size':>8} {'figure':>15} {'mrc-nic':>10}"
    for t in peers_here:
        head += f" {t:>10} {'ratio':>7}"
    lines += ["", "mrc-nic beside the peers (ratio = mrc-nic / peer)", head]
    figures = (
        ("lat", "t_typical", "p50 [us]"),
        ("lat", "p99", "p99 [us]"),
        ("lat", "p99_9", "p99.9 [us]"),
        ("bw", "bw_average_gbps", "Gb/s"),
        ("bw", "msg_rate_mpps", "Mpps"),
    )
    for e in sizes:
        for part, key, label in figures:
            m = get(e, "mrc", part, key)
            row = f"{size_name(e['size']):>8} {label:>15} {fmt(m, '.4g'):>10}"
            for t in peers_here:
                v = get(e, t, part, key)
                row += f" {fmt(v, '.4g'):>10} {ratio(m, v):>7}"
            lines.append(row)
    errors = [
        f"  {size_name(e['size'])} {t}: {e[t][key]}"
        for e in sizes
        for t in transports
        for key in ("error", "lat_error", "bw_error")
        if e.get(t, {}).get(key)
    ]
    if errors:
        lines += ["", "Runs that gave no figure (reported, not retried):", *errors]
    return "\n".join(lines)


def table(sizes: list[dict]) -> list[dict]:
    """The README's rows: a handful of the figures."""
    by = {e["size"]: e for e in sizes}
    rows = []
    wanted = [
        (64, "lat", "t_typical", "latency p50", "round trip, median", "us", "tcp"),
        (64, "lat", "p99", "latency p99", "round trip, 99th percentile", "us", "tcp"),
        (64 * KIB, "lat", "t_typical", "latency p50", "round trip, median", "us", "tcp"),
        (64 * KIB, "lat", "p99", "latency p99", "round trip, 99th percentile", "us", "tcp"),
        (64, "bw", "msg_rate_mpps", "message rate", "messages per second", "Mpps", "tcp"),
        (64 * KIB, "bw", "bw_average_gbps", "goodput", "goodput", "Gbit/s", "mptcp"),
        (16 * MIB, "bw", "bw_average_gbps", "goodput", "goodput", "Gbit/s", "mptcp"),
    ]
    for size, part, key, case, metric, unit, peer in wanted:
        e = by.get(size)
        if e is None or peer not in e:
            continue
        name = "TCP ping-pong, plane 0" if part == "lat" else "TCP stream, plane 0"
        if peer == "mptcp":
            name = "MPTCP stream, 4 subflows" if part == "bw" else "MPTCP ping-pong"
        rows.append(
            table_row(
                "msgsize",
                f"{size_name(size)} {case}",
                metric,
                unit,
                get(e, "mrc", part, key),
                name,
                get(e, peer, part, key),
                ratio_is="mrc/peer",
                target="- (lower is better)" if part == "lat" else "- (higher is better)",
            )
        )
    return rows
