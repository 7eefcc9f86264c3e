#!/usr/bin/env python3
"""The verbs API (mrc_nic.verbs) beside the NIC alone and kernel TCP, in one run (issue 17).

On a default lab of its own (2 hosts, 4 planes), h0 writes to h1:
1. 64 B WRITE message rate from one Python process on one QP, TX depth 128,
   a signaled WR every 64 (the OCP example's moderation), against
   - the NIC alone: WQEs written straight into the mapped send queue and one
     doorbell per NIC-full of them, no library (what the API must not slow);
   - kernel TCP through the same lab: iperf3 -l 64 (XDP on the host ports
     turns GSO off on their peers: docs/design.md, section 3).
   - itself with every doorbell a BPF_PROG_RUN (before the doorbell port).
   And how a 64 B post splits: Python, the doorbell syscall, and the NIC
   program's own time within it (BPF_PROG_RUN's duration).
2. 64 B latency: WRITE_WITH_IMM ping-pong between two processes (h0, h1),
   each answering the other's completion, one way = round trip / 2 (as
   ib_write_lat), against a TCP ping-pong (TCP_NODELAY) between the same hosts,
   and against itself with every doorbell a BPF_PROG_RUN (before the doorbell port).
   The NIC's own share of it, without the library: from a side's doorbell to
   the peer NIC's completion record (both CLOCK_MONOTONIC), the floor any API
   on this fabric gets. And both ping-pongs again busy-polling (ib_write_lat's
   default; the TCP peer spins on a non-blocking recv).
3. Large messages (1 MiB WRITEs): the API's goodput against `mrc-nic write`.
4. Unmodified C programs through the native verbs library (mrc_nic/native),
   run by `mrc-nic exec`: perftest's `ib_write_bw -s 64` message rate against
   the NIC alone and the Python API; `ib_write_lat -s 64` typical one-way
   against a C TCP ping-pong (scripts/native/tcp_pingpong.c, TCP_NODELAY,
   blocking reads); `ib_write_bw -s 1M` against `mrc-nic write`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import resources, verbs
from mrc_nic.kernel import netns
from mrc_nic.lab import topology
from mrc_nic.nic.driver.doorbell import doorbell
from mrc_nic.verbs import SGE, SendFlags, SendWR, WrOpcode, cm
from mrc_nic.workloads.benchkit import (
    add_common_args,
    begin,
    log,
    median,
    own_lab,
    print_table,
    table_row,
    verdict,
)

KIB, MIB = 1 << 10, 1 << 20
TX_DEPTH, CQ_MOD = 128, 64  # the OCP example's
RATE_TARGET = 0.8  # of the NIC alone
OLD_RATE_MPPS = 0.015  # 64 B through the daemon's socket before the API (issue 17)
PORT = 18190


class Pair:
    """h0 and h1, each a Context with an MR, a CQ and a QP, connected."""

    def __init__(self, lab: str, depth: int = TX_DEPTH) -> None:
        self.sides = []
        for host in ("h0", "h1"):
            ctx = verbs.Context(lab, host)
            pd = verbs.PD(ctx)
            mr = pd.reg_mr(8 * MIB)
            cq = verbs.CQ(ctx, 1024)
            cap = verbs.QPCap(max_send_wr=depth, max_recv_wr=64)
            qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq, cap=cap))
            self.sides.append((ctx, mr, cq, qp))
        (ca, ma, _, qa), (cb, mb, _, qb) = self.sides
        qa.to_init()
        qb.to_init()
        qa.to_rtr(qb.qp_num, cb.gid())
        qb.to_rtr(qa.qp_num, ca.gid())
        qa.to_rts()
        qb.to_rts()

    def close(self) -> None:
        for ctx, *_ in self.sides:
            ctx.close()


def nic_alone(lab: str, seconds: float) -> float:
    """64 B WRITEs with no library: a NIC-full of WQEs, one doorbell, wait for done."""
    pair = Pair(lab)
    try:
        (_, mr, _, qp), (_, peer_mr, _, _) = pair.sides
        sq = qp._sq  # the QP's send queue: the driver's WQE writer (nic.driver.sq)
        depth = sq.depth
        posted = sq.head()[0]
        start = posted
        end = time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            free = depth - ((posted - sq.done()) & 0xFFFFFFFF)
            if free < depth // 2:
                continue
            for _ in range(free):
                sq.write(posted, (0, peer_mr.addr, peer_mr.rkey, 64, mr.lkey, 0, 0, 0x0A, 0))
                posted = (posted + 1) & 0xFFFFFFFF
            sq.publish(posted)
            qp._kick(free)
        while sq.done() != posted:
            time.sleep(0.0001)
        return ((posted - start) & 0xFFFFFFFF) / (time.perf_counter() - t0) / 1e6
    finally:
        pair.close()


def api_rate(lab: str, seconds: float, size: int, port: bool = True) -> dict[str, Any]:
    """WRITEs of `size` through post_send/poll, TX depth 128, a signal every 64 (16
    above 64 KiB); with the time split of the posts. port: as in _lat_side."""
    pair = Pair(lab)
    try:
        (ctx, mr, cq, qp), (_, peer_mr, _, _) = pair.sides
        mod = CQ_MOD if size <= 64 * KIB else 16
        depth = TX_DEPTH if size <= 64 * KIB else 4 * mod
        wr = {
            flags: SendWR(sg_list=[SGE(mr.addr, size, mr.lkey)], remote_addr=peer_mr.addr,
                          rkey=peer_mr.rkey, send_flags=flags)
            for flags in (0, SendFlags.SIGNALED)
        }  # fmt: skip
        batch = [wr[0]] * (mod - 1) + [wr[SendFlags.SIGNALED]]
        ring = qp._kick if port else doorbell(ctx._nic.program_fd, qp.qp_num, None)
        sys_ns, bpf_ns, kicks = [0], [0], [0]

        def timed(packets: int):
            t = time.perf_counter_ns()
            result = ring(packets)
            sys_ns[0] += time.perf_counter_ns() - t
            if result is not None:  # a BPF_PROG_RUN (a doorbell port frame reports no time)
                bpf_ns[0] += result.duration * max(1, min(packets, 256))
            kicks[0] += 1
            return result

        qp._kick = timed
        posted = done = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            while posted - done <= depth - mod:
                qp.post_send(batch)
                posted += mod
            for wc in cq.poll(16):
                if wc.status:
                    raise RuntimeError(f"a WRITE failed: {wc}")
                done += mod
        while done < posted:
            done += mod * len(cq.poll(16))
        wall = time.perf_counter() - t0
        return {
            "mpps": done / wall / 1e6,
            "gbps": done * size * 8 / wall / 1e9,
            "per_msg_us": {
                "total": wall / done * 1e6,
                "python": (wall * 1e9 - sys_ns[0]) / done / 1e3,
                "doorbell_syscall": sys_ns[0] / done / 1e3,
                "of_which_nic_program": bpf_ns[0] / done / 1e3,
            },
            "doorbells_per_msg": kicks[0] / done,
        }
    finally:
        pair.close()


def _lat_side(
    lab: str, host: str, server: str | None, iters: int, size: int, port: bool, busy: bool
) -> dict[str, list]:
    """One process of the WRITE_WITH_IMM ping-pong, in its host: the server (None)
    answers each message it receives; the client times each round trip. port:
    False rings every doorbell with BPF_PROG_RUN, as before the doorbell port.
    busy: spin on poll_cq (ib_write_lat's default) instead of sleeping on the
    CQ's fd. Also returns, per round, when this side rang its doorbell and when
    its NIC recorded the peer's message (CLOCK_MONOTONIC, both): the NIC's own
    one-way, without the library, is the difference across the two sides."""
    with verbs.Context(lab, host) as ctx:
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(MIB)
        cq = verbs.CQ(ctx, 256)
        cap = verbs.QPCap(max_send_wr=64, max_recv_wr=64)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq, cap=cap))
        ring = qp._kick if port else doorbell(ctx._nic.program_fd, qp.qp_num, None)
        kick_ns = [0]

        def timed_ring(packets: int):
            kick_ns[0] = time.monotonic_ns()
            return ring(packets)

        qp._kick = timed_ring
        qp.to_init()
        with cm.Link.open(server, PORT + 2, timeout=30) as link:
            peer = link.swap(cm.Endpoint.of(qp, mr, ctx.gid()))
            qp.to_rtr(peer.qpn, peer.gid)
            qp.to_rts()
            wr = SendWR(opcode=WrOpcode.RDMA_WRITE_WITH_IMM, sg_list=[SGE(mr.addr, size, mr.lkey)],
                        remote_addr=peer.addr, rkey=peer.rkey)  # fmt: skip
            recv = verbs.RecvWR()
            qp.post_recv([recv] * 32)
            link.barrier()
            out, kicks, arrivals = [], [], []
            for _ in range(iters):
                t0 = time.perf_counter_ns()
                if server is not None:
                    qp.post_send(wr)
                    kicks.append(kick_ns[0])
                while not (wcs := cq.poll(1)):
                    if not busy:
                        cq.wait(1.0)  # blocks, as the TCP peer's recv does
                arrivals.append(wcs[0].timestamp_ns)
                qp.post_recv(recv)
                if server is None:
                    qp.post_send(wr)
                    kicks.append(kick_ns[0])
                out.append((time.perf_counter_ns() - t0) / 2e3)
            link.barrier()
    warm = iters // 10  # the first tenth warms up
    return {"one_way_us": out[warm:], "kick_ns": kicks[warm:], "arrival_ns": arrivals[warm:]}


def api_latency(
    topo, iters: int, size: int = 64, port: bool = True, busy: bool = False
) -> dict[str, list[float]]:
    """One-way latencies (us) of a WRITE_WITH_IMM ping-pong between two processes,
    and the NIC's share of each: the mean of the two doorbell-to-peer-NIC times
    of a round (the client's message, then the server's answer)."""
    lab = topo.lab
    server = netns.start_in(topo.netns("h1"), _lat_side, lab, "h1", None, iters, size, port, busy)
    try:
        addr = str(topo.host_address(topo.nodes["h1"].index, 0))
        client = netns.run_in(
            topo.netns("h0"), _lat_side, lab, "h0", addr, iters, size, port, busy, timeout=120
        )
    finally:
        served = server.result(timeout=30)
    nic = [
        ((s_arr - c_kick) + (c_arr - s_kick)) / 2e3
        for c_kick, s_arr, s_kick, c_arr in zip(
            client["kick_ns"],
            served["arrival_ns"],
            served["kick_ns"],
            client["arrival_ns"],
            strict=True,
        )
    ]
    return {"one_way": client["one_way_us"], "nic": nic}


def _recv_exactly(sock: socket.socket, size: int, busy: bool) -> bytes:
    """size bytes; busy: spinning on a non-blocking recv (as a busy-polling peer)."""
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data), socket.MSG_DONTWAIT if busy else 0)
        except BlockingIOError:
            continue
        if not chunk:
            raise ConnectionError("the TCP peer closed mid-message")
        data += chunk
    return data


def _tcp_server(port: int, iters: int, size: int, busy: bool) -> int:
    with socket.create_server(("", port)) as srv:
        srv.settimeout(20)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(iters):
            conn.sendall(_recv_exactly(conn, size, busy))
    return 0


def _tcp_client(addr: str, port: int, iters: int, size: int, busy: bool) -> list[float]:
    deadline = time.monotonic() + 20
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=20)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # with a timeout every recv is a poll() and a recv: not at its best
    msg, out = b"x" * size, []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        sock.sendall(msg)
        _recv_exactly(sock, size, busy)
        out.append((time.perf_counter_ns() - t0) / 2e3)
    sock.close()
    return out[iters // 10 :]


def tcp_latency(topo, iters: int, size: int = 64, busy: bool = False) -> list[float]:
    server = netns.start_in(topo.netns("h1"), _tcp_server, PORT, iters, size, busy)
    try:
        addr = str(topo.host_address(topo.nodes["h1"].index, 0))
        return netns.run_in(
            topo.netns("h0"), _tcp_client, addr, PORT, iters, size, busy, timeout=60
        )
    finally:
        server.result(timeout=30)


def tcp_rate(topo, seconds: float, size: int = 64) -> float | None:
    """iperf3 -l 64 h0 -> h1 on plane 0: messages per second (Mpps)."""
    port = PORT + 1
    server = subprocess.Popen(
        ["ip", "netns", "exec", topo.netns("h1"), "iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(0.3)
        addr = str(topo.host_address(topo.nodes["h1"].index, 0))
        cmd = ["ip", "netns", "exec", topo.netns("h0"), "iperf3", "-c", addr, "-p", str(port)]
        cmd += ["-l", str(size), "-t", f"{seconds:g}", "-J"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
        if out.returncode:
            log(f"iperf3 failed: {out.stderr.strip() or out.stdout[-200:]}")
            return None
        report = json.loads(out.stdout)
        return (
            report["end"]["sum_received"]["bytes"]
            / size
            / report["end"]["sum_received"]["seconds"]
            / 1e6
        )
    finally:
        server.wait(timeout=10)


def mrc_write_gbps(lab: str, size: str) -> float | None:
    cmd = [sys.executable, "-m", "mrc_nic", "write", "h0", "h1", "--size", size, "-l", lab]
    out = subprocess.run([*cmd, "--format", "json"], capture_output=True, text=True, timeout=300)
    if out.returncode:
        log(f"mrc-nic write failed: {out.stderr.strip()}")
        return None
    return json.loads(out.stdout)["goodput_bps"] / 1e9


def _exec(lab: str, host: str, *program: str) -> list[str]:
    return [sys.executable, "-m", "mrc_nic", "exec", "-l", lab, host, "--", *program]


def _pair(topo, program: list[str], timeout: float) -> str | None:
    """program on h1 (server), then on h0 with h1's plane-0 address: the client's output."""
    server = subprocess.Popen(_exec(topo.lab, "h1", *program), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(1.5)
        addr = str(topo.host_address(topo.nodes["h1"].index, 0))
        out = subprocess.run(_exec(topo.lab, "h0", *program, addr), capture_output=True,
                             text=True, timeout=timeout)  # fmt: skip
        if out.returncode:
            log(f"{program[0]} failed: {out.stderr.strip()[-300:]}")
            return None
        return out.stdout
    finally:
        server.wait(timeout=timeout)


def _perftest_row(text: str | None, size: int) -> list[float] | None:
    """perftest's result row for `size` bytes, the numbers after #bytes."""
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[0] == str(size) and fields[1].isdigit():
            return [float(v) for v in fields[1:]]
    return None


def perftest_bw(topo, size: int, iters: int) -> dict[str, float] | None:
    """ib_write_bw -s size -n iters: message rate (Mpps) and goodput (Gbit/s).
    (Iterations, not -D: in its duration mode perftest 4.5 measured 1 MiB
    WRITEs at a fifteenth of the same run by iterations here.)"""
    row = _perftest_row(_pair(topo, ["ib_write_bw", "-s", str(size), "-n", str(iters)], 300), size)
    return None if row is None else {"mpps": row[3], "gbps": row[2] * 8 * 2**20 / 1e9}


def perftest_lat(topo, iters: int) -> float | None:
    """ib_write_lat -s 64: its typical one-way (us; it reports RTT/2 itself)."""
    row = _perftest_row(_pair(topo, ["ib_write_lat", "-s", "64", "-n", str(iters)], 120), 64)
    return None if row is None else row[3]


def tcp_c_latency(topo, iters: int, size: int = 64) -> list[float]:
    """scripts/native/tcp_pingpong.c between h1 and h0: one-ways (us)."""
    exe = Path("/tmp") / f"mrc-nic-tcp-pingpong-{os.getpid()}"
    src = Path(__file__).parent / "native" / "tcp_pingpong.c"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    port, peer = str(PORT + 2), str(topo.host_address(topo.nodes["h1"].index, 0))
    try:
        server = subprocess.Popen(
            ["ip", "netns", "exec", topo.netns("h1"), exe, "server", port, str(iters), str(size)]
        )
        try:
            out = subprocess.run(
                ["ip", "netns", "exec", topo.netns("h0"), exe, "client", peer, port,
                 str(iters), str(size)],
                capture_output=True, text=True, timeout=120, check=True,
            )  # fmt: skip
        finally:
            server.wait(timeout=30)
        return [float(v) for v in out.stdout.split()]
    finally:
        exe.unlink(missing_ok=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(values), "p99": percentile(values, 0.99),
            "p99_9": percentile(values, 0.999)}  # fmt: skip


def measure(topo, seconds: float, iters: int) -> dict[str, Any]:
    lab = topo.lab
    log("64 B: the NIC alone")
    nic = nic_alone(lab, seconds)
    log("64 B: the verbs API")
    api = api_rate(lab, seconds, 64)
    api_run = api_rate(lab, seconds, 64, port=False)
    log("64 B: kernel TCP (iperf3 -l 64)")
    tcp = tcp_rate(topo, seconds)
    log("64 B latency: WRITE_WITH_IMM ping-pong (doorbell port, BPF_PROG_RUN), TCP ping-pong")
    lat_api, lat_tcp = api_latency(topo, iters), tcp_latency(topo, iters)
    lat_run = api_latency(topo, iters, port=False)["one_way"]
    log("64 B latency, busy-polling: WRITE_WITH_IMM ping-pong, TCP ping-pong")
    lat_busy = api_latency(topo, iters, busy=True)
    lat_tcp_busy = tcp_latency(topo, iters, busy=True)
    log("1 MiB WRITEs: the verbs API, mrc-nic write")
    big = api_rate(lab, seconds, MIB)
    write = mrc_write_gbps(lab, "256M")
    log("C programs: ib_write_bw -s 64, ib_write_lat -s 64, C TCP ping-pong, ib_write_bw -s 1M")
    pt_small, pt_lat = perftest_bw(topo, 64, 5000), perftest_lat(topo, iters)
    pt_tcp, pt_big = tcp_c_latency(topo, iters), perftest_bw(topo, MIB, 200)
    return {
        "nic_mpps": nic, "api": api, "api_prog_run_mpps": api_run["mpps"], "tcp_mpps": tcp,
        "lat_api_us": spread(lat_api["one_way"]), "lat_nic_us": spread(lat_api["nic"]),
        "lat_tcp_us": spread(lat_tcp), "lat_prog_run_us": spread(lat_run),
        "lat_busy_us": spread(lat_busy["one_way"]), "lat_busy_nic_us": spread(lat_busy["nic"]),
        "lat_tcp_busy_us": spread(lat_tcp_busy),
        "big_api_gbps": big["gbps"], "write_gbps": write,
        "perftest_mpps": pt_small and pt_small["mpps"], "perftest_lat_us": pt_lat,
        "tcp_c_us": spread(pt_tcp), "perftest_big_gbps": pt_big and pt_big["gbps"],
    }  # fmt: skip


def table(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def med(get) -> float | None:
        return median([get(r) for r in rounds])

    def judged(target: str, ratio: float | None, bar: float, *, above: bool = False) -> str:
        met = None if ratio is None else (ratio > bar if above else ratio >= bar)
        return f"{target}: {verdict(met)}"

    def rate(peer_name: str, peer: float | None, target: str, bar: float) -> dict[str, Any]:
        case = "64 B WRITE rate, one QP, one process"
        api = med(lambda r: r["api"]["mpps"])
        row = table_row("verbs", case, "message rate", "Mpps", api, peer_name, peer)
        row["target"] = judged(target, row["ratio"], bar) if bar else target
        return row

    def p50(key: str) -> float | None:
        return med(lambda r: r[key]["p50"])

    def latency(case: str, mrc: str, peer_name: str, peer: str, note: str) -> dict[str, Any]:
        """note: "judge" for the target (peer/mrc > 1), else what the row is for."""
        row = table_row("verbs", case, "latency", "us", p50(mrc), peer_name, p50(peer),
                        ratio_is="peer/mrc")  # fmt: skip
        judge = note == "judge"
        row["target"] = judged("peer/mrc > 1", row["ratio"], 1, above=True) if judge else note
        return row

    one_way, busy = "64 B one-way latency p50 (RTT/2)", "64 B one-way latency p50, busy-polling"
    big = table_row("verbs", "1 MiB WRITEs, one QP", "goodput", "Gbit/s",
                    med(lambda r: r["big_api_gbps"]), "mrc-nic write 256M",
                    med(lambda r: r["write_gbps"]))  # fmt: skip
    big["target"] = judged("mrc/peer >= 0.95 (1 within this machine's noise)", big["ratio"], 0.95)
    c_case = "64 B WRITE rate: ib_write_bw -s 64 (perftest, unmodified)"
    c_rate = med(lambda r: r["perftest_mpps"])
    c_nic = table_row("verbs", c_case, "message rate", "Mpps", c_rate,
                      "the NIC alone (no library)", med(lambda r: r["nic_mpps"]))  # fmt: skip
    c_nic["target"] = judged("mrc/peer >= 0.9", c_nic["ratio"], 0.9)
    c_py = table_row("verbs", c_case, "message rate", "Mpps", c_rate, "the Python API",
                     med(lambda r: r["api"]["mpps"]))  # fmt: skip
    c_py["target"] = judged("mrc/peer >= 3", c_py["ratio"], 3)
    c_lat = table_row("verbs", "64 B one-way: ib_write_lat -s 64 typical", "latency", "us",
                      med(lambda r: r["perftest_lat_us"]), "C TCP ping-pong p50, TCP_NODELAY",
                      p50("tcp_c_us"), ratio_is="peer/mrc")  # fmt: skip
    c_lat["target"] = judged("peer/mrc > 1", c_lat["ratio"], 1, above=True)
    c_big = table_row("verbs", "1 MiB WRITEs: ib_write_bw -s 1M", "goodput", "Gbit/s",
                      med(lambda r: r["perftest_big_gbps"]), "mrc-nic write 256M",
                      med(lambda r: r["write_gbps"]))  # fmt: skip
    c_big["target"] = judged("mrc/peer >= 1", c_big["ratio"], 1)
    return [
        c_nic, c_py, c_lat, c_big,
        rate("the NIC alone (no library)", med(lambda r: r["nic_mpps"]),
             f"mrc/peer >= {RATE_TARGET}", RATE_TARGET),
        rate("before the API (daemon socket)", OLD_RATE_MPPS, ">= 10x", 10),
        rate("the same, BPF_PROG_RUN doorbell (before)", med(lambda r: r["api_prog_run_mpps"]),
             "-", 0),
        rate("TCP iperf3 -l 64, plane 0", med(lambda r: r["tcp_mpps"]), "stretch >= 1", 1),
        latency(one_way, "lat_api_us", "TCP ping-pong, TCP_NODELAY", "lat_tcp_us", "judge"),
        latency(one_way, "lat_api_us", "the same, BPF_PROG_RUN doorbell (before)",
                "lat_prog_run_us", "-"),
        latency("64 B one-way p50, the NIC alone: doorbell to peer NIC's record", "lat_nic_us",
                "TCP ping-pong, TCP_NODELAY (socket to socket)", "lat_tcp_us",
                "(the floor any API gets)"),
        latency(busy, "lat_busy_us", "TCP ping-pong, busy-polling recv", "lat_tcp_busy_us",
                "judge"),
        latency(busy, "lat_busy_us", "TCP ping-pong, blocking recv", "lat_tcp_us", "judge"),
        big,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, __file__, "one round of 1.5 s per figure")
    p.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    p.add_argument("--seconds", type=float, help="seconds per rate figure (default 3)")
    p.add_argument("--iters", type=int, default=2000, help="ping-pong round trips")
    args = p.parse_args(argv)
    header = begin(__file__, sys.argv[1:] if argv is None else argv)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (1.5 if args.quick else 3.0)
    envelope = resources.TOPOLOGY_DIR / "default-1g.toml"  # how fast the API goes: 1 Gbit/s
    topo = topology.load(envelope, lab=f"bv{os.getpid() % 100000}")
    results = []
    with own_lab(topo):
        for i in range(rounds):
            log(f"round {i + 1}/{rounds}")
            results.append(measure(topo, seconds, args.iters))
    rows = table(results)
    print_table(rows)
    split = results[-1]["api"]["per_msg_us"]
    print("64 B post, per message (us): " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "verbs.json"
    path.write_text(json.dumps({**header, "rounds": results, "table": rows}, indent=1))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
