#!/usr/bin/env python3
"""Run every benchmark of issue 7 in turn, then make the results table.

Each benchmark script (scripts/bench*.py below) runs mrc-nic and a real peer
side by side on a lab of its own and writes DIR/<name>.json (DIR: --out,
default out/bench/) with PNG plots beside it. This script runs them one after
the other, each with --quick so that the whole suite ends within 15 minutes
on the project's 2-core machine, and each under a time limit: a script that
overruns is sent SIGTERM (it takes its lab down in `finally`), then SIGKILL
if it does not end, by its pid, and the overrun is reported. A script that
does not exist yet is skipped with a message.

Then it reads the JSONs and writes DIR/RESULTS.md, a markdown table of every
row (benchmark, case, mrc-nic, peer, ratio, target, date, machine, command),
and puts the same table in README.md between the markers
<!-- bench-results:start --> and <!-- bench-results:end -->. The table is
made from the JSON the scripts wrote and printed from, so the README says
what the scripts printed.

The output convention every benchmark script follows (and the helpers
below, which bench.py, bench_failover.py, bench_msgsize.py and
bench_collective.py use, implement):
- options --out DIR (default out/bench) and --quick;
- DIR/<script name without "bench_">.json (bench.py: bench.json), PNGs beside;
- top-level keys "started" (ISO UTC), "machine" ({"cpus", "kernel",
  "load_avg"} at the start), "command" (what reproduces it, as
  `.venv/bin/python scripts/X.py ...`) and "table": rows of
  {"benchmark", "case", "metric", "unit", "mrc", "peer_name", "peer", "ratio",
  "ratio_is" ("mrc/peer" or "peer/mrc"), "target"}.

Usage (root; the project's venv; or `make bench`):
    .venv/bin/python scripts/bench_all.py [--only NAME ...] [--out DIR] [--no-readme]
    .venv/bin/python scripts/bench_all.py --table-only   # the table from the JSONs there
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # for the lazy `from mrc_nic import lab` below
    sys.path.insert(0, str(ROOT))
DEFAULT_OUT = ROOT / "out" / "bench"
README = ROOT / "README.md"
MARK_START = "<!-- bench-results:start -->"
MARK_END = "<!-- bench-results:end -->"
SUITE_LIMIT_S = 15 * 60  # issue 7: the whole suite under 15 minutes
TERM_GRACE_S = 60  # after SIGTERM: time for a script to take its lab down
MIN_SLOT_S = 30  # a script given less than this would only be killed: skipped


@dataclass(frozen=True)
class Bench:
    name: str  # scripts/<name>.py
    limit_s: int  # its time limit in the suite (with --quick)

    @property
    def script(self) -> Path:
        return ROOT / "scripts" / f"{self.name}.py"

    @property
    def json_name(self) -> str:
        return "bench.json" if self.name == "bench" else f"{self.name.removeprefix('bench_')}.json"


# The limits add up to 14 minutes; each script's --quick run takes a fraction
# of its limit on a quiet machine (docs/benchmarks.md has the timings).
SUITE = (
    Bench("bench", 180),
    Bench("bench_failover", 240),
    Bench("bench_msgsize", 180),
    Bench("bench_collective", 240),
)
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


# ---- the output convention (used by the benchmark scripts) -------------------------
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


def command_line(script: str, argv: list[str]) -> str:
    """The command that reproduces a run, from the repository's root."""
    return shlex.join([".venv/bin/python", f"scripts/{Path(script).name}", *argv])


def run_header(script: str, argv: list[str] | None = None) -> dict[str, Any]:
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


def verdict(met: bool | None) -> str:
    """How a target reads in the table: never softened."""
    return "unknown (no figure)" if met is None else ("met" if met else "NOT MET")


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


