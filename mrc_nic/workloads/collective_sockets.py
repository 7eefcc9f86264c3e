"""The ring all-reduce's kernel peer: TCP or MPTCP sockets, one process per host.

socket_ring runs the schedule of mrc_nic.workloads.collective (ring_schedule,
the same barrier per step) with a TCP connection per ring edge on one plane,
or MPTCP with one subflow per plane: what a collective over kernel sockets
gets. Each host's process (host_main) runs inside the host's namespace
(mrc_nic.workloads.hostprocs).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from mrc_nic.workloads import hostprocs
from mrc_nic.workloads.collective import (
    Event,
    EventTimer,
    JobResult,
    Send,
    StepEvent,
    StepFailed,
    StepResult,
    ring_edges,
    ring_schedule,
    run_steps,
)

# ---- the kernel peer: one process per host -----------------------------------------------------
PROTOS = ("tcp", "mptcp")
IO_BUF = 1 << 20
IO_TIMEOUT_S = 0.1  # socket calls wake up this often to check the deadline
START_TIMEOUT_S = 20.0  # every host process listening and connected


def socket_ring(
    lab_or_topo,
    hosts: Sequence[str],
    total: int,
    *,
    proto: str = "tcp",
    plane: int = 0,
    limit_s: float = 600.0,
    events: Iterable[Event] = (),
    step_events: Iterable[StepEvent] = (),
    on_step: Callable[[StepResult], None] | None = None,
) -> JobResult:
    """The same all-reduce over kernel sockets: a process per host in its
    namespace (hostprocs.HostProc), connected to the
    next host on `plane`'s addresses (MPTCP: the first subflow there, one more
    per plane the next host announces; mrc_nic.workloads.peers.mptcp_setup), driven
    step by step by this process through its stdin, each step ending when
    every host has received its chunk. Every host process is ended, by pid,
    when the job ends or its time limit passes."""
    from mrc_nic.workloads import peers

    if proto not in PROTOS:
        raise ValueError(f"proto must be one of {', '.join(PROTOS)}, not {proto!r}")
    topo = peers.resolve(lab_or_topo)
    hosts = list(hosts)
    n = len(hosts)
    if not 0 <= plane < topo.planes:
        raise ValueError(f"no plane {plane}: the lab has planes 0..{topo.planes - 1}")
    if proto == "mptcp":
        for src, dst in ring_edges(hosts):
            peers.mptcp_setup(topo, src, dst)
    schedule = ring_schedule(n, total)
    addr = [str(topo.host_address(topo.nodes[h].index, plane)) for h in hosts]
    job = JobResult(proto, hosts, total, len(schedule), limit_s)
    job.detail = {"plane": plane}
    procs: list[hostprocs.HostProc] = []
    timer = EventTimer(events, step_events)
    try:
        _start_ring(procs, topo, hosts, proto, addr, schedule)

        def run_step(step: list[Send], start: float, deadline: float) -> tuple[list[dict], float]:
            for p in procs:
                p.tell({"go": step[0].step, "deadline_ns": int(deadline * 1e9)})
            try:
                lines = hostprocs.gather(procs, "step", deadline)
            except (TimeoutError, RuntimeError) as e:  # the limit, or a host that gave up
                raise StepFailed(str(e)) from None
            edges = [
                {
                    "src": t.src,
                    "dst": t.dst,
                    "chunk": t.chunk,
                    "size": t.size,
                    "bytes": lines[t.dst]["received"],
                    "seconds": round((lines[t.dst]["recv_done_ns"] / 1e9) - start, 6),
                }
                for t in step
            ]
            return edges, max(ln["recv_done_ns"] for ln in lines) / 1e9

        run_steps(job, schedule, timer, run_step, on_step)
        if job.completed:
            _end_ring(procs, job)
    except (TimeoutError, RuntimeError) as e:
        job.error = job.error or str(e)
    finally:
        job.events = timer.stop()
        job.detail["stderr"] = hostprocs.end_all(procs)
    return job


def _start_ring(procs: list, topo, hosts: list[str], proto: str, addr: list[str], schedule) -> None:
    """A host process per host (appended to procs as it starts), each connected
    to the next host of the ring; raises TimeoutError or RuntimeError if not."""
    from mrc_nic.workloads.peers import PORT_BASE, PORT_SPAN

    n = len(hosts)
    port = PORT_BASE + (os.getpid() * 31) % PORT_SPAN
    for i, h in enumerate(hosts):
        args = {
            "proto": proto,
            "addr": addr[i],
            "next": addr[(i + 1) % n],
            "port": port,
            "sends": [step[i].size for step in schedule],
            "recvs": [step[(i - 1) % n].size for step in schedule],
        }
        procs.append(hostprocs.HostProc(topo.netns(h), __name__, args))
    setup_deadline = time.monotonic() + START_TIMEOUT_S
    ready = hostprocs.gather(procs, "ready", setup_deadline)
    for i, p in enumerate(procs):
        p.tell({"next_port": ready[(i + 1) % n]["ready"]})
    hostprocs.gather(procs, "connected", setup_deadline)


def _end_ring(procs: list, job: JobResult) -> None:
    """A completed job's end: each host's retransmits and subflows into job.detail."""
    for p in procs:
        p.tell({"end": True})
    try:
        ends = hostprocs.gather(procs, "done", time.monotonic() + 10)
        job.detail["retransmits"] = sum(e.get("retrans") or 0 for e in ends)
        job.detail["subflows"] = [e.get("subflows") for e in ends]
        for p in procs:
            p.tell({"close": True})
    except (TimeoutError, RuntimeError) as e:  # the job's figures stand
        job.detail["end_error"] = str(e)


# ---- the host process (runs inside a host's namespace) -------------------------------------------
class _Deadline(Exception):
    pass


def _send_n(sock: socket.socket, n: int, deadline_ns: int, out: dict) -> None:
    view = memoryview(bytes(min(IO_BUF, max(1, n))))
    left = n
    try:
        while left:
            if time.monotonic_ns() > deadline_ns:
                raise _Deadline("time limit")
            try:
                left -= sock.send(view[: min(left, len(view))])
            except TimeoutError:
                continue
    except BaseException as e:
        out["error"] = f"send: {type(e).__name__}: {e}"
    out["sent"] = n - left
    out["send_done_ns"] = time.monotonic_ns()


def _recv_n(sock: socket.socket, n: int, deadline_ns: int, buf: bytearray) -> int:
    got = 0
    while got < n:
        if time.monotonic_ns() > deadline_ns:
            raise _Deadline("time limit")
        try:
            k = sock.recv_into(buf, min(len(buf), n - got))
        except TimeoutError:
            continue
        if not k:
            raise ConnectionError(f"end of stream after {got} of {n} bytes")
        got += k
    return got


def _tcp_retrans(sock: socket.socket, proto: str) -> int | None:
    from mrc_nic.workloads import peers

    with contextlib.suppress(OSError):
        if proto == "mptcp":
            return sum(f.get("total_retrans", 0) for f in peers.subflow_info(sock))
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, peers.TCPI_SIZE)
        off, fmt = peers.TCPI["total_retrans"]
        return struct.unpack_from("=" + fmt, info, off)[0]
    return None


def host_main(args: dict) -> None:
    """One host of the socket ring: listen, connect to the next host, accept the
    previous one, then for each step told on stdin send its bytes to the next
    host while receiving the previous one's, and say when both are done."""
    from mrc_nic.workloads import peers

    proto = args["proto"]
    lst = peers.stream_socket(proto)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = args["port"]
    for attempt in range(50):
        try:
            lst.bind(("0.0.0.0" if proto == "mptcp" else args["addr"], port))
            break
        except OSError:
            if attempt == 49:
                raise
            port += 1
    lst.listen(1)
    hostprocs.say({"ready": port})
    nxt = peers.stream_socket(proto)
    nxt.bind((args["addr"], 0))
    nxt.settimeout(START_TIMEOUT_S)
    nxt.connect((args["next"], hostprocs.hear()["next_port"]))
    lst.settimeout(START_TIMEOUT_S)
    prev, _ = lst.accept()  # MPTCP: the listener stays open for the joins
    for s in (nxt, prev):
        s.settimeout(IO_TIMEOUT_S)
    hostprocs.say({"connected": True})
    buf = bytearray(IO_BUF)
    try:
        for sends, recvs in zip(args["sends"], args["recvs"], strict=True):
            go = hostprocs.hear()
            deadline_ns = go["deadline_ns"]
            start = time.monotonic_ns()
            out: dict = {}
            sender = threading.Thread(target=_send_n, args=(nxt, sends, deadline_ns, out))
            sender.start()
            try:
                received = _recv_n(prev, recvs, deadline_ns, buf)
                recv_done = time.monotonic_ns()
            finally:
                sender.join()
            if "error" in out:
                raise RuntimeError(out["error"])
            hostprocs.say(
                {
                    "step": go["go"],
                    "start_ns": start,
                    "recv_done_ns": recv_done,
                    "send_done_ns": out["send_done_ns"],
                    "received": received,
                    "sent": out["sent"],
                }
            )
        hostprocs.hear()  # {"end": true}
        retrans = _tcp_retrans(nxt, proto)
        subflows = len(peers.subflow_info(nxt)) if proto == "mptcp" else 1
        hostprocs.say({"done": True, "retrans": retrans, "subflows": subflows})
        with contextlib.suppress(EOFError):
            hostprocs.hear()  # every host has said done: the connections may go
    finally:
        for s in (nxt, prev, lst):
            peers.abort(s)
