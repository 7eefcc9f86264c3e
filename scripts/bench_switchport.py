#!/usr/bin/env python3
"""Per-packet cost of the switch port program (bpf/switch_port.c), BPF_PROG_TEST_RUN.

The program runs on every switch port, ingress and egress, so its cost is
paid by every packet at every hop. This measures it with BPF_PROG_TEST_RUN
(the kernel's own loop and clock: `duration` is ns per run), one MRC data
frame of 1 KiB payload (1090 bytes), in interleaved rounds, medians:

  repeat runs (the kernel runs the same skb `--repeat` times):
    no queue       a key without a queue: count + fault lookup (+ queue lookup);
    queue, idle    a queue at 1 Tbit/s: enqueued, never above kmin: the cost
                   every packet pays on a switch egress port;
    queue, busy    a queue at 100 Gbit/s, slower than the loop: the backlog
                   grows (an atomic add a packet) but stays below kmin;
    queue, parse   a queue in its marking band (kmin 0), packet Not-ECT: the
                   headers are read and nothing is rewritten (congested path);
  single runs (repeat 1, a fresh packet each, the median of `--singles`;
  each includes the same fixed overhead of one test run):
    single, no queue   the reference for the two below;
    single, mark       backlog above kmax: CE marked, IP checksum updated;
    single, trim       backlog above trim: cut to 94 bytes, headers fixed.

`--before DIR` also compiles an older switch_port.c (DIR holds it and its
headers, e.g. `git show HEAD:bpf/switch_port.c`) and runs its "no queue"
case in the same rounds: what the queue stage costs the packets that pass.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_switchport.py [--before DIR] [--rounds 5] [--json FILE]

Nothing is pinned or attached: each program lives in this process only.
Absolute figures drift on a shared 2-core machine; compare within one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

from mrc_nic import resources
from mrc_nic.fabric import switchport as sp
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire

KEY0 = (0).to_bytes(4, "little")


def frame(ecn: int = wire.Ecn.ECT0) -> bytes:
    return bytes(
        wire.data_packet(ev=4097, dqpn=1, psn=1, va=0x1000, rkey=1, payload=bytes(1024), ecn=ecn)
    )


def compile_program(bpf_dir: Path):
    from bcc import BPF

    bpf = BPF(
        src_file=str(bpf_dir / "switch_port.c").encode(),
        cflags=["-DMAX_PORT_KEYS=8", f"-I{bpf_dir}", f"-I{resources.BPF_DIR}"],
    )
    return bpf, bpf.load_func(b"switch_port", BPF.SCHED_CLS).fd


class Queue:
    """Key 0's queue in a program compiled here (map port_queues, unpinned)."""

    def __init__(self, bpf) -> None:
        self.fd = bpf[b"port_queues"].map_fd

    def set(self, settings: sp.QueueSettings | None, backlog: int = 0) -> None:
        q = settings.layout() if settings else sp.QueueLayout()
        if settings and backlog:
            import time

            span = ((backlog + q.burst) * q.cost_q) >> sp.Q_COST_SHIFT
            q.tail_ns = time.monotonic_ns() + span
        bpfsys.map_update(self.fd, KEY0, bytes(q))


IDLE = sp.QueueSettings(rate_bps=10**12, buffer=1 << 30, kmin=1 << 29, kmax=1 << 29, trim=None)
BUSY = sp.QueueSettings(rate_bps=10**11, buffer=1 << 30, kmin=1 << 30, kmax=1 << 30, trim=None)
PARSE = sp.QueueSettings(rate_bps=1000, buffer=1 << 30, kmin=0, kmax=1 << 30, trim=None)
# Backlog above kmax (every ECT packet marked) or above trim; drained at 1 Mbit/s.
MARK = sp.QueueSettings(rate_bps=10**6, buffer=1 << 30, kmin=0, kmax=1000, trim=1 << 29)
TRIM = sp.QueueSettings(rate_bps=10**6, buffer=1 << 30, kmin=0, kmax=1000, trim=1000, ecn=False)


def repeat_ns(fd: int, data: bytes, repeat: int) -> int:
    return bpfsys.prog_test_run(fd, data, repeat=repeat).duration


def single_ns(fd: int, queue: Queue, settings, data: bytes, count: int) -> float:
    runs = []
    for i in range(count):
        if i % 256 == 0:  # keep the backlog where the case wants it
            queue.set(settings, backlog=1 << 20)
        runs.append(bpfsys.prog_test_run(fd, data).duration)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="directory of an older switch_port.c to compare")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=1_000_000)
    p.add_argument("--singles", type=int, default=4000)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)

    bpf, fd = compile_program(resources.BPF_DIR)
    queue = Queue(bpf)
    old = compile_program(args.before) if args.before else None
    ect, not_ect = frame(), frame(wire.Ecn.NOT_ECT)
    cases: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        cases.setdefault(name, []).append(value)

    for _ in range(args.rounds):
        if old:
            add("before: no queue", repeat_ns(old[1], ect, args.repeat))
        queue.set(None)
        add("no queue", repeat_ns(fd, ect, args.repeat))
        queue.set(IDLE)
        add("queue, idle", repeat_ns(fd, ect, args.repeat))
        queue.set(BUSY)
        add("queue, busy", repeat_ns(fd, ect, args.repeat))
        queue.set(PARSE)
        add("queue, parse", repeat_ns(fd, not_ect, args.repeat))
        queue.set(None)
        add("single, no queue", single_ns(fd, queue, None, ect, args.singles))
        add("single, mark", single_ns(fd, queue, MARK, ect, args.singles))
        add("single, trim", single_ns(fd, queue, TRIM, ect, args.singles))
    queue.set(None)

    result = {
        "machine": {"kernel": platform.release()},
        "rounds": args.rounds,
        "ns_per_packet": {name: statistics.median(v) for name, v in cases.items()},
        "all": cases,
    }
    width = max(map(len, cases))
    for name, values in cases.items():
        spread = f"{min(values):.0f}-{max(values):.0f}"
        print(f"{name:<{width}}  {statistics.median(values):6.1f} ns   (rounds {spread})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    bpf.cleanup()
    if old:
        old[0].cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
