"""RDMA WRITE bandwidth and message rate over a sweep of message sizes.

The emulated counterpart of the OCP MRC release's examples/benchmark/mrc_example.c,
written with the public verbs API only. Without SERVER it serves (receives); with
SERVER, an address of the server's host, it connects and sends. For each message
size from --min-size to --size (multiplied by --step-factor each time) the client
posts --warmup WRITEs one at a time, then --iters WRITEs with up to 128 in flight
(TX depth 128) and a completion every 64th (CQ moderation), then one 8-byte
WRITE_WITH_IMM that the server waits for with a posted receive. The client fills
its buffer with byte i = i & 0xFF; the server checks the bytes it got and a
mismatch is an error (exit status 1) on both sides.

Run it in two hosts of a lab (h1's address on plane 0 is 198.18.0.2):

    mrc-nic exec h1 -- python examples/write_bw.py                  # server
    mrc-nic exec h0 -- python examples/write_bw.py 198.18.0.2       # client

The client prints MsgSize, TotalOps, BW_avg(Gbps), MsgRate(Mpps) per size; with
--json one JSON object per size and line: {"size", "ops", "gbps", "mpps"}. The
sweep options are the client's: the server takes them from the client. The
server prints its check of each size ({"size", "checked", "errors"} with --json).
--size defaults to 1 MiB, not the OCP example's 64 MiB: an MR of the emulated NIC
holds 32 MiB, and 1000 WRITEs of 64 MiB take minutes on an emulated fabric.

Posting costs: each post_send call is one doorbell, so the client posts every WR
that fits in one call, from SendWR objects built once per size.
"""

from __future__ import annotations

import json
import sys
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
    wait_one,
)

from mrc_nic import verbs
from mrc_nic.verbs import SendFlags, SendWR, WcOpcode, WrOpcode, cm

TX_DEPTH = 128  # WRs in flight (max_send_wr)
CQ_MOD = 64  # a signaled WR every CQ_MOD
POLL_SIZE = 16
SIGNAL_BYTES = 8  # the WRITE_WITH_IMM at the end of each size
RECV_WR_ID = 0x1000
SIGNAL_WR_ID = 0xFFFFFFFF


def parse_args(argv: list[str] | None = None):
    p = client_server_parser(
        "write_bw.py",
        "RDMA WRITE bandwidth and message rate over a sweep of sizes (the OCP "
        "mrc_example). Without SERVER: serve; with SERVER: connect to it and send.",
        cm.DEFAULT_PORT,
    )
    p.add_argument("--min-size", type=size_arg(1), default=1, help="first message size (default 1)")
    p.add_argument(
        "--size", type=size_arg(1), default=1 << 20, help="last message size (default 1M)"
    )
    p.add_argument(
        "--step-factor",
        type=float,
        default=2.0,
        help="each size is the last one times this (default 2)",
    )
    p.add_argument("--iters", type=int_arg(1), default=1000, help="WRITEs per size (default 1000)")
    p.add_argument(
        "--warmup", type=int_arg(0), default=100, help="WRITEs one by one before each (default 100)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per size and line")
    args = p.parse_args(argv)
    if args.min_size > args.size:
        p.error(f"--min-size ({args.min_size}) is larger than --size ({args.size})")
    if not args.step_factor > 1:
        p.error(f"--step-factor must be more than 1, not {args.step_factor:g}")
    return args


def sweep(low: int, high: int, factor: float) -> list[int]:
    sizes = [low]
    while sizes[-1] < high:
        sizes.append(min(high, max(sizes[-1] + 1, int(sizes[-1] * factor))))
    return sizes


