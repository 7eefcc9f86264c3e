"""What the benchmark scripts (scripts/bench*.py) share: their output convention,
the life of their own lab, and the results table's cells.

Only the scripts import this; it sits at the workloads level and imports
only what is below it. scripts/bench_all.py runs the scripts and makes the
README's results table from the JSONs they write.

The output convention every benchmark script of the suite follows:
- options --out DIR (default out/bench of the source tree) and --quick;
- DIR/<script name without "bench_">.json (bench.py: bench.json), PNGs beside;
- top-level keys "started" (ISO UTC), "machine" ({"cpus", "kernel",
  "load_avg"} at the start), "command" (what reproduces it, as
  `.venv/bin/python scripts/X.py ...`) and "table": rows of
  {"benchmark", "case", "metric", "unit", "mrc", "peer_name", "peer", "ratio",
  "ratio_is" ("mrc/peer" or "peer/mrc"), "target"} (table_row; check_result
  checks a JSON against it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import platform
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mrc_nic import resources

ROW_KEYS = (
    "benchmark",
    "case",
    "metric",
    "unit",
    "mrc",
    "peer_name",
    "peer",
    "ratio",
    "ratio_is",
    "target",
)
RATIO_KINDS = ("mrc/peer", "peer/mrc")


class BenchError(Exception):
    """Bad input: an unknown script, a missing or malformed JSON, no README markers."""


# ---- where things are --------------------------------------------------------------
def source_tree(script: str | Path) -> Path:
    """The source tree a benchmark script belongs to (scripts/X.py -> the tree)."""
    return Path(script).resolve().parents[1]


def default_out(script: str | Path) -> Path:
    """Where a script's JSON and PNGs go by default: out/bench of its tree."""
    return source_tree(script) / "out" / "bench"


def rel(path: Path, root: Path) -> str:
    """`path` relative to `root` when it is below it, else as it is."""
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(root))
    return str(path)


# ---- the output convention -----------------------------------------------------------
def log(msg: str) -> None:
    """A progress line, on stderr (stdout has the report)."""
    print(msg, file=sys.stderr, flush=True)


def load_avg() -> list[float]:
    """1, 5 and 15-minute load averages. Scripts keep the one at their end too
    ("load_avg_end"): on a shared machine it moves during a run."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """What the figures were measured on; the load average is that of the start."""
    return {"cpus": os.cpu_count(), "kernel": platform.release(), "load_avg": load_avg()}


def command_line(script: str | Path, argv: list[str]) -> str:
    """The command that reproduces a run, from the source tree's root."""
    return shlex.join([".venv/bin/python", f"scripts/{Path(script).name}", *argv])


def run_header(script: str | Path, argv: list[str] | None = None) -> dict[str, Any]:
    """The keys every benchmark JSON starts with. argv: the script's arguments
    (default: those it was started with)."""
    return {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": command_line(script, sys.argv[1:] if argv is None else argv),
    }


def _sig3(x: float) -> float:
    """x to 3 significant digits (ratios span 0.01 to 1000s)."""
    return float(f"{x:.3g}")


def ratio_of(mrc: float | None, peer: float | None, ratio_is: str) -> float | None:
    if ratio_is not in RATIO_KINDS:
        raise ValueError(f"ratio_is must be one of {', '.join(RATIO_KINDS)}, not {ratio_is!r}")
    top, bottom = (mrc, peer) if ratio_is == "mrc/peer" else (peer, mrc)
    if top is None or not bottom:
        return None
    return _sig3(top / bottom)


