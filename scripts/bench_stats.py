#!/usr/bin/env python3
"""Cost of reading a lab's counters at 10 Hz, against a peer measured in the same run (issue 6).

The reader: `mrc-nic stats --format jsonl --interval 0.1` as a separate
process, for --seconds (default 10). Its CPU time (user + system, from
/proc/<pid>/stat) is taken between its first line and the end of the
window, so the one-off start (imports, opening maps) is reported apart from
the steady cost. The target is under 5% of one core.

The peer: what a script would run to read the same kernel numbers, `ip -s -j
link show` and `tc -s -j qdisc show` in every namespace of the lab (`-n`,
which enters the namespace itself), one round per tick, for a few seconds.
Its CPU is the children's rusage. The peer reads less than the reader (no
BPF map, no QP), so the ratio flatters the peer.

Also printed: the in-process cost of one Sampler.snapshot() (reading the
kernel every 5th time, as the stream does), of its rates, and of encoding it
as JSON (the stream's jsonenc.Encoder; json.dumps for comparison), back to
back with warm caches, to show where the reader's time goes. A process that
sleeps between lines starts each one with cold caches and pays more.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_stats.py [-l LAB | -t TOPOLOGY] [--seconds 10]
        [--no-traffic] [--json FILE]
    .venv/bin/python scripts/bench_stats.py -t netns/clos-8.toml --no-traffic

Without -l it brings up its own lab (bst<pid>) from -t (default
netns/default.toml) and takes it down by exact name at the end, also on
error. With traffic (the default) a bounded UDP stream runs between h0 and
h1 on every plane during the window, and one 8 MiB WRITE first populates the
QP section of its own lab.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mrc_nic import resources
from mrc_nic.lab import state, topology
from mrc_nic.observe import jsonenc, rates, stats
from mrc_nic.testkit import transfer
from mrc_nic.workloads import traffic
from mrc_nic.workloads.benchkit import own_lab, require_root

INTERVAL = 0.1
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
MRC = [sys.executable, "-m", "mrc_nic"]


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


def measure_reader(lab: str, seconds: float) -> dict:
    """Run the jsonl stream for `seconds` after its first line; CPU of that window."""
    proc = subprocess.Popen(
        [*MRC, "stats", "-l", lab, "--format", "jsonl", "--interval", str(INTERVAL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=resources.python_path_env(),  # this same mrc_nic
        # Ctrl-C ends the stream, also when this runs in the background of a
        # shell script, which starts it with SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        first = proc.stdout.readline()
        if not first:
            raise RuntimeError(f"the stream gave no line: {proc.stderr.read().strip()}")
        cpu0, t0 = proc_cpu_seconds(proc.pid), time.monotonic()
        lines = 0
        last = json.loads(first)
        while time.monotonic() - t0 < seconds:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the stream ended early: {proc.stderr.read().strip()}")
            lines += 1
            last = json.loads(line)
        cpu1, t1 = proc_cpu_seconds(proc.pid), time.monotonic()
    finally:
        proc.send_signal(signal.SIGINT)  # our own child, by pid
        # Keep reading until it exits: a line of a big lab (clos-8: ~400 kB) is
        # more than a pipe holds, and the stream finishes the line it is writing.
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        usage = _reap(proc.pid, timeout=10)
        drain.join(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    wall = t1 - t0
    return {
        "seconds": round(wall, 2),
        "snapshots": lines,
        "snapshots_per_s": round(lines / wall, 2),
        "cpu_s": round(cpu1 - cpu0, 3),
        "core_percent": round(100 * (cpu1 - cpu0) / wall, 2),
        "cpu_ms_per_snapshot": round(1000 * (cpu1 - cpu0) / max(lines, 1), 3),
        "whole_process_cpu_s": round(usage.ru_utime + usage.ru_stime, 3) if usage else None,
        "qps_in_last_snapshot": len(last["qps"]),
    }


def _reap(pid: int, timeout: float):
    """Wait for our child to exit (SIGKILL, by pid, if it has not after timeout);
    its rusage, or None if it was already reaped."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            done, _, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return usage
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                return os.wait4(pid, 0)[2]
            time.sleep(0.05)
    except ChildProcessError:
        return None


