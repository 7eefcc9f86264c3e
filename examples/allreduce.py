"""A ring all-reduce of numpy float32 arrays across the hosts of a lab.

Rank r (one process per host) draws its array from a seed, then runs the ring
algorithm over RDMA WRITE_WITH_IMM: N-1 reduce-scatter steps, in which it WRITEs
one chunk into its right neighbour's staging area and adds the chunk its left
neighbour wrote into its own staging area (numpy, straight into the MR's own
view: mr.numpy("float32")), then N-1 all-gather steps that pass the reduced
chunks on the same way. Each step has its own staging slot, so no WRITE ever
lands on memory its receiver still reads. At the end every rank recomputes all
ranks' arrays from the seeds, compares its result with numpy's sum and prints OK
and the largest error (exit status 1 if it is off).

Ranks find each other by their hosts' addresses: each listens on --port for its
left neighbour and connects to its right neighbour's address (verbs.cm.Link),
over which they swap QP numbers and rkeys.

Launch every rank from the root namespace (as root), one per host of a lab:

    mrc-nic up -t netns/clos-8.toml --name ar
    python examples/allreduce.py --launch --lab ar [--hosts 8] [--size 1M]

which runs, for K = 0..N-1, with the hosts' plane-0 addresses:

    mrc-nic exec hK -- python examples/allreduce.py --rank K --world N \\
        --peer-addr 198.18.0.1,198.18.0.2,... [--size 1M]

and exits non-zero if any rank fails or the job outlasts --timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict

import numpy as np
from common import (
    KIB,
    ExampleError,
    Parser,
    add_port_and_timeout,
    fidelity_meter,
    int_arg,
    run,
    size_arg,
    wait_one,
)

from mrc_nic import verbs
from mrc_nic.verbs import SendFlags, SendWR, WrOpcode, cm

DEFAULT_PORT = 18190
FLOATS_PER_KIB = KIB // 4  # chunks start on the NIC's 1 KiB elements


def parse_args(argv: list[str] | None = None):
    p = Parser(
        prog="allreduce.py",
        description="A ring all-reduce of float32 arrays over the verbs API, checked against\n"
        "numpy. --launch starts one rank per host; --rank is one rank.",
        epilog=(
            "examples:\n"
            "  python examples/allreduce.py --launch --lab ar --size 4M\n"
            "  mrc-nic exec h2 -- python examples/allreduce.py --rank 2 --world 8 "
            "--peer-addr 198.18.0.1,...,198.18.0.8"
        ),
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--launch", action="store_true", help="start one rank per host of --lab (root namespace)"
    )
    mode.add_argument("--rank", type=int_arg(0), help="this process's rank (inside a host)")
    p.add_argument("--lab", default=os.environ.get("MRC_NIC_LAB"), help="the lab (--launch)")
    p.add_argument(
        "--hosts", type=int_arg(2), help="ranks h0..h(N-1) (--launch; default every host)"
    )
    p.add_argument("--world", type=int_arg(2), help="how many ranks (--rank)")
    p.add_argument("--peer-addr", help="every rank's host address, by rank, comma-separated")
    p.add_argument(
        "--size", type=size_arg(4), default=1 << 20, help="bytes of each rank's array (default 1M)"
    )
    p.add_argument("--seed", type=int_arg(0), default=1, help="rank r's data comes from (seed, r)")
    add_port_and_timeout(p, DEFAULT_PORT, 120.0, "for the whole job (--launch) or any one wait")
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    args = p.parse_args(argv)
    if args.size % 4:
        p.error(f"--size must be a multiple of 4 bytes (float32), not {args.size}")
    if args.launch:
        if not args.lab:
            p.error("--launch needs --lab NAME (or MRC_NIC_LAB)")
        if args.world or args.peer_addr:
            p.error("--world and --peer-addr are the launcher's to give, not --launch's")
    else:
        if args.world is None or args.peer_addr is None:
            p.error("--rank needs --world and --peer-addr")
        args.peer_addr = args.peer_addr.split(",")
        if len(args.peer_addr) != args.world:
            p.error(f"--peer-addr names {len(args.peer_addr)} ranks, --world is {args.world}")
        if args.rank >= args.world:
            p.error(f"--rank {args.rank} is not below --world {args.world}")
    return args


def main() -> int:
    args = parse_args()
    return launch(args) if args.launch else rank_main(args)


def rank_data(seed: int, rank: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, rank]).standard_normal(n, dtype=np.float32)


# ---- one rank --------------------------------------------------------------------------------
def rank_main(args) -> int:
    rank, world, addrs = args.rank, args.world, args.peer_addr
    right, left = (rank + 1) % world, (rank - 1) % world
    n = args.size // 4
    chunk = -(-n // world)  # floats per chunk, rounded up to whole 1 KiB elements
    chunk = -(-chunk // FLOATS_PER_KIB) * FLOATS_PER_KIB
    chunk_bytes, steps = chunk * 4, 2 * (world - 1)
    with verbs.Context() as ctx:
        pd = verbs.PD(ctx)
        data_mr = pd.reg_mr(world * chunk_bytes)  # the array, padded with zeros to N chunks
        stage_mr = pd.reg_mr(steps * chunk_bytes)  # one slot per step, written by the left
        x = data_mr.numpy("float32")
        x[:n] = rank_data(args.seed, rank, n)
        chunks = x.reshape(world, chunk)
        stage = stage_mr.numpy("float32").reshape(steps, chunk)

        scq, rcq = verbs.CQ(ctx, 64), verbs.CQ(ctx, 64)
        to_right = verbs.QP(pd, verbs.QPInitAttr(send_cq=scq, recv_cq=scq))
        cap = verbs.QPCap(max_send_wr=4, max_recv_wr=steps)
        from_left = verbs.QP(pd, verbs.QPInitAttr(send_cq=rcq, recv_cq=rcq, cap=cap))
        for qp in (to_right, from_left):
            qp.to_init()
        link_left, link_right = ring_links(addrs[right], args.port, args.timeout)
        with link_left, link_right:
            # Send on both links before reading either: nobody waits in a circle.
            link_right.send(asdict(cm.Endpoint.of(to_right, stage_mr, ctx.gid())))
            link_left.send(asdict(cm.Endpoint.of(from_left, stage_mr, ctx.gid())))
            peer = cm.Endpoint(**link_right.recv())  # the right's from_left and staging area
            back = cm.Endpoint(**link_left.recv())  # the left's to_right
            to_right.to_rtr(peer.qpn, peer.gid, rq_psn=peer.psn)
            from_left.to_rtr(back.qpn, back.gid, rq_psn=back.psn)
            for qp in (to_right, from_left):
                qp.to_rts()
            from_left.post_recv([verbs.RecvWR(wr_id=s) for s in range(steps)])
            ring_barrier((link_left, link_right), "start")
            t0 = time.perf_counter()
            for step in range(steps):
                if step < world - 1:  # reduce-scatter
                    send_c, recv_c = (rank - step) % world, (rank - step - 1) % world
                else:  # all-gather
                    s = step - (world - 1)
                    send_c, recv_c = (rank + 1 - s) % world, (rank - s) % world
                wr = SendWR(
                    wr_id=step,
                    opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
                    imm_data=step,
                    sg_list=[
                        verbs.SGE(data_mr.addr + send_c * chunk_bytes, chunk_bytes, data_mr.lkey)
                    ],
                    remote_addr=peer.addr + step * chunk_bytes,
                    rkey=peer.rkey,
                    send_flags=SendFlags.SIGNALED,
                )
                to_right.post_send(wr)
                what = f"rank {rank} step {step}"
                got = wait_one(rcq, args.timeout, f"{what}: the chunk from rank {left}")
                if got.imm_data != step or got.byte_len != chunk_bytes:
                    raise ExampleError(f"{what}: got imm {got.imm_data}, {got.byte_len} B")
                if step < world - 1:
                    chunks[recv_c] += stage[step]  # numpy, in the MR itself
                else:
                    chunks[recv_c] = stage[step]
                # Our WRITE has left our memory before the next step changes it.
                wait_one(scq, args.timeout, f"{what}: our WRITE to rank {right}")
            elapsed = time.perf_counter() - t0
            ring_barrier((link_left, link_right), "end")
        result = x[:n].copy()
    expected = sum(rank_data(args.seed, r, n).astype(np.float64) for r in range(world))
    max_error = float(np.max(np.abs(result - expected))) if n else 0.0
    ok = bool(np.allclose(result, expected, rtol=1e-5, atol=1e-5 * world))
    busbw = 2 * (world - 1) / world * args.size * 8 / elapsed / 1e9
    report = {
        "rank": rank,
        "world": world,
        "host": ctx.attr.host,
        "elements": n,
        "seconds": elapsed,
        "busbw_gbps": busbw,
        "max_error": max_error,
        "ok": ok,
    }
    if args.json:
        print(json.dumps(report))
    else:
        verdict = "OK" if ok else "WRONG"
        print(
            f"rank {rank}/{world} on {ctx.attr.host}: {n} float32 all-reduced in "
            f"{elapsed * 1e3:.1f} ms (bus {busbw:.3f} Gbit/s): {verdict}, "
            f"max error {max_error:.3g} against numpy's sum"
        )
    return 0 if ok else 1


def ring_links(right_addr: str, port: int, timeout: float) -> tuple[cm.Link, cm.Link]:
    """(from the left, to the right): listen for the left while connecting to the right."""
    got: dict[str, object] = {}

    def accept() -> None:
        try:
            got["link"] = cm.Link.open(None, port, timeout=timeout)
        except Exception as e:  # reported by the caller
            got["error"] = e

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    link_right = cm.Link.open(right_addr, port, timeout=timeout)
    listener.join(timeout)
    if "link" not in got:
        link_right.close()
        why = got.get("error", "no connection")
        raise ExampleError(f"the left neighbour did not connect on port {port}: {why}")
    return got["link"], link_right


def ring_barrier(links: tuple[cm.Link, ...], tag: str) -> None:
    """Both neighbours reached `tag` (sends first, then reads: no circular wait)."""
    for link in links:
        link.send({"barrier": tag})
    for link in links:
        if link.recv().get("barrier") != tag:
            raise ExampleError(f"barrier {tag!r}: a neighbour is elsewhere")


# ---- the launcher ----------------------------------------------------------------------------
def launch(args) -> int:
    addrs = host_addresses(args.lab, args.hosts)
    world = len(addrs)
    script = os.path.abspath(__file__)
    rank_args = ["--size", str(args.size), "--seed", str(args.seed), "--port", str(args.port)]
    rank_args += ["--timeout", f"{args.timeout:g}", "--world", str(world)]
    rank_args += ["--peer-addr", ",".join(addrs)] + (["--json"] if args.json else [])
    procs: list[subprocess.Popen] = []
    meter = fidelity_meter(args.lab) if args.json else None  # over the whole job
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(world)]
        try:
            for k, out in enumerate(outs):
                exec_cmd = [sys.executable, "-m", "mrc_nic", "exec", "-l", args.lab, f"h{k}"]
                cmd = [*exec_cmd, "--", sys.executable, script, "--rank", str(k), *rank_args]
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True))
            codes = wait_all(procs, args.timeout)
        finally:
            for proc in procs:  # only ours, by pid
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for k, out in enumerate(outs):
            out.seek(0)
            for line in out.read().splitlines():
                mine = line.startswith(("rank ", "{"))
                print(line if mine else f"rank {k}: {line}")
    failed = [k for k, c in enumerate(codes) if c not in (None, 0)]
    stopped = [k for k, c in enumerate(codes) if c is None]
    ok = not failed and not stopped
    if args.json:
        fid = meter.stop() if meter is not None else None
        report = {"world": world, "ok": ok, "failed": failed, "stopped": stopped, "fidelity": fid}
        print(json.dumps(report))
    elif ok:
        print(f"all-reduce on {world} hosts of lab {args.lab}: {world} of {world} ranks OK")
    else:
        why = f"ranks {failed} failed" if failed else f"timed out after {args.timeout:g} s"
        why += f"; ranks {stopped} stopped" if stopped else ""
        print(f"all-reduce on {world} hosts of lab {args.lab}: {why}")
    return 0 if ok else 1


def host_addresses(lab: str, hosts: int | None) -> list[str]:
    """h0, h1, ...: each host's plane-0 address (its GID), from its NIC."""
    addrs: list[str] = []
    k = 0
    while hosts is None or k < hosts:
        try:
            with verbs.Context(lab, f"h{k}") as ctx:
                addrs.append(ctx.gid(0))
        except verbs.VerbsError as e:
            if hosts is None and k >= 2:
                break  # every host there is
            raise ExampleError(str(e)) from None
        k += 1
    return addrs


def wait_all(procs: list[subprocess.Popen], timeout: float, grace: float = 2.0) -> list:
    """Every rank's exit status, None for one still running at the timeout, or
    `grace` seconds after the first failure (the others would wait for the
    failed rank until their own timeouts)."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [p.poll() for p in procs]
        now = time.monotonic()
        if None not in codes or now > deadline:
            return codes
        if any(c not in (None, 0) for c in codes):
            deadline = min(deadline, now + grace)
        time.sleep(0.05)


if __name__ == "__main__":
    run(main)
