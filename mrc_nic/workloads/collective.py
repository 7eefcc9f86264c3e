"""Ring all-reduce among a lab's hosts: mrc-nic WRITE_WITH_IMM, or kernel TCP/MPTCP.

The ring all-reduce of S bytes on N hosts (as NCCL's ring algorithm): the
buffer is cut into N chunks; in reduce-scatter step s (s = 0 .. N-2) host r
sends chunk (r - s) mod N to host r+1, which adds it into its own copy;
after N-1 steps host r holds chunk (r + 1) mod N fully reduced. In
all-gather step s host r sends chunk (r + 1 - s) mod N, fully reduced, to
host r+1, which keeps it. 2(N-1) steps, each moving one chunk (S/N bytes)
over every edge of the ring at once; a step's sends depend on the previous
step's receives, so every step here ends when all N transfers have been
delivered (a barrier per step, which is a ring's dependency made strict).
`ring_schedule` is the schedule, `simulate` checks it by tracking which
hosts' contributions every copy of every chunk holds.

What is modelled: the schedule, the bytes on the wire and the dependency
between steps. What is not: the reduction arithmetic and the accelerator
memory (the emulator moves bytes; the adds take no time), and the overlap
of one step's tail with the next step's head that pipelined collectives
get. mrc-nic: one process per rank in its host's namespace, as NCCL's
ranks are (collective_ranks), holding a send QP to the next rank and a
receive QP from the previous one through the verbs API, made once and kept
for every step; every step is, on each ring edge, one transfer of the chunk
in WRITEs through the NIC's 64 MiB host memory, as large as it allows when
each host receives from one other (MrcRing: up to 16 MiB), each with an
immediate (the receiver's completions end its step), each step's bytes
random from its own seed so that `verify` lets the receiving rank compare
every byte placed. The peer: one process per host in its namespace with
kernel sockets, the same schedule and barrier, a TCP connection per ring
edge on one plane (what a TCP collective gets), or MPTCP with one subflow per plane.

Both runners take events, fn() called at t seconds into the job or into a
given step (a fault put in force mid-job), and a time limit: a job that has
not ended by then is stopped and reported as not finished, with the steps it
completed (and, for mrc-nic, the NIC state of the transfers still running).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

PHASES = ("reduce-scatter", "all-gather")


# ---- the schedule (pure) ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Send:
    """One transfer of a step: rank `src` sends chunk `chunk` (`size` bytes) to `dst`."""

    step: int
    phase: str
    src: int
    dst: int
    chunk: int
    size: int


def chunk_sizes(total: int, n: int) -> list[int]:
    """The N chunks of a buffer of `total` bytes: as equal as can be, the first
    ones a byte larger when N does not divide it."""
    if n < 2:
        raise ValueError(f"a ring needs at least 2 hosts, not {n}")
    if total < n:
        raise ValueError(f"an all-reduce of {total} bytes cannot be cut into {n} chunks")
    base, extra = divmod(total, n)
    return [base + (1 if c < extra else 0) for c in range(n)]


def ring_schedule(n: int, total: int) -> list[list[Send]]:
    """The 2(N-1) steps of a ring all-reduce of `total` bytes among ranks
    0..N-1 (rank r sends to r+1 mod N); each step is N sends, one per rank."""
    sizes = chunk_sizes(total, n)
    steps: list[list[Send]] = []
    for phase, first in ((PHASES[0], 0), (PHASES[1], 1)):
        for s in range(n - 1):
            step = len(steps)
            steps.append(
                [
                    Send(step, phase, r, (r + 1) % n, c, sizes[c])
                    for r in range(n)
                    for c in [(r + first - s) % n]
                ]
            )
    return steps


def simulate(n: int, schedule: Sequence[Sequence[Send]]) -> list[list[frozenset[int]]]:
    """Run a schedule on contributions: held[r][c] is the set of ranks whose
    part of chunk c rank r's copy holds (at first {r}). A reduce-scatter
    send adds the sender's set into the receiver's (a rank counted twice is
    an error: its data would be added twice); an all-gather send must carry
    a complete chunk, which replaces the receiver's. All sends of a step
    read the state before the step. Returns the final state; raises
    ValueError on a schedule that double counts or gathers a partial chunk."""
    held = [[frozenset([r]) for _ in range(n)] for r in range(n)]
    everyone = frozenset(range(n))
    for step in schedule:
        before = [row[:] for row in held]
        for t in step:
            got = before[t.src][t.chunk]
            if t.phase == PHASES[0]:
                mine = held[t.dst][t.chunk]
                if got & mine:
                    raise ValueError(
                        f"step {t.step}: rank {t.dst} would count ranks {sorted(got & mine)} "
                        f"of chunk {t.chunk} twice"
                    )
                held[t.dst][t.chunk] = mine | got
            else:
                if got != everyone:
                    raise ValueError(
                        f"step {t.step}: rank {t.src} gathers chunk {t.chunk} holding only "
                        f"ranks {sorted(got)}"
                    )
                held[t.dst][t.chunk] = got
    return held


def bytes_sent(n: int, total: int) -> list[int]:
    """What each rank sends in the whole all-reduce (and its successor
    receives): about 2(N-1)/N x S."""
    out = [0] * n
    for step in ring_schedule(n, total):
        for t in step:
            out[t.src] += t.size
    return out


def ring_edges(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """(sender, receiver) of each edge of the ring over `hosts` in that order."""
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"a host appears twice in the ring: {', '.join(hosts)}")
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]


# ---- results (shared by both runners) ------------------------------------------------------
@dataclasses.dataclass
class StepResult:
    step: int
    phase: str
    start_s: float  # from the job's start
    end_s: float  # when the last of its transfers had been delivered
    bytes: int  # all hosts together
    edges: list[dict] = dataclasses.field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclasses.dataclass
class JobResult:
    transport: str  # "mrc", "tcp", "mptcp"
    hosts: list[str]
    total_bytes: int  # the all-reduce's size S
    steps_planned: int
    limit_s: float
    completed: bool = False
    job_s: float | None = None  # from the first step's start to the last step's end
    steps: list[StepResult] = dataclasses.field(default_factory=list)
    events: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    detail: dict = dataclasses.field(default_factory=dict)

    @property
    def bytes_moved(self) -> int:
        return sum(s.bytes for s in self.steps)

    @property
    def algbw_bps(self) -> float | None:
        """NCCL's algorithm bandwidth: S / job time."""
        return self.total_bytes * 8 / self.job_s if self.completed and self.job_s else None

    @property
    def busbw_bps(self) -> float | None:
        """NCCL's bus bandwidth: algbw x 2(N-1)/N, what each host's link carried."""
        n = len(self.hosts)
        algbw = self.algbw_bps
        return algbw * 2 * (n - 1) / n if algbw is not None else None

    def progress(self) -> list[tuple[float, int]]:
        """(seconds from the start, bytes delivered so far) at each step's end."""
        out, done = [(0.0, 0)], 0
        for s in self.steps:
            done += s.bytes
            out.append((s.end_s, done))
        return out

    def summary(self) -> str:
        n = len(self.steps)
        if self.completed:
            head = f"{self.job_s:.3f} s"
        else:
            head = f"did not finish within {self.limit_s:g} s ({n}/{self.steps_planned} steps)"
        bw = self.busbw_bps
        tail = f", bus bandwidth {bw / 1e9:.3f} Gbit/s" if bw else ""
        return f"{self.transport}: {head}{tail}" + (f"; {self.error}" if self.error else "")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for d, s in zip(out["steps"], self.steps, strict=True):
            d["seconds"] = round(s.seconds, 6)
        out["bytes_moved"] = self.bytes_moved
        out["algbw_gbps"] = _gbps(self.algbw_bps)
        out["busbw_gbps"] = _gbps(self.busbw_bps)
        return out


