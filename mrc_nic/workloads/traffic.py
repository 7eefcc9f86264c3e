"""Test traffic across the fabric: UDP streams sprayed over planes and source ports.

This is a load generator for checking the fabric (paths, ECMP, faults), not
the MRC data path, which belongs to the NIC fast path in BPF (issue 3). Each
stream runs in a child process inside the source host's namespace, bounded in
time; a receiver in the destination namespace counts what arrives per plane
and per source port.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import time

from mrc_nic.errors import MrcNicError
from mrc_nic.kernel import netns
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab.topology import Topology

TEST_UDP_PORT = 4792  # next to RoCEv2's 4791, which the NIC fast path owns
FIRST_SOURCE_PORT = 49152


class TrafficError(MrcNicError, RuntimeError):
    """Test traffic cannot run: bad host or plane, a port in use, a child failed."""


# What a sender sees while faults come and go: ICMP errors, full queues, and a
# port whose carrier is down. The stream goes on and counts them.
TRANSIENT_SEND_ERRORS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ENOBUFS,
        errno.EAGAIN,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.EHOSTDOWN,
    }
)


def _bind_receivers(ns: str, addresses: list[str]) -> list[tuple[int, socket.socket]]:
    """Bound sockets in the destination namespace, made here so that a port in
    use fails at once, before anything is sent."""
    socks = []
    with netns.entered(ns):
        try:
            for plane, addr in enumerate(addresses):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append((plane, s))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.bind((addr, TEST_UDP_PORT))
                s.setblocking(False)
        except OSError as e:
            for _, s in socks:
                s.close()
            raise TrafficError(
                f"cannot receive on {addr}:{TEST_UDP_PORT} in {ns}: {e.strerror} "
                "(is another `mrc-nic traffic` to this host running?)"
            ) from None
    return socks


def _receive(socks: list[tuple[int, socket.socket]], seconds: float) -> dict:
    counts: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    by_fd = {s.fileno(): (plane, s) for plane, s in socks}
    with Waiter(by_fd) as waiter:
        while (left := deadline - time.monotonic()) > 0:
            for fd in waiter.wait(min(left, 0.1)):
                plane, s = by_fd[fd]
                while True:
                    try:
                        data, (_, sport) = s.recvfrom(65536)
                    except BlockingIOError:
                        break
                    key = f"{plane}/{sport}"
                    counts[key] = counts.get(key, 0) + 1
                    nbytes[key] = nbytes.get(key, 0) + len(data)
    return {"packets": counts, "bytes": nbytes}


def _send(pairs: list[tuple[int, str, str, int]], seconds: float, size: int, pps: int) -> dict:
    """pairs: (plane, src addr, dst addr, source port). Round-robin over them."""
    socks = []
    for plane, src, dst, sport in pairs:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((src, sport))
        s.connect((dst, TEST_UDP_PORT))
        socks.append((f"{plane}/{sport}", s))
    payload = bytes(size)
    sent = {key: 0 for key, _ in socks}
    errors = 0
    start = time.monotonic()
    deadline = start + seconds
    n = 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        if pps and n >= (now - start) * pps:
            time.sleep(min(0.001, deadline - now))
            continue
        for key, s in socks:
            try:
                s.send(payload)
                sent[key] += 1
            except OSError as e:  # ICMP errors and full queues: count, go on
                if e.errno not in TRANSIENT_SEND_ERRORS:
                    raise
                errors += 1
            n += 1
    return {"packets": sent, "errors": errors, "seconds": time.monotonic() - start}


def check_endpoints(topo: Topology, src: str, dst: str, planes: list[int] | None) -> list[int]:
    """Both are hosts of the lab and the planes exist; return the planes (all if None)."""
    for h in (src, dst):
        if h not in topo.nodes or topo.nodes[h].is_switch:
            raise TrafficError(
                f"{h!r} is not a host of lab {topo.lab} (hosts: {', '.join(topo.host_names())})"
            )
    planes = list(range(topo.planes)) if planes is None else planes
    for p in planes:
        if not 0 <= p < topo.planes:
            raise TrafficError(f"no plane {p}: lab {topo.lab} has planes 0..{topo.planes - 1}")
    return planes


def udp(
    topo: Topology,
    src: str,
    dst: str,
    *,
    planes: list[int] | None = None,
    source_ports: int = 4,
    seconds: float = 5.0,
    size: int = 1000,
    pps: int = 0,
) -> dict:
    """Send UDP from src to dst over each plane and several source ports.

    Returns per 'plane/sport' the packets sent and received, and totals.
    """
    planes = check_endpoints(topo, src, dst, planes)
    s_idx, d_idx = topo.nodes[src].index, topo.nodes[dst].index
    dst_addrs = [str(topo.host_address(d_idx, p)) for p in range(topo.planes)]
    pairs = [
        (p, str(topo.host_address(s_idx, p)), dst_addrs[p], FIRST_SOURCE_PORT + i)
        for p in planes
        for i in range(source_ports)
    ]
    socks = _bind_receivers(topo.netns(dst), dst_addrs)
    try:
        receiver = netns.start_in(topo.netns(dst), _receive, socks, seconds + 0.5)
    finally:
        for _, s in socks:
            s.close()  # the child has its own copies
    try:
        sent = netns.run_in(topo.netns(src), _send, pairs, seconds, size, pps, timeout=seconds + 30)
        received = receiver.result(timeout=seconds + 30)
    except (RuntimeError, TimeoutError) as e:
        raise TrafficError(f"traffic {src} -> {dst} failed: {e}") from None
    flows = []
    for key, n_sent in sent["packets"].items():
        plane, sport = (int(x) for x in key.split("/"))
        n_recv = received["packets"].get(key, 0)
        flows.append(
            {
                "plane": plane,
                "sport": sport,
                "sent": n_sent,
                "received": n_recv,
                "bytes": received["bytes"].get(key, 0),
            }
        )
    total_sent = sum(f["sent"] for f in flows)
    total_recv = sum(f["received"] for f in flows)
    return {
        "src": src,
        "dst": dst,
        "seconds": sent["seconds"],
        "size": size,
        "sent": total_sent,
        "received": total_recv,
        "send_errors": sent["errors"],
        "goodput_bps": 8 * sum(f["bytes"] for f in flows) / max(sent["seconds"], 1e-9),
        "flows": flows,
    }


def ping(
    topo: Topology, src: str, dst: str, plane: int, count: int = 3, interval: float = 0.2
) -> dict:
    """ICMP echo from src's port on `plane` to dst's address on that plane."""
    check_endpoints(topo, src, dst, [plane])
    s_idx, d_idx = topo.nodes[src].index, topo.nodes[dst].index
    target = str(topo.host_address(d_idx, plane))
    cmd = [
        "ping",
        "-n",
        "-q",
        "-c",
        str(count),
        "-i",
        str(interval),
        "-W",
        "1",
        "-I",
        f"eth{plane}",
        target,
    ]
    ns = topo.netns(src)
    netns.require_setns()  # the preexec_fn below would fail with no reason given
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=count * 2 + 5,
        preexec_fn=lambda: netns.enter_for_good(ns),
    )
    received = 0
    rtt = None
    for line in proc.stdout.splitlines():
        if "received" in line:
            received = int(line.split(",")[1].split()[0])
        if line.startswith("rtt") or line.startswith("round-trip"):
            rtt = float(line.split("=")[1].split("/")[1])
    return {
        "src": src,
        "dst": dst,
        "plane": plane,
        "address": target,
        "sent": count,
        "received": received,
        "rtt_avg_ms": rtt,
        "source": str(topo.host_address(s_idx, plane)),
    }
