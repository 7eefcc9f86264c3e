"""Packet capture of one link of a lab into a pcap file.

How: an AF_PACKET socket bound to one end of the link, opened by a child
process that has moved into that end's namespace (netns.start_in), which
writes a nanosecond pcap itself. Why not dumpcap/tshark under `ip netns
exec`: no dependency on Wireshark's capture tool and its privileges, the
bounds (count, duration, Ctrl-C) are enforced here exactly, and the kernel's
own count of packets it could not queue for us (PACKET_STATISTICS) is
reported instead of silently missing. tshark is still what reads the file.

Which end: by default the upper (switch) end. A host port's XDP program
consumes and sends the NIC's packets below the stack (XDP_TX, redirects),
where AF_PACKET does not see them; the switch end receives them through
the stack and sees both directions, data and SACKs.

Timestamps come from the kernel (SO_TIMESTAMPNS), taken when each packet
reached the socket, not when Python read it.
"""

from __future__ import annotations

import difflib
import os
import socket
import struct
import time
from dataclasses import asdict, dataclass
from typing import BinaryIO

from mrc_nic.errors import MrcNicError
from mrc_nic.kernel import netns
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab.topology import Topology

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
# Python's socket module lacks it; 35 (SO_TIMESTAMPNS_OLD) gives a native struct
# timespec, which is two 64-bit fields on the 64-bit machines this runs on.
SO_TIMESTAMPNS = 35
RCVBUF_BYTES = 16 << 20  # room for ~10k full frames while Python writes
SNAPLEN = 65535
PCAP_MAGIC_NS = 0xA1B23C4D  # pcap with nanosecond timestamps
LINKTYPE_ETHERNET = 1
MAX_DURATION = 3600.0
ENDS = ("upper", "lower")

_PCAP_HEADER = struct.Struct("=IHHiIII")
_RECORD_HEADER = struct.Struct("=IIII")
_TIMESPEC = struct.Struct("=qq")
_PACKET_STATS = struct.Struct("=II")  # struct tpacket_stats: tp_packets, tp_drops


class CaptureError(MrcNicError, ValueError):
    """A capture cannot start: unknown link, bad bounds, file not writable."""


@dataclass(frozen=True)
class Spot:
    """Where a capture is taken: one end of one link."""

    link: str
    end: str
    node: str
    ifname: str
    netns: str

    @property
    def port(self) -> str:
        return f"{self.node}:{self.ifname}"


def resolve(topo: Topology, target: str, end: str = "upper") -> Spot:
    """A link (p1.t0a-h0) or a host port (h0:eth1, h0.eth1: its host link)."""
    if end not in ENDS:
        raise CaptureError(f"--end must be upper or lower, not {end!r}")
    link = topo.links.get(target)
    if link is None:
        host, _, ifname = target.replace(":", ".").partition(".")
        if host in topo.host_names() and ifname:
            try:
                link = topo.host_port_link(host, ifname)
            except KeyError:
                link = None
    if link is None:
        host_ports = [f"{lk.lower.node}:{lk.lower.ifname}" for lk in topo.links.values()]
        close = difflib.get_close_matches(target, list(topo.links) + host_ports, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise CaptureError(
            f"no link or host port {target!r} in lab {topo.lab}{hint}: give a link "
            "(p1.t0a-h0) or a host port (h0:eth1); `mrc-nic status` lists them"
        )
    port = link.upper if end == "upper" else link.lower
    return Spot(link.name, end, port.node, port.ifname, topo.netns(port.node))


def check_bounds(count: int | None, duration: float) -> None:
    if count is not None and count < 1:
        raise CaptureError(f"--count must be at least 1, got {count}")
    if not 0 < duration <= MAX_DURATION:
        raise CaptureError(f"--duration must be more than 0 and at most {MAX_DURATION:.0f}s")


def capture(spot: Spot, out: BinaryIO, *, count: int | None, duration: float) -> dict:
    """Capture on spot into out (an open binary file); returns what was taken.

    Stops after `count` packets, after `duration` seconds, or on Ctrl-C.
    """
    check_bounds(count, duration)
    child = netns.start_in(spot.netns, _capture_here, spot.ifname, out, count, duration)
    try:
        result = child.result(timeout=duration + 10)
    except KeyboardInterrupt:
        # The child got the same SIGINT, closes the file and reports.
        result = child.result(timeout=10)
    except RuntimeError as e:
        raise CaptureError(f"capture on {spot.port} ({spot.netns}) failed: {e}") from None
    return {**asdict(spot), **result}


def pcap_header() -> bytes:
    return _PCAP_HEADER.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)


def pcap_record(sec: int, nsec: int, frame: bytes, orig_len: int | None = None) -> bytes:
    return _RECORD_HEADER.pack(sec, nsec, len(frame), orig_len or len(frame)) + frame


def _capture_here(ifname: str, out: BinaryIO, count: int | None, duration: float) -> dict:
    """In the link end's namespace (a forked child): the capture loop."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind((ifname, ETH_P_ALL))
        out.write(pcap_header())
        out.flush()  # a header in the file says the capture is listening
        packets = nbytes = 0
        stopped_by = "duration"
        start = time.monotonic()
        deadline = start + duration
        waiter = Waiter([sock])
        try:
            while (left := deadline - time.monotonic()) > 0:
                if count is not None and packets >= count:
                    stopped_by = "count"
                    break
                if not waiter.wait(min(left, 0.2)):
                    continue
                frame, ancillary, _, address = sock.recvmsg(SNAPLEN, 64)
                if address[0] != ifname:
                    continue  # queued between socket() and bind(), from another port
                sec, nsec = _kernel_time(ancillary)
                out.write(pcap_record(sec, nsec, frame))
                packets += 1
                nbytes += len(frame)
        except KeyboardInterrupt:
            stopped_by = "interrupt"
        finally:
            waiter.close()
        seconds = time.monotonic() - start
        _, kernel_drops = _PACKET_STATS.unpack(
            sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _PACKET_STATS.size)
        )
        out.flush()
    finally:
        sock.close()
        out.close()
    return {
        "packets": packets,
        "bytes": nbytes,
        "seconds": round(seconds, 3),
        "kernel_drops": kernel_drops,
        "stopped_by": stopped_by,
    }


def _kernel_time(ancillary: list) -> tuple[int, int]:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec, nsec
    now = time.time_ns()  # no timestamp given: the time we read it
    return now // 10**9, now % 10**9


def open_output(path: str) -> BinaryIO:
    """The pcap file, opened before anything starts so a bad path fails first;
    '-' is standard output."""
    if path == "-":
        return os.fdopen(os.dup(1), "wb")
    try:
        return open(path, "wb")  # noqa: SIM115 (the capture child closes it)
    except OSError as e:
        raise CaptureError(f"cannot write {path}: {e.strerror}") from None
