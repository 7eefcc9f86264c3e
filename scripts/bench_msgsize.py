#!/usr/bin/env python3
"""Message sizes: mrc-nic WRITE latency and goodput vs kernel TCP and MPTCP (issue 7).

For 64 B, 1 KiB, 4 KiB, 64 KiB, 1 MiB, 16 MiB and 64 MiB messages, perftest
style (ib_write_lat, ib_write_bw), with the kernel's TCP and MPTCP measured
in the same run on the same lab. The lab is the default shape
(netns/default-1g.toml: 2 hosts, 4 planes, every link at 1 Gbit/s), named
bm<pid>, brought up here and taken down by that exact name at the end, also
on an error, Ctrl-C or SIGTERM. Sizes run in turn; for each, mrc-nic, TCP and
MPTCP run one after the other (their order turned every size), each bounded
in time (--seconds per figure; --quick shorter).

mrc-nic (h0 -> h1, one QP, the connection of `mrc-nic write`, which posts
through the verbs API: mrc_nic.workloads.rdma_write):
- latency: one message at a time (msgs_in_flight 1, like ib_write_lat), for
  --seconds. A message's latency is from its post (time.monotonic_ns() in
  this process as post_send is called: it writes the WQE and rings the
  doorbell, whose syscall sends the first packet) to the NIC's send completion
  of its last WQE (the WC's timestamp: bpf_ktime_get_ns() in h0's XDP when
  the SACK that acknowledges its last packet arrives): the completion as the
  sender sees it, a round trip through the fabric (3 switch hops each way),
  as ib_write_lat's is. The one-way figure (JSON and plot: the post to the
  receiver NIC's completion of the WRITE_WITH_IMM) is there too. Both clocks
  are CLOCK_MONOTONIC. A WRITE whose completion was not seen is counted,
  never guessed.
- goodput: as many messages in flight as the NIC's send queue (32 WQEs) and
  the buffers allow (1 MiB messages: 32; 16 and 64 MiB: 2 WQEs of 16 MiB,
  the most host memory gives one QP on this lab: a 64 MiB message is 4
  WQEs), for --seconds (perftest -D). The writer posts new WQEs as it reads
  completions (a signaled WR every half depth, CQ moderation). Goodput is
  the bytes of the completed messages over the transfer's time (its start
  to the last completion read). The buffers are not rewritten
  between messages (perftest does not either): the figure is the NIC's and
  the fabric's, not Python generating data. Peak: the best 100 ms of the
  lab's receive timeline (bytes placed, NIC map nic_rx_timeline).

Peers (kernel sockets, this script's own processes in the hosts'
namespaces, h0 -> h1):
- latency: a ping-pong per size (netperf TCP_RR / sockperf style, TCP_NODELAY):
  the client sends the message, the server answers 1 byte once it has all
  of it; the round trip as the client sees it, time.monotonic_ns() around
  sendall and the 1-byte recv. TCP runs over plane 0 alone, MPTCP with 4
  subflows (one per plane; for one message at a time its scheduler mostly
  uses the lowest-RTT one). The figures include the Python loop and the
  syscalls of both ends (a few microseconds each), as mrc-nic's include the
  daemon's kick.
- goodput: a stream of send() calls of the message size (netperf
  TCP_STREAM -m), the bytes the receiving application got in a window of
  --seconds that starts after a warm-up (slow start, MPTCP's joins). Small
  messages cost a Python send() each (a few microseconds), which caps their
  rate; Nagle coalesces them on the wire.

Output: perftest-style lines per transport (bandwidth: #bytes #iterations
BW peak[Gb/s] BW average[Gb/s] MsgRate[Mpps]; latency: #bytes #iterations
t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec], t_typical = median),
then each figure beside the peers' with the ratio; DIR/msgsize.json (with the
table rows the README takes and every latency sample) and DIR/msgsize_latency.png
(latency CDFs per size) and DIR/msgsize_goodput.png (goodput vs message size).

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_msgsize.py [--quick] [--out DIR] [--seconds S]
        [--sizes 64,1K,...] [--no-mptcp]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import nic, resources, verbs
from mrc_nic.kernel.fdwait import readable
from mrc_nic.lab import client, topology
from mrc_nic.observe import fidelity
from mrc_nic.workloads import peers, rdma_write
from mrc_nic.workloads.benchkit import (
    add_common_args,
    begin,
    log,
    own_lab,
    print_table,
    pyplot,
    save_png,
)
from mrc_nic.workloads.msgfigures import (
    KIB,
    MIB,
    MRC_LABEL,
    PEAK_WINDOW_NS,
    PEER_LABEL,
    bw_stats,
    chunk_room,
    fmt,
    get,
    lat_stats,
    match_latencies,
    parse_sizes,
    peak_bps,
    plan,
    report,
    size_name,
    table,
)

SIZES = [64, KIB, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB]
# The peers' wire protocol: a header per connection (mode, message size, and
# for a stream its window in CLOCK_MONOTONIC, which every namespace shares).
HEAD = struct.Struct("!BQQQ")
PINGPONG, STREAM = 1, 2
IO_TIMEOUT_S = 10.0  # a peer socket blocked this long gives up (a stalled stream)
STREAM_WARMUP_S = 0.3
LAT_MIN_ITERS = 3  # a ping-pong does at least this many if 3 x --seconds allow


def mrc_write(conn: rdma_write.Connection, msg: int, seconds: float, **opts) -> dict[str, Any]:
    """A write of `msg`-byte messages on the connection's QPs for `seconds`
    (the message options of mrc_nic.workloads.writeplan: depth, msgs_in_flight, timing,
    fill; duration bounds it, size only needs to be large enough)."""
    count = max(1, min(10**7, rdma_write.SIZE_MAX // msg))
    wait = 60 + seconds + msg * 8 / 20e6  # a last message at 20 Mbit/s still ends
    result = conn.write(msg * count, msg=msg, duration=seconds, wait=wait, **opts)
    if not result.get("completed"):
        raise RuntimeError(f"mrc-nic write of {size_name(msg)} messages: {result.get('error')}")
    return result


def run_mrc(
    name: str, size: int, args: argparse.Namespace, room: int
) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Latency and goodput of `size`-byte messages on one connection (h0 -> h1):
    the figures, and the latency samples (ns)."""
    p = plan(size, room)
    out: dict[str, Any] = {"plan": p}
    with rdma_write.Connection(name, "h0", "h1", chunk=p["chunk"], mpr=args.mpr) as conn:
        # A warm-up (the QP's window and congestion state), latency, then goodput.
        mrc_write(conn, size, args.warmup, depth=p["bw_depth"], fill=False)
        lat_opts = {"depth": p["lat_depth"], "msgs_in_flight": 1, "timing": True, "imm": True}
        lat = mrc_write(conn, size, args.seconds, fill=False, **lat_opts)
        matched = match_latencies(lat)
        samples = {"rtt": matched.pop("rtt_ns"), "one_way": matched.pop("one_way_ns")}
        out["lat"] = lat_stats(samples["rtt"])
        out["one_way"] = lat_stats(samples["one_way"])
        out["lat_run"] = {
            **matched,
            "messages": lat["messages"],
            "seconds": lat["seconds"],
            "msg_rate": lat["messages"] / lat["seconds"] if lat["seconds"] else None,
            "retransmits": lat["retransmits"],
        }
        with nic.NicMaps.open(name) as maps:
            t0 = time.monotonic_ns()
            meter = fidelity.Meter(topo=conn.topo)  # which resource bound the goodput
            bw = mrc_write(conn, size, args.seconds, depth=p["bw_depth"], fill=False, meter=meter)
            t1 = time.monotonic_ns()
            timeline = maps.rx_timeline()
        peak = peak_bps(timeline, 1 << nic.TIMELINE_SHIFT, t0, t1)
        out["bw"] = bw_stats(size, bw["bytes"], bw["seconds"], peak)
        out["bw"].update(retransmits=bw["retransmits"], per_plane_share=bw["per_plane_share"])
        out["bw"]["fidelity"] = bw.get("fidelity")
    return out, samples


