"""The doorbell: the send engine run from user space, by BPF_PROG_RUN on a
kick frame (struct nic_kick as XDP metadata) or by a frame sent into the
host's doorbell port (docs/nic-program.md, "Kicks"). run_kick is every
kick's (the daemon's, the tests'); doorbell() is an application QP's, on
the post path.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import socket
import struct
from collections.abc import Callable

from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys, netns, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.layout import Kick, KickOp

# A kick's template frame (bpf/nic_structs.h, struct nic_kick): broadcast, EtherType 0x88B5
# (IEEE 802 local experimental), zero padding to 64 bytes; the engine overwrites it.
KICK_ETHERTYPE = defs.NIC_KICK_ETHERTYPE
KICK_TEMPLATE = bytes.fromhex("ffffffffffff000000000000") + KICK_ETHERTYPE.to_bytes(2, "big")


KICK_TEMPLATE += bytes(64 - len(KICK_TEMPLATE))
# Room for the frame a non-live kick run returns (metadata + the largest data packet).
_KICK_OUT = 4096


def kick_frame(qpn: int, op: KickOp = KickOp.SEND, arg: int = 0, age_ns: int = 0) -> bytes:
    """BPF_PROG_RUN's data_in for a kick of QP qpn: the metadata, then the template."""
    pins.check_range("qpn", qpn, wireconst.QPN_MASK)
    pins.check_range("arg", arg, 0xFFFF)
    pins.check_range("age_ns", age_ns, pins.U64_MAX)
    return bytes(Kick(qpn=qpn, op=op, arg=arg, age_ns=age_ns)) + KICK_TEMPLATE


LIVE_BATCH_MAX = 256  # frames per batch of a live-frames BPF_PROG_RUN, at most


def _kick_ctx(data: bytes) -> bytes:
    """BPF_PROG_RUN's ctx_in for a kick frame: the data starts after struct nic_kick."""
    return bytes(bpfsys.XdpMd(data=ctypes.sizeof(Kick), data_end=len(data)))


def _live_run(
    prog_fd: int, data: bytes, ctx: bytes, packets: int, batch_size: int
) -> bpfsys.TestRunResult:
    """packets engine runs with live frames: each sends at most one packet."""
    return bpfsys.prog_test_run(
        prog_fd, data, repeat=packets, data_size_out=0, ctx_in=ctx,
        flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch_size,
    )  # fmt: skip


def run_kick(
    prog_fd: int,
    qpn: int,
    packets: int,
    *,
    live: bool = True,
    batch_size: int = 0,
    op: KickOp = KickOp.SEND,
    arg: int = 0,
    age_ns: int = 0,
) -> bpfsys.TestRunResult:
    """Run the send engine `packets` times for QP qpn; each run sends at most one packet.

    live: with BPF_F_TEST_XDP_LIVE_FRAMES, every packet really leaves through
    the devmap nic_tx_ports (batch_size frames per batch; 0: the kernel's 64),
    and nothing comes back but the mean run time (duration, ns). Not live:
    the runs reuse one buffer, and data_out is the last run's frame (the
    metadata stripped); nothing is sent. The counters say what the runs did
    (kick_sent, kick_idle and the tx_* extras). op and arg: struct nic_kick's
    (every run of a TIMEOUT kick queues; NicMaps.timeout_kick runs one).
    """
    if not (isinstance(packets, int) and 1 <= packets <= pins.U32_MAX):
        raise ValueError(f"packets must be a positive integer, not {packets!r}")
    data = kick_frame(qpn, op, arg, age_ns)
    ctx = _kick_ctx(data)
    if live:
        # The kernel refuses larger batches (TEST_XDP_MAX_BATCH) with E2BIG.
        return _live_run(prog_fd, data, ctx, packets, min(batch_size, LIVE_BATCH_MAX))
    result = bpfsys.prog_test_run(
        prog_fd,
        data,
        repeat=packets,
        data_size_out=_KICK_OUT,
        ctx_in=ctx,
        ctx_size_out=ctypes.sizeof(bpfsys.XdpMd),
    )
    start = bpfsys.XdpMd.from_buffer_copy(result.ctx_out).data
    return result._replace(data_out=result.data_out[start:])


