"""WRITE_WITH_IMM ping-pong latency between two hosts.

Without SERVER it serves; with SERVER, an address of the server's host, it
connects. The client WRITEs --size bytes with an immediate into the server's
memory; the server, busy-polling its CQ, answers the receive completion with a
WRITE_WITH_IMM of its own; the client's receive completion ends the round trip.
Each side re-posts a receive every round, and busy-polls (yielding the CPU
on an empty poll) or, with --event, sleeps on the CQ's fd. After --warmup rounds the client times
--iters of them and prints the one-way latency (round trip / 2, as ib_write_lat
reports it) at p50, p99 and p99.9 in microseconds; with --json one object:
{"size", "p50_us", "p99_us", "p99_9_us", "iters"}.

Run it in two hosts of a lab (h1's address on plane 0 is 198.18.0.2):

    mrc-nic exec h1 -- python examples/write_lat.py                 # server
    mrc-nic exec h0 -- python examples/write_lat.py 198.18.0.2      # client

--size and the round counts are the client's: the server takes them from it.
Busy-polling keeps a CPU busy on each side; on a 2-core machine --event has the
better tail (p99), busy-polling the better median.
"""

from __future__ import annotations

import json
import math
import os
import time

from common import (
    KIB,
    Conn,
    ExampleError,
    check,
    client_server_parser,
    fidelity_meter,
    int_arg,
    open_link,
    round_up,
    run,
    size_arg,
)

from mrc_nic import verbs
from mrc_nic.verbs import SendFlags, SendWR, WcOpcode, WrOpcode, cm

DEFAULT_PORT = cm.DEFAULT_PORT + 1  # beside a write_bw on the same hosts
CQ_MOD = 64  # a signaled send every CQ_MOD rounds: completions of our own WRITEs
MAX_SIZE = 32 << 20


def parse_args(argv: list[str] | None = None):
    p = client_server_parser(
        "write_lat.py",
        "WRITE_WITH_IMM ping-pong latency (one-way = round trip / 2). Without "
        "SERVER: serve; with SERVER: connect to it and measure.",
        DEFAULT_PORT,
    )
    p.add_argument(
        "--size", type=size_arg(0, MAX_SIZE), default=64, help="message size (default 64)"
    )
    p.add_argument("--iters", type=int_arg(1), default=1000, help="timed rounds (default 1000)")
    p.add_argument(
        "--warmup", type=int_arg(0), default=100, help="untimed rounds first (default 100)"
    )
    p.add_argument(
        "--event",
        action="store_true",
        help="wait for completions on the CQ's fd instead of busy-polling (ib_write_lat -e)",
    )
    p.add_argument("--json", action="store_true", help="the result as one JSON object")
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    with (
        verbs.Context() as ctx,
        open_link(args, "write_lat.py") as link,
    ):
        if args.server is None:
            params = link.recv()
            size, rounds = params["size"], params["warmup"] + params["iters"]
        else:
            size, rounds = args.size, args.warmup + args.iters
            link.send({"size": size, "iters": args.iters, "warmup": args.warmup})
        c = Conn.open(ctx, link, max(KIB, round_up(size)), one_cq=True)
        client = args.server is not None
        meter = fidelity_meter(ctx.lab) if client and args.json else None
        rtts = ping_pong(c, size, rounds, args.timeout, client=client, event=args.event)
        fid = meter.stop() if meter is not None else None
    if args.server is None:
        if not args.json:
            print(f"served {rounds} round trips of {size} B")
        return 0
    one_way_us = sorted(ns / 2 / 1e3 for ns in rtts[args.warmup :])
    p50, p99, p999 = (percentile(one_way_us, q) for q in (50, 99, 99.9))
    if args.json:
        result = {"size": size, "p50_us": p50, "p99_us": p99, "p99_9_us": p999}
        print(json.dumps({**result, "iters": args.iters, "fidelity": fid}))
    else:
        print(f" {'#bytes':<8} {'#iterations':<12} {'p50[us]':<10} {'p99[us]':<10} p99.9[us]")
        print(f" {size:<8} {args.iters:<12} {p50:<10.2f} {p99:<10.2f} {p999:.2f}")
    return 0


def ping_pong(
    c: Conn, size: int, rounds: int, timeout: float, *, client: bool, event: bool
) -> list[int]:
    """`rounds` round trips; the client's times in ns (the server's list is empty)."""
    recv = verbs.RecvWR(wr_id=1)
    sge = c.sge(0, size)
    plain, signaled = (
        SendWR(
            wr_id=2,
            opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
            sg_list=sge,
            remote_addr=c.peer.addr,
            rkey=c.peer.rkey,
            send_flags=flags,
        )
        for flags in (0, SendFlags.SIGNALED)
    )
    qp, cq = c.qp, c.send_cq
    qp.post_recv(recv)
    c.link.barrier("go")  # both receives are posted
    rtts: list[int] = []
    clock = time.perf_counter_ns
    for i in range(rounds):
        wr = signaled if i % CQ_MOD == CQ_MOD - 1 else plain
        wr.imm_data = i & 0xFFFFFFFF
        if client:
            t0 = clock()
            qp.post_send(wr)
            wait_recv(cq, i, timeout, event)
            rtts.append(clock() - t0)
        else:
            wait_recv(cq, i, timeout, event)
            qp.post_send(wr)
        qp.post_recv(recv)
    c.link.barrier("done")
    return rtts


def wait_recv(cq: verbs.CQ, expect: int, timeout: float, event: bool) -> None:
    """Poll the CQ for the peer's message `expect`; our own signaled sends'
    completions are checked and passed over. Busy-polling yields the CPU on an
    empty poll (on a small machine the NIC's softirq work needs it); with
    `event` it sleeps on the CQ's fd instead."""
    deadline = None
    while True:
        for wc in cq.poll(1):  # one at a time: nothing polled is left behind
            check(wc, f"round {expect}")
            if wc.opcode != WcOpcode.RECV_RDMA_WITH_IMM:
                continue
            if wc.imm_data != expect & 0xFFFFFFFF:
                raise ExampleError(f"round {expect}: the peer's message carried {wc.imm_data}")
            return
        if event:
            cq.wait(0.01)
        else:
            os.sched_yield()
        if deadline is None:
            deadline = time.monotonic() + timeout
        elif time.monotonic() > deadline:
            raise ExampleError(f"round {expect}: no message from the peer within {timeout:g} s")


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank q-th percentile of an ordered list."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


if __name__ == "__main__":
    run(main)