# ---- the peers: this script's processes in the hosts' namespaces -----------------------
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError(f"end of stream after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _serve_one(conn: socket.socket) -> None:
    """One client connection: a ping-pong or a stream, as its header says."""
    conn.settimeout(IO_TIMEOUT_S)
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    mode, size, start_ns, end_ns = HEAD.unpack(_recv_exact(conn, HEAD.size))
    buf = bytearray(min(max(size, 1), 4 * MIB))
    view = memoryview(buf)
    if mode == PINGPONG:
        while True:
            got = 0
            while got < size:
                k = conn.recv_into(view, min(len(buf), size - got))
                if not k:
                    return
                got += k
            conn.sendall(b"\x01")
    bins: dict[int, int] = {}
    window = total = 0
    mono = time.monotonic_ns
    answer: dict[str, Any] = {}
    try:
        while True:
            k = conn.recv_into(view)
            if not k:
                break
            now = mono()
            total += k
            if start_ns <= now < end_ns:
                window += k
                b = (now - start_ns) // PEAK_WINDOW_NS
                bins[b] = bins.get(b, 0) + k
    except OSError as e:  # told to the client (with what arrived), not kept here
        answer["error"] = f"server: {type(e).__name__}: {e} after {total} bytes"
    answer.update(window=window, total=total, bins=bins)
    reply = json.dumps(answer).encode()
    conn.sendall(len(reply).to_bytes(4, "big") + reply)


def role_server(args: dict) -> dict:
    """h1: a TCP listener on plane 0's address and an MPTCP one on every
    address; serves connections one at a time until stdin closes or the
    deadline."""
    deadline = time.monotonic() + args["max_s"]
    listeners = {}
    for proto, host in (("tcp", args["addr"]), ("mptcp", "0.0.0.0")):
        lst = peers.stream_socket(proto)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((host, 0))
        lst.listen(4)
        listeners[proto] = lst
    ports = {p: lst.getsockname()[1] for p, lst in listeners.items()}
    print(json.dumps({"ready": True, "ports": ports}), flush=True)
    served, errors = 0, []
    stdin = sys.stdin.fileno()
    while time.monotonic() < deadline:
        ready = readable([stdin, *listeners.values()], 1.0)
        if stdin in ready and not os.read(stdin, 4096):
            break  # the parent closed our stdin: done
        for lst in listeners.values():
            if lst in ready:
                conn, _ = lst.accept()
                try:
                    _serve_one(conn)
                    served += 1
                except (OSError, struct.error) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                finally:
                    conn.close()
    return {"served": served, "errors": errors}


def _connect(cmd: dict) -> socket.socket:
    sock = peers.stream_socket(cmd["proto"])
    sock.settimeout(IO_TIMEOUT_S)
    sock.bind((cmd["src"], 0))
    sock.connect((cmd["dst"], cmd["port"]))
    return sock


def client_pingpong(cmd: dict) -> dict:
    """Round trips of `size` bytes there, 1 byte back, for `seconds`."""
    size, mono = cmd["size"], time.monotonic_ns
    sock = _connect(cmd)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(HEAD.pack(PINGPONG, size, 0, 0))
        msg = memoryview(bytes(size))
        one = bytearray(1)
        lat: list[int] = []
        end = mono() + int(cmd["seconds"] * 1e9)
        hard = end + int(2 * cmd["seconds"] * 1e9)  # for LAT_MIN_ITERS, at most
        while len(lat) < cmd["max_iters"]:
            now = mono()
            if now >= hard or (now >= end and len(lat) >= LAT_MIN_ITERS):
                break
            t0 = mono()
            sock.sendall(msg)
            if not sock.recv_into(one, 1):
                raise ConnectionError("the server closed the connection")
            lat.append(mono() - t0)
    finally:
        sock.close()
    return {"lat_ns": lat}


def client_stream(cmd: dict) -> dict:
    """send() of `size` bytes as fast as the kernel takes them; the server
    counts what arrives in [start, start + seconds)."""
    size, mono = cmd["size"], time.monotonic_ns
    sock = _connect(cmd)
    try:
        start = mono() + int(STREAM_WARMUP_S * 1e9)
        end = start + int(cmd["seconds"] * 1e9)
        sock.sendall(HEAD.pack(STREAM, size, start, end))
        msg = memoryview(bytes(size))
        sent = 0
        while mono() < end:
            sock.sendall(msg)
            sent += 1
        sock.shutdown(socket.SHUT_WR)
        n = int.from_bytes(_recv_exact(sock, 4), "big")
        reply = json.loads(_recv_exact(sock, n))
    finally:
        sock.close()
    if "error" in reply:
        return {"error": reply["error"]}
    return {
        "start_ns": start,
        "end_ns": end,
        "sent_msgs": sent,
        "window_bytes": reply["window"],
        "bins": reply["bins"],
    }


def role_client(args: dict) -> dict:
    """h0: runs the parent's commands (one JSON line each on stdin), answers
    one JSON line each; ends on EOF, "quit" or the deadline."""
    deadline = time.monotonic() + args["max_s"]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if time.monotonic() > deadline:
            break
        cmd = json.loads(line)
        if cmd.get("op") == "quit":
            break
        try:
            run = client_pingpong if cmd["op"] == "pingpong" else client_stream
            reply = run(cmd)
        except (OSError, ValueError) as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    return {"done": True}


class Peers:
    """The server (h1) and the client (h0) processes: started here, ended by pid."""

    def __init__(self, topo) -> None:
        self.topo = topo
        self.procs: list[subprocess.Popen] = []
        self.src = str(topo.host_address(topo.nodes["h0"].index, 0))
        self.dst = str(topo.host_address(topo.nodes["h1"].index, 0))

    def start(self, max_s: float) -> None:
        """Both ends, each bounded to max_s seconds of life (close() ends them)."""
        server = self._start("h1", "server", {"addr": self.dst, "max_s": max_s})
        self.ports = self._line(server, 15)["ports"]
        self.client = self._start("h0", "client", {"max_s": max_s})
        self._line(self.client, 15)

    def _start(self, host: str, role: str, args: dict) -> subprocess.Popen:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, json.dumps(args)]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.topo.netns(host), *cmd],
            env=resources.python_path_env(),  # this same mrc_nic in the namespace
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.procs.append(proc)
        return proc

    @staticmethod
    def _line(proc: subprocess.Popen, timeout: float) -> dict:
        line = proc.stdout.readline() if readable([proc.stdout], timeout) else b""
        if not line:
            err = b""
            if proc.poll() is not None:
                err = proc.stderr.read()
            raise RuntimeError(
                f"peer process gave no answer in {timeout:g} s: {err.decode()[-500:]}"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"peer: {reply['error']}")
        return reply

    def run(self, op: str, proto: str, size: int, seconds: float) -> dict:
        cmd = {
            "op": op,
            "proto": proto,
            "size": size,
            "seconds": seconds,
            "src": self.src,
            "dst": self.dst,
            "port": self.ports[proto],
            "max_iters": 1_000_000,
        }
        self.client.stdin.write((json.dumps(cmd) + "\n").encode())
        self.client.stdin.flush()
        return self._line(self.client, seconds + STREAM_WARMUP_S + IO_TIMEOUT_S + 35)

    def close(self) -> list[dict]:
        """End both (stdin closed; killed by pid if they do not end); their last
        lines (the server's: connections served and errors)."""
        last = []
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=5)  # closes its stdin first
            except (subprocess.TimeoutExpired, ValueError, OSError):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()  # by its pid: the process this object started
                out = b""
                with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
                    out, _ = proc.communicate(timeout=5)
            lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
            last.append(json.loads(lines[-1]) if lines else {"exit": proc.returncode})
        return last