def measure_peer(topo: topology.Topology, seconds: float) -> dict:
    """`ip -s -j link` and `tc -s -j qdisc` in every namespace, a round per tick."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    rounds = 0
    next_at = t0
    while time.monotonic() - t0 < seconds:
        for node in topo.nodes:
            for tool, what in (("ip", "link"), ("tc", "qdisc")):
                subprocess.run(
                    [tool, "-n", topo.netns(node), "-s", "-j", what, "show"],
                    stdout=subprocess.DEVNULL,
                    check=True,
                    timeout=10,
                )
        rounds += 1
        next_at += INTERVAL
        time.sleep(max(0.0, next_at - time.monotonic()))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "seconds": round(wall, 2),
        "rounds": rounds,
        "rounds_per_s": round(rounds / wall, 2),
        "cpu_ms_per_round": round(1000 * cpu / rounds, 3),
        "core_percent_at_10hz": round(100 * cpu / rounds * (1 / INTERVAL), 1),
    }


def measure_in_process(lab: str, n: int = 100) -> dict:
    """What the stream does for one line, step by step, back to back: the
    snapshot (kernel every 5th time), its rates, and its JSON text (the
    stream's Encoder, and json.dumps for comparison)."""
    encoder = jsonenc.Encoder()
    with stats.Sampler(lab, kernel_every=stats.kernel_every(INTERVAL)) as sampler:
        prev = sampler.snapshot()
        encoder.encode(prev)
        taken = []
        t = time.process_time()
        for _ in range(n):
            taken.append(sampler.snapshot())
        per_snapshot = (time.process_time() - t) / n
        t = time.process_time()
        for snap in taken:
            rates.add_rates(prev, snap)
            prev = snap
        per_rates = (time.process_time() - t) / n
        t = time.process_time()
        for snap in taken:
            text = encoder.encode(snap)
        per_json = (time.process_time() - t) / n
        t = time.process_time()
        for snap in taken:
            json.dumps(snap, separators=(",", ":"))
        per_dumps = (time.process_time() - t) / n
    return {
        "snapshot_ms": round(per_snapshot * 1000, 3),
        "rates_ms": round(per_rates * 1000, 3),
        "json_ms": round(per_json * 1000, 3),
        "json_dumps_ms": round(per_dumps * 1000, 3),
        "json_bytes": len(text),
    }


@contextlib.contextmanager
def background_traffic(topo: topology.Topology, seconds: float):
    """Bounded UDP h0 -> h1 over every plane, in a thread, for `seconds`."""
    result: dict = {}

    def run() -> None:
        result.update(traffic.udp(topo, "h0", "h1", seconds=seconds, pps=20000))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        thread.join(timeout=seconds + 60)


@contextlib.contextmanager
def lab_for(args: argparse.Namespace):
    if args.lab:
        _, topo = state.open_lab(args.lab)
        yield topo, False
        return
    name = f"bst{os.getpid() % 100000}"
    topo = topology.load(args.topology, lab=name)
    with own_lab(topo):  # down by its exact name at the end; never someone else's
        yield topo, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-l", "--lab", help="an existing lab (default: bring one up)")
    parser.add_argument(
        "-t",
        "--topology",
        type=Path,
        default=resources.DEFAULT_TOPOLOGY,
        help="topology of the lab it brings up (default: netns/default.toml)",
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--peer-seconds", type=float, default=3.0)
    parser.add_argument("--no-traffic", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.lab and args.topology != parser.get_default("topology"):
        parser.error("-t brings up a lab of that topology; -l uses an existing one: not both")
    require_root(__file__)
    with lab_for(args) as (topo, own):
        if own and not args.no_traffic:
            transfer.write(topo, "h0", "h1", 8 * 2**20)  # QPs and EVs in the NIC maps
        window = args.seconds + args.peer_seconds + 5
        with contextlib.nullcontext() if args.no_traffic else background_traffic(topo, window):
            time.sleep(0.5)
            reader = measure_reader(topo.lab, args.seconds)
            peer = measure_peer(topo, args.peer_seconds)
            inner = measure_in_process(topo.lab)
    ratio = reader["cpu_ms_per_snapshot"] / peer["cpu_ms_per_round"]
    figures = {
        "lab": topo.lab,
        "namespaces": len(topo.nodes),
        "traffic": not args.no_traffic,
        "reader": reader,
        "peer_ip_link_qdisc": peer,
        "in_process": inner,
        "reader_vs_peer_cpu_per_read": round(ratio, 4),
        "target_core_percent": 5.0,
        "met": reader["core_percent"] < 5.0,
    }
    print(
        f"lab {topo.lab} ({len(topo.nodes)} namespaces), traffic "
        f"{'on' if figures['traffic'] else 'off'}\n"
        f"reader  stats --format jsonl --interval {INTERVAL}: {reader['snapshots']} snapshots "
        f"in {reader['seconds']}s ({reader['snapshots_per_s']}/s), CPU {reader['cpu_s']}s = "
        f"{reader['core_percent']}% of one core, {reader['cpu_ms_per_snapshot']} ms/snapshot "
        f"(whole process incl. start: {reader['whole_process_cpu_s']}s; "
        f"{reader['qps_in_last_snapshot']} QPs)\n"
        f"peer    ip -s -j link + tc -s -j qdisc in every namespace: {peer['rounds']} rounds in "
        f"{peer['seconds']}s ({peer['rounds_per_s']}/s), {peer['cpu_ms_per_round']} ms/round "
        f"= {peer['core_percent_at_10hz']}% of one core at 10 Hz\n"
        f"inside  Sampler.snapshot {inner['snapshot_ms']} ms + rates {inner['rates_ms']} ms "
        f"+ JSON {inner['json_ms']} ms ({inner['json_bytes']} bytes; json.dumps "
        f"{inner['json_dumps_ms']} ms)\n"
        f"ratio   reader/peer CPU per read: {ratio:.3f}; target < 5% of a core: "
        f"{'met' if figures['met'] else 'NOT met'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