def _gbps(bps: float | None) -> float | None:
    return round(bps / 1e9, 4) if bps is not None else None


Event = tuple[float, Callable[[], Any]]  # (t, fn): fn() at t s into the job
StepEvent = tuple[int, float, Callable[[], Any]]  # (step, t, fn): t s into that step


class EventTimer:
    """Calls each event's fn at its time, in a thread, until stopped: (t, fn)
    at t seconds after the job's start, (step, t, fn) at t seconds after that
    step's start (the same point of the job's progress, however fast the
    steps before it went). Each call's times (from the job's start) and
    result, or error, are kept; the events not reached are said."""

    def __init__(self, events: Iterable[Event] = (), step_events: Iterable[StepEvent] = ()):
        self.plan: list[tuple[int | None, float, Callable[[], Any]]] = [
            (None, t, fn) for t, fn in events
        ] + list(step_events)
        self.log: list[dict] = []
        self._anchors: dict[int | None, float] = {}
        self._cv = threading.Condition()
        self._stopped = False
        self._pending = list(self.plan)  # what the thread has not called yet
        self._thread: threading.Thread | None = None
        self.t0 = 0.0

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.anchor(None, t0)
        if self.plan:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def anchor(self, step: int | None, at: float) -> None:
        """The job (None) or a step started at `at` (time.monotonic())."""
        with self._cv:
            self._anchors[step] = at
            self._cv.notify_all()

    def _run(self) -> None:
        pending = self._pending
        while pending:
            with self._cv:
                if self._stopped:
                    return
                due = [
                    (self._anchors[k] + t, i)
                    for i, (k, t, _) in enumerate(pending)
                    if k in self._anchors
                ]
                wait = min(due)[0] - time.monotonic() if due else None
                if wait is None or wait > 0:
                    self._cv.wait(wait)
                    continue
                step, t, fn = pending.pop(min(due)[1])
            entry: dict[str, Any] = {"t": t, "name": getattr(fn, "__name__", repr(fn))}
            if step is not None:
                entry["step"] = step
            entry["called_s"] = round(time.monotonic() - self.t0, 6)
            try:
                entry["result"] = fn()
            except Exception as e:  # kept; the job goes on
                entry["error"] = f"{type(e).__name__}: {e}"
            entry["done_s"] = round(time.monotonic() - self.t0, 6)
            self.log.append(entry)

    def stop(self) -> list[dict]:
        """Stop calling; the log of every event (a second call returns it again)."""
        with self._cv:
            if self._stopped:
                return self.log
            self._stopped = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for step, t, fn in list(self._pending):
            entry = {"t": t, "name": getattr(fn, "__name__", repr(fn)), "not_reached": True}
            if step is not None:
                entry["step"] = step
            self.log.append(entry)
        return self.log


