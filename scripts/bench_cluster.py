#!/usr/bin/env python3
"""One lab on one machine vs the same lab split over two machines (issue 30).

A local Ray cluster of two "machines" on this box (mrc_nic.cluster.local:
two network namespaces, each with an underlay address on a bridge and a Ray
node), and two labs of the same topology (default: netns/default.toml, 2
hosts, 4 planes, 200 Mbit/s links): one local, one over both machines, where
h0's side and h1's side are on different machines and the T0-T1 links
between them are VXLAN. The same program moves the same bytes on both: the
cluster's two-process WRITE (mrc_nic.workloads.splitwrite, one process in each
host, through `mrc-nic exec`), verified. Per lab, --rounds times each:

- healthy: goodput, the longest time between two 1 MiB WRITE completions
  (--verify: every byte checked, the sender waiting for each round's check),
  and machine CPU per data packet (busy CPU time of the whole box over the
  transfer / data packets: payload / 3 KiB; both sides, VXLAN included);
- plane 1 blackholed at h1's T0 (on the second machine when split) --fault-at
  seconds into the transfer: goodput and the longest completion gap;
- up and down time of the lab (and of --updown-topology, default none);
- each WRITE's fidelity verdict: every machine's CPU and links sampled about
  every --sample-every seconds while it runs (`python -m
  mrc_nic.cluster.probe` with the machine's lab state directory, as its agent
  runs it), judged between the first and last samples inside its transfer,
  each machine on its own (mrc_nic.cluster.verdict); the local lab is one
  machine. A figure whose verdict is not `links` measures this box.

The machine is shared: the 1-minute load is recorded before and after.
Output: a table, and DIR/cluster.json (DIR = --out, default out/bench).
Every lab, namespace and Ray process it made is removed at the end.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_cluster.py [--size 256M] [--rounds 2] [--out DIR]
        [--updown-topology netns/clos-8.toml] [--rate 150mbit]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from mrc_nic.cluster import verdict
from mrc_nic.cluster.local import LocalCluster
from mrc_nic.kernel import cpustat
from mrc_nic.lab import topology
from mrc_nic.units import parse_transfer_size as parse_size

ROOT = Path(__file__).resolve().parent.parent

SEG = 3072  # payload per data packet at MTU 3200


def load() -> float:
    return os.getloadavg()[0]


def check(done: subprocess.CompletedProcess, what: str) -> str:
    if done.returncode != 0:
        raise SystemExit(f"{what}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class Lab:
    def __init__(self, c: LocalCluster, name: str, topo: str, split: bool) -> None:
        self.c, self.name, self.topo, self.split = c, name, topo, split

    def up(self) -> float:
        argv = ["up", "-t", self.topo, "--name", self.name]
        if self.split:
            argv += ["--cluster", self.c.address]
        t = time.monotonic()
        check(self.c.cli_run(argv), f"up {self.name}")
        return time.monotonic() - t

    def down(self) -> float:
        t = time.monotonic()
        self.c.cli_run(["down", "-l", self.name])
        return time.monotonic() - t

    def write(self, size: int, verify: bool) -> dict:
        check_bytes = ["--verify"] if verify else []
        if self.split:
            out = self.c.cli_run(
                ["write", "h0", "h1", "-l", self.name, "--size", str(size), *check_bytes]
                + ["--format", "json"]
            )
            return json.loads(check(out, "write"))
        # The same two processes on the local lab, through exec.
        base = ["exec", "-l", self.name]
        prog = ["python", "-m", "mrc_nic.workloads.splitwrite"]
        extra = ["--size", str(size), *check_bytes]
        tool = str(Path(sys.executable).parent / "mrc-nic")
        recv = subprocess.Popen(
            [tool, base[0], "h1", "-l", self.name, "--", *prog, "recv", *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        send = subprocess.run(
            [tool, base[0], "h0", "-l", self.name, "--", *prog, "send", "198.18.0.2", *extra],
            capture_output=True,
            text=True,
        )
        recv.wait(timeout=600)
        return json.loads(check(send, "write").splitlines()[-1])

    def fail(self, *target: str) -> None:
        check(self.c.cli_run(["fail", *target, "--mode", "blackhole", "-l", self.name]), "fail")
        self.failed_at = time.time()

    def machine_envs(self) -> dict[int, dict[str, str]]:
        """Each machine's lab state directory and pin root (the local lab: this box's)."""
        if not self.split:
            return {0: {}}
        return {i: self.c.env(i) for i in range(self.c.count)}

    def heal(self) -> None:
        self.c.cli_run(["heal", "--all", "-l", self.name])


class Samples:
    """Every machine's fidelity sample (cluster.probe, run with the machine's
    environment), again and again until stopped, with the wall times each
    round was asked for and done."""

    def __init__(self, lab: Lab, every: float) -> None:
        self.envs, self.every, self.lab = lab.machine_envs(), every, lab.name
        self.taken: list[tuple[float, float, dict[int, dict]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def probe_all(self) -> dict[int, dict]:
        body = json.dumps({"lab": self.lab, "stats": False, "meter": True})
        procs = {
            i: subprocess.Popen(
                [sys.executable, "-m", "mrc_nic.cluster.probe"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=dict(os.environ, **env),
            )
            for i, env in self.envs.items()
        }
        out = {}
        for i, proc in procs.items():
            answer, _ = proc.communicate(body, timeout=120)
            got = json.loads(answer.splitlines()[-1])
            if "ok" in got:
                out[i] = got["ok"]["meter"]
        return out

    def loop(self) -> None:
        while True:
            asked = time.time()
            got = self.probe_all()
            self.taken.append((asked, time.time(), got))
            if self.stop.wait(self.every):
                return

    def judge(self, topo, start: float, end: float) -> dict | None:
        inside = [s for s in self.taken if s[0] >= start and s[1] <= end]
        if len(inside) < 2:
            return None
        return verdict.judge_machines(topo, inside[0][2], inside[-1][2])


def measure(lab: Lab, topo, size: int, fault_at: float | None, verify: bool, every: float) -> dict:
    timer = None
    if fault_at is not None:
        timer = threading.Timer(fault_at, lab.fail, args=("p1.t0b",))
        timer.start()
    samples = Samples(lab, every)
    samples.thread.start()
    cpu0 = cpustat.sample()
    try:
        result = lab.write(size, verify)
    finally:
        samples.stop.set()
        samples.thread.join()
        if timer is not None:
            timer.join()
            lab.heal()
    cpu1 = cpustat.sample()
    fid = samples.judge(topo, result["started_at"], result["ended_at"])
    busy = cpustat.busy_cores(cpu0, cpu1) or 0.0
    wall = (cpu1[1] - cpu0[1]) / (os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1))
    packets = -(-size // SEG)
    return {
        "gbps": result["gbps"],
        "max_gap_ms": result["max_completion_gap_ms"],
        "errors": result["errors"],
        "cpu_us_per_packet": round(busy * wall / packets * 1e6, 2),
        "verdict": fid["verdict"] if fid else None,
        "busiest_link": fid["busiest_link"] if fid else None,
        "why": fid["why"] if fid else "fewer than two samples inside the transfer",
        # when the fault was in force on its machine, from the transfer's start
        "fault_into_transfer_s": round(lab.failed_at - result["started_at"], 2)
        if fault_at is not None
        else None,
    }


def with_rate(path: Path, rate: str, out: Path) -> Path:
    """The topology file with every link's rate (its [links] rate and
    fabric_rate) set to `rate`, written to out/topology.toml."""
    lines, section = [], None
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        key = line.split("=")[0].strip()
        if section == "[links]" and key in ("rate", "fabric_rate"):
            line = f'{key} = "{rate}"'
        lines.append(line)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "topology.toml"
    target.write_text("\n".join(lines) + "\n")
    loaded = topology.load(target)
    if not loaded.rate_bps or not loaded.fabric_rate_bps:
        raise SystemExit(f"--rate {rate}: {path} has no [links] rate to replace")
    return target


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="256M")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--fault-at", type=float, default=1.0)
    # Verifying costs the receiver a regeneration and compare per round, which
    # the sender waits for: it would be in the gaps. Off by default here.
    p.add_argument("--verify", action="store_true", help="verify every byte (slower)")
    p.add_argument("--topology", default=str(ROOT / "netns/default.toml"))
    p.add_argument(
        "--rate",
        default=None,
        help="every link's rate (e.g. 150mbit): the topology file with its [links] rates "
        "replaced, written to OUT/topology.toml",
    )
    p.add_argument("--updown-topology", default=None)
    p.add_argument("--out", default=str(ROOT / "out/bench"))
    p.add_argument(
        "--sample-every", type=float, default=1.0, help="seconds between verdict samples"
    )
    args = p.parse_args()
    size = parse_size(args.size)
    if args.rate:
        args.topology = str(with_rate(Path(args.topology), args.rate, Path(args.out)))
    topo = topology.load(Path(args.topology))
    tag = os.getpid() % 1000
    figures: dict = {
        "size": size,
        "verify": args.verify,
        "load_start": load(),
        "date": time.strftime("%Y-%m-%d"),
    }
    c = LocalCluster(prefix=f"b{tag}")
    t = time.monotonic()
    c.start()
    figures["cluster_start_s"] = round(time.monotonic() - t, 1)
    try:
        for split in (False, True):
            kind = "split" if split else "local"
            lab = Lab(c, f"bc{kind[0]}{tag}", args.topology, split)
            row: dict = {"up_s": round(lab.up(), 2)}
            try:
                runs = [(topo, size, None, args.verify, args.sample_every)] * args.rounds
                healthy = [measure(lab, *run) for run in runs]
                runs = [(topo, size, args.fault_at, args.verify, args.sample_every)] * args.rounds
                faulted = [measure(lab, *run) for run in runs]
            finally:
                row["down_s"] = round(lab.down(), 2)
            for name, runs in (("healthy", healthy), ("blackhole", faulted)):
                row[name] = {
                    k: statistics.median(r[k] for r in runs)
                    for k in ("gbps", "max_gap_ms", "cpu_us_per_packet")
                }
                row[name]["runs"] = runs
            figures[kind] = row
            if args.updown_topology:
                big = Lab(c, f"bb{kind[0]}{tag}", args.updown_topology, split)
                try:
                    figures[f"{kind}_updown"] = {"up_s": round(big.up(), 2)}
                finally:
                    figures.setdefault(f"{kind}_updown", {})["down_s"] = round(big.down(), 2)
    finally:
        c.stop()
    figures["load_end"] = load()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(figures, indent=1))
    print(f"load {figures['load_start']:.2f} -> {figures['load_end']:.2f}; size {size} bytes")
    print(
        f"{'':10} {'goodput':>9} {'gap':>8} {'cpu/pkt':>8} {'bh goodput':>11} {'bh gap':>8} "
        f"{'up':>7} {'down':>6}"
    )
    for kind in ("local", "split"):
        r = figures[kind]
        h, b = r["healthy"], r["blackhole"]
        cells = [
            f"{h['gbps']:>8.3f}G",
            f"{h['max_gap_ms']:>6.1f}ms",
            f"{h['cpu_us_per_packet']:>6.1f}us",
            f"{b['gbps']:>10.3f}G",
            f"{b['max_gap_ms']:>6.1f}ms",
            f"{r['up_s']:>6.1f}s",
            f"{r['down_s']:>5.1f}s",
        ]
        print(f"{kind:10} " + " ".join(cells))
        for name in ("healthy", "blackhole"):
            verdicts = [(x["verdict"], x["busiest_link"]) for x in r[name]["runs"]]
            print(f"{'':10} {name} verdicts (busiest link): {verdicts}")
    for kind in ("local", "split"):
        if f"{kind}_updown" in figures:
            print(f"{kind} {args.updown_topology}: {figures[f'{kind}_updown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