def _value(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return float(f"{x:.4g}")


def table_row(
    benchmark: str,
    case: str,
    metric: str,
    unit: str,
    mrc: float | None,
    peer_name: str,
    peer: float | None,
    *,
    ratio_is: str = "mrc/peer",
    target: str = "-",
) -> dict[str, Any]:
    """One row of the results table; the ratio is computed here, from the values kept."""
    mrc, peer = _value(mrc), _value(peer)
    return {
        "benchmark": benchmark,
        "case": case,
        "metric": metric,
        "unit": unit,
        "mrc": mrc,
        "peer_name": peer_name,
        "peer": peer,
        "ratio": ratio_of(mrc, peer, ratio_is),
        "ratio_is": ratio_is,
        "target": target,
    }


def median(values: list[float | None]) -> float | None:
    """The median of the figures there are (None: not measured), None if none is."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b to 3 decimals, None without both (the scripts' printout; the
    table's ratios are table_row's)."""
    return round(a / b, 3) if a is not None and b else None


def verdict(met: bool | None, fid: dict[str, Any] | None = None) -> str:
    """How a target reads in the table: never softened, and never judged on a
    run the CPU bound (fid: the run's fidelity object, observe.fidelity):
    such a figure measures the machine, not MRC."""
    if fid is not None and fid.get("verdict") == "cpu":
        return "not judged: CPU-bound"
    return "unknown (no figure)" if met is None else ("met" if met else "NOT MET")


def fidelity_of(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One fidelity verdict over a benchmark's runs (each run's "fidelity",
    observe.fidelity; runs without one are left out): what verdict() takes."""
    from mrc_nic.observe import fidelity

    parts = {f"run {i}": r.get("fidelity") for i, r in enumerate(runs, 1) if r.get("fidelity")}
    return fidelity.combine(parts) if parts else None


def check_result(data: Any, where: str) -> list[dict[str, Any]]:
    """The table rows of one benchmark JSON, after checking the convention."""
    if not isinstance(data, dict):
        raise BenchError(f"{where}: not a JSON object")
    for key in ("started", "machine", "command", "table"):
        if key not in data:
            raise BenchError(f"{where}: no top-level key {key!r} (see {__name__})")
    for key in ("cpus", "kernel", "load_avg"):
        if key not in data["machine"]:
            raise BenchError(f"{where}: machine has no {key!r}")
    if not isinstance(data["table"], list):
        raise BenchError(f"{where}: table must be a list of rows")
    for i, r in enumerate(data["table"]):
        missing = [k for k in ROW_KEYS if k not in r]
        if missing:
            raise BenchError(f"{where}: table[{i}] has no {', '.join(map(repr, missing))}")
        if r["ratio_is"] not in RATIO_KINDS:
            raise BenchError(f"{where}: table[{i}].ratio_is is {r['ratio_is']!r}")
        for k in ("mrc", "peer", "ratio"):
            if r[k] is not None and not isinstance(r[k], int | float):
                raise BenchError(f"{where}: table[{i}].{k} must be a number or null")
    return data["table"]


# ---- a script's life: root, SIGTERM, its own lab ------------------------------------
def exit_on_sigterm() -> None:
    """SIGTERM (bench_all's time limit, or a user) unwinds the script through its
    `finally`, so that its lab goes down. A fork of the script (pyroute2's
    helpers) just ends."""
    pid = os.getpid()

    def handler(*_: object) -> None:
        if os.getpid() == pid:
            raise SystemExit("terminated")
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def require_root(script: str | Path) -> None:
    """Namespaces and BPF need root: said on stderr, exit status 2, without it."""
    if os.geteuid() != 0:
        print(f"{Path(script).stem}: needs root (namespaces, BPF)", file=sys.stderr)
        raise SystemExit(2)


def add_common_args(parser: argparse.ArgumentParser, script: str | Path, quick_help: str) -> None:
    """--quick and --out DIR, as every benchmark script of the suite takes them."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", default=str(default_out(script)), help="JSON and PNGs go here")


def begin(script: str | Path, argv: list[str]) -> dict[str, Any]:
    """What a benchmark's main starts with: root is needed (require_root),
    SIGTERM unwinds it (exit_on_sigterm), and its JSON starts with run_header."""
    require_root(script)
    exit_on_sigterm()
    return run_header(script, argv)


@contextlib.contextmanager
def own_lab(topo) -> Iterator[float]:
    """Bring up the lab of `topo` (its name carries the script's pid) and take it
    down by that exact name when the block ends, also on an error, Ctrl-C or
    SIGTERM (exit_on_sigterm). Yields the bring-up time in seconds, unrounded.
    A lab of that name already there is someone else's: refused, never taken
    down."""
    from mrc_nic.fabric import testbed  # pyroute2 and bcc: only for a run, not for --help

    if topo.lab in testbed.labs_present():
        raise SystemExit(f"lab {topo.lab} already exists here: not touched")
    t0 = time.monotonic()
    where = rel(Path(topo.path), resources.TOPOLOGY_DIR.parent)
    log(f"lab {topo.lab}: bringing up {where} ...")
    testbed.up(topo)  # on an error, up removes what it made before raising
    try:
        yield time.monotonic() - t0
    finally:
        try:
            testbed.down(topo.lab)
            log(f"lab {topo.lab} down")
        except Exception as e:  # said, and the first error (if any) still propagates
            log(f"lab {topo.lab}: down failed ({e}); run: mrc-nic down -l {topo.lab}")


@contextlib.contextmanager
def plain_fabric(topo) -> Iterator[Any]:
    """The fabric of `topo` with no BPF program anywhere (namespaces, veths,
    routes, sysctls and TBFs only, so TCP keeps GSO): where a kernel peer runs
    as a user would run it instead of mrc-nic. Removed by exact name at the
    end (mrc-nic down -l <lab> also finds them if this dies)."""
    from mrc_nic.fabric.builder import Fabric
    from mrc_nic.kernel import netns

    made = topo.all_netns()
    if any(netns.exists(n) for n in made):
        raise SystemExit(f"namespaces of {topo.lab} already exist here: not touched")
    try:
        with Fabric(topo) as fabric:
            fabric.build(None, None)
        yield topo
    finally:
        for name in made:
            netns.remove(name)
        log(f"plain fabric {topo.lab} removed")


def cpu_figures(cpu0, cpu1, seconds: float | None, packets: int, hops: int = 0) -> dict[str, Any]:
    """Busy CPUs between two cpustat samples; data packets a second and CPU
    time per data packet and, given the packet-hops, per packet per switch (an
    upper bound: the hosts' work and everything else on the machine is in the
    busy time too). `seconds` is the transfer's own time (default: the wall
    time between the samples)."""
    from mrc_nic.kernel import cpustat

    busy = cpustat.busy_cores(cpu0, cpu1)
    wall = (cpu1[1] - cpu0[1]) / (os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1))
    secs = seconds or wall
    cpu_s = (busy or 0) * wall
    return {
        "busy_cores": busy,
        "mpps": round(packets / secs / 1e6, 4) if secs and packets else None,
        "cpu_us_per_packet": round(cpu_s / packets * 1e6, 2) if cpu_s and packets else None,
        "cpu_us_per_packet_hop": round(cpu_s / hops * 1e6, 3) if cpu_s and hops else None,
    }