class StepFailed(Exception):
    """A step of a job did not complete; the message says why."""


def run_steps(
    job: JobResult,
    schedule: Sequence[Sequence[Send]],
    timer: EventTimer,
    run_step: Callable[[list[Send], float, float], tuple[list[dict], float]],
    on_step: Callable[[StepResult], None] | None,
) -> None:
    """Run the steps one after the other (a barrier between them) until the
    last, a step that fails, or the job's time limit; fill `job` and keep the
    events' log in it. run_step(sends, start, deadline) returns the step's
    edges and when its last transfer was delivered (time.monotonic()), or
    raises StepFailed."""
    t0 = time.monotonic()
    deadline = t0 + job.limit_s
    timer.start(t0)
    try:
        for step in schedule:
            start = time.monotonic()
            if start >= deadline:
                job.error = f"time limit reached before step {step[0].step}"
                break
            timer.anchor(step[0].step, start)
            try:
                edges, end = run_step(list(step), start, deadline)
            except StepFailed as e:
                job.error = f"step {step[0].step}: {e}"
                break
            moved = sum(e["bytes"] for e in edges)
            result = StepResult(step[0].step, step[0].phase, start - t0, end - t0, moved, edges)
            job.steps.append(result)
            if on_step is not None:
                on_step(result)
        else:
            job.completed = True
            job.job_s = job.steps[-1].end_s if job.steps else 0.0
    finally:
        job.events = timer.stop()


# ---- mrc-nic ---------------------------------------------------------------------------------
START_TIMEOUT_S = 120.0  # every rank's process up, its QPs made (a loaded machine: imports)
REPORT_GRACE_S = 10.0  # a rank stops a step at its deadline; its report may come this late


def ring_chunk(topo, total: int, n: int, qps: int = 1) -> int:
    """A ring's WRITE size: what host memory allows for its largest step
    (rdma_write.default_chunk, one transfer landing at a host at once), and
    no more than a rank's session may hold (rdma_write.session_memory): its
    send and its receive double buffers, 4 chunks per QP."""
    from mrc_nic.workloads import rdma_write

    chunk = rdma_write.default_chunk(topo, max(chunk_sizes(total, n)), qps, peers=1)
    room = rdma_write.session_memory(topo) // (4 * qps) // 1024 * 1024
    return max(1024, min(chunk, room))