def add_common_args(parser: argparse.ArgumentParser, quick_help: str) -> None:
    """--quick and --out DIR, as every benchmark script takes them."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON and PNGs go here")


def begin(script: str, argv: list[str]) -> dict[str, Any]:
    """What a benchmark's main starts with: root is needed (namespaces, BPF),
    SIGTERM unwinds it (exit_on_sigterm), and its JSON starts with run_header."""
    if os.geteuid() != 0:
        raise SystemExit(f"{Path(script).stem}: needs root (namespaces, BPF)")
    exit_on_sigterm()
    return run_header(script, argv)


@contextlib.contextmanager
def own_lab(topo) -> Iterator[float]:
    """Bring up the lab of `topo` (its name carries the script's pid) and take it
    down by that exact name when the block ends, also on an error, Ctrl-C or
    SIGTERM (exit_on_sigterm). Yields the bring-up time in seconds. A lab of
    that name already there is someone else's: refused, never taken down."""
    from mrc_nic.fabric import testbed

    if topo.lab in testbed.labs_present():
        raise SystemExit(f"lab {topo.lab} already exists here: not touched")
    t0 = time.monotonic()
    print(f"lab {topo.lab}: bringing up {rel(Path(topo.path))} ...", file=sys.stderr, flush=True)
    testbed.up(topo)  # on an error, up removes what it made before raising
    try:
        yield round(time.monotonic() - t0, 2)
    finally:
        try:
            testbed.down(topo.lab)
            print(f"lab {topo.lab} down", file=sys.stderr, flush=True)
        except Exception as e:  # said, and the first error (if any) still propagates
            hint = f"lab {topo.lab}: down failed ({e}); run: mrc-nic down -l {topo.lab}"
            print(hint, file=sys.stderr, flush=True)


def pyplot():
    """matplotlib's pyplot without a screen, or None (said once) when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (scripts/setup installs it): no plots", file=sys.stderr)
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


# ---- reading the JSONs -------------------------------------------------------------
def check_result(data: Any, where: str) -> list[dict[str, Any]]:
    """The table rows of one benchmark JSON, after checking the convention."""
    if not isinstance(data, dict):
        raise BenchError(f"{where}: not a JSON object")
    for key in ("started", "machine", "command", "table"):
        if key not in data:
            raise BenchError(f"{where}: no top-level key {key!r} (see scripts/bench_all.py)")
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


def load_result(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{rel(path)}: missing (its script has not written it)") from None
    except json.JSONDecodeError as e:
        raise BenchError(f"{rel(path)}: not valid JSON ({e})") from None
    check_result(data, rel(path))
    return data


def rel(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(ROOT))
    return str(path)


# ---- the markdown ------------------------------------------------------------------
def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def machine_text(data: dict[str, Any]) -> str:
    m = data["machine"]
    load = fmt_number(m["load_avg"][0] if m["load_avg"] else None)
    if data.get("load_avg_end"):
        load += f" -> {fmt_number(data['load_avg_end'][0])}"
    return f"{m['cpus']} CPUs, kernel {m['kernel']}, load {load}"


def results_markdown(results: list[tuple[Bench, dict[str, Any]]]) -> str:
    heads = ["benchmark", "case", "mrc-nic", "peer", "ratio", "target", "date", "machine"]
    heads.append("command")
    lines = [
        "## Benchmark results",
        "",
        "mrc-nic and a real kernel peer on the same lab, in the same run, one row per",
        "figure; `-` is a figure not measured or not reached (the JSON says why).",
        "Ratios are mrc-nic/peer for rates and peer/mrc-nic for times, so above 1 is",
        "mrc-nic ahead. The machine is shared: the load is the 1-minute load average",
        "at the start of each script (-> at its end). Generated by",
        "`scripts/bench_all.py` from `out/bench/*.json` (`make bench` runs",
        "everything, `--table-only` only rebuilds this table); the plots are the PNGs",
        "beside each JSON; [docs/benchmarks.md](docs/benchmarks.md) says what each",
        "figure means.",
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "|".join("---" for _ in heads) + "|",
    ]
    for _bench, data in results:
        date = data["started"][:10]
        where = machine_text(data)
        command = f"`{data['command']}`"
        for r in data["table"]:
            c = cells(r)
            row_cells = [c["benchmark"], c["case"], c["mrc-nic"], c["peer"], c["ratio"]]
            row_cells += [c["target"], date, where, command]
            lines.append("| " + " | ".join(md_cell(x) for x in row_cells) + " |")
    if not results:
        lines.append("| (no results yet) |" + " |" * (len(heads) - 1))
    return "\n".join(lines) + "\n"


def replace_readme_section(text: str, section: str) -> str:
    start, end = text.find(MARK_START), text.find(MARK_END)
    if start < 0 or end < 0 or end < start:
        raise BenchError(f"README.md has no {MARK_START} ... {MARK_END} markers, in that order")
    return text[: start + len(MARK_START)] + "\n" + section + text[end:]


def write_table(results: list[tuple[Bench, dict[str, Any]]], out: Path, readme: bool) -> None:
    section = results_markdown(results)
    path = out / "RESULTS.md"
    path.write_text(section)
    print(f"table: {rel(path)} ({sum(len(d['table']) for _, d in results)} rows)")
    if readme:
        README.write_text(replace_readme_section(README.read_text(), section))
        print(f"table: README.md between {MARK_START} and {MARK_END}")


# ---- running the scripts -----------------------------------------------------------
def labs_present() -> set[str]:
    from mrc_nic.fabric import testbed

    return set(testbed.labs_present())


def _copy_output(stream, log) -> None:
    """The script's output, to the terminal and to its log, line by line."""
    for line in iter(stream.readline, ""):
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
    stream.close()


def _end_overrun(proc: subprocess.Popen) -> str:
    """SIGTERM to the script (it takes its lab down), then SIGKILL; by pid only."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
        return f"ended by SIGTERM (pid {proc.pid})"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
        return f"did not end {TERM_GRACE_S} s after SIGTERM: SIGKILL (pid {proc.pid})"


def _take_down_orphans(before: set[str], pid: int) -> list[str]:
    """After a SIGKILL: the labs that appeared during the run and carry the killed
    script's pid in their name (bn<pid>, bfo<pid>, bm<pid>, bcol<pid>: its own)
    are taken down by that exact name. Any other new lab is someone else's: only reported."""
    from mrc_nic.fabric import testbed

    notes = []
    for name in sorted(labs_present() - before):
        if name.endswith(str(pid)):
            testbed.down(name)
            notes.append(f"lab {name} (left by the killed script) taken down")
        else:
            notes.append(f"lab {name} appeared meanwhile; not ours by name, not touched")
    return notes


def run_one(bench: Bench, out: Path, limit_s: float) -> tuple[bool, str]:
    """Run one script with --quick under a time limit; (ok, what happened)."""
    out_arg = rel(out)
    cmd = [sys.executable, str(bench.script.relative_to(ROOT)), "--quick", "--out", out_arg]
    before = labs_present()
    log_path = out / f"{bench.name}.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        copier = threading.Thread(target=_copy_output, args=(proc.stdout, log), daemon=True)
        copier.start()
        try:
            rc = proc.wait(timeout=limit_s)
            how = f"exit {rc}"
        except subprocess.TimeoutExpired:
            rc = None
            how = f"OVERRAN its {limit_s:.0f} s limit: " + _end_overrun(proc)
            if proc.returncode == -signal.SIGKILL:
                how += "; " + "; ".join(_take_down_orphans(before, proc.pid) or ["no lab left"])
        except BaseException:  # Ctrl-C: the script gets the same treatment
            _end_overrun(proc)
            raise
        copier.join(timeout=5)
    took = time.monotonic() - t0
    return rc == 0, f"{how} after {took:.0f} s (log: {rel(log_path)})"


def run_suite(chosen: list[Bench], out: Path) -> dict[str, tuple[bool, str]]:
    deadline = time.monotonic() + SUITE_LIMIT_S
    outcome: dict[str, tuple[bool, str]] = {}
    for bench in chosen:
        if not bench.script.exists():
            print(f"== {bench.name}: scripts/{bench.name}.py does not exist yet: skipped")
            continue
        slot = min(bench.limit_s, deadline - time.monotonic())
        if slot < MIN_SLOT_S:
            outcome[bench.name] = (
                False,
                f"no time left in the {SUITE_LIMIT_S // 60}-minute budget: not run",
            )
            print(f"== {bench.name}: {outcome[bench.name][1]}")
            continue
        print(f"== {bench.name}: --quick, limit {slot:.0f} s", flush=True)
        outcome[bench.name] = run_one(bench, out, slot)
        print(f"== {bench.name}: {outcome[bench.name][1]}", flush=True)
    return outcome


def gather(
    out: Path, outcome: dict[str, tuple[bool, str]], required: list[Bench]
) -> tuple[list[tuple[Bench, dict[str, Any]]], list[str]]:
    """The results to tabulate: every script of the suite whose JSON is in `out`
    (--only chooses what runs, not what the table shows), and what was left
    out and why. A script that failed in this run keeps no rows: an older JSON
    of it would pass for new. A JSON of `required` that cannot be read is an
    error."""
    results, left_out = [], []
    for bench in SUITE:
        if not bench.script.exists():
            left_out.append(f"{bench.name}: scripts/{bench.name}.py does not exist yet")
            continue
        if bench.name in outcome and not outcome[bench.name][0]:
            left_out.append(f"{bench.name}: failed in this run ({outcome[bench.name][1]})")
            continue
        try:
            results.append((bench, load_result(out / bench.json_name)))
        except BenchError as e:
            if bench in required:
                raise
            left_out.append(str(e))
    return results, left_out


def choose(names: list[str] | None) -> list[Bench]:
    by_name = {b.name: b for b in SUITE}
    if not names:
        return list(SUITE)
    chosen = []
    for n in names:
        key = n.removesuffix(".py").removeprefix("scripts/")
        if key not in by_name:
            raise BenchError(f"unknown benchmark {n!r}: choose from {', '.join(by_name)}")
        chosen.append(by_name[key])
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="NAME", help="these scripts (e.g. bench_failover)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSONs and PNGs (out/bench)")
    p.add_argument("--table-only", action="store_true", help="run nothing; table from the JSONs")
    p.add_argument("--no-readme", action="store_true", help="write RESULTS.md only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        chosen = choose(args.only)
        out = args.out if args.out.is_absolute() else Path.cwd() / args.out
        outcome: dict[str, tuple[bool, str]] = {}
        if not args.table_only:
            if os.geteuid() != 0:
                print("bench_all: needs root (namespaces, BPF)", file=sys.stderr)
                return 2
            out.mkdir(parents=True, exist_ok=True)
            outcome = run_suite(chosen, out)
        elif not out.is_dir():
            raise BenchError(f"{rel(out)}: no such directory (run the benchmarks first)")
        # Named with --table-only --only: its JSON must be there.
        required = chosen if args.table_only and args.only else []
        results, left_out = gather(out, outcome, required)
        for note in left_out:
            print(f"left out of the table: {note}")
        if not results:
            raise BenchError(f"no benchmark results in {rel(out)}: table and README not changed")
        write_table(results, out, readme=not args.no_readme)
    except BenchError as e:
        print(f"bench_all: {e}", file=sys.stderr)
        return 2
    failed = [n for n, (ok, _) in outcome.items() if not ok]
    if failed:
        print(f"bench_all: failed or overran: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
