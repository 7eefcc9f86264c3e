"""One RDMA WRITE between two hosts of a lab, through the NIC fast path.

This sets up one QP pair and two memory regions in the lab's NIC maps, posts
the WRITE and starts the BPF send engine: a live-frames kick sends the first
window, then every SACK clocks out the next packet. Python only polls the
QP's progress and, as the daemon does, resends what a stall leaves unacknowledged
(a timeout kick) and restarts the ACK clock. It touches no packet.

It is the building block of the tests and benchmarks until the transport
daemon and `mrc-nic write` exist; it uses fixed QP numbers and regions, so
one transfer at a time per lab. Its regions and QPs are the daemon's: owner
0 and protection domain 0, which the NIC lets work only with each other.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from mrc_nic import nic
from mrc_nic.kernel import cpustat
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import auth as nic_auth
from mrc_nic.nic.wire import MPR_UNIT
from mrc_nic.transport.ev_profiles import AUTO_EV_BASE

EV_BASE = AUTO_EV_BASE  # EVs ride in the UDP source port: the AUTO profile's, from 49152
SRC_REGION, DST_REGION = 1, 2
SRC_RKEY, DST_RKEY = 0x1111, 0x1234
STALL_SECONDS = 0.02


def qpn(host: int, index: int = 1) -> int:
    """Lab-unique QP numbers: host << 16 | index (docs/fastpath.md)."""
    return host << 16 | index


def ev_profile(planes: int, per_plane: int = 32) -> dict[int, int]:
    """{EV: plane}, planes interleaved so consecutive packets change plane."""
    return {EV_BASE + i: i % planes for i in range(planes * per_plane)}


@dataclass
class WriteResult:
    length: int
    seconds: float
    complete: bool
    byte_exact: bool | None  # None: not verified
    per_plane_pkts: list[int]
    retransmits: int
    top_up_kicks: int
    counters: dict[str, int]
    cpu_cores: float | None  # busy CPUs of the whole machine while packets flowed (/proc/stat)

    @property
    def goodput_bps(self) -> float:
        return self.length * 8 / self.seconds if self.seconds else 0.0


def write(
    topo: Topology,
    src: str,
    dst: str,
    length: int,
    *,
    mpr: int = 2,
    evs_per_plane: int = 32,
    verify: bool = True,
    timeout: float = 60.0,
    data: bytes | None = None,
    auth: bool = False,
) -> WriteResult:
    """WRITE `length` bytes (a multiple of 1 KiB) from src's region to dst's; with
    auth, every packet of the QP pair carries a MAC under a fresh key (nic.auth)."""
    if length <= 0 or length % nic.MR_ELEM_SIZE:
        raise ValueError(f"length must be a positive multiple of {nic.MR_ELEM_SIZE}")
    s_host, d_host = topo.nodes[src].index, topo.nodes[dst].index
    elems = length // nic.MR_ELEM_SIZE
    evs = ev_profile(topo.planes, evs_per_plane)
    tx_qp, rx_qp = qpn(s_host), qpn(d_host)
    key = nic_auth.new_key() if auth else None
    with nic.NicMaps.open(topo.lab) as maps:
        if 2 * elems > maps.mr_elems:
            raise ValueError(
                f"{length} bytes twice (source and destination) do not fit the "
                f"lab's {maps.mr_elems * nic.MR_ELEM_SIZE} bytes of NIC memory"
            )
        maps.set_region(SRC_REGION, first_elem=0, n_elems=elems, rkey=SRC_RKEY)
        maps.set_region(DST_REGION, first_elem=elems, n_elems=elems, rkey=DST_RKEY)
        data = os.urandom(length) if data is None else data
        maps.write_region(SRC_REGION, 0, data)
        maps.write_region(DST_REGION, 0, bytes(length))
        # Every host's transfer QP receives in the same slot of nic_rx_qps
        # (QP index 1): free it of an earlier transfer to another host.
        for host in range(topo.hosts):
            if host != d_host:
                with contextlib.suppress(KeyError):
                    maps.delete_rq(qpn(host))
        maps.setup_rq(
            rx_qp,
            local_host=d_host,
            peer_host=s_host,
            peer_qpn=tx_qp,
            region=DST_REGION,
            mpr=mpr,
            auth_key=key,
        )
        maps.setup_sq(
            tx_qp,
            local_host=s_host,
            peer_host=d_host,
            peer_qpn=rx_qp,
            ring=0,
            evs=evs,
            mpr=mpr,
            engine=True,
            auth_key=key,
        )
        before = maps.counters()
        maps.post_write(tx_qp, length=length, src_region=SRC_REGION, remote_va=0, rkey=DST_RKEY)
        cpu_before = cpustat.sample()
        seconds, top_ups = _run(maps, tx_qp, mpr * MPR_UNIT, timeout)
        cpu = cpustat.busy_cores(cpu_before, cpustat.sample())
        complete = maps.sq(tx_qp).wqe_done >= 1
        exact = maps.read_region(DST_REGION, 0, length) == data if verify else None
        per_plane = [0] * topo.planes
        for ev, plane in evs.items():
            per_plane[plane] += maps.ev(tx_qp, ev).stats["tx_pkts"]
        after = maps.counters()
    moved = {k: after[k] - before.get(k, 0) for k in after}
    return WriteResult(
        length, seconds, complete, exact, per_plane, moved.get("tx_retx", 0), top_ups, moved, cpu
    )


def _run(maps: nic.NicMaps, tx_qp: int, window: int, timeout: float) -> tuple[float, int]:
    """Kick a window, let the ACK clock carry the rest; returns (seconds, top-up kicks)."""
    t0 = time.monotonic()
    maps.kick(tx_qp, window, batch_size=window)  # one batch (nic caps it at 256)
    top_ups, last_una, last_move = 0, None, t0
    while (sq := maps.sq(tx_qp)).wqe_done < 1 and time.monotonic() - t0 < timeout:
        now = time.monotonic()
        if sq.snd_una != last_una:
            last_una, last_move = sq.snd_una, now
        elif now - last_move > STALL_SECONDS:
            # Nothing acknowledged for a while: resend what is that old (lost
            # with no SACK after it to tell, e.g. the last packets of a burst
            # that a queue dropped), as the daemon's timeout does, and restart
            # a stalled ACK clock.
            maps.timeout_kick(tx_qp, max(1, sq.window_free), age_ns=int(STALL_SECONDS * 1e9))
            top_ups, last_move = top_ups + 1, now
        time.sleep(0.0005)
    return time.monotonic() - t0, top_ups