class LocalRanks:
    """A ring's ranks as processes of this machine (hostprocs.HostProc), by
    host name, each rank's credit sockets (rdma_ends) one end of a socketpair
    per ring edge and QP, the other end its neighbour's. MrcRing's default;
    a cluster lab's ranks are another machine's processes (RemoteHosts of
    mrc_nic.cluster.hostparts, which has the same tell, gather, settle, end)."""

    def __init__(self, topo, args: dict[str, dict], qps: int) -> None:
        import socket

        from mrc_nic.workloads import collective_ranks, hostprocs

        hosts = list(args)
        n = len(hosts)
        self.procs: dict[str, hostprocs.HostProc] = {}
        # A credit socket per ring edge and QP: the reader tells the writer which
        # slots it has read (rdma_ends); each end goes to its own rank's process.
        pairs = [[socket.socketpair() for _ in range(qps)] for _ in range(n)]  # by sender
        try:
            for r, h in enumerate(hosts):
                send = [pairs[r][i][0].fileno() for i in range(qps)]
                recv = [pairs[(r - 1) % n][i][1].fileno() for i in range(qps)]
                self.procs[h] = hostprocs.HostProc(
                    topo.netns(h), collective_ranks.__name__,
                    {**args[h], "credit_send": send, "credit_recv": recv},
                    lab=topo.lab, host=h, pass_fds=send + recv,
                )  # fmt: skip
        except BaseException:
            self.end()
            raise
        finally:
            for row in pairs:
                for a, b in row:
                    a.close(), b.close()  # the ranks hold their own copies

    @property
    def pids(self) -> list[int]:
        return [p.proc.pid for p in self.procs.values()]

    def tell(self, host: str, message: dict) -> None:
        self.procs[host].tell(message)

    def gather(self, hosts: Sequence[str], key: str, deadline: float, value: Any = None):
        from mrc_nic.workloads import hostprocs

        return hostprocs.gather([self.procs[h] for h in hosts], key, deadline, value)

    def settle(self, deadline: float) -> None:
        """Wait, until deadline (time.monotonic()), for every process to end."""
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))

    def end(self) -> dict[str, str]:
        from mrc_nic.workloads import hostprocs

        return hostprocs.end_all(list(self.procs.values()))


