"""A WRITE transfer run by the sender's daemon: chunks, timeouts, verification.

A transfer of `size` bytes over N send QPs gives each QP an equal share,
cut into chunks that each go as one WRITE (the last with the immediate when
asked). Host memory is 64 MiB, transfers reach 1 GiB, so every QP writes
from a double buffer (2 chunks of its source region) into a double buffer
at the receiver: chunk k goes from and to half k % 2, and chunk k + 2 is
posted only once chunk k has completed and, with verify, been compared with
what was sent. Chunk k's bytes are random, from a seed and k, so every chunk
differs and a misplaced or stale byte shows.

Messages (perftest style, scripts/bench_msgsize.py): with `msg`, a QP's
share is a series of messages of `msg` bytes, each one WRITE (or, above the
chunk, several WRITEs of at most a chunk). The buffer at each end is then
cut into slots of the largest WRITE rounded up to 1 KiB, and WRITE k goes
from and to slot k % slots; `depth` WRITEs (up to the NIC's SQ_DEPTH and
the slots) are posted at once instead of 2, so that many small messages are
in flight, and WRITE k + slots is posted only once WRITE k has completed
(and been verified): the byte-exact guarantee is the double buffer's.
`msgs_in_flight` 1 posts a message only once the one before has completed
(ib_write_lat's one message at a time); `duration` stops starting messages
after that many seconds (perftest -D), and the result counts those
completed. With `timing`, the result has, per QP, the time
(time.monotonic_ns(), CLOCK_MONOTONIC as the NIC's bpf_ktime_get_ns) of
the send kick that followed each WRITE's post, and its WQE index, which the
NIC's NIC_EV_SEND_DONE event of that WRITE reports (field `wqe`).

Reliability per QP, each tick (1 ms):
- progress is snd_una moving; the retransmission timeout is the QP's
  timeout attribute (1.024 us * 2^t) for the first retry.linear_cnt timeouts,
  then doubling for retry.exp_cnt more; each timeout is a timeout kick (BPF
  queues the oldest unacked PSNs, struct nic_kick) and a send kick;
- a QP with nothing in flight and work posted (its ACK clock stopped, e.g.
  every EV was ASSUMED_BAD until probes brought some back) is kicked;
- when the budget is spent, the QP goes to ERR with the reason, and the
  transfer fails; the daemon goes on serving its other QPs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import random
import time
from typing import Any

from mrc_nic import nic
from mrc_nic.lab.protocol import arg
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import hostmem, nscc, supervisor, transfer
from mrc_nic.transport.qp import QpError, QpState, Retry

DEFAULT_TIMEOUT = 12  # 1.024 us * 2^12 = 4.2 ms: above this lab's worst queueing delay
DEFAULT_MPR = 8
# The head scan's reorder window (mrc-nic extension; docs/nic-program.md, "Loss detection"):
# a packet still unacknowledged when one sent this much later has been
# acknowledged is lost (or, at the head scan, when the QP's largest recent
# round trip is longer: queues). Short enough that a path which dies is
# found before its losses hold the whole window (a few round trips of the
# default lab, whose RTT is 0.1-0.25 ms), long enough for the scheduling
# hiccups of a 2-core machine: scripts/bench_failover.py --reorder-window
# found a blackholed plane with a gap under 0.5 ms in 3 of 3 runs with 250 us,
# 2.3-3.3 ms (a stall) with 1 ms; healthy runs resent 27-91 packets per
# 768 MiB, 26-80 with 1 ms.
DEFAULT_REORDER_NS = 250_000
# Most packets in the network (struct nic_sq.cwnd; mrc-nic extension): a fixed
# window until congestion control (NSCC) sets it. The MPR range stays larger
# (DEFAULT_MPR), so a hole at snd_una does not stop the sender while the loss
# is found and repaired; and a small window keeps this CPU-bound lab's
# standing queues, hence its RTT and loss detection time, short. Measured with
# scripts/bench_failover.py: 128 keeps goodput within noise of the MPR window.
DEFAULT_CWND = 128
REORDER_NS_MAX = 2**32 - 1
EV_COUNT = 128  # EVs per send QP (the OCP API's ev_count default), equal per plane


@dataclasses.dataclass(kw_only=True)
class JobOptions:
    """A transfer's options: the fields of the daemon's `write` request
    (mrc_nic.transport.protocol.Write adds where to), declared here once."""

    size: int = arg("bytes to write, shared equally by the QPs")
    chunk: int = arg("bytes per WRITE, a multiple of 1 KiB, at most sq_open's")
    mpr: int = arg("the MPR range, in 128-PSN units", DEFAULT_MPR)
    timeout: int = arg("retransmission timeout, 1.024 us * 2^timeout", DEFAULT_TIMEOUT)
    retry: Retry = arg("timeouts at the base value, then doubling (7 = forever)", factory=Retry)
    imm: bool = arg("the last WRITE carries an immediate", False)
    verify: bool = arg("compare each chunk's bytes at the receiver", False)
    seed: int = arg("of the bytes written", 1)
    reorder_ns: int = arg("the reorder window, ns (0: off)", DEFAULT_REORDER_NS)
    cwnd: int = arg("the fixed window, packets (0: the MPR range)", DEFAULT_CWND)
    # NSCC sets the window each tick; profile 0 keeps `cwnd` fixed.
    cc_profile: int = arg(
        "CC profile (OCP cc_profile_id): 0 fixed window, 1 NSCC, 2 NSCC without QA",
        nscc.DEFAULT_NSCC,
    )
    cc: dict | None = arg("NSCC fields to override (struct mrc_ctl_cc_nscc_cfg names)", None)
    ev_profile: int | None = arg(
        "EV profile (OCP ev_profile_id) of the QPs; null: profile 0, AUTO with ev_count EVs",
        None,
    )
    keep_open: bool = arg(
        "leave the send QPs open in RTS for another write to the same receive QPs "
        "(sq_close closes them); by default a write closes them",
        False,
    )
    # The EV profile (OCP: ev_count, ev_min_active): failed EVs are replaced
    # whatever their plane below the floor (mrc_nic.transport.evreplace).
    ev_count: int = arg("EVs per QP (1..256, a multiple of the planes)", EV_COUNT)
    ev_min_active: int | None = arg("the floor of active EVs (null: a quarter of ev_count)", None)
    # Messages (see the module's docstring).
    msg: int = arg("message size (0: the whole share is one message)", 0)
    depth: int = arg("WRITEs posted at once per QP (1..32, at most the slots)", 2)
    msgs_in_flight: int = arg("0: as many as depth allows; 1: one message at a time", 0)
    duration: float = arg("seconds after which no message is started (0: none)", 0.0)
    timing: bool = arg("the result carries each WRITE's kick time", False)
    # False sends the buffer as it is, as perftest does (no generation cost:
    # 16 MiB take 50 ms of Python).
    fill: bool = arg(
        "write each WRITE's bytes (from seed) into the source buffer first; not false with verify",
        True,
    )

    @classmethod
    def from_request(cls, req: JobOptions) -> JobOptions:
        """The options of a write request (a JobOptions with more fields), checked."""
        return cls(**{f.name: getattr(req, f.name) for f in dataclasses.fields(cls)}).check()

    def check(self) -> JobOptions:
        """Refuse options out of range (QpError, EINVAL); self otherwise."""
        opts = self
        if opts.cc is not None and not isinstance(opts.cc, dict):
            raise QpError(22, "cc must be an object of NSCC fields")
        try:
            if opts.cc_profile in nscc.PROFILES:  # a controller's own: checked at connect
                opts.nscc_config()
        except ValueError as e:
            raise QpError(22, str(e)) from None
        if not 0 <= opts.reorder_ns <= REORDER_NS_MAX:
            raise QpError(
                22, f"reorder_ns must be 0 (off) .. {REORDER_NS_MAX}, not {opts.reorder_ns}"
            )
        if not 0 <= opts.cwnd <= nic.BITMAP_BITS:
            raise QpError(
                22, f"cwnd must be 0 (the MPR range) .. {nic.BITMAP_BITS}, not {opts.cwnd}"
            )
        if not 1 <= opts.ev_count <= nic.MAX_QP_EVS:
            raise QpError(22, f"ev_count must be 1..{nic.MAX_QP_EVS}, not {opts.ev_count}")
        if opts.ev_min_active is not None and not 0 <= opts.ev_min_active <= opts.ev_count:
            raise QpError(
                22, f"ev_min_active must be 0..ev_count ({opts.ev_count}), not {opts.ev_min_active}"
            )
        if opts.size < 1:
            raise QpError(22, f"size must be at least 1 byte, not {opts.size}")
        if opts.chunk < hostmem.KIB or opts.chunk % hostmem.KIB:
            raise QpError(22, f"chunk must be a positive multiple of 1 KiB, not {opts.chunk}")
        if not 0 <= opts.msg <= opts.size:
            raise QpError(22, f"msg must be 0 (one message) .. size ({opts.size}), not {opts.msg}")
        if not 1 <= opts.depth <= nic.SQ_DEPTH:
            raise QpError(22, f"depth must be 1..{nic.SQ_DEPTH} (the send queue), not {opts.depth}")
        if opts.msgs_in_flight < 0:
            raise QpError(
                22, f"msgs_in_flight must be 0 (no limit) or more, not {opts.msgs_in_flight}"
            )
        if not 0 <= opts.duration <= 86400:
            raise QpError(22, f"duration must be 0 (none) .. 86400 s, not {opts.duration}")
        if opts.verify and not opts.fill:
            raise QpError(22, "verify needs fill: unfilled buffers have nothing to compare")
        return opts

    @property
    def write_max(self) -> int:
        """The largest WRITE of this transfer: a chunk, or a smaller message."""
        return min(self.chunk, self.msg) if self.msg else self.chunk

    def ev_min_active_for(self) -> int:
        """The floor of active EVs: as asked, or a quarter of the profile."""
        return self.ev_count // 4 if self.ev_min_active is None else self.ev_min_active

    def nscc_config(self, table=None) -> nscc.NsccConfig | None:
        """The NSCC tunables of this transfer's CC profile (None: a fixed
        window), from the host's profiles (transport.profiles) when given."""
        config = table.nscc_config(self.cc_profile) if table else nscc.profile(self.cc_profile).nscc
        if config is None:
            if self.cc:
                raise ValueError(f"CC profile {self.cc_profile} has no NSCC to tune")
            return None
        return config.with_overrides(self.cc)