# The doorbell port (docs/nic-program.md, "Kicks"): a veth in each host's
# namespace; the NIC program on its NIC end (ifindex NIC_DOORBELL_IFINDEX)
# takes every frame sent into the other end as a kick.
DOORBELL_IFNAME = "doorbell"  # the applications' end
DOORBELL_NIC_IFNAME = "nicdb"  # the NIC's end
DOORBELL_IFINDEX = defs.NIC_DOORBELL_IFINDEX
# Engine runs a doorbell sends as that many frames (about 3 us each); more are one
# live-frames BPF_PROG_RUN (about 18 us, then about 0.1 us a run).
DOORBELL_FRAMES_MAX = 4
_SOL_PACKET, _PACKET_QDISC_BYPASS = 263, 20  # linux/socket.h, linux/if_packet.h
_SIOCGIFMTU = 0x8921


def open_doorbell(netns_name: str | None = None) -> tuple[socket.socket, int] | None:
    """An AF_PACKET socket on a host's doorbell port (made inside netns_name,
    if given) and the frame size to send there, or None if the host has no
    doorbell port (a lab made before it): kicks then take BPF_PROG_RUN.

    A kick frame is as long as the port's MTU allows: the engine shrinks it to
    the data packet it builds, and a frame received on a veth may have no
    room to grow."""
    ctx = netns.entered(netns_name) if netns_name else contextlib.nullcontext()
    try:
        with ctx:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: sends only
    except OSError:
        return None
    try:
        sock.bind((DOORBELL_IFNAME, 0))
        sock.setsockopt(_SOL_PACKET, _PACKET_QDISC_BYPASS, 1)
        ifreq = fcntl.ioctl(sock, _SIOCGIFMTU, struct.pack("16si12x", DOORBELL_IFNAME.encode(), 0))
        mtu = struct.unpack_from("i", ifreq, 16)[0]
    except OSError:
        sock.close()
        return None
    return sock, 14 + mtu


def doorbell_frame(qpn: int, size: int, op: KickOp = KickOp.SEND, arg: int = 0) -> bytes:
    """A doorbell port frame: the kick template's Ethernet header, struct nic_kick, zeros."""
    pins.check_range("qpn", qpn, wireconst.QPN_MASK)
    frame = KICK_TEMPLATE[:14] + bytes(Kick(qpn=qpn, op=op, arg=arg, age_ns=0))
    return frame + bytes(max(0, size - len(frame)))


Ring = Callable[[int], "bpfsys.TestRunResult | None"]


def doorbell(prog_fd: int, qpn: int, port: tuple[socket.socket, int] | None = None) -> Ring:
    """An application QP's doorbell: ring(n) makes n runs of the send engine
    (each sends at most one packet; the SACKs clock the rest). Up to
    DOORBELL_FRAMES_MAX runs are frames sent into the host's doorbell port
    (port: open_doorbell's socket and frame size); more, or any the port
    refuses, one BPF_PROG_RUN with live frames. ring returns the
    BPF_PROG_RUN's result, or None. Everything per QP is made here once: a
    post's doorbell is a call and a send."""
    data = kick_frame(qpn)
    ctx = _kick_ctx(data)
    batch_max, frames_max = LIVE_BATCH_MAX, DOORBELL_FRAMES_MAX
    send = frame = None
    if port is not None:
        send, frame = port[0].send, doorbell_frame(qpn, port[1])

    def ring(packets: int) -> bpfsys.TestRunResult | None:
        packets = max(1, min(packets, batch_max))
        if send is not None and packets <= frames_max:
            try:
                for _ in range(packets):
                    send(frame)
                return None
            except OSError:
                pass  # the port's queue is full: BPF_PROG_RUN below (extra runs are idle)
        return _live_run(prog_fd, data, ctx, packets, packets)

    return ring