class MrcRing:
    """A ring of mrc-nic ranks, one process per host in its namespace
    (collective_ranks), each with a send QP to the next host and a receive QP
    from the previous one (`qps` of each), made once and used by every step of
    every job run on it, as a collective's QPs are.

    chunk: each WRITE's size; by default what host memory allows
    (rdma_write.default_chunk) with one transfer landing at a host at once:
    in a ring each host receives from one other (peers=1: up to 16 MiB
    WRITEs on a 64 MiB host) and a rank's session may hold (ring_chunk).
    topo: the lab's (default: its state on this machine); start_ranks(args):
    the ranks' processes, given each host's collective_ranks arguments
    (default: LocalRanks, this machine's)."""

    def __init__(
        self,
        lab_name: str,
        hosts: Sequence[str],
        total: int,
        *,
        qps: int = 1,
        chunk: int | None = None,
        topo=None,
        start_ranks: Callable[[dict[str, dict]], Any] | None = None,
    ) -> None:
        self.lab, self.hosts, self.total = lab_name, list(hosts), total
        self.schedule = ring_schedule(len(self.hosts), total)
        if topo is None:
            from mrc_nic.lab.state import open_lab

            _, topo = open_lab(lab_name)
        if chunk is None:
            chunk = ring_chunk(topo, total, len(self.hosts), qps)
        self.chunk, self.qps = chunk, qps
        self.connected = False
        args = {h: {"lab": lab_name, "host": h, "chunk": chunk, "qps": qps} for h in self.hosts}
        start = start_ranks or (lambda a: LocalRanks(topo, a, qps))
        self.ranks = start(args)
        try:
            self.ends = [
                line["ready"]
                for line in self.ranks.gather(
                    self.hosts, "ready", time.monotonic() + START_TIMEOUT_S
                )
            ]
        except BaseException:
            self.close()
            raise

    def _connect(self, cc_profile: int | None) -> None:
        """Every rank's QPs to RTS (the first job's CC profile is the QPs')."""
        n = len(self.hosts)
        opts = {"mpr": None, "cc_profile": cc_profile}
        for r, h in enumerate(self.hosts):
            self.ranks.tell(
                h,
                {
                    "connect": {
                        "right_recv": self.ends[(r + 1) % n]["recv"],
                        "left_send": self.ends[(r - 1) % n]["send"],
                        # credits over TCP (ranks of several machines): where the left listens
                        "credit_left": self.ends[(r - 1) % n].get("credit"),
                        "opts": opts,
                    }
                },
            )
        self.ranks.gather(self.hosts, "connected", time.monotonic() + START_TIMEOUT_S)
        self.connected = True

    def run(
        self,
        *,
        limit_s: float = 600.0,
        verify: bool = False,
        events: Iterable[Event] = (),
        step_events: Iterable[StepEvent] = (),
        seed: int = 1,
        cc_profile: int | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> JobResult:
        """One all-reduce; events and step_events as EventTimer; cc_profile: the
        send QPs' (mrc_nic.transport.nscc.PROFILES; default the daemons', NSCC),
        set by the first job on the ring. A step whose transfers have not all
        ended by `limit_s` ends the job as not finished (the ranks move their
        send QPs to ERR), with the NIC state of the stuck ones in detail["stuck"]."""
        job = JobResult("mrc", self.hosts, self.total, len(self.schedule), limit_s)
        job.detail = {"chunk": self.chunk, "qps": self.qps, "verify": verify}
        job.detail["cc_profile"] = cc_profile
        job.detail["processes"] = self.ranks.pids
        if not self.connected:
            self._connect(cc_profile)

        def run_step(step: list[Send], start: float, deadline: float) -> tuple[list[dict], float]:
            for t in step:
                self.ranks.tell(
                    self.hosts[t.src],
                    {
                        "go": t.step,
                        "send": t.size,
                        "recv": step[(t.src - 1) % len(step)].size,
                        "seed": seed * 1000 + t.step,
                        "verify": verify,
                        "deadline_ns": int(deadline * 1e9),
                    },
                )
            try:
                lines = self.ranks.gather(self.hosts, "step", deadline + REPORT_GRACE_S)
            except (TimeoutError, RuntimeError) as e:  # a rank that ended or went silent
                raise StepFailed(str(e)) from None
            edges = [_mrc_edge(t, lines[t.dst], start, verify) for t in step]
            failed = [e for e in edges if not e["completed"]]
            if failed:
                with contextlib.suppress(TimeoutError, RuntimeError):  # where the sends stand
                    sent = self.ranks.gather(
                        self.hosts, "sent", time.monotonic() + REPORT_GRACE_S, step[0].step
                    )
                    job.detail["stuck"] = [
                        {"src": self.hosts[t.src], "dst": self.hosts[t.dst], "step": t.step,
                         **sent[t.src]["stuck"]}
                        for t in step if sent[t.src]["stuck"]
                    ]  # fmt: skip
                raise StepFailed(
                    "; ".join(
                        f"{self.hosts[e['src']]}->{self.hosts[e['dst']]}: {e['error']}"
                        for e in failed
                    )
                )
            return edges, max(ln["recv_done_ns"] for ln in lines) / 1e9

        run_steps(job, self.schedule, EventTimer(events, step_events), run_step, on_step)
        self._sends(job)
        job.detail["retransmits"] = sum(
            e.get("retransmits") or 0 for s in job.steps for e in s.edges
        )
        job.detail["timeouts"] = sum(e.get("timeouts") or 0 for s in job.steps for e in s.edges)
        return job

    def _sends(self, job: JobResult) -> None:
        """Each step's sends as the sending ranks said them once their WRITEs
        completed (after the step's end, which is the receivers'): the
        counters into the edges, an error into the job."""
        for step in job.steps:
            try:
                lines = self.ranks.gather(
                    self.hosts, "sent", time.monotonic() + REPORT_GRACE_S, step.step
                )
            except (TimeoutError, RuntimeError) as e:
                job.detail["sends_error"] = str(e)
                return
            for e in step.edges:
                sent = lines[e["src"]]
                e.update(
                    retransmits=sent["retransmits"],
                    timeouts=sent["timeouts"],
                    per_plane_share=sent["per_plane_share"],
                )
                if sent["send_error"] or sent["bytes"] != e["size"]:
                    e["completed"] = False
                    e["error"] = sent["send_error"] or f"{sent['bytes']} of {e['size']} bytes sent"
                    job.completed = False
                    job.error = job.error or f"step {step.step}: {e['error']}"

    def close(self, settle_s: float = 10.0) -> dict[str, str]:
        """End every rank's process (by pid), whatever happened: its context
        closes and the daemons release its QPs and memory. The stderr tails of
        ranks that left one."""
        ranks, self.ranks = getattr(self, "ranks", None), None
        if ranks is None:
            return {}
        for h in self.hosts:
            with contextlib.suppress(Exception):
                ranks.tell(h, {"end": True})  # ranks leave their loop and close their contexts
        ranks.settle(time.monotonic() + settle_s)
        return ranks.end()

    def __enter__(self) -> MrcRing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _mrc_edge(t: Send, receiver: dict, start: float, verify: bool) -> dict:
    """One transfer's outcome as the receiving rank saw it (the sending
    rank's counters come later: MrcRing._sends)."""
    edge: dict[str, Any] = {"src": t.src, "dst": t.dst, "chunk": t.chunk, "size": t.size}
    error = receiver.get("recv_error")
    edge.update(
        completed=not error and receiver["received"] == t.size,
        error=error,
        bytes=receiver["received"],
        seconds=round(receiver["recv_done_ns"] / 1e9 - start, 6),
        verified=bool(receiver["verified"]) if verify else False,
    )
    if not edge["completed"] and not edge["error"]:
        edge["error"] = f"{edge['bytes']} of {t.size} bytes"
    return edge