def run_peer(
    peer_procs: Peers, proto: str, size: int, args: argparse.Namespace
) -> tuple[dict[str, Any], list[int]]:
    """A ping-pong and a stream of `size`-byte messages: figures and latency samples."""
    out: dict[str, Any] = {}
    samples: list[int] = []
    try:
        pp = peer_procs.run("pingpong", proto, size, args.seconds)
        samples = pp["lat_ns"]
        out["lat"] = lat_stats(samples)
    except RuntimeError as e:
        out["lat"], out["lat_error"] = None, str(e)
    try:
        st = peer_procs.run("stream", proto, size, args.seconds)
        bins = {int(k): v for k, v in st["bins"].items()}  # JSON made the keys strings
        peak = peak_bps(bins, PEAK_WINDOW_NS, 0, int(args.seconds * 1e9))
        out["bw"] = bw_stats(size, st["window_bytes"], args.seconds, peak)
        out["bw"]["sent_msgs"] = st["sent_msgs"]
    except RuntimeError as e:
        out["bw"], out["bw_error"] = None, str(e)
    return out, samples


def plots(sizes: list[dict], samples: dict, out: Path) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    from matplotlib.ticker import NullFormatter

    made = []
    cols = 4
    rows = -(-len(sizes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    styles = {
        "mrc": ("mrc-nic (kick -> SEND_DONE)", "-"),
        "mrc_one_way": ("mrc-nic one way (-> RECV_IMM)", ":"),
        "tcp": ("TCP ping-pong, plane 0", "-"),
        "mptcp": ("MPTCP ping-pong", "--"),
    }
    for ax, e in zip(axes.flat, sizes, strict=False):
        for key, (label, ls) in styles.items():
            got = sorted(samples.get(str(e["size"]), {}).get(key, []))
            if not got:
                continue
            xs = [got[0] / 1e3] + [x / 1e3 for x in got]
            ys = [0.0] + [(i + 1) / len(got) for i in range(len(got))]
            marker = "o" if len(got) <= 20 else None  # a few large messages: show each
            ax.step(xs, ys, where="post", ls=ls, marker=marker, ms=3, label=label)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # narrow ranges: no crowded labels
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{size_name(e['size'])} messages", fontsize=9)
        ax.set_xlabel("latency [us]", fontsize=8)
        ax.set_ylabel("CDF", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(sizes) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("latency CDF per message size (same lab, same run)", fontsize=10)
    made.append(save_png(fig, out / "msgsize_latency.png"))

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [e["size"] for e in sizes]
    for key, label in (("mrc", MRC_LABEL), *PEER_LABEL.items()):
        gb = [get(e, key, "bw", "bw_average_gbps") for e in sizes]
        p50 = [get(e, key, "lat", "t_typical") for e in sizes]
        if any(v is not None for v in gb):
            ax.plot(xs, [float("nan") if v is None else v for v in gb], "o-", label=label)
        if any(v is not None for v in p50):
            ax2.plot(xs, [float("nan") if v is None else v for v in p50], "o-", label=label)
    ax.axhline(4.0, ls="--", c="gray", label="4 x 1 Gbit/s")
    ax.axhline(1.0, ls=":", c="gray", label="1 plane")
    for a, title, ylabel in (
        (ax, "goodput vs message size", "goodput [Gbit/s]"),
        (ax2, "median round trip vs message size", "latency p50 [us]"),
    ):
        a.set_xscale("log", base=2)
        a.set_xlabel("message size [bytes]")
        a.set_ylabel(ylabel)
        a.set_title(title, fontsize=9)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    ax2.set_yscale("log")
    made.append(save_png(fig, out / "msgsize_goodput.png"))
    return made


# ---- main --------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, __file__, quick_help="shorter runs (the whole in ~2 minutes)")
    p.add_argument("--seconds", type=float, help="each figure's run (default 2, quick 0.6)")
    p.add_argument("--warmup", type=float, help="mrc-nic's warm-up write (default 0.3, quick 0.1)")
    p.add_argument("--sizes", help="message sizes, e.g. 64,1K,64K,16M (default: 64 B .. 64 MiB)")
    p.add_argument("--no-mptcp", action="store_true", help="TCP only as the peer")
    p.add_argument("--mpr", type=int, default=8, help="mrc-nic QP's MPR (default 8)")
    p.add_argument("--topology", default=str(resources.TOPOLOGY_DIR / "default-1g.toml"))
    args = p.parse_args(argv)
    args.seconds = args.seconds or (0.6 if args.quick else 2.0)
    args.warmup = args.warmup if args.warmup is not None else (0.1 if args.quick else 0.3)
    args.sizes = parse_sizes(args.sizes) if args.sizes else list(SIZES)
    return args


def measure(
    name: str, args: argparse.Namespace, transports: list[str], peer_procs: Peers, room: int
) -> tuple[list[dict], dict[str, dict[str, list[int]]]]:
    """Every size in turn, each transport on it (their order turned every size):
    the figures per size and the latency samples."""
    sizes: list[dict] = []
    samples: dict[str, dict[str, list[int]]] = {}
    for i, size in enumerate(args.sizes):
        entry: dict[str, Any] = {"size": size}
        got: dict[str, list[int]] = {}
        order = transports[i % len(transports) :] + transports[: i % len(transports)]
        for t in order:
            if t == "mrc":
                try:
                    entry["mrc"], mrc_samples = run_mrc(name, size, args, room)
                    got["mrc"], got["mrc_one_way"] = mrc_samples["rtt"], mrc_samples["one_way"]
                except (RuntimeError, client.DaemonError, verbs.VerbsError) as e:
                    entry["mrc"] = {"error": str(e)}
            else:
                entry[t], got[t] = run_peer(peer_procs, t, size, args)
            log(
                f"  {size_name(size):>7} {t:6} p50 "
                f"{fmt(get(entry, t, 'lat', 't_typical'), '.1f')} us, "
                f"{fmt(get(entry, t, 'bw', 'bw_average_gbps'), '.3f')} Gbit/s"
                + (f"  ({entry[t]['error']})" if "error" in entry[t] else "")
            )
        sizes.append(entry)
        samples[str(size)] = got
    return sizes, samples


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result: dict[str, Any] = begin(__file__, argv)
    name = f"bm{os.getpid()}"[:12]
    topo = topology.load(args.topology, lab=name)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.update(lab=name, topology=args.topology, seconds_per_figure=args.seconds)
    transports = ["mrc", "tcp"] + ([] if args.no_mptcp else ["mptcp"])
    started = time.monotonic()
    peer_procs = None
    with own_lab(topo) as up_seconds:  # never takes down a lab this run did not make
        log(f"lab {name} up in {up_seconds:.1f} s")
        try:
            if "mptcp" in transports:
                peers.mptcp_setup(topo, "h0", "h1")
            room = chunk_room(topo)
            peer_procs = Peers(topo)
            peer_procs.start(120 + len(args.sizes) * (args.seconds * 8 + 30))
            sizes, samples = measure(name, args, transports, peer_procs, room)
        finally:
            if peer_procs is not None:
                result["peer_processes"] = peer_procs.close()
    result["seconds"] = round(time.monotonic() - started, 1)
    result["sizes"] = sizes
    result["table"] = table(sizes)
    text = report(sizes, transports)
    m = result["machine"]
    print(
        f"Message sizes, mrc-nic vs kernel peers ({m['cpus']} CPUs, kernel {m['kernel']}, "
        f"load average {m['load_avg']} at the start, lab {name}, {result['seconds']} s)\n"
    )
    print(text)
    print()
    print_table(result["table"])
    result["samples_ns"] = samples
    path = out / "msgsize.json"
    path.write_text(json.dumps(result) + "\n")
    result["plots"] = plots(sizes, samples, out)
    path.write_text(json.dumps(result) + "\n")
    print(f"\nJSON: {path}" + "".join(f"\nPNG: {p}" for p in result["plots"]))
    return 0


def role_main(argv: list[str]) -> int:
    """`--role server|client JSON`: one end of the peers, in a host's namespace."""
    return peers.run_role({"server": role_server, "client": role_client}, argv[1], argv[2])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        sys.exit(role_main(sys.argv[1:]))
    sys.exit(main())
