"""`mrc-nic write`: a WRITE transfer between two hosts, through the verbs API.

This process is the application at both ends (mrc_nic.verbs, naming lab and
host), as any user program would be: per QP it registers a buffer of 2
chunks at each host, connects a send QP at the source to a receive QP at the
destination (INIT -> RTR -> RTS), posts the WRITEs that writeplan cuts the
transfer into, polls the send CQ, and with verify compares what arrived in
the receiver's MR (mapped here: NIC memory) with what was sent. The daemons
do for these QPs what they do for every application's: QP numbers, memory,
NSCC, the retransmission timeout, probes and EV replacement. A Connection
keeps its QPs across several writes, as a verbs connection does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from typing import Any, NamedTuple

from mrc_nic import units, verbs
from mrc_nic.errors import MrcNicError
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab import topology
from mrc_nic.lab.state import open_lab
from mrc_nic.observe import fidelity
from mrc_nic.verbs import ctl
from mrc_nic.workloads.writeplan import DEPTH_MAX, Pieces, WriteOptions, chunk_data

U32 = 0xFFFFFFFF
KIB = 1 << 10  # chunks are whole KiB (the NIC's memory element)
POLL_BATCH = 64
WRITE, WRITE_IMM = verbs.WrOpcode.RDMA_WRITE, verbs.WrOpcode.RDMA_WRITE_WITH_IMM
WRITE_SIZE_UNITS = units.TRANSFER_SIZE_UNITS
SIZE_MAX = units.TRANSFER_MAX
QPS_MAX = 64  # QPs of one connection, at most
# A lab with slow links has a long design RTT ([queues] base_rtt): a QP's
# retransmission timeout and reorder window must scale with it, or queueing
# alone fires them (10 Mbit/s links and MTU 3200: a 10.3 ms base RTT, above
# the default timeout of 4.2 ms). Defaults when not given: the timeout at
# least this many base RTTs; in a lab slower than the default one (design RTT 100 us), the
# reorder window this many: enough for the differences between paths'
# queues, which NSCC keeps short and a fixed window does not (clos-8 at
# 5 Mbit/s, 3 KiB packets, permutation, the worst flow's share of its link:
# NSCC 0.88-0.90 with 2 RTTs, 0.80-0.82 with 4; the fixed window 0.72 with
# 2, 0.88 with 4: spurious losses; measured before the head scan took the
# largest recent RTT, docs/congestion.md). Never below the daemon's
# defaults, which were measured on the default lab.
TIMEOUT_RTTS = 8
REORDER_RTTS = 2
REORDER_RTTS_FIXED = 4


# Transfer sizes ("1G" = 1 GiB, as perftest counts), 1 byte .. 1 TiB: mrc_nic.units.
parse_size = units.parse_transfer_size


def lab_defaults(
    topo: topology.Topology, attr: verbs.DeviceAttr, fixed_window: bool = False
) -> tuple[int, int]:
    """(timeout exponent, reorder window ns) that fit a lab's design RTT, from
    the device's defaults (attr); fixed_window: the QPs' CC profile has no
    algorithm (a fixed window), which wants a longer reorder window."""
    rtt = topo.queues.base_rtt_ns
    timeout = attr.default_timeout
    while attr.timeout_seconds(timeout) * 1e9 < TIMEOUT_RTTS * rtt and timeout < attr.max_timeout:
        timeout += 1
    reorder = attr.default_reorder_ns
    if rtt > topology.BASE_RTT_NS:  # slower than the default lab
        rtts = REORDER_RTTS_FIXED if fixed_window else REORDER_RTTS
        reorder = min(max(reorder, rtts * rtt), attr.max_reorder_ns)
    return timeout, reorder


def chunk_bytes(bytes_per_qp: int, qps: int, half_bytes: int, peers: int = 1) -> int:
    """The size of one WRITE of a transfer: the whole share of a QP when two of
    them (a double buffer) fit its part of a half of host memory, else as
    much as fits, in whole KiB. Sender and receiver compute the same.

    peers: how many transfers may land at one receiver at once (a lab's hosts
    but one). The receiver's half is split between them, so that every other
    host can write to it at the same time (an N:1 incast) without ENOMEM:
    on clos-8 (8 hosts, 32 MiB per half), 7 single-QP transfers of up to
    2.28 MiB chunks each."""
    room = (half_bytes // max(1, qps) // max(1, peers) // 2) // KIB * KIB
    want = -(-max(1, bytes_per_qp) // KIB) * KIB
    return max(KIB, min(want, room))


def default_chunk(
    topo: topology.Topology, size_hint: int = SIZE_MAX, qps: int = 1, peers: int | None = None
) -> int:
    """Each WRITE's size when none is given: what host memory allows for
    `size_hint` bytes over `qps` QPs (chunk_bytes), with `peers` transfers
    landing at one host at once (default: every other host of the lab,
    hosts - 1). A host's memory is its topology's [nic] memory, half for what
    it sends and half for what it receives (the device's max_mr_size)."""
    half = topo.nic_memory_bytes // 2 // KIB * KIB
    peers = topo.hosts - 1 if peers is None else peers
    return chunk_bytes(-(-size_hint // qps), qps, half, peers=peers)


def session_memory(topo: topology.Topology) -> int:
    """The NIC memory one session of a host may hold by default: the lab's
    [tenants] memory share, or contract.shares' default (half the host)."""
    from mrc_nic.contract import shares

    written = topo.tenant_shares().get("memory")
    share = shares.DEFAULT if written is None else shares.parse("memory", written)
    return share.limit(topo.nic_memory_bytes)


class DaemonGone(MrcNicError):
    """A host's daemon ended during a write: its QPs went with it."""


@dataclasses.dataclass(kw_only=True)
class QpOptions:
    """The send QPs' attributes, set when they connect (a Connection's first
    write); None takes the lab's default (lab_defaults) or the daemon's."""

    mpr: int | None = None  # None: the daemon's default
    timeout: int | None = None  # 1.024 us * 2^timeout
    retry: dict | None = None  # {linear_cnt, exp_cnt}
    cc_profile: int | None = None  # OCP cc_profile_id (the host's CC profiles); default NSCC
    ev_profile: int | None = None  # OCP ev_profile_id (the host's EV profiles); default 0
    # mrc-nic extensions (modify_qp's ext, docs/api.md)
    cwnd: int | None = None
    reorder_ns: int | None = None
    cc: dict | None = None  # NSCC fields to override
    ev_count: int | None = None
    ev_min_active: int | None = None
    auth_key: str | None = None  # 32 hex digits: every packet MAC'd (nic.auth)

    def ext(self, reorder: int) -> dict[str, Any]:
        """RTS's mrc-nic extensions; reorder: the lab's default window (lab_defaults)."""
        ext = {
            "reorder_ns": reorder if self.reorder_ns is None else self.reorder_ns,
            "cwnd": self.cwnd,
            "cc": self.cc,
            "ev_count": self.ev_count,
            "ev_min_active": self.ev_min_active,
            "auth_key": self.auth_key,
        }
        return {name: value for name, value in ext.items() if value is not None}


def _auth(opts: QpOptions) -> dict[str, str] | None:
    """RTR's extension: the key the receive side checks MACs with."""
    return {"auth_key": opts.auth_key} if opts.auth_key else None


def connect_recv(rqp: verbs.QP, peer_qpn: int, peer_gid: str, opts: QpOptions) -> None:
    """A receive QP INIT -> RTR towards the send QP (peer_qpn at peer_gid)."""
    rqp.to_init(verbs.Access.LOCAL_WRITE | verbs.Access.REMOTE_WRITE)
    dyn = verbs.MrcQpCap.DYNAMIC_MPR  # both ends: the sender follows the receiver's MPR
    rqp.to_rtr(peer_qpn, peer_gid, mpr_dest=opts.mpr, cap=dyn, ext=_auth(opts))


def connect_send(
    sqp: verbs.QP, peer_qpn: int, peer_gid: str, topo: topology.Topology, opts: QpOptions
) -> None:
    """A send QP INIT -> RTR -> RTS towards the receive QP (peer_qpn at
    peer_gid), with opts and the lab's defaults (lab_defaults)."""
    sqp.to_init(
        verbs.Access.LOCAL_WRITE,
        ev_profile_id=opts.ev_profile or 0,
        cc_profile_id=opts.cc_profile,
    )
    dyn = verbs.MrcQpCap.DYNAMIC_MPR
    sqp.to_rtr(peer_qpn, peer_gid, mpr_dest=opts.mpr, cap=dyn, ext=_auth(opts))
    fixed = opts.cc_profile is not None and _fixed_window(sqp.ctx, opts.cc_profile)
    timeout, reorder = lab_defaults(topo, sqp.ctx.query_device(), fixed)
    retry = {"linear_cnt": 7, "exp_cnt": 7, **(opts.retry or {})}
    sqp.to_rts(
        timeout=timeout if opts.timeout is None else opts.timeout,
        retry_linear_cnt=retry["linear_cnt"],
        retry_exp_cnt=retry["exp_cnt"],
        mpr=opts.mpr,
        cap=dyn,
        ext=opts.ext(reorder),
    )


def _fixed_window(ctx: verbs.Context, cc_profile: int) -> bool:
    """The CC profile has no algorithm: a fixed window (mrc-nic cc profile list)."""
    try:
        return ctl.query_cc_profile(ctx, cc_profile).get("algorithm") is None
    except verbs.VerbsError:
        return False  # no such profile: RTS says so


class Lane:
    """One QP pair of a connection: a send QP at the source writing from its
    buffer into the buffer of a receive QP at the destination."""

    def __init__(self, conn: Connection, index: int) -> None:
        self.index = index
        size = 2 * conn.chunk
        self.src_mr = conn.src_pd.reg_mr(size, verbs.Access.LOCAL_WRITE)
        self.dst_mr = conn.dst_pd.reg_mr(size, verbs.Access.LOCAL_WRITE | verbs.Access.REMOTE_WRITE)
        self.sqp = verbs.QP(
            conn.src_pd,
            verbs.QPInitAttr(
                send_cq=conn.send_cq, recv_cq=conn.send_cq,
                cap=verbs.QPCap(max_send_wr=DEPTH_MAX, max_recv_wr=1),
            ),
        )  # fmt: skip
        self.rqp = verbs.QP(
            conn.dst_pd,
            verbs.QPInitAttr(
                send_cq=conn.recv_cq, recv_cq=conn.recv_cq,
                # a WRITE's receive is posted with it and may be matched only after
                # its send completed and the next WRITEs' receives were posted
                cap=verbs.QPCap(max_send_wr=1, max_recv_wr=2 * DEPTH_MAX),
            ),
        )  # fmt: skip
        self.remote = {"qpn": self.rqp.qp_num, "rkey": self.dst_mr.rkey, "region": self.dst_mr.lkey}
        # What counters() read at the end of the last write: the next write's start
        # (one daemon query and one EV read per write instead of three and two).
        self.last: Counters | None = None
        self.begin(None, 0)

    def connect(self, conn: Connection, opts: QpOptions) -> None:
        """INIT -> RTR at the receiver, INIT -> RTR -> RTS at the sender."""
        connect_recv(self.rqp, self.sqp.qp_num, conn.src_ctx.gid(0), opts)
        connect_send(self.sqp, self.rqp.qp_num, conn.dst_ctx.gid(0), conn.topo, opts)

    def begin(self, pieces: Pieces | None, slot: int) -> None:
        """Ready this lane for a transfer's share."""
        self.pieces = pieces
        self.limit = len(pieces) if pieces is not None else 0
        self.slot, self.slots = slot, (len(self.src_mr.buf) // slot if slot else 0)
        self.posted = self.verified = self.done_bytes = 0
        self.in_buffer: dict[int, bytes] = {}
        self.kick_ns: list[int] = []
        self.done_ns: dict[int, int] = {}
        self.recv_ns: dict[int, int] = {}
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or self.verified >= self.limit

    def offset(self, k: int) -> int:
        """Where WRITE k lives in the source and the destination buffers."""
        return (k % self.slots) * self.slot

    def counters(self, conn: Connection) -> Counters:
        """The send QP's counters so far, and its query_qp."""
        return qp_counters(self.sqp)

    def close(self) -> None:
        for thing in (self.sqp, self.rqp, self.src_mr, self.dst_mr):
            thing.close()


class Connection:
    """Send QPs at `src` connected to receive QPs at `dst`, for one or more
    writes (a verbs connection: QPs live across work requests).

    chunk: each WRITE's size at most (default: what host memory allows for
    `size_hint` bytes, default_chunk). on_open: called with the receive QPs
    ([{qpn, rkey, region}]) once they exist, before anything is sent (a caller
    that watches their counters). close() (or the with block's end) releases
    both ends, whatever happened, and returns the receive QPs' NIC stats."""

    def __init__(
        self,
        lab_name: str,
        src: str,
        dst: str,
        *,
        qps: int = 1,
        size_hint: int = SIZE_MAX,
        chunk: int | None = None,
        mpr: int | None = None,
        on_open=None,
    ) -> None:
        _, topo = open_lab(lab_name)
        for name in (src, dst):
            if name not in topo.host_names():
                raise ValueError(
                    f"no host {name!r} in lab {lab_name!r} (hosts: {', '.join(topo.host_names())})"
                )
        if src == dst:
            raise ValueError("source and destination must be different hosts")
        if not 1 <= qps <= QPS_MAX:
            raise ValueError(f"qps must be 1..{QPS_MAX}, not {qps}")
        if chunk is None:
            chunk = default_chunk(topo, size_hint, qps)
        if chunk < KIB or chunk % KIB:
            raise ValueError(f"chunk must be a positive multiple of 1 KiB, not {chunk}")
        self.lab, self.src, self.dst, self.topo = lab_name, src, dst, topo
        self.chunk, self.mpr = chunk, mpr
        self.lanes: list[Lane] = []
        self.connected = False
        self._send_open = True
        self._running = False  # a write is under way (perhaps in another thread)
        self._stop: str | None = None  # stop(): why the running write must end
        self._closing: list[Any] = []  # what close() releases, last made first
        try:
            self._open(qps)
            self.remote = [lane.remote for lane in self.lanes]
            self.qpns = [lane.sqp.qp_num for lane in self.lanes]
            if on_open is not None:
                on_open(self.remote)
        except BaseException:
            self.close()
            raise

    def _open(self, qps: int) -> None:
        cqe = 4 * DEPTH_MAX * qps
        self.src_ctx = self._keep(verbs.Context(self.lab, self.src))
        self.dst_ctx = self._keep(verbs.Context(self.lab, self.dst))
        self.src_pd = self._keep(verbs.PD(self.src_ctx))
        self.dst_pd = self._keep(verbs.PD(self.dst_ctx))
        self.send_cq = self._keep(verbs.CQ(self.src_ctx, cqe))
        self.recv_cq = self._keep(verbs.CQ(self.dst_ctx, cqe))
        for i in range(qps):
            self.lanes.append(self._keep(Lane(self, i)))

    def _keep(self, thing):
        self._closing.append(thing)
        return thing

    def write(
        self,
        size: int,
        *,
        imm: bool = False,
        verify: bool = False,
        seed: int = 1,
        wait: float = 3600.0,
        keep_open: bool = True,
        cwnd: int | None = None,
        reorder_ns: int | None = None,
        timeout: int | None = None,
        retry: dict | None = None,
        cc_profile: int | None = None,
        ev_profile: int | None = None,
        cc: dict | None = None,
        ev_count: int | None = None,
        ev_min_active: int | None = None,
        auth: bool = False,
        meter=None,
        **fields,
    ) -> dict:
        """One transfer of `size` bytes (in WRITEs of at most a chunk); the
        result (see Transfer.result). The QP attributes (cwnd, reorder_ns,
        timeout, retry {linear_cnt, exp_cnt}, cc_profile, ev_profile, cc, ev_count,
        ev_min_active, auth: a fresh key for per-packet MACs: QpOptions) take
        effect at the first write, which
        connects the QPs; later writes go on with the QPs' state (PSNs, EVs,
        window), as a verbs QP's work requests do. keep_open=False: no write
        after this one. fields: WriteOptions' message options (msg, depth,
        msgs_in_flight, duration, timing, fill). wait: seconds at most.
        meter: an observe.fidelity.Meter started just before the transfer and
        stopped after it: its verdict is the result's "fidelity"."""
        if not self._send_open:
            raise RuntimeError("this connection's send QPs are closed")
        opts = WriteOptions(
            size=size, chunk=self.chunk, imm=imm, verify=verify, seed=seed, **fields
        )
        opts.check()
        slots = 2 * self.chunk // opts.slot
        if opts.depth > slots:
            raise ValueError(
                f"depth {opts.depth} needs {opts.depth} slots of {opts.slot} bytes; the "
                f"buffers (2 x {self.chunk} bytes) hold {slots}"
            )
        self._running = True  # from here on, a stop() from another thread ends this write
        try:
            if not self.connected:
                qp_opts = QpOptions(
                    mpr=self.mpr, timeout=timeout, retry=retry, cc_profile=cc_profile,
                    ev_profile=ev_profile, auth_key=secrets.token_hex(16) if auth else None,
                    cwnd=cwnd, reorder_ns=reorder_ns, cc=cc, ev_count=ev_count,
                    ev_min_active=ev_min_active,
                )  # fmt: skip
                try:
                    for lane in self.lanes:
                        lane.connect(self, qp_opts)
                except verbs.VerbsError as e:
                    raise ValueError(str(e).split(": ", 1)[-1]) from None
                self.connected = True
            self._send_open = keep_open
            transfer = Transfer(self, opts)
            if meter is not None:
                meter.start()
            transfer.run(wait)
            result = transfer.result()
            if meter is not None:
                result["fidelity"] = meter.stop()
                result["links_share"] = fidelity.links_share(result["goodput_bps"], self.topo)
        except KeyboardInterrupt:
            self.cancel("cancelled by the user (Ctrl-C)")
            raise
        finally:
            # A stop() asked for while connecting or before the loop began is this
            # write's too (clearing it at the start lost it); the next starts clean.
            self._running, self._stop = False, None
        result["chunk"] = self.chunk
        result["src"], result["dst"] = self.src, self.dst
        return result

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Move the send QPs to ERR (verbs: their WRs flush). Best effort."""
        for lane in self.lanes:
            if lane.sqp.state == verbs.QpState.RTS:
                with contextlib.suppress(verbs.VerbsError, OSError):
                    lane.sqp.modify(
                        verbs.QPAttr(qp_state=verbs.QpState.ERR),
                        verbs.QpAttrMask.STATE,
                        ext={"reason": reason},
                    )
        self._send_open = False

    def stop(self, reason: str) -> None:
        """Make a write running in another thread end soon (within a poll,
        50 ms), its QPs in ERR with the reason; asked for before a write
        starts, it ends that write. Thread-safe: the writing thread does the rest."""
        self._stop = reason

    def close(self, settle_s: float = 10.0) -> dict:
        """Release everything (QPs, MRs, CQs, contexts; the daemons clean up
        after a context that closes); returns the receive QPs' NIC stats. A
        write running in another thread is stopped first (up to settle_s)."""
        if not self._closing:
            return {}  # closed already
        if self._running:
            self.stop("the connection was closed")
            deadline = time.monotonic() + settle_s
            while self._running and time.monotonic() < deadline:
                time.sleep(0.01)
        stats: dict = {}
        for lane in self.lanes:
            try:
                rq = lane.rqp.nic_recv_state()
                stats[str(lane.rqp.qp_num)] = {**rq.stats, "long_gaps": rq.long_gaps}
            except (KeyError, OSError):
                pass
        self._send_open = False
        while self._closing:
            thing = self._closing.pop()
            with contextlib.suppress(verbs.VerbsError, OSError):
                thing.close()  # on failure the context's close releases what is left
        return stats

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def qp_counters(sqp: verbs.QP) -> Counters:
    """A send QP's counters so far (packets per plane, retired EVs' included;
    retransmissions, timeouts, reorder kicks) and its query_qp."""
    q = sqp.query()
    per_plane = {int(p): n for p, n in q.get("retired_tx_pkts", {}).items()}
    for plane, n in sqp.nic_tx_per_plane().items():
        per_plane[plane] = per_plane.get(plane, 0) + n
    try:
        retx = sqp.nic_send_state().tx_stats.get("retx_pkts", 0)
    except KeyError:  # not in RTS yet
        retx = 0
    return Counters(per_plane, retx, q.get("timeouts", 0), q.get("reorder_kicks", 0), q)


class Counters(NamedTuple):
    """A send QP's counters at one moment (Lane.counters)."""

    per_plane: dict[int, int]  # data packets sent, per plane
    retx: int  # retransmissions
    timeouts: int
    reorder_kicks: int
    qp: dict  # query_qp then


class Transfer:
    """One write on a connection's lanes: posting, completions, verification."""

    def __init__(self, conn: Connection, opts: WriteOptions) -> None:
        self.conn, self.opts = conn, opts
        lanes = conn.lanes
        share = -(-opts.size // len(lanes))
        for i, lane in enumerate(lanes):
            start, end = min(opts.size, i * share), min(opts.size, (i + 1) * share)
            lane.begin(Pieces(start, end, opts.msg or max(1, end - start), opts.chunk), opts.slot)
        # Signal every WR that needs its own completion time or frees the
        # first slot; otherwise one in half the depth (CQ moderation).
        self.sig_every = 1 if opts.timing else max(1, opts.depth // 2)
        self.mismatch: list[dict] = []
        self.started = self.ended = 0.0
        self.deadline: float | None = None  # duration: no message starts after it
        self.stopped = False
        self._before = [lane.last or lane.counters(conn) for lane in lanes]

    # ---- running --------------------------------------------------------------------
    def run(self, wait: float) -> None:
        contexts = (self.conn.src_ctx, self.conn.dst_ctx)
        try:
            self._run(wait)
        except verbs.VerbsError:  # a verb that found the NIC gone (verbs.fatal) says which
            dead = [ctx.host for ctx in contexts if ctx.device_fatal()]
            if dead:
                raise self._gone(dead[0]) from None
            raise

    def _gone(self, host: str) -> DaemonGone:
        lab = self.conn.lab
        return DaemonGone(
            f"the daemon of {host} in lab {lab!r} ended during the write "
            f"(did it die?); `mrc-nic up --reuse -l {lab}` restarts it"
        )

    def _run(self, wait: float) -> None:
        conn = self.conn
        self.started = now = time.monotonic()
        give_up = now + wait
        if self.opts.duration:
            self.deadline = now + self.opts.duration
        for lane in conn.lanes:
            self._fill(lane, now)
        contexts = {conn.src_ctx.fileno(): conn.src_ctx, conn.dst_ctx.fileno(): conn.dst_ctx}
        fds = [conn.send_cq.fileno(), conn.recv_cq.fileno(), *contexts]
        with Waiter(fds) as waiter:  # epoll: a process may hold fds above 1,024
            self._loop(waiter, contexts, give_up, wait)
        self.ended = time.monotonic()

    def _loop(self, waiter: Waiter, contexts: dict, give_up: float, wait: float) -> None:
        """Completions, posts and waits until every lane is done, stopped or out of time."""
        conn, lanes = self.conn, self.conn.lanes
        ready: list[int] = []
        while not all(lane.done for lane in lanes):
            if self._completions():
                continue  # more may wait in the CQs' batches: no sleep before reading them
            now = time.monotonic()
            why = conn._stop or (f"not done after {wait:g} s (wait)" if now > give_up else None)
            dead = [ctx.host for fd, ctx in contexts.items() if fd in ready and ctx.device_fatal()]
            if dead:
                raise self._gone(dead[0])
            if why is not None:
                for lane in lanes:
                    if not lane.done:
                        lane.error = why
                conn.cancel(why)
                break
            ready = waiter.wait(min(0.05, give_up - now))

    def _fill(self, lane: Lane, now: float) -> None:
        """Post WRITEs while the depth, the slots and the messages in flight
        allow: one post_send, one doorbell."""
        opts, pieces = self.opts, lane.pieces
        wrs: list[verbs.SendWR] = []
        while lane.posted < lane.limit and lane.posted - lane.verified < opts.depth:
            k = lane.posted
            if k and pieces.starts_msg(k):  # a new message
                if self.deadline is not None and now >= self.deadline:
                    lane.limit, self.stopped = k, True
                    break
                n = opts.msgs_in_flight
                if n and lane.verified < k and pieces.msg_of(k) - pieces.msg_of(lane.verified) >= n:
                    break
            wrs.append(self._wr(lane, k))
            lane.posted += 1
        if not wrs:
            return
        wrs[-1].send_flags = verbs.SendFlags.SIGNALED  # the batch's end completes
        if opts.imm:
            lane.rqp.post_recv([verbs.RecvWR(wr_id=wr.wr_id) for wr in wrs])
        if opts.timing:  # before the post: its doorbell may carry the packets all the way
            lane.kick_ns.extend([time.monotonic_ns()] * len(wrs))
        lane.sqp.post_send(wrs)

    def _wr(self, lane: Lane, k: int) -> verbs.SendWR:
        _, length = lane.pieces[k]
        at = lane.offset(k)
        if self.opts.fill and length:
            data = chunk_data(self.opts.seed, lane.index, k, length)
            lane.src_mr.buf[at : at + length] = data
            if self.opts.verify:
                lane.in_buffer[k] = data
        src, dst = lane.src_mr, lane.dst_mr
        sgl = [verbs.SGE(src.addr + at, length, src.lkey)] if length else []
        signaled = (k + 1) % self.sig_every == 0
        return verbs.SendWR(
            wr_id=k,
            opcode=WRITE_IMM if self.opts.imm else WRITE,
            sg_list=sgl,
            remote_addr=dst.addr + at,
            rkey=dst.rkey,
            send_flags=verbs.SendFlags.SIGNALED if signaled else 0,
            imm_data=k & U32,
        )

    def _completions(self) -> int:
        """Read both CQs once; how many completions there were."""
        conn = self.conn
        by_qpn = {lane.sqp.qp_num: lane for lane in conn.lanes}
        by_rqpn = {lane.rqp.qp_num: lane for lane in conn.lanes}
        touched = set()
        recvs = conn.recv_cq.poll(POLL_BATCH * len(conn.lanes))
        sends = conn.send_cq.poll(POLL_BATCH * len(conn.lanes))
        for wc in recvs:
            lane = by_rqpn.get(wc.qp_num)
            if lane is not None and wc.status == verbs.WcStatus.SUCCESS:
                lane.recv_ns[wc.wr_id] = wc.timestamp_ns
        for wc in sends:
            lane = by_qpn.get(wc.qp_num)
            if lane is None or lane.error is not None:
                continue
            if wc.status != verbs.WcStatus.SUCCESS:
                self._fail(lane, wc)
                continue
            if self.opts.timing:
                lane.done_ns[wc.wr_id] = wc.timestamp_ns
            # completions come in post order: every WRITE up to this one is done
            while lane.verified <= wc.wr_id and lane.error is None:
                self._complete(lane, lane.verified)
            touched.add(lane)
        now = time.monotonic()
        for lane in touched:
            if lane.error is None:
                self._fill(lane, now)
        return len(recvs) + len(sends)

    def _complete(self, lane: Lane, k: int) -> None:
        _, length = lane.pieces[k]
        if self.opts.verify and length:
            at = lane.offset(k)
            got = bytes(lane.dst_mr.buf[at : at + length])
            want = lane.in_buffer.pop(k)
            if got != want:
                first = next(i for i in range(length) if got[i] != want[i])
                self.mismatch.append({"qpn": lane.sqp.qp_num, "chunk": k, "first_bad_byte": first})
                lane.error = f"chunk {k} arrived different from what was sent (byte {first})"
                self.conn.cancel(lane.error)
                return
        lane.done_bytes += length
        lane.verified += 1

    def _fail(self, lane: Lane, wc: verbs.WC) -> None:
        reason = lane.sqp.query().get("err_reason") or ""
        lane.error = f"{wc.status.name}" + (f": {reason}" if reason else "")

    # ---- the result -----------------------------------------------------------------
    def result(self) -> dict:
        """What the write did: bytes, time, QPs, retransmissions, the planes' shares."""
        lanes, opts = self.conn.lanes, self.opts
        seconds = (self.ended or time.monotonic()) - self.started
        errors = {f"{lane.sqp.qp_num:#x}": lane.error for lane in lanes if lane.error}
        per_plane: dict[int, int] = {}
        retx = timeouts = reorder_kicks = 0
        for lane, before in zip(lanes, self._before, strict=True):
            lane.last = now = lane.counters(self.conn)
            for p, n in now.per_plane.items():
                per_plane[p] = per_plane.get(p, 0) + n - before.per_plane.get(p, 0)
            retx += now.retx - before.retx
            timeouts += now.timeouts - before.timeouts
            reorder_kicks += now.reorder_kicks - before.reorder_kicks
        total = sum(per_plane.values()) or 1
        sent = sum(lane.done_bytes for lane in lanes)
        result = {
            "completed": not errors,
            "error": "; ".join(f"QP {q} in ERR: {e}" for q, e in errors.items()) or None,
            "bytes": sent,
            "size": opts.size,
            "seconds": round(seconds, 6),
            "goodput_bps": sent * 8 / seconds if seconds > 0 else 0.0,
            "qps": [lane.last.qp for lane in lanes],
            "chunks": sum(lane.limit for lane in lanes),
            "wqes_done": sum(lane.verified for lane in lanes),
            "messages": sum(lane.pieces.msgs_within(lane.verified) for lane in lanes),
            "msg": opts.msg or None,
            "stopped": self.stopped,  # `duration` ended it: fewer bytes than size
            "retransmits": retx,
            "timeouts": timeouts,
            "reorder_kicks": reorder_kicks,
            "per_plane_share": {str(p): n / total for p, n in sorted(per_plane.items())},
            "verified": opts.verify and not errors,
            "mismatch": self.mismatch,
        }
        if opts.timing:
            # Per QP and WRITE k: its post (the time post_send was called), and the NIC's
            # times of its send completion and (imm) its receive completion.
            result["timing"] = [
                {
                    "qpn": lane.sqp.qp_num,
                    "per_msg": lane.pieces.per_msg,
                    "kick_ns": lane.kick_ns[: lane.verified],
                    "done_ns": [lane.done_ns.get(k) for k in range(lane.verified)],
                    "recv_ns": [lane.recv_ns.get(k) for k in range(lane.verified)],
                }
                for lane in lanes
            ]
        return result


def write(
    lab_name: str,
    src: str,
    dst: str,
    size: int,
    *,
    qps: int = 1,
    chunk: int | None = None,
    mpr: int | None = None,
    on_open=None,
    judge: bool = True,
    **options,
) -> dict:
    """Run one transfer on a Connection of its own; returns its result (see
    Transfer.result) with the receive QPs' NIC stats under "receiver".
    options: those of Connection.write (imm, verify, cwnd, reorder_ns,
    timeout, retry, seed, wait, cc_profile: the send QPs' CC profile,
    `mrc-nic cc profile list`, default NSCC; cc: NSCC fields to override).
    judge: measure which resource bound the transfer (observe.fidelity; the
    result's "fidelity" and "links_share"); a caller running several
    transfers at once judges them together instead."""
    conn = Connection(
        lab_name, src, dst, qps=qps, size_hint=size, chunk=chunk, mpr=mpr, on_open=on_open
    )
    meter = None
    try:
        meter = fidelity.Meter(topo=conn.topo) if judge else None
        result = conn.write(size, keep_open=False, meter=meter, **options)
    finally:
        if meter is not None:
            meter.close()
        receiver = conn.close()
    result["receiver"] = receiver
    return result