def pattern(n: int) -> bytes:
    """Byte i is i & 0xFF, as the OCP example fills its send buffer."""
    return (bytes(range(256)) * (n // 256 + 1))[:n]


def main() -> int:
    args = parse_args()
    with (
        verbs.Context() as ctx,
        open_link(args, "write_bw.py") as link,
    ):
        if args.server is None:
            return serve(ctx, link, args)
        return send(ctx, link, args)


# ---- the client: sends -------------------------------------------------------------------
def send(ctx: verbs.Context, link: cm.Link, args) -> int:
    sizes = sweep(args.min_size, args.size, args.step_factor)
    link.send({"sizes": sizes, "iters": args.iters, "warmup": args.warmup})
    region = round_up(args.size)  # the data; the signal word after it, 1 KiB aligned
    c = Conn.open(ctx, link, region + KIB, max_send_wr=TX_DEPTH)
    if c.peer.length < region + SIGNAL_BYTES:
        raise ExampleError(f"the server's MR holds {c.peer.length} bytes, not {region + KIB}")
    c.mr.buf[: args.size] = pattern(args.size)
    meter = fidelity_meter(ctx.lab) if args.json else None
    if not args.json:
        print(f"\n {'MsgSize':<10} {'TotalOps':<14} {'BW_avg(Gbps)':<18} MsgRate(Mpps)")
    for n, size in enumerate(sizes, 1):
        link.barrier(f"size {size}")  # the server has posted its receive
        warm = SendWR(
            sg_list=c.sge(0, size),
            remote_addr=c.peer.addr,
            rkey=c.peer.rkey,
            send_flags=SendFlags.SIGNALED,
        )
        for i in range(args.warmup):
            warm.wr_id = i
            c.qp.post_send(warm)
            wait_one(c.send_cq, args.timeout, f"warmup WRITE of {size} B", busy=True)
        if meter is not None:
            meter.tick()  # judged from here ...
        elapsed = bench(c, size, args.iters, args.timeout)
        fid = meter.tick() if meter is not None else None  # ... to here
        signal(c, region, n, size, args.timeout)
        verdict = link.recv()
        if verdict.get("errors"):
            raise ExampleError(
                f"size {size}: the server found {verdict['errors']} wrong bytes "
                f"(first at byte {verdict['first']})"
            )
        gbps = args.iters * size * 8 / elapsed / 1e9
        mpps = args.iters / elapsed / 1e6
        if args.json:
            row = {"size": size, "ops": args.iters, "gbps": gbps, "mpps": mpps, "fidelity": fid}
            print(json.dumps(row))
        else:
            print(f" {size:<10} {args.iters:<14} {gbps:<18.3f} {mpps:.4f}")
        sys.stdout.flush()
    link.barrier("done")
    if meter is not None:
        meter.close()
    return 0


def bench(c: Conn, size: int, iters: int, timeout: float) -> float:
    """iters WRITEs of `size` bytes, TX_DEPTH in flight, every CQ_MOD-th signaled
    (and the last); seconds from the first post to the last completion."""
    sge = c.sge(0, size)
    ring = [
        SendWR(
            wr_id=k,
            sg_list=sge,
            remote_addr=c.peer.addr,
            rkey=c.peer.rkey,
            send_flags=SendFlags.SIGNALED if k % CQ_MOD == CQ_MOD - 1 else 0,
        )
        for k in range(TX_DEPTH)
    ]
    ring += ring  # any TX_DEPTH consecutive WRs are one slice
    last = SendWR(
        wr_id=iters - 1,
        sg_list=sge,
        remote_addr=c.peer.addr,
        rkey=c.peer.rkey,
        send_flags=SendFlags.SIGNALED,
    )
    signaled = iters // CQ_MOD + (1 if iters % CQ_MOD else 0)
    qp, cq, posted, completed = c.qp, c.send_cq, 0, 0
    stalled_since = None
    t0 = time.perf_counter()
    while completed < signaled:
        room = min(TX_DEPTH - qp.outstanding, iters - posted)
        if room > 0:
            k = posted % TX_DEPTH
            batch = ring[k : k + room]
            posted += room
            if posted == iters:
                batch[-1] = last
            qp.post_send(batch)  # one doorbell for the whole batch
        wcs = cq.poll(POLL_SIZE)
        for wc in wcs:
            check(wc, f"WRITE of {size} B")
        completed += len(wcs)
        if wcs or room > 0:
            stalled_since = None
        elif stalled_since is None:
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since > timeout:
            raise ExampleError(f"WRITEs of {size} B: no completion within {timeout:g} s")
    return time.perf_counter() - t0


def signal(c: Conn, region: int, n: int, size: int, timeout: float) -> None:
    """The end of a size: 8 bytes (the size's ordinal) with the size as immediate."""
    c.mr.buf[region : region + SIGNAL_BYTES] = n.to_bytes(SIGNAL_BYTES, "little")
    c.qp.post_send(
        SendWR(
            wr_id=SIGNAL_WR_ID,
            opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
            imm_data=size & 0xFFFFFFFF,
            sg_list=c.sge(region, SIGNAL_BYTES),
            remote_addr=c.peer.addr + region,
            rkey=c.peer.rkey,
            send_flags=SendFlags.SIGNALED,
        )
    )
    wait_one(c.send_cq, timeout, f"the signal WRITE_WITH_IMM after size {size}", busy=True)


# ---- the server: receives and checks ----------------------------------------------------------
def serve(ctx: verbs.Context, link: cm.Link, args) -> int:
    params = link.recv()
    sizes, iters = params.get("sizes"), params.get("iters")
    if not (sizes and all(isinstance(n, int) and n > 0 for n in sizes) and isinstance(iters, int)):
        raise ExampleError(f"the client sent no sweep of sizes but {params!r}")
    region = round_up(max(sizes))
    c = Conn.open(ctx, link, region + KIB, max_send_wr=TX_DEPTH)
    if not args.json:
        print(f"serving {len(sizes)} sizes from {sizes[0]} to {sizes[-1]} B, {iters} WRITEs each")
    for n, size in enumerate(sizes, 1):
        c.mr.buf[:size] = bytes(size)
        c.qp.post_recv(verbs.RecvWR(wr_id=RECV_WR_ID))  # before the sync point: no RNR
        link.barrier(f"size {size}")
        wc = wait_one(c.recv_cq, args.timeout, f"the signal of size {size}")
        signal_word = int.from_bytes(c.mr.buf[region : region + SIGNAL_BYTES], "little")
        if wc.opcode != WcOpcode.RECV_RDMA_WITH_IMM or wc.imm_data != size & 0xFFFFFFFF:
            raise ExampleError(f"size {size}: unexpected signal {wc}")
        if wc.byte_len != SIGNAL_BYTES or signal_word != n:
            raise ExampleError(f"size {size}: signal word {signal_word}, expected {n}")
        errors, first = compare(c.mr.buf[:size], pattern(size))
        link.send({"size": size, "errors": errors, "first": first})
        if args.json:
            print(json.dumps({"size": size, "checked": size, "errors": errors}))
        elif not errors:
            print(f" {size:<10} {size} bytes checked: OK")
        sys.stdout.flush()
        if errors:
            got = c.mr.buf[first]
            raise ExampleError(
                f"size {size}: {errors} wrong bytes; first at {first}: "
                f"expected {first & 0xFF:#04x}, got {got:#04x}"
            )
    link.barrier("done")
    return 0


def compare(got: memoryview, want: bytes) -> tuple[int, int | None]:
    """(how many bytes differ, the first that does)."""
    if got == want:
        return 0, None
    diffs = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
    return len(diffs), diffs[0]


if __name__ == "__main__":
    run(main)
