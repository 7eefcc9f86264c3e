"""Real kernel peers inside a lab: MPTCP over every plane, and single-path TCP.

mrc-nic is measured against what the Linux kernel does with the same fabric,
in the same run (docs/design.md). A peer is a bulk stream between two
hosts of a lab: a sender in the source host's namespace writes as fast as the
kernel takes data for `seconds`, a receiver in the destination's namespace
reads it and counts the bytes delivered to the application into fixed time
bins of CLOCK_MONOTONIC (1 ms, 10 ms, ...), which every namespace shares.
The kernel does the per-packet work; the two processes only move buffers.

- proto="mptcp": IPPROTO_MPTCP sockets (Debian's iperf3 3.12 has no --mptcp
  and mptcpize is not installed). The receiver's host announces each of its
  plane addresses (`ip mptcp endpoint add ADDR dev ethP signal`) and both
  hosts accept them (`ip mptcp limits set subflows 8 add_addr_accepted 8`),
  so the sender opens one subflow per plane: the initial one on `plane`, one
  per announced address on the others, each from its own plane's address
  (hosts see every plane's /24 as on-link). `subflow` endpoints at the sender
  do not work in this fabric: the kernel opens them towards the receiver's
  initial address, which lives on another plane, and they stay in SYN-SENT.
- proto="tcp": plain TCP on one plane (`plane`).

The parent (run_stream) starts both ends with `ip netns exec` (each a Python
process running this module), fixes t = 0 a little in the future so that the
connection and its subflows are up by then, and runs the caller's events
(e.g. a fault) at their times while the stream flows. Every part is bounded
in time, and only the two processes started here are ever ended, by pid.

The result has the timeline, goodput over [0, seconds), the longest interval
without a delivered byte (from the receiver's own timestamps, not the bins),
and the time back to full rate after the first event (`analyse`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mrc_nic import resources
from mrc_nic.kernel.fdwait import readable

IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP = 284
MPTCP_INFO, MPTCP_TCPINFO, MPTCP_SUBFLOW_ADDRS = 1, 2, 3
PROTOS = ("mptcp", "tcp")
MPTCP_LIMITS = {"subflows": 8, "add_addr_accepted": 8}

RECV_BUF = 64 * 1024  # per read: 0.13 ms of 4 Gbit/s, well inside a 1 ms bin
SEND_BUF = 256 * 1024  # per send() call
WARMUP_S = 0.4  # connect + MP_JOINs before t = 0
DRAIN_S = 2.0  # after `seconds`: the sender's queued bytes, then EOF
START_TIMEOUT_S = 10.0  # the receiver listening
PORT_BASE, PORT_SPAN = 20000, 20000


class PeerError(RuntimeError):
    """A peer run could not be made or gave no result; the message says why."""


# ---- results -----------------------------------------------------------------
@dataclass
class StreamResult:
    proto: str
    src: str
    dst: str
    plane: int  # the initial subflow's (mptcp) or the only (tcp) plane
    seconds: float
    bin_s: float
    bins: list[int]  # bytes delivered to the receiving application per bin; bin 0 starts at t = 0
    bytes_window: int  # delivered in [0, seconds)
    bytes_total: int  # delivered in all, drain included
    goodput_bps: float  # bytes_window * 8 / seconds
    first_byte_s: float | None  # first delivery, from t = 0
    longest_gap_s: float  # longest interval in [first byte, seconds) with no byte delivered
    gap_start_s: float | None
    eof: bool  # the receiver saw the sender's end of stream before its deadline
    sent_bytes: int
    subflows: list[dict] = field(default_factory=list)  # the sender's, at the end of sending
    plane_bytes: dict[int, int] | None = None  # src -> its T0 per plane, lab BPF counters
    events: list[dict] = field(default_factory=list)
    fault_s: float | None = None  # when the first event had returned (in force)
    baseline_bps: float | None = None  # mean rate before fault_s
    full_rate_bps: float | None = None  # what "back to full rate" means
    recovery_s: float | None = None  # from fault_s back to full rate; None: never, or no event
    errors: list[str] = field(default_factory=list)

    def timeline(self) -> list[tuple[float, float]]:
        """(bin start in s, Gbit/s) for every bin."""
        return [(i * self.bin_s, b * 8 / self.bin_s / 1e9) for i, b in enumerate(self.bins)]

    def rate_between(self, t0: float, t1: float) -> float:
        """Mean delivered bits/s over [t0, t1) (whole bins)."""
        return window_rate(self.bins, self.bin_s, t0, t1)

    def analyse(
        self,
        fault_s: float | None = None,
        *,
        full_rate_bps: float | None = None,
        full_fraction: float = 1.0,
        frac: float = 0.9,
        window_s: float | None = None,
        hold: int = 3,
    ) -> StreamResult:
        """(Re)compute baseline, full rate and recovery around `fault_s` (default:
        the first event's). Full rate: `full_rate_bps`, else the pre-fault
        baseline x `full_fraction` (0.75 when one of 4 planes stays cut)."""
        fault_s = self.fault_s if fault_s is None else fault_s
        self.fault_s = fault_s
        if fault_s is None:
            return self
        self.baseline_bps = baseline_rate(self.bins, self.bin_s, fault_s)
        self.full_rate_bps = (
            full_rate_bps if full_rate_bps is not None else self.baseline_bps * full_fraction
        )
        self.recovery_s = recovery_time(
            self.bins[: round(self.seconds / self.bin_s)],
            self.bin_s,
            fault_s,
            self.full_rate_bps,
            frac=frac,
            window_s=window_s,
            hold=hold,
        )
        return self

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.plane_bytes is not None:
            out["plane_bytes"] = {str(k): v for k, v in self.plane_bytes.items()}
        return out

    def summary(self) -> str:
        gap = f"{self.longest_gap_s * 1e3:.1f} ms"
        if self.gap_start_s is not None:
            gap += f" at {self.gap_start_s:.3f} s"
        rec = "-" if self.recovery_s is None else f"{self.recovery_s * 1e3:.0f} ms"
        return (
            f"{self.proto} {self.src}->{self.dst}: {self.goodput_bps / 1e9:.3f} Gbit/s over "
            f"{self.seconds:g} s, {len(self.subflows) or 1} subflow(s), longest gap {gap}, "
            f"back to full rate {rec}"
        )


# ---- analysis (pure) ---------------------------------------------------------
def window_rate(bins: Sequence[int], bin_s: float, t0: float, t1: float) -> float:
    i0, i1 = max(0, round(t0 / bin_s)), min(len(bins), round(t1 / bin_s))
    if i1 <= i0:
        return 0.0
    return sum(bins[i0:i1]) * 8 / ((i1 - i0) * bin_s)


def baseline_rate(bins: Sequence[int], bin_s: float, fault_s: float) -> float:
    """Mean rate before the fault, skipping the start (slow start, first joins)."""
    skip = min(0.2, fault_s / 2)
    return window_rate(bins, bin_s, skip, fault_s)


def longest_zero_run(bins: Sequence[int], bin_s: float) -> tuple[float, float | None]:
    """(length in s, start in s) of the longest run of empty bins after the
    first non-empty one: the gap as the bins see it (to a bin's width)."""
    best, best_at, run, at, seen = 0, None, 0, 0, False
    for i, b in enumerate(bins):
        if b:
            seen, run = True, 0
        elif seen:
            if run == 0:
                at = i
            run += 1
            if run > best:
                best, best_at = run, at
    return best * bin_s, (best_at * bin_s if best_at is not None else None)


def recovery_time(
    bins: Sequence[int],
    bin_s: float,
    fault_s: float,
    full_rate_bps: float,
    *,
    frac: float = 0.9,
    window_s: float | None = None,
    hold: int = 3,
) -> float | None:
    """Seconds from `fault_s` until the rate is back to `frac` x `full_rate_bps`
    and stays there for `hold` consecutive windows of `window_s` (default:
    10 bins, at least 50 ms). Holding matters: the in-order bytes held back by
    a stalled subflow are delivered in one burst when its hole is filled,
    which alone would look like full rate. None: not back before the end."""
    if full_rate_bps <= 0:
        return None
    window_s = window_s or max(10 * bin_s, 0.05)
    per = max(1, round(window_s / bin_s))
    need = frac * full_rate_bps * per * bin_s / 8  # bytes per window
    start = max(0, int(fault_s / bin_s))
    for i in range(start, len(bins) - per * hold + 1):
        if all(sum(bins[i + k * per : i + (k + 1) * per]) >= need for k in range(hold)):
            return max(0.0, i * bin_s - fault_s)
    return None


# ---- lab plumbing ------------------------------------------------------------
def resolve(lab_or_topo) -> Any:
    """A Topology from a lab name (which must be up) or a Topology."""
    if isinstance(lab_or_topo, str):
        from mrc_nic.lab.state import open_lab

        return open_lab(lab_or_topo)[1]
    return lab_or_topo


def _ip(ns: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "-n", ns, *args], capture_output=True, text=True, timeout=10, check=False
    )


def mptcp_setup(topo, src: str, dst: str) -> list[str]:
    """Limits on both hosts, and every plane address of `dst` announced
    (signal), so that `src` opens one subflow per plane. Idempotent: only what
    is missing is added. Touches the two hosts' namespaces only; the lab's
    `down` removes it with them. Returns the commands run."""
    done = []
    limits = [str(x) for kv in MPTCP_LIMITS.items() for x in kv]
    for host in (src, dst):
        ns = topo.netns(host)
        proc = _ip(ns, "mptcp", "limits", "set", *limits)
        if proc.returncode:
            raise PeerError(f"ip -n {ns} mptcp limits set: {proc.stderr.strip()}")
        done.append(f"ip -n {ns} mptcp limits set {' '.join(limits)}")
    ns = topo.netns(dst)
    shown = _ip(ns, "-j", "mptcp", "endpoint", "show")
    have = {e.get("address") for e in json.loads(shown.stdout or "[]")}
    index = topo.nodes[dst].index
    for p in range(topo.planes):
        addr = str(topo.host_address(index, p))
        if addr in have:
            continue
        cmd = ("mptcp", "endpoint", "add", addr, "dev", f"eth{p}", "signal")
        proc = _ip(ns, *cmd)
        if proc.returncode:
            raise PeerError(f"ip -n {ns} {' '.join(cmd)}: {proc.stderr.strip()}")
        done.append(f"ip -n {ns} {' '.join(cmd)}")
    return done


def _plane_points(topo, src: str) -> dict[int, tuple[int, int]]:
    """(port_id, hook) where src's traffic into each plane is counted."""
    from mrc_nic.fabric import faults

    out = {}
    for p in range(topo.planes):
        link = topo.host_port_link(src, f"eth{p}")
        out[p] = faults.enforcement_points(link, "up")[0]
    return out


class _PlaneCounter:
    """Bytes src sent into each plane, from the switch ports' BPF counters."""

    def __init__(self, topo, src: str) -> None:
        from mrc_nic.observe.port_table import PortCounterTable

        self.points = _plane_points(topo, src)
        self.table = PortCounterTable(topo.lab)
        self.before = self._read()

    def _read(self) -> dict[int, int]:
        self.table.read()
        return {p: self.table.as_dict(*pt)["bytes"] for p, pt in self.points.items()}

    def delta(self) -> dict[int, int]:
        after = self._read()
        self.table.close()
        return {p: after[p] - self.before[p] for p in after}


def fault_event(lab: str, target: str, mode: str, **spec) -> Callable[[], dict]:
    """An event for run_stream: put a fault in force (faults.apply, what
    `mrc-nic fail` does, without starting a CLI process at that moment).
    `target` as the CLI takes it: 'plane 2', 'h0.eth1', 'p1.t0a-h0'.
    Returns the fault's id and target."""

    def apply() -> dict:
        from mrc_nic.fabric import faults

        fault = faults.apply(lab, tuple(target.split()), faults.FaultSpec(mode=mode, **spec))
        return {"fault_id": fault["id"], "target": fault["target"], "mode": mode}

    apply.__name__ = f"fail {target} {mode}"
    return apply


def heal_event(lab: str, ids: list[int] | None = None) -> Callable[[], dict]:
    """An event that heals faults by id (None: every fault of the lab)."""

    def heal() -> dict:
        from mrc_nic.fabric import faults

        return {"healed": [f["id"] for f in faults.heal(lab, ids)]}

    heal.__name__ = "heal"
    return heal


# ---- the parent --------------------------------------------------------------
_port_seq = [0]


def _next_port() -> int:
    _port_seq[0] += 1
    return PORT_BASE + (os.getpid() * 97 + _port_seq[0] * 13) % PORT_SPAN


def _start(ns: str, role: str, args: dict) -> subprocess.Popen:
    env = resources.python_path_env()
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-m",
            "mrc_nic.workloads.peers",
            role,
            json.dumps(args),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _end(proc: subprocess.Popen | None) -> None:
    """End a process this module started, by its pid, if it still runs."""
    if proc is None:
        return
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def _ready_line(proc: subprocess.Popen, timeout: float) -> tuple[dict, bytes]:
    """The receiver's first line ({"ready": ..., "port": ...}) and what followed it."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if not readable([fd], left):
            raise PeerError(f"the receiver gave no sign of listening in {timeout:g} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            err = proc.stderr.read().decode(errors="replace").strip()
            raise PeerError(f"the receiver ended before listening: {err[-500:]}")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    ready = json.loads(line)
    if "error" in ready:
        raise PeerError(f"the receiver: {ready['error']}")
    return ready, rest


def _result(proc: subprocess.Popen, role: str, timeout: float, before: bytes = b"") -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PeerError(f"the {role} did not end within {timeout:g} s") from None
    out = before + out
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise PeerError(
            f"the {role} gave no result (exit {proc.returncode}): "
            f"{err.decode(errors='replace').strip()[-500:]}"
        )
    reply = json.loads(lines[-1])
    if "error" in reply:
        raise PeerError(f"the {role}: {reply['error']}")
    return reply


def run_stream(
    lab_or_topo,
    src: str = "h0",
    dst: str = "h1",
    proto: str = "mptcp",
    seconds: float = 5.0,
    bin_s: float = 0.01,
    *,
    plane: int = 0,
    events: Iterable[tuple[float, Callable[[], Any]]] = (),
    on_start: Callable[[], Any] | None = None,
    warmup_s: float = WARMUP_S,
    drain_s: float = DRAIN_S,
    configure: bool = True,
    count_planes: bool = True,
    full_fraction: float = 1.0,
) -> StreamResult:
    """Stream from `src` to `dst` for `seconds` and return what the receiver saw.

    events: (t, fn) pairs; the parent calls fn() when t seconds of the stream
    have passed (t = 0 is when the sender starts writing), in order, while the
    stream runs; each call's times and return value (or error) are kept in
    `events` of the result. on_start: the same as an event at t = 0.
    fault_event() and heal_event() make events that `mrc-nic fail` / `heal`.
    The first event is taken as the fault for `recovery_s` (StreamResult.analyse
    recomputes it with other choices). Bounded: the whole call ends within
    warmup_s + seconds + drain_s + about 20 s, whatever the network does.
    """
    topo = resolve(lab_or_topo)
    _check_stream(topo, src, dst, proto, seconds, bin_s, plane)
    plan = sorted(events, key=lambda e: e[0])
    if on_start is not None:
        plan.insert(0, (0.0, on_start))
    if proto == "mptcp" and configure:
        mptcp_setup(topo, src, dst)
    src_addr = str(topo.host_address(topo.nodes[src].index, plane))
    dst_addr = str(topo.host_address(topo.nodes[dst].index, plane))
    counter = _plane_counter(topo, src) if count_planes else None
    receiver = sender = None
    log: list[dict] = []
    errors: list[str] = []
    try:
        receiver = _start(
            topo.netns(dst),
            "recv",
            {
                "proto": proto,
                "addr": dst_addr,
                "port": _next_port(),
                "seconds": seconds,
                "bin_s": bin_s,
                "accept_s": START_TIMEOUT_S + warmup_s,
                "drain_s": drain_s,
            },
        )
        ready, rest = _ready_line(receiver, START_TIMEOUT_S)
        start_ns = time.monotonic_ns() + int(warmup_s * 1e9)
        common = {"start_ns": start_ns, "seconds": seconds, "drain_s": drain_s}
        sender = _start(
            topo.netns(src),
            "send",
            {**common, "proto": proto, "src": src_addr, "dst": dst_addr, "port": ready["port"]},
        )
        log += _call_events(plan, start_ns, errors)
        left = start_ns / 1e9 + seconds + drain_s - time.monotonic()
        sent = _result(sender, "sender", max(0.0, left) + 15)
        got = _result(receiver, "receiver", 15, rest)
    finally:
        _end(sender)
        _end(receiver)
    plane_bytes = counter.delta() if counter is not None else None
    errors += [f"sender: {e}" for e in sent.get("errors", [])]
    errors += [f"receiver: {e}" for e in got.get("errors", [])]
    return _stream_result(
        sent, got, log, errors, plane_bytes, full_fraction,
        proto=proto, src=src, dst=dst, plane=plane, seconds=seconds, bin_s=bin_s,
    )  # fmt: skip


def _plane_counter(topo, src: str):
    """Per-plane byte counters of src's ports; None on a lab without pinned counters."""
    try:
        return _PlaneCounter(topo, src)
    except Exception:  # a lab without pinned counters: no per-plane figures
        return None


def _stream_result(sent, got, log, errors, plane_bytes, full_fraction, **shape) -> StreamResult:
    """The sender's and receiver's reports as a StreamResult, analysed from its first event."""
    seconds = shape["seconds"]
    res = StreamResult(
        **shape,
        bins=got["bins"],
        bytes_window=got["bytes_window"],
        bytes_total=got["bytes_total"],
        goodput_bps=got["bytes_window"] * 8 / seconds,
        first_byte_s=got["first_byte_s"],
        longest_gap_s=got["longest_gap_s"],
        gap_start_s=got["gap_start_s"],
        eof=got["eof"],
        sent_bytes=sent["bytes"],
        subflows=sent.get("subflows", []),
        plane_bytes=plane_bytes,
        events=log,
        errors=errors,
    )
    if log:
        res.analyse(log[0]["done_s"], full_fraction=full_fraction)
    return res


def _check_stream(topo, src: str, dst: str, proto: str, seconds: float, bin_s: float, plane: int):
    """run_stream's arguments, checked before anything starts (ValueError: which is wrong)."""
    if proto not in PROTOS:
        raise ValueError(f"proto must be one of {', '.join(PROTOS)}, not {proto!r}")
    if seconds <= 0 or bin_s <= 0 or bin_s > seconds:
        raise ValueError("need seconds > 0 and 0 < bin_s <= seconds")
    for host in (src, dst):
        if host not in topo.host_names():
            raise ValueError(f"no host {host!r} in lab {topo.lab!r}")
    if src == dst:
        raise ValueError("source and destination must be different hosts")
    if not 0 <= plane < topo.planes:
        raise ValueError(f"no plane {plane}: the lab has planes 0..{topo.planes - 1}")


def _call_events(plan, start_ns: int, errors: list[str]) -> list[dict]:
    """Call each (t, fn) of the plan when t seconds of the stream have passed;
    each call's times and result (or error, also added to errors) as the log."""
    log = []
    for t, fn in plan:
        wait = start_ns / 1e9 + t - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        called = (time.monotonic_ns() - start_ns) / 1e9
        entry: dict[str, Any] = {"t": t, "name": getattr(fn, "__name__", repr(fn))}
        try:
            entry["result"] = _jsonable(fn())
        except Exception as e:  # kept, and the stream goes on: the caller decides
            entry["error"] = f"{type(e).__name__}: {e}"
            errors.append(f"event at {t:g} s ({entry['name']}): {entry['error']}")
        entry["called_s"] = round(called, 6)
        entry["done_s"] = round((time.monotonic_ns() - start_ns) / 1e9, 6)
        log.append(entry)
    return log


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


# ---- the two ends (run inside the hosts' namespaces) ---------------------------
def stream_socket(proto: str) -> socket.socket:
    """An IPv4 stream socket: IPPROTO_MPTCP for proto "mptcp", else TCP."""
    return socket.socket(
        socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP if proto == "mptcp" else 0
    )


def abort(sock: socket.socket) -> None:
    """Close with a reset: nothing of ours lingers in the kernel after the deadline."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _listen(proto: str, addr: str, port: int) -> socket.socket:
    """A listening socket on port (or the next free one of the span), said on stdout
    as {"ready": true, "port": PORT}."""
    lst = stream_socket(proto)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # MPTCP: on every address, for the MP_JOINs to the announced ones.
    host = "0.0.0.0" if proto == "mptcp" else addr
    for attempt in range(50):
        try:
            lst.bind((host, port))
            break
        except OSError:
            if attempt == 49:
                raise
            port = PORT_BASE + (port - PORT_BASE + 1) % PORT_SPAN
    lst.listen(1)
    print(json.dumps({"ready": True, "port": port}), flush=True)
    return lst


def _start_time(conn: socket.socket, wait_s: float) -> int:
    """The stream's t = 0 (CLOCK_MONOTONIC ns), the sender's first 8 bytes."""
    head = b""
    hard = time.monotonic() + wait_s
    while len(head) < 8 and time.monotonic() < hard:
        with contextlib.suppress(TimeoutError):
            chunk = conn.recv(8 - len(head))
            if not chunk:
                break
            head += chunk
    if len(head) < 8:
        abort(conn)
        raise RuntimeError("the sender sent no start time")
    return struct.unpack("!Q", head)[0]


def receiver(args: dict) -> dict:
    """Listen, print {"ready": port}, accept one stream and count its bytes into bins
    of CLOCK_MONOTONIC from t = 0 (the sender's start, told in its first 8 bytes)."""
    proto, bin_ns = args["proto"], int(args["bin_s"] * 1e9)
    lst = _listen(proto, args["addr"], args["port"])
    lst.settimeout(args["accept_s"])
    conn, _ = lst.accept()  # the listener stays open: MP_JOINs of later subflows reach it
    conn.settimeout(0.05)
    start_ns = _start_time(conn, args["accept_s"])
    end_ns = start_ns + int(args["seconds"] * 1e9)
    hard_ns = end_ns + int(args["drain_s"] * 1e9)
    n_window = -(-(end_ns - start_ns) // bin_ns)
    bins = [0] * n_window
    buf = bytearray(RECV_BUF)
    total = window = 0
    first = last = None
    gap, gap_at = 0, None
    eof = False
    errors = []
    mono = time.monotonic_ns
    recv_into = conn.recv_into
    while True:
        now = mono()
        if now >= hard_ns:
            break
        try:
            n = recv_into(buf)
        except TimeoutError:
            continue
        except ConnectionError as e:  # the sender gave up (its deadline) or broke
            errors.append(f"{type(e).__name__} at {(mono() - start_ns) / 1e9:.3f} s")
            break
        now = mono()
        if not n:
            eof = True
            break
        total += n
        i = (now - start_ns) // bin_ns
        if i < 0:
            i = 0
        while i >= len(bins):
            bins.append(0)
        bins[i] += n
        if now < end_ns:
            window += n
            if first is None:
                first = now
            elif now - last > gap:
                gap, gap_at = now - last, last
            last = now
    if last is not None and end_ns - last > gap:
        gap, gap_at = end_ns - last, last  # the stream stopped before the end
    if eof:
        conn.close()
    else:
        abort(conn)
        errors.append("no end of stream before the deadline")
    lst.close()
    return {
        "bins": bins,
        "bytes_window": window,
        "bytes_total": total,
        "first_byte_s": (first - start_ns) / 1e9 if first is not None else None,
        "longest_gap_s": gap / 1e9,
        "gap_start_s": (gap_at - start_ns) / 1e9 if gap_at is not None else None,
        "eof": eof,
        "errors": errors,
    }


def sender(args: dict) -> dict:
    """Connect (before t = 0), send the start time, then write from t = 0 to
    t = seconds; shut down and wait for the receiver's close, bounded."""
    proto = args["proto"]
    start_ns = args["start_ns"]
    end_ns = start_ns + int(args["seconds"] * 1e9)
    hard_ns = end_ns + int(args["drain_s"] * 1e9)
    errors = []
    sock = stream_socket(proto)
    sock.bind((args["src"], 0))
    sock.settimeout(max(1.0, (start_ns - time.monotonic_ns()) / 1e9 + 5))
    sock.connect((args["dst"], args["port"]))
    sock.sendall(struct.pack("!Q", start_ns))
    wait = (start_ns - time.monotonic_ns()) / 1e9
    if wait > 0:
        time.sleep(wait)
    late = (time.monotonic_ns() - start_ns) / 1e9
    if late > 0.05:
        errors.append(f"started {late:.3f} s late (connect)")
    chunk = memoryview(bytes(SEND_BUF))
    sock.settimeout(0.05)
    sent = 0
    mono = time.monotonic_ns
    while mono() < end_ns:
        try:
            sent += sock.send(chunk)
        except TimeoutError:
            continue
        except ConnectionError as e:
            errors.append(f"{type(e).__name__} at {(mono() - start_ns) / 1e9:.3f} s")
            break
    subflows = subflow_info(sock) if proto == "mptcp" else []
    eof = False
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        while mono() < hard_ns:
            try:
                if not sock.recv(4096):
                    eof = True
                    break
            except TimeoutError:
                continue
    if eof:
        sock.close()
    else:
        abort(sock)
    return {"bytes": sent, "subflows": subflows, "errors": errors}


# struct mptcp_subflow_data (uapi/linux/mptcp.h): size_subflow_data, num_subflows,
# size_kernel, size_user; then num_subflows elements of size_user bytes.
_SFD = struct.Struct("=IIII")
_ADDRS_SIZE = 256  # struct mptcp_subflow_addrs: two __kernel_sockaddr_storage
TCPI_SIZE = 232  # the head of struct tcp_info this reads (up to tcpi_snd_wnd)
# Offsets in struct tcp_info (uapi/linux/tcp.h).
TCPI = {"rtt_us": (68, "I"), "total_retrans": (100, "I"), "bytes_acked": (120, "Q")}
TCPI.update({"bytes_sent": (200, "Q"), "bytes_retrans": (208, "Q")})
_libc = ctypes.CDLL(None, use_errno=True)


def _mptcp_array(sock: socket.socket, optname: int, size_user: int, n_max: int = 16) -> list:
    size = _SFD.size + size_user * n_max
    buf = ctypes.create_string_buffer(size)
    _SFD.pack_into(buf, 0, _SFD.size, 0, 0, size_user)
    optlen = ctypes.c_uint32(size)
    fd = sock.fileno()
    if _libc.getsockopt(fd, SOL_MPTCP, optname, buf, ctypes.byref(optlen)) != 0:
        return []
    _, num, size_kernel, size_user = _SFD.unpack_from(buf, 0)
    raw = buf.raw
    return [raw[_SFD.size + i * size_user :][:size_user] for i in range(min(num, n_max))]


def _sockaddr_in(raw: bytes) -> str | None:
    family = struct.unpack_from("=H", raw, 0)[0]
    if family != socket.AF_INET:
        return None
    port = struct.unpack_from("!H", raw, 2)[0]
    return f"{socket.inet_ntoa(raw[4:8])}:{port}"


def subflow_info(sock: socket.socket) -> list[dict]:
    """Each subflow of an MPTCP socket: local and remote address, and its TCP
    counters (bytes_acked, bytes_sent, bytes_retrans, ...), from the kernel
    (MPTCP_SUBFLOW_ADDRS and MPTCP_TCPINFO, both in the same subflow order)."""
    addrs = _mptcp_array(sock, MPTCP_SUBFLOW_ADDRS, _ADDRS_SIZE)
    infos = _mptcp_array(sock, MPTCP_TCPINFO, TCPI_SIZE)
    out = []
    for i, raw in enumerate(addrs):
        entry: dict[str, Any] = {
            "local": _sockaddr_in(raw[:128]),
            "remote": _sockaddr_in(raw[128:]),
        }
        if i < len(infos):
            info = infos[i]
            for name, (off, fmt) in TCPI.items():
                if off + struct.calcsize(fmt) <= len(info):
                    entry[name] = struct.unpack_from("=" + fmt, info, off)[0]
        out.append(entry)
    return out


def run_role(roles: dict[str, Callable[[dict], dict]], role: str, args_json: str) -> int:
    """One end of a peer, in a host's namespace: roles[role](args), its result
    (or its error) printed as one JSON line for the parent."""
    try:
        result = roles[role](json.loads(args_json))
    except BaseException as e:  # reported to the parent as one line
        result = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)
    return 0


def _main(argv: list[str]) -> int:
    return run_role({"recv": receiver, "send": sender}, argv[0], argv[1])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
