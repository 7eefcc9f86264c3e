"""A WRITE between hosts on two machines: one process at each end.

`mrc-nic write` is one process at both ends (it maps the receiver's memory);
across machines each end runs on its own machine, as any RDMA application
does: the agents start `python -m mrc_nic.workloads.splitwrite recv|send` in
the two hosts (`mrc-nic exec`), which swap their QP facts over TCP through
the lab itself (mrc_nic.verbs.cm, on a plane's addresses), and the sender
WRITEs the transfer in rounds of one half of the receiver's buffer. With
--verify each round is bytes from a seeded generator that the receiver
regenerates and compares; the sender writes a half again only after the
receiver has checked it (two halves: one is checked while the other fills).

A cluster scenario keeps the two ends open over several transfers, as the
local `scenario single-ev-loss` keeps its QP: host_main runs an end as a
host process (workloads.hostprocs) that its parent starts each transfer of
({"go": K}), so that a fault can be put on the QP's EVs between two.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from typing import NamedTuple

HALF_MAX = 8 * 2**20  # bytes per round: two halves fit one MR (32 MiB)
WR_BYTES = 2**20  # bytes per WRITE
DEPTH = 32  # WRITEs in flight
CM_PORT = 18186


def _pattern(seed: int, round_no: int, n: int) -> bytes:
    import numpy as np

    return np.random.default_rng([seed, round_no]).bytes(n)


def _connect(
    server: str | None, port: int, mr_bytes: int, timeout: float, ev_count: int | None = None
):
    from mrc_nic import verbs
    from mrc_nic.verbs import cm

    ctx = verbs.Context()
    link = cm.Link.open(server, port, timeout=timeout)
    pd = verbs.PD(ctx)
    mr = pd.reg_mr(mr_bytes)
    cq = verbs.CQ(ctx, 256)
    cap = verbs.QPCap(max_send_wr=DEPTH * 2, max_recv_wr=4)
    qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq, cap=cap))
    qp.to_init()
    peer = link.swap(cm.Endpoint.of(qp, mr, ctx.gid()))
    qp.to_rtr(peer.qpn, peer.gid, rq_psn=peer.psn)
    if server is not None:  # the sender: the lab's timeout and reorder window, as `write` has
        from mrc_nic.lab.state import open_lab
        from mrc_nic.workloads.rdma_write import lab_defaults

        _, topo = open_lab(ctx.lab)
        qp_timeout, reorder = lab_defaults(topo, ctx.query_device())
        ext = {"reorder_ns": reorder, **({"ev_count": ev_count} if ev_count else {})}
        qp.to_rts(timeout=qp_timeout, ext=ext)
    else:
        qp.to_rts()
    return ctx, link, pd, mr, cq, qp, peer


def receive(args: argparse.Namespace) -> dict:
    """The receiving end: every transfer the sender makes, until it says it is done."""
    half = min(HALF_MAX, args.size)
    ctx, link, pd, mr, cq, qp, peer = _connect(None, args.port, 2 * half, args.timeout)
    checked = errors = 0
    while True:
        plan = link.recv()  # the sender's next transfer: its size and seed; or its end
        if plan.get("end"):
            break
        c, e = _check(link, mr, plan, half)
        checked, errors = checked + c, errors + e
    return {"role": "receiver", "checked_bytes": checked, "errors": errors}


def _check(link, mr, plan: dict, half: int) -> tuple[int, int]:
    """One transfer, received round by round (compared if the plan says so)."""
    checked = errors = 0
    for r in range((plan["size"] + half - 1) // half):
        msg = link.recv()
        n, off = msg["bytes"], (r % 2) * half
        if plan["verify"]:
            got = bytes(mr.buf[off : off + n])
            if got != _pattern(plan["seed"], r, n):
                errors += sum(
                    a != b for a, b in zip(got, _pattern(plan["seed"], r, n), strict=True)
                )
            checked += n
        link.send({"checked": r})
    link.send({"checked_bytes": checked, "errors": errors})
    return checked, errors


def send(args: argparse.Namespace) -> dict:
    """The sending end of one transfer."""
    half = min(HALF_MAX, args.size)
    ends = _connect(args.server, args.port, 2 * half, args.timeout)
    result = transfer(ends, args.size, args.verify, args.timeout)
    ends[1].send({"end": True})
    return result


def transfer(ends: tuple, size: int, verify: bool, timeout: float) -> dict:
    """One transfer of `size` bytes over the connected ends (_connect's), in
    rounds of half the MR: the sender's figures."""
    from mrc_nic import verbs

    ctx, link, pd, mr, cq, qp, peer = ends
    half = mr.length // 2
    seed = secrets.randbits(32)
    link.send({"size": size, "seed": seed, "verify": verify})
    rounds = (size + half - 1) // half
    pending_acks = 0
    clock = _Clock()
    before = _QpFigures.of(qp)
    started_at = time.time()  # wall clock: another machine places a fault against it
    t0 = time.perf_counter()
    for r in range(rounds):
        if pending_acks == 2:  # the half about to be written: checked by now
            link.recv()
            pending_acks -= 1
        n, off = min(half, size - r * half), (r % 2) * half
        if verify or r < 2:
            mr.buf[off : off + n] = _pattern(seed, r, n)
        wrs = [
            verbs.SendWR(
                wr_id=k,
                sg_list=[verbs.SGE(mr.addr + off + k, min(WR_BYTES, n - k), mr.lkey)],
                remote_addr=peer.addr + off + k,
                rkey=peer.rkey,
                send_flags=verbs.SendFlags.SIGNALED,
            )
            for k in range(0, n, WR_BYTES)
        ]
        _post_all(qp, cq, wrs, timeout, clock)
        link.send({"round": r, "bytes": n})
        pending_acks += 1
    while pending_acks:
        link.recv()
        pending_acks -= 1
    seconds = time.perf_counter() - t0
    ended_at = time.time()
    after = _QpFigures.of(qp)
    verdict = link.recv()
    return {
        "role": "sender",
        "bytes": size,
        "seconds": round(seconds, 4),
        "gbps": round(size * 8 / seconds / 1e9, 4),
        "verified_bytes": verdict["checked_bytes"],
        "errors": verdict["errors"],
        # The longest time without a WRITE completing (1 MiB each): a stall,
        # e.g. while a fault is met, shows as a gap above the usual spacing.
        "max_completion_gap_ms": round(clock.max_gap * 1e3, 2),
        "started_at": started_at,
        "ended_at": ended_at,
        "retransmits": after.retx - before.retx,
        "timeouts": after.timeouts - before.timeouts,
        "plane_pkts": {
            p: n - before.per_plane.get(p, 0) for p, n in sorted(after.per_plane.items())
        },
    }


class _QpFigures(NamedTuple):
    """A send QP's retransmissions, timeouts and data packets per plane so far
    (what workloads.rdma_write.qp_counters reads, beside this package)."""

    retx: int
    timeouts: int
    per_plane: dict[int, int]

    @classmethod
    def of(cls, qp) -> _QpFigures:
        try:
            retx = qp.nic_send_state().tx_stats.get("retx_pkts", 0)
        except KeyError:  # not in RTS yet
            retx = 0
        q = qp.query()
        per_plane = {int(p): n for p, n in q.get("retired_tx_pkts", {}).items()}
        for plane, n in qp.nic_tx_per_plane().items():  # live EVs; retired ones above
            per_plane[plane] = per_plane.get(plane, 0) + n
        return cls(retx, q.get("timeouts", 0), per_plane)


class _Clock:
    """The longest time between two WRITE completions of a transfer."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.max_gap = 0.0

    def tick(self, now: float) -> None:
        if self.last is not None:
            self.max_gap = max(self.max_gap, now - self.last)
        self.last = now


def _post_all(qp, cq, wrs: list, timeout: float, clock: _Clock) -> None:
    from mrc_nic import verbs

    posted = done = 0
    last = time.monotonic()
    while done < len(wrs):
        room = min(DEPTH - (posted - done), len(wrs) - posted)
        if room > 0:
            qp.post_send(wrs[posted : posted + room])
            posted += room
        wcs = cq.poll(16)
        for wc in wcs:
            if wc.status != verbs.WcStatus.SUCCESS:
                raise RuntimeError(f"WRITE {wc.wr_id} failed: {wc.status.name}")
        done += len(wcs)
        if wcs:
            last = time.monotonic()
            clock.tick(time.perf_counter())
        elif time.monotonic() - last > timeout:
            raise RuntimeError(f"no WRITE completed within {timeout:g} s")
        else:
            cq.wait(0.05)


def host_main(args: dict) -> None:
    """One end as a host process (workloads.hostprocs), kept open over the
    transfers its parent asks for. args: role (recv|send), size, port,
    timeout, verify; a sender's server and ev_count. Lines to the parent:
    the sender's {"connected": QPN} once its QP is in RTS, then per
    {"go": K} {"written": K, ...the transfer's figures}; an {"end": true}
    ends both ends. The receiver's {"received": {...}} at the end."""
    from mrc_nic.workloads.hostprocs import hear, say

    ns = argparse.Namespace(
        size=args["size"], port=args.get("port", CM_PORT),
        timeout=args.get("timeout", 60.0), verify=bool(args.get("verify")),
    )  # fmt: skip
    if args["role"] == "recv":
        say({"received": receive(ns)})
        return
    half = min(HALF_MAX, ns.size)
    ends = _connect(args["server"], ns.port, 2 * half, ns.timeout, args.get("ev_count"))
    say({"connected": ends[5].qp_num})
    while True:
        try:
            msg = hear()
        except EOFError:
            msg = {"end": True}
        if msg.get("end"):
            ends[1].send({"end": True})
            return
        say({"written": msg["go"], **transfer(ends, ns.size, ns.verify, ns.timeout)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mrc_nic.workloads.splitwrite")
    p.add_argument("role", choices=("recv", "send"))
    p.add_argument("server", nargs="?", help="send: an address of the receiver's host")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--port", type=int, default=CM_PORT)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--verify", action="store_true")
    args = p.parse_args(argv)
    try:
        result = receive(args) if args.role == "recv" else send(args)
    except Exception as e:  # noqa: BLE001 (one line for the agent to relay)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(result))
    return 0 if not result.get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
