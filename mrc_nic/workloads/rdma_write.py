"""`mrc-nic write`: a WRITE transfer between two hosts, through their daemons.

The connection dance of verbs, over the daemons' control sockets: the
sender's daemon opens send QPs (sq_open: QP numbers, INIT), the receiver's
opens one receive QP per send QP (rq_open: QP number, rkey, region; RTR),
then the sender's runs the transfer (write: RTR -> RTS, post, reliability,
verification) and answers when it ends; the receive QPs are closed last,
whatever happened. A Connection keeps both ends open for several writes.
The caller's process never touches a packet or a map.
"""

from __future__ import annotations

import contextlib

from mrc_nic.fabric import testbed
from mrc_nic.lab import ctl, topology
from mrc_nic.lab.protocol import encode_reply
from mrc_nic.lab.state import open_lab
from mrc_nic.transport import hostmem, nscc
from mrc_nic.transport import protocol as ops
from mrc_nic.transport.qp import Retry

# Transfer sizes: the one-letter units are binary, as RDMA tools count
# (perftest, ib_write_bw): 1G = 1 GiB; the long forms as everywhere (GB, GiB).
WRITE_SIZE_UNITS = {**topology.SIZE_UNITS, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
SIZE_MAX = 2**40
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


def parse_size(text: str) -> int:
    """'1G', '64MiB', '1.5G', '4096' -> bytes; 1 byte .. 1 TiB."""
    value = topology.parse_size(text, WRITE_SIZE_UNITS)
    if value < 1:
        raise ValueError(f"size must be at least 1 byte, not {text!r}")
    if value > SIZE_MAX:
        raise ValueError(
            f"{text!r} is {topology.format_size(value)}, over the limit of "
            f"{topology.format_size(SIZE_MAX)} per transfer"
        )
    return value


def lab_defaults(topo: topology.Topology, cc_profile: int | None = None) -> tuple[int, int]:
    """(timeout exponent, reorder window ns) that fit a lab's design RTT and
    the QPs' CC profile (None: the default, NSCC)."""
    from mrc_nic.transport import qp, sendjob

    rtt = topo.queues.base_rtt_ns
    timeout = sendjob.DEFAULT_TIMEOUT
    while qp.TIMEOUT_UNIT_S * 2**timeout * 1e9 < TIMEOUT_RTTS * rtt and timeout < qp.TIMEOUT_MAX:
        timeout += 1
    reorder = sendjob.DEFAULT_REORDER_NS
    if rtt > topology.QueueParams.base_rtt_ns:  # slower than the default lab
        rtts = REORDER_RTTS_FIXED if cc_profile == nscc.FIXED else REORDER_RTTS
        reorder = min(max(reorder, rtts * rtt), sendjob.REORDER_NS_MAX)
    return timeout, reorder


def default_chunk(
    topo: topology.Topology, size_hint: int = SIZE_MAX, qps: int = 1, peers: int | None = None
) -> int:
    """Each WRITE's size when none is given: what host memory allows for
    `size_hint` bytes over `qps` QPs (hostmem.chunk_bytes), with `peers`
    transfers landing at one host at once (default: every other host of the
    lab, hosts - 1)."""
    half = hostmem.half_elems(testbed.nic_memory_elems(topo), topo.hosts) * hostmem.KIB
    peers = topo.hosts - 1 if peers is None else peers
    return hostmem.chunk_bytes(-(-size_hint // qps), qps, half, peers=peers)


class Connection:
    """Send QPs at `src` connected to receive QPs at `dst`, for one or more
    writes (a verbs connection: QPs live across work requests).

    chunk: each WRITE's size (default: what host memory allows for `size_hint`
    bytes, default_chunk). on_open: called with the receive QPs
    ([{qpn, rkey, region}]) once they exist, before anything is sent (a caller
    that watches their counters). close() (or the with block's end) closes
    both ends, whatever happened, and returns the receive QPs' stats."""

    def __init__(
        self,
        lab_name: str,
        src: str,
        dst: str,
        *,
        qps: int = 1,
        size_hint: int = SIZE_MAX,
        chunk: int | None = None,
        mpr: int = 8,
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
        if chunk is None:
            chunk = default_chunk(topo, size_hint, qps)
        self.lab, self.src, self.dst, self.topo = lab_name, src, dst, topo
        self.chunk, self.mpr = chunk, mpr
        self.qpns = ctl.call(lab_name, src, ops.SqOpen(count=qps, chunk=chunk)).qpns
        self._send_open = True
        self.remote: list[dict] = []
        try:
            self.remote = ctl.call(
                lab_name, dst, ops.RqOpen(peer=src, peer_qpns=self.qpns, chunk=chunk, mpr=mpr)
            ).qps
            if on_open is not None:
                on_open(self.remote)
        except BaseException:
            self.close()
            raise

    def write(
        self,
        size: int,
        *,
        imm: bool = False,
        verify: bool = False,
        cwnd: int | None = None,
        reorder_ns: int | None = None,
        timeout: int | None = None,
        retry: dict | None = None,
        seed: int = 1,
        wait: float = 3600.0,
        cc_profile: int | None = None,
        cc: dict | None = None,
        ev_count: int | None = None,
        ev_min_active: int | None = None,
        keep_open: bool = True,
        **fields,
    ) -> dict:
        """One transfer of `size` bytes (in chunk-sized WRITEs); the sender
        daemon's result (see sendjob.Job.result). keep_open=False lets the
        daemon close the send QPs when it ends (the last write). ev_count,
        ev_min_active: the EV profile of QPs not connected yet (the first
        write). retry: {linear_cnt, exp_cnt}. fields: more fields of the write
        request (protocol.Write)."""
        if not self._send_open:
            raise RuntimeError("this connection's send QPs are closed")
        scaled_timeout, scaled_reorder = lab_defaults(self.topo, cc_profile)
        # Options left as None take the request's defaults.
        optional = {
            "cwnd": cwnd,
            "cc_profile": cc_profile,
            "cc": cc,
            "ev_count": ev_count,
            "ev_min_active": ev_min_active,
            "retry": Retry(**retry) if retry else None,
            **fields,
        }
        request = ops.Write(
            dst=self.dst,
            qpns=self.qpns,
            remote=self.remote,
            size=size,
            chunk=self.chunk,
            mpr=self.mpr,
            imm=imm,
            verify=verify,
            seed=seed,
            timeout=scaled_timeout if timeout is None else timeout,
            reorder_ns=scaled_reorder if reorder_ns is None else reorder_ns,
            keep_open=keep_open,
            **{key: value for key, value in optional.items() if value is not None},
        )
        try:
            reply = ctl.call(self.lab, self.src, request, timeout=wait)
        except KeyboardInterrupt:
            self.cancel("cancelled by the user (Ctrl-C)")
            raise
        # The daemon closed them unless asked not to (a refused write closes
        # nothing: close() does).
        self._send_open = keep_open
        result = {"ok": True, **encode_reply(reply)}  # the reply as it came, as a dict
        result["chunk"] = self.chunk
        result["src"], result["dst"] = self.src, self.dst
        return result

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """End a write running on this connection (from another thread, or
        after a KeyboardInterrupt): its QPs go to ERR. Best effort."""
        with contextlib.suppress(ctl.DaemonError, OSError):
            ctl.call(self.lab, self.src, ops.Cancel(qpns=self.qpns, reason=reason))

    def close(self) -> dict:
        """Close the receive QPs (their stats are returned) and the send QPs
        still open. A write still running on them (a caller that gave up
        waiting) is cancelled; the daemon closes its QPs when it ends, since
        nobody waits for it any more."""
        stats: dict = {}
        try:
            if self.remote:
                closed = ctl.call(
                    self.lab, self.dst, ops.RqClose(qpns=[q["qpn"] for q in self.remote])
                )
                stats = closed.stats
                self.remote = []
        finally:
            if self._send_open:
                self._send_open = False
                self.cancel("the connection was closed")
                # EBUSY: the cancelled write ends at the daemon's next tick and
                # closes them; ENOENT: gone already
                with contextlib.suppress(ctl.DaemonError, OSError):
                    ctl.call(self.lab, self.src, ops.SqClose(qpns=self.qpns))
        return stats

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write(
    lab_name: str,
    src: str,
    dst: str,
    size: int,
    *,
    qps: int = 1,
    chunk: int | None = None,
    mpr: int = 8,
    on_open=None,
    **options,
) -> dict:
    """Run one transfer on a Connection of its own; returns the sender
    daemon's result (see sendjob.Job.result) with the receive QPs' stats
    under "receiver". options: those of Connection.write (imm, verify, cwnd,
    reorder_ns, timeout, retry, seed, wait, cc_profile: the send QPs' CC
    profile, mrc_nic.transport.nscc.PROFILES, default NSCC; cc: NSCC fields to override)."""
    conn = Connection(
        lab_name, src, dst, qps=qps, size_hint=size, chunk=chunk, mpr=mpr, on_open=on_open
    )
    try:
        result = conn.write(size, keep_open=False, **options)
    finally:
        receiver = conn.close()
    result["receiver"] = receiver
    return result
