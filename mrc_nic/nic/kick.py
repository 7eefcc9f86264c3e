"""Kicks: the send engine run from user space with BPF_PROG_RUN."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import socket
import struct

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
    meta = ctypes.sizeof(Kick)
    ctx = bytes(bpfsys.XdpMd(data=meta, data_end=len(data)))
    if live:
        return bpfsys.prog_test_run(
            prog_fd,
            data,
            repeat=packets,
            data_size_out=0,
            ctx_in=ctx,
            flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES,
            # The kernel refuses larger batches (TEST_XDP_MAX_BATCH) with E2BIG.
            batch_size=min(batch_size, LIVE_BATCH_MAX),
        )
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