def write_packets(payload_bytes: int, seg_bytes: int, resends: int | None) -> int:
    """Data packets an mrc-nic WRITE put on the wire: its segments and resends."""
    return -(-payload_bytes // seg_bytes) + (resends or 0)


def tcp_segments(payload_bytes: int, mtu: int) -> int:
    """Wire packets of a TCP stream: segments of at most the MSS (MTU - 52:
    IPv4, TCP with timestamps)."""
    return -(-payload_bytes // (mtu - 52))


def stream_packets(
    bytes_window: int, bytes_total: int, retrans_bytes: int | None, mtu: int
) -> tuple[int, int]:
    """A kernel stream's TCP segments: (in its measured seconds, in all). All
    counts its warm-up, drain and retransmissions, which the CPU time
    sampled around the stream includes."""
    return tcp_segments(bytes_window, mtu), tcp_segments(bytes_total + (retrans_bytes or 0), mtu)


def cpu_per_packet_and_rate(
    cpu0, cpu1, in_window: int, in_all: int, seconds: float | None
) -> dict[str, Any]:
    """cpu_figures with the CPU time over every packet of the run and the
    rate over the packets of its measured seconds."""
    figures = cpu_figures(cpu0, cpu1, None, in_all)
    figures["mpps"] = round(in_window / seconds / 1e6, 4) if seconds and in_window else None
    return figures


# ---- plots ---------------------------------------------------------------------------
def pyplot(what: str = "plots"):
    """matplotlib's pyplot without a screen, or None (said once) when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"matplotlib is not installed (scripts/setup installs it): no {what}")
        return None
    return plt


def save_png(fig, path: Path) -> str:
    """Save a figure beside the JSON and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# ---- formatting: the same cells for the scripts' printout and the markdown ----------
def fmt_number(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def cells(r: dict[str, Any]) -> dict[str, str]:
    unit = f" {r['unit']}" if r["unit"] else ""
    mrc = "-" if r["mrc"] is None else fmt_number(r["mrc"]) + unit
    peer = f"{r['peer_name']} " + ("-" if r["peer"] is None else fmt_number(r["peer"]) + unit)
    ratio = "-" if r["ratio"] is None else f"{fmt_number(r['ratio'])} ({r['ratio_is']})"
    return {
        "benchmark": r["benchmark"],
        "case": f"{r['case']}: {r['metric']}",
        "mrc-nic": mrc,
        "peer": peer,
        "ratio": ratio,
        "target": r["target"],
    }


def print_table(rows: list[dict[str, Any]], file=None) -> None:
    """The rows as an aligned text table: what goes in the README, cell for cell."""
    file = file or sys.stdout
    shown = [cells(r) for r in rows]
    heads = list(shown[0]) if shown else []
    widths = {h: max(len(h), *(len(c[h]) for c in shown)) for h in heads}
    print("  ".join(h.ljust(widths[h]) for h in heads), file=file)
    for c in shown:
        print("  ".join(c[h].ljust(widths[h]) for h in heads).rstrip(), file=file)