# Source data: rotations of one random pool, generated once per daemon. Why
# not random bytes per chunk: random.Random.randbytes makes 16 MiB in 50 ms
# of CPU holding the GIL, and the daemon's loop (timeouts, top-up kicks,
# port bitmaps, probes) stood still that long under every chunk (measured in
# flap runs: 5-30 ms delivery gaps while it ran). A rotation is one copy.
POOL_BYTES = 4 << 20


@functools.cache
def _pool() -> bytes:
    raw = random.Random("mrc-nic source pool").randbytes(POOL_BYTES)
    return raw + raw  # every rotation is one slice


def chunk_data(seed: int, qp_index: int, k: int, length: int) -> bytes:
    """The source bytes of WRITE k of QP qp_index: each POOL_BYTES block a
    rotation of the pool by an offset hashed from (seed, qp_index, k, block),
    so that blocks differ from one another at every position (a packet placed
    in the wrong place does not go unseen) and the same seed gives the same
    bytes."""
    pool = memoryview(_pool())
    parts = []
    for block, at in enumerate(range(0, length, POOL_BYTES)):
        key = f"{seed}/{qp_index}/{k}/{block}".encode()
        off = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest()) % POOL_BYTES
        parts.append(pool[off : off + min(POOL_BYTES, length - at)])
    return b"".join(parts)


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The WRITEs of one QP's share of a transfer, bytes [start, end): messages
    of `msg` bytes (the last one may be shorter), each cut into WRITEs of at
    most `chunk` bytes. Computed, not listed: a run of small messages has
    hundreds of thousands. An empty share is one WRITE of 0 bytes."""

    start: int
    end: int
    msg: int  # > 0
    chunk: int

    @property
    def per_msg(self) -> int:
        """WRITEs of a whole message."""
        return -(-self.msg // self.chunk)

    def __len__(self) -> int:
        whole, rest = divmod(self.end - self.start, self.msg)
        return whole * self.per_msg + -(-rest // self.chunk) or 1

    def __getitem__(self, k: int) -> tuple[int, int]:
        """(offset in the transfer, length) of WRITE k."""
        if not 0 <= k < len(self):
            raise IndexError(k)
        m, j = divmod(k, self.per_msg)
        base = self.start + m * self.msg
        length = min(self.msg, self.end - base) - j * self.chunk
        return base + j * self.chunk, max(0, min(self.chunk, length))

    def msg_of(self, k: int) -> int:
        """The message WRITE k belongs to (a shorter last message has fewer WRITEs)."""
        return k // self.per_msg

    def starts_msg(self, k: int) -> bool:
        return k % self.per_msg == 0

    def msgs_within(self, n: int) -> int:
        """Whole messages among the first n WRITEs."""
        return -(-len(self) // self.per_msg) if n >= len(self) else n // self.per_msg


@dataclasses.dataclass(kw_only=True)
class SendQp(supervisor.Supervised):
    """A send QP of this host: its QP record and resources, and its part of a transfer."""

    ring: int
    region: int
    span: hostmem.Span
    chunk: int
    evs: dict[int, int] = dataclasses.field(default_factory=dict)
    remote: dict = dataclasses.field(default_factory=dict)
    # the transfer
    index: int = 0
    wqe_base: int = 0  # the NIC's wqe_done when this transfer began (it is free-running)
    pieces: Pieces | None = None  # this QP's WRITEs
    limit: int = 0  # WRITEs to complete (fewer than the pieces when `duration` ends it)
    slot: int = 0  # bytes of a slot of the buffers: WRITE k goes from and to slot k % slots
    slots: int = 2
    posted: int = 0
    verified: int = 0
    done_bytes: int = 0
    kick_ns: list[int] = dataclasses.field(default_factory=list)  # timing: per WRITE
    in_buffer: dict[int, bytes] = dataclasses.field(default_factory=dict)
    error: str | None = None
    ev_min_active: int = 0  # the EV profile's floor of active EVs (evreplace)
    seg: int = nic.MR_ELEM_SIZE  # payload of a full packet on this lab (nic.seg_size)
    # Packets sent per plane on EVs replaced since (evreplace): their counters went with them.
    retired_tx_pkts: dict[int, int] = dataclasses.field(default_factory=dict)
    # The EV profile's backup set (evreplace): (plane, taken) -> a wire EV or None
    backup: Any = None

    def begin(
        self, maps: nic.NicMaps, topo: Topology, dst: int, remote: dict, opts, ctl=None
    ) -> None:
        """Ready this QP for a new transfer: connect a fresh QP (INIT), or reuse
        one a previous transfer left in RTS (write with keep_open) towards the
        same remote QP. A reused QP keeps its NIC state: PSNs, MSNs, EV states
        and its congestion window go on from where the last transfer left them,
        as a verbs QP's do between work requests."""
        if opts.chunk > self.chunk:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qp.qpn:#x}: chunk {opts.chunk} exceeds the {self.chunk} "
                "its buffers were opened with (sq_open)",
            )
        slot = -(-opts.write_max // hostmem.KIB) * hostmem.KIB
        slots = 2 * self.chunk // slot
        if opts.depth > slots:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qp.qpn:#x}: depth {opts.depth} needs {opts.depth} slots of {slot} "
                f"bytes; its buffers (2 x {self.chunk} bytes, sq_open) hold {slots}",
            )
        wanted = {k: int(remote[k]) for k in ("qpn", "rkey", "region")}
        if self.qp.state == QpState.INIT:
            self.connect(maps, topo, dst, wanted, opts, ctl)
        elif self.qp.state != QpState.RTS:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qp.qpn:#x} is in {self.qp.state.name}"
                + (f" ({self.qp.err_reason})" if self.qp.err_reason else "")
                + ": close it (sq_close) and open a new one",
            )
        elif wanted != self.remote or dst != self.qp.attrs.dest_host:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qp.qpn:#x} is connected to QP {self.remote['qpn']:#x} of host "
                f"{self.qp.attrs.dest_host}: open a new QP for another destination",
            )
        self.index, self.posted, self.verified, self.done_bytes = 0, 0, 0, 0
        self.slot, self.slots = slot, slots
        self.kick_ns = []
        self.in_buffer.clear()
        self.last_una, self.attempt, self.timeouts, self.error = None, 0, 0, None
        self.reorder_kicks = 0
        self.wqe_base = maps.sq(self.qp.qpn).wqe_done

    def connect(
        self, maps: nic.NicMaps, topo: Topology, dst: int, remote: dict, opts, ctl=None
    ) -> None:
        """INIT -> RTR -> RTS with the peer's QP, and the send state in the maps.
        ctl: the daemon's controller (transport.controller), whose EV and CC
        profiles the QP takes; without it, profile 0's run of EVs."""
        if not opts.ev_profile and opts.ev_count % topo.planes:
            raise QpError(
                errno.EINVAL,
                f"ev_count must be a multiple of the lab's {topo.planes} planes "
                f"(EVs are equal per plane), not {opts.ev_count}",
            )
        table = ctl.table if ctl is not None else None
        try:
            config = opts.nscc_config(table)
        except ValueError as e:
            raise QpError(errno.EINVAL, str(e)) from None
        denied: set[int] = set()
        if ctl is not None:
            self.evs, floor, denied = ctl.qp_evs(self.qp.qpn, opts.ev_profile, opts.ev_count)
            table.attach(self.qp.qpn, None, opts.cc_profile)
            self.backup = ctl.backup_for(opts.ev_profile)
        else:
            self.evs = transfer.ev_profile(topo.planes, opts.ev_count // topo.planes)
            floor = opts.ev_min_active_for()
        self.remote = dict(remote)
        self.qp.modify(
            QpState.RTR,
            mpr=opts.mpr,
            dest_host=dst,
            dest_qpn=self.remote["qpn"],
            cc_profile_id=opts.cc_profile,
            ev_profile_id=opts.ev_profile or 0,
        )
        self.qp.modify(QpState.RTS, timeout=opts.timeout, retry=opts.retry)
        # The write's ev_min_active, if given, overrides the profile's floor.
        self.ev_min_active = floor if opts.ev_min_active is None else opts.ev_min_active
        self.seg = nic.seg_size(topo.mtu)
        cwnd, rtt_target = opts.cwnd, 0
        self.cc = None
        if config is not None:
            self.cc = nscc.QpCc(
                nscc.Nscc(
                    config,
                    link_bps=topo.rate_bps * topo.planes if topo.rate_bps else None,
                    window_pkts=opts.mpr * nic.wire.MPR_UNIT,
                    lab_rtt_ns=topo.queues.base_rtt_ns,
                    mss=self.seg,
                )
            )
            cwnd, rtt_target = self.cc.initial()
        maps.setup_sq(
            self.qp.qpn,
            local_host=self.qp.host,
            peer_host=dst,
            peer_qpn=self.remote["qpn"],
            ring=self.ring,
            evs=self.evs,
            mpr=opts.mpr,
            engine=True,
            reo_wnd_ns=opts.reorder_ns,
            cwnd=cwnd,
            cc_rtt_target_ns=rtt_target,
            ev_min_active=self.ev_min_active,
        )
        for ev in denied:  # the controller's DENIED EVs of the profile (MODIFY_EV_STATE)
            maps.set_ev_state(self.qp.qpn, ev, nic.EvState.DENIED)

    @property
    def done(self) -> bool:
        return self.error is not None or self.verified >= self.limit

    def offset(self, k: int) -> int:
        """Where WRITE k lives in the source and the destination buffers."""
        return (k % self.slots) * self.slot


class Job:
    """One transfer over one or more send QPs; `conn` waits for its result."""

    def __init__(self, maps: nic.NicMaps, qps: list[SendQp], opts: JobOptions, conn: Any) -> None:
        self.maps, self.qps, self.opts, self.conn = maps, qps, opts, conn
        share = -(-opts.size // len(qps))
        for i, sq in enumerate(qps):
            sq.index = i
            start, end = min(opts.size, i * share), min(opts.size, (i + 1) * share)
            sq.pieces = Pieces(start, end, opts.msg or max(1, end - start), opts.chunk)
            sq.limit = len(sq.pieces)
        self.started = self.ended = 0.0
        self.deadline: float | None = None  # duration: no message starts after it
        self.stopped = False  # the duration ended the transfer
        self.mismatch: list[dict] = []
        # The NIC's counters are the QPs' lifetime's: a QP reused from an
        # earlier transfer (keep_open) has counted that one's packets already.
        self._counted_before = self._tx_counts()

    def _tx_counts(self) -> tuple[dict[int, int], int]:
        """(data packets sent per plane, retransmissions) of this job's QPs so far."""
        per_plane: dict[int, int] = {}
        retx = 0
        evs = self.maps.evs_raw()  # every EV of the lab in one batch read
        for sq in self.qps:
            for plane, n in sq.retired_tx_pkts.items():
                per_plane[plane] = per_plane.get(plane, 0) + n
            with contextlib.suppress(KeyError):
                retx += self.maps.sq(sq.qp.qpn).tx_stats.get("retx_pkts", 0)
            for ev, plane in sq.evs.items():
                state = evs.get((sq.qp.qpn, ev))
                if state is not None:
                    per_plane[plane] = per_plane.get(plane, 0) + state.stats.tx_pkts
        return per_plane, retx

    # ---- running ------------------------------------------------------------------
    def start(self, now: float) -> None:
        self.started = now
        if self.opts.duration:
            self.deadline = now + self.opts.duration
        for sq in self.qps:
            sq.last_progress = sq.last_kick = now
            new = self._fill(sq, now)
            self._kick(sq, new, sq.qp.attrs.mpr * nic.wire.MPR_UNIT, now)

    def _fill(self, sq: SendQp, now: float) -> int:
        """Post WRITEs while the send queue's depth, the slots and the messages
        in flight allow; returns how many packets they make."""
        packets = 0
        while sq.posted < sq.limit and sq.posted - sq.verified < self.opts.depth:
            k = sq.posted
            if k and sq.pieces.starts_msg(k):  # a new message
                if self.deadline is not None and now >= self.deadline:
                    sq.limit, self.stopped = k, True
                    break
                n = self.opts.msgs_in_flight
                if (
                    n
                    and sq.verified < k
                    and sq.pieces.msg_of(k) - sq.pieces.msg_of(sq.verified) >= n
                ):
                    break
            packets += self._post(sq, k)
        return packets

    def _post(self, sq: SendQp, k: int) -> int:
        """Post WRITE k (its bytes in its slot first, when filling); its packets."""
        _, length = sq.pieces[k]
        at = sq.offset(k)
        data = b""
        if self.opts.fill:
            data = chunk_data(self.opts.seed, sq.index, k, length)
            if length:
                self.maps.write_region(sq.region, at, data)
        self.maps.post_write(
            sq.qp.qpn,
            length=length,
            src_region=sq.region,
            src_offset=at,
            remote_va=at,
            rkey=sq.remote["rkey"],
            imm=k if self.opts.imm else None,  # the receiver completes them in order
            wr_id=k,
        )
        sq.in_buffer[k] = data
        sq.posted += 1
        return max(1, -(-length // sq.seg))

    def _kick(self, sq: SendQp, new: int, room: int, now: float) -> None:
        """A send kick after posting `new` packets' worth of WRITEs: as many
        engine runs as they need (or, when they fill it, the room in the
        window); the engine sends queued retransmissions and the oldest data
        first. With timing, the WRITEs posted since the last kick get this
        kick's time: the doorbell, after the data was written and posted."""
        if self.opts.timing:
            t = time.monotonic_ns()
            sq.kick_ns.extend([t] * (sq.posted - len(sq.kick_ns)))
        packets = room if not new or new >= room else new
        self.maps.kick(sq.qp.qpn, max(1, packets), batch_size=256)
        sq.last_kick = now

    def step(self, now: float) -> None:
        for sq in self.qps:
            if not sq.done:
                self._step_qp(sq, now)
        if self.finished and not self.ended:
            self.ended = time.monotonic()

    def _step_qp(self, sq: SendQp, now: float) -> None:
        try:
            s = self.maps.sq(sq.qp.qpn)
        except KeyError:
            self._fail(sq, "its send state vanished from the NIC maps")
            return
        if s.state == nic.QpState.ERR:
            self._fail(sq, "the NIC put it in ERR (a fatal NACK: remote access error)")
            return
        # completions, in order: verify, then reuse the slot
        done = (s.wqe_done - sq.wqe_base) & 0xFFFFFFFF  # this transfer's WQEs completed
        completed = 0
        while sq.verified < done and sq.verified < sq.posted and sq.error is None:
            k = sq.verified
            if self.opts.verify:
                self._verify(sq, k)
            sq.in_buffer.pop(k, None)
            sq.done_bytes += sq.pieces[k][1]
            sq.verified += 1
            completed += 1
        if completed and sq.error is None:
            self._kick(sq, self._fill(sq, now), max(1, s.window_free), now)
        if sq.done:
            return
        work = (s.wqe_sent - sq.wqe_base) & 0xFFFFFFFF < sq.posted
        reason = supervisor.step(self.maps, sq, s, now, work)
        if reason is not None:
            self._fail(sq, reason)

    def _verify(self, sq: SendQp, k: int) -> None:
        _, length = sq.pieces[k]
        got = self.maps.read_region(sq.remote["region"], sq.offset(k), length)
        want = sq.in_buffer[k]
        if got != want:
            first = next(i for i in range(length) if got[i] != want[i])
            self.mismatch.append({"qpn": sq.qp.qpn, "chunk": k, "first_bad_byte": first})
            self._fail(sq, f"chunk {k} arrived different from what was sent (byte {first})")

    def cancel(self, reason: str) -> None:
        """End the transfer now: every QP of it still sending goes to ERR
        (verbs: a QP moved to ERR flushes its work requests) with the reason."""
        for sq in self.qps:
            if not sq.done:
                self._fail(sq, reason)

    def _fail(self, sq: SendQp, reason: str) -> None:
        sq.error = reason
        sq.qp.to_err(reason)
        with contextlib.suppress(KeyError):
            self.maps.set_sq_state(sq.qp.qpn, nic.QpState.ERR)

    @property
    def finished(self) -> bool:
        return all(sq.done for sq in self.qps)

    # ---- the result -----------------------------------------------------------------
    def result(self) -> dict:
        """The fields of the write's reply (mrc_nic.transport.protocol.WriteReply)."""
        seconds = (self.ended or time.monotonic()) - self.started
        errors = {f"{sq.qp.qpn:#x}": sq.error for sq in self.qps if sq.error}
        timeouts = sum(sq.timeouts for sq in self.qps)
        (plane_now, retx_now), (plane_before, retx_before) = self._tx_counts(), self._counted_before
        per_plane = {p: n - plane_before.get(p, 0) for p, n in plane_now.items()}
        retx = retx_now - retx_before
        total = sum(per_plane.values()) or 1
        sent = sum(sq.done_bytes for sq in self.qps)
        result = {
            "completed": not errors,
            "error": "; ".join(f"QP {q} in ERR: {e}" for q, e in errors.items()) or None,
            "bytes": sent,
            "size": self.opts.size,
            "seconds": round(seconds, 6),
            "goodput_bps": sent * 8 / seconds if seconds > 0 else 0.0,
            "qps": [sq.qp.as_dict() for sq in self.qps],
            "chunks": sum(sq.limit for sq in self.qps),
            "wqes_done": sum(sq.verified for sq in self.qps),
            "messages": sum(sq.pieces.msgs_within(sq.verified) for sq in self.qps),
            "msg": self.opts.msg or None,
            "stopped": self.stopped,  # `duration` ended it: fewer bytes than size
            "retransmits": retx,
            "timeouts": timeouts,
            "reorder_kicks": sum(sq.reorder_kicks for sq in self.qps),
            "per_plane_share": {str(p): n / total for p, n in sorted(per_plane.items())},
            "verified": self.opts.verify and not errors,
            "mismatch": self.mismatch,
        }
        if self.opts.timing:
            # Per QP: WRITE k is the NIC's WQE wqe_base + k (mod 2^32, the `wqe` of
            # its NIC_EV_SEND_DONE), kicked at kick_ns[k]; message m is WRITEs
            # [m * per_msg, (m + 1) * per_msg).
            result["timing"] = [
                {
                    "qpn": sq.qp.qpn,
                    "wqe_base": sq.wqe_base,
                    "per_msg": sq.pieces.per_msg,
                    "kick_ns": sq.kick_ns[: sq.verified],
                }
                for sq in self.qps
            ]
        return result
