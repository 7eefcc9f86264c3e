"""Probes that bring ASSUMED_BAD EVs back (run by the host daemon).

An EV goes ASSUMED_BAD in BPF the moment a packet sent on it is declared
lost. Nothing else brings it back: the daemon sends a PROBE on that EV (the
EV is the UDP source port, so the probe takes the same path through the
fabric's ECMP), backing off while they go unanswered and within a budget per
QP and plane (below), until the peer's NIC answers with a PROBE_REPLY, which
the NIC's XDP program turns into GOOD (and an RTT sample). While the path is
still broken the probes are lost too and the EV stays out. Probes are
control traffic, a few per millisecond at most, so they are built with
mrc_nic.nic.wire and sent from Python on an AF_PACKET socket bound to the
EV's plane port; the data path never waits for them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import socket
import struct
import time
from typing import NamedTuple

from mrc_nic import nic
from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import auth, wire

# The probe budget (docs/watch.md, "Probes"). MRC probes a suspect EV; it does
# not flood a path that is down. An EV is probed when a scan finds it
# ASSUMED_BAD, again PROBE_INTERVAL_S later, and each probe that goes
# unanswered doubles the interval to the next, up to
# PROBE_BACKOFF_MAX_S, as the QP's retries back off (mrc.h: retry.exp_cnt); an
# answer brings PROBE_INTERVAL_S back, so the probe_good replies that make it
# GOOD come within a few ms once the path works. On top, the probes of one QP
# into one plane are a token bucket of PLANE_PROBES_PER_S (burst
# PLANE_PROBE_BURST): a whole plane down (32 EVs of 128) costs it at most that,
# 32 / 64 ms = 500 a second once backed off.
# The times are the default lab's (design RTT 515 us); a slower lab stretches
# them with its round trip (Timing.for_rtt).
PROBE_INTERVAL_S = 0.002  # per EV at first; about 4 RTTs of the default lab
PROBE_BACKOFF_MAX_S = 0.064  # per unanswered EV at most: a heal is seen within this
PLANE_PROBES_PER_S = 500.0  # per QP and plane, at most (long-run)
PLANE_PROBE_BURST = 8.0  # the bucket's depth: a few fresh suspects at once
SCAN_INTERVAL_S = 0.002  # how often EV states are read (one batch read)
BACKOFF_STEPS = 32  # the longest backoff, in first intervals (64 ms / 2 ms)
# Every EV that BPF puts in ASSUMED_BAD comes with a PSN declared lost (loss
# walk, head scan, timeout kick), counted in its QP's stats.lost_pkts, which
# the supervision reads every tick (Supervised.lost_pkts); an EV blamed later
# for a silence is one of those PSNs' too, and the daemon's own changes
# (an operator's, a port down) reach EvEvents, which wakes the prober. So a
# scan is due only when our QPs' counts move, when a probe of an EV still bad
# is due (and one probe interval after it, for the reply), or when someone
# asks (wake_at: the replacer's next decision, an EV made bad). It ran every
# SCAN_INTERVAL_S while any EV of ours was bad, and every 50 ms otherwise:
# 128 lookups each on an 8-plane QP, a quarter of every daemon's CPU on a
# slow lab.
# A scan looks our EVs up one by one up to this many (a syscall each), else
# reads all of nic_evs at once: every host's EVs, copied out of the kernel and
# searched, which on a 32-host lab was most of each of 32 daemons' work.
LOOKUP_MAX = 128
_EV_KEY_SIZE = ctypes.sizeof(defs.NicEvKey)
_EV_KEY_EV = defs.NicEvKey.ev.offset
_EV_PLANE = defs.NicEv.plane.offset  # plane and state: consecutive u32s
_EV_HEAD = struct.Struct("<II")
_EV_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_EV_ACKS_AT = nic.EvStateLayout.stats.offset + nic.EvStats.acks.offset
_EV_LOST_AT = nic.EvStateLayout.stats.offset + nic.EvStats.lost_pkts.offset
_EV_REPLIES_AT = nic.EvStateLayout.stats.offset + nic.EvStats.probe_replies.offset
_EV_RTT_LAST_AT = defs.NicEv.rtt_last.offset


@dataclasses.dataclass(frozen=True)
class Timing:
    """A lab's probe times. The constants were measured on the default lab; on
    a slower one (the 32x8 lab at 2 Mbit/s: design RTT 51 ms) a probe's reply
    takes longer than the first interval, so every probe of a bad EV went
    unanswered before its reply could come, and the scan that probes ran every
    tick of every daemon (docs/benchmarks.md, "The probe scan's trigger"). So:
    a bad EV is probed at most once a design RTT, backs off to BACKOFF_STEPS
    times that, and the scan runs at most twice a round trip."""

    probe_interval_s: float = PROBE_INTERVAL_S
    backoff_max_s: float = PROBE_BACKOFF_MAX_S
    scan_interval_s: float = SCAN_INTERVAL_S

    @classmethod
    def for_rtt(cls, rtt_s: float) -> Timing:
        interval = max(PROBE_INTERVAL_S, rtt_s)
        return cls(
            probe_interval_s=interval,
            backoff_max_s=max(PROBE_BACKOFF_MAX_S, BACKOFF_STEPS * interval),
            scan_interval_s=max(SCAN_INTERVAL_S, rtt_s / 2),
        )


class EvScan(NamedTuple):
    """One EV of ours as a scan read it."""

    qpn: int
    ev: int
    plane: int
    state: int  # nic.EvState
    acks: int  # stats.acks: SACKs taken as its feedback, ever
    lost: int  # stats.lost_pkts: packets sent on it declared lost, ever
    replies: int = 0  # stats.probe_replies: PROBE_REPLYs for it, ever
    rtt_last_ns: int = 0  # the round trip of its latest acknowledged packet (0: none yet)


class ProbeDue(NamedTuple):
    """When an ASSUMED_BAD EV is probed next, and what it had heard then."""

    last: float  # when its last probe left
    interval: float  # until the next one, unless a reply comes
    replies: int  # its probe_replies when that probe left


class PlaneBucket:
    """The probes one QP may still send into one plane now (a token bucket)."""

    def __init__(self, now: float) -> None:
        self.tokens, self.at = PLANE_PROBE_BURST, now

    def take(self, now: float) -> bool:
        self.tokens = min(PLANE_PROBE_BURST, self.tokens + (now - self.at) * PLANE_PROBES_PER_S)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


TEMPLATES_MAX = 4096


def _probe_offsets() -> tuple[int, int, int, int]:
    """Where a probe frame holds its EV (UDP source port and MRC_PROBE.ev, 2
    bytes each), its number (BTH PSN, 3 bytes) and tx_ts (8 bytes)."""
    ev, psn, ts = 0xA5C3, 0x5A1234, 0x0102030405060708
    frame = bytes(wire.probe(ev=ev, dqpn=1, psn=psn, tx_ts=ts))
    evb = ev.to_bytes(2, "big")
    return (
        frame.index(evb),
        frame.rindex(evb),
        frame.index(psn.to_bytes(3, "big")),
        frame.index(ts.to_bytes(8, "big")),
    )


SPORT_AT, EV_AT, PSN_AT, TX_TS_AT = _probe_offsets()


_BTH_AT = len(wire.probe(ev=1, dqpn=1, psn=0, tx_ts=0)) - wire.PROBE_HDRS_LEN - wire.ICRC_LEN
_BTH_HEAD = struct.Struct(">B3xII")  # opcode, QPN word, A/PSN word
_PROBE_EXT = struct.Struct(">QHBxI")  # tx_ts, ev, flags, port_bitmap


def probe_frame(template: bytes, ev: int, psn: int, tx_ts: int, key: bytes | None = None) -> bytes:
    """A probe from its template (wire.probe of EV 1, psn 0, tx_ts 0 on the same
    path): the bytes wire.probe builds for ev, psn and tx_ts (the UDP checksum
    is 0, so nothing else changes), without scapy's several ms a frame. With
    the connection's key (a QP whose packets are MAC'd), its MAC (nic.auth) is
    in the ICRC slot: the peer's NIC drops a probe without it."""
    frame = bytearray(template)
    frame[SPORT_AT : SPORT_AT + 2] = frame[EV_AT : EV_AT + 2] = ev.to_bytes(2, "big")
    frame[PSN_AT : PSN_AT + 3] = (psn & wire.PSN_MASK).to_bytes(3, "big")
    frame[TX_TS_AT : TX_TS_AT + 8] = tx_ts.to_bytes(8, "big")
    if key is not None:
        opcode, qpn, apsn = _BTH_HEAD.unpack_from(frame, _BTH_AT)
        ts, ev_, flags, ports = _PROBE_EXT.unpack_from(frame, _BTH_AT + wire.BTH_LEN)
        mac = auth.probe_mac(
            key,
            opcode=opcode,
            qpn=qpn & wire.QPN_MASK,
            psn=apsn & wire.PSN_MASK,
            tx_ts=ts,
            ev=ev_,
            flags=flags,
            port_bitmap=ports,
        )
        frame[-wire.ICRC_LEN :] = mac.to_bytes(wire.ICRC_LEN, "big")
    return bytes(frame)


def plane_socket(socks: dict[int, socket.socket], plane: int) -> socket.socket:
    """The raw socket of this host's port of `plane` (eth<plane>), opened once into socks."""
    s = socks.get(plane)
    if s is None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((f"eth{plane}", 0))
        s.setblocking(False)
        socks[plane] = s
    return s


def _decode(qpn: int, ev: int, values: bytes, base: int) -> EvScan:
    """The scan's fields of the EV whose nic_evs value starts at values[base]."""
    plane, state = _EV_HEAD.unpack_from(values, base + _EV_PLANE)
    (acks,) = _EV_U64.unpack_from(values, base + _EV_ACKS_AT)
    (lost,) = _EV_U64.unpack_from(values, base + _EV_LOST_AT)
    (replies,) = _EV_U64.unpack_from(values, base + _EV_REPLIES_AT)
    (rtt,) = _EV_U64.unpack_from(values, base + _EV_RTT_LAST_AT)
    return EvScan(qpn, ev, plane, state, acks, lost, replies, rtt)


class Prober:
    def __init__(self, topo: Topology, host: int, maps: nic.NicMaps) -> None:
        self.topo, self.host, self.maps = topo, host, maps
        self.timing = Timing.for_rtt(topo.queues.base_rtt_ns / 1e9)
        self._socks: dict[int, socket.socket] = {}
        self._due: dict[tuple[int, int], ProbeDue] = {}  # (qpn, ev) -> its schedule
        self._buckets: dict[tuple[int, int], PlaneBucket] = {}  # (qpn, plane)
        self.held = 0  # probes the plane budget held back
        self._next_scan = 0.0
        self._lost_seen: int | None = None
        self._wake = 0.0  # the next scan, unless our QPs' losses move first
        self._templates: dict[tuple, bytes] = {}
        self._reader: bpfsys.BatchReader | None = None
        self.sent = 0

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def _sock(self, plane: int) -> socket.socket:
        return plane_socket(self._socks, plane)

    def wake_at(self, when: float) -> None:
        """Scan again by `when` (the replacer's next decision; 0: at the next
        step, an EV of ours went bad)."""
        self._wake = min(self._wake, when)

    def step(self, now: float, mine: dict) -> list[EvScan] | None:
        """Probe the ASSUMED_BAD EVs that are due of these send QPs ({qpn:
        SendQp}). Returns what the scan read of every EV of theirs, or None
        if no scan was due."""
        if now < self._next_scan or not mine:
            return None
        timing = self.timing
        self._next_scan = now + timing.scan_interval_s
        lost = sum(sq.lost_pkts for sq in mine.values())
        if lost == self._lost_seen and now < self._wake:
            return None
        self._lost_seen, self._wake = lost, math.inf  # until something is due
        states = self._scan(mine)
        due, self._due = self._due, {}  # only EVs still bad are kept
        for e in states:
            if e.state != nic.EvState.ASSUMED_BAD or e.ev not in mine[e.qpn].evs:
                continue  # (not in the profile: replaced, to be deleted)
            key = (e.qpn, e.ev)
            d = due.get(key)
            if d is not None and e.replies > d.replies:
                d = d._replace(interval=timing.probe_interval_s)  # answered: the path works
            if d is not None and now - d.last < d.interval:
                self._keep(key, d)
                continue
            bucket = self._buckets.get((e.qpn, e.plane))
            if bucket is None:
                bucket = self._buckets[(e.qpn, e.plane)] = PlaneBucket(now)
            if not bucket.take(now):
                self.held += 1
                self._wake = now  # due still: the next scan tries again
                if d is not None:
                    self._due[key] = d
                continue
            # Unanswered since the last probe: wait twice as long for the next.
            interval = (
                timing.probe_interval_s if d is None else min(2 * d.interval, timing.backoff_max_s)
            )
            self._keep(key, ProbeDue(now, interval, e.replies))
            # and a scan a round trip on, whose reply brings the short interval back
            self._wake = min(self._wake, now + timing.probe_interval_s)
            self._send(mine[e.qpn], e.ev, e.plane)
        if len(self._buckets) > TEMPLATES_MAX:
            self._buckets.clear()
        return states

    def _keep(self, key: tuple[int, int], d: ProbeDue) -> None:
        """An EV still bad: its next probe is due then, and so is a scan."""
        self._due[key] = d
        self._wake = min(self._wake, d.last + d.interval)

    def _scan(self, mine: dict) -> list[EvScan]:
        """The EVs of our send QPs' profiles (replaced ones, still to be
        deleted, are no one's concern here): looked up one by one when they
        are few, else one batch read of all of nic_evs (every host's EVs)."""
        wanted = [(qpn, ev) for qpn, sq in mine.items() for ev in sq.evs]
        if len(wanted) <= LOOKUP_MAX:
            return self._scan_each(wanted)
        return self._scan_all(mine)

    def _scan_each(self, wanted: list[tuple[int, int]]) -> list[EvScan]:
        fd, size = self.maps.fd(nic.EVS_MAP), ctypes.sizeof(nic.EvStateLayout)
        out = []
        for qpn, ev in wanted:
            try:
                value = bpfsys.map_lookup(fd, bytes(nic.EvKey(qpn, ev)), size)
            except FileNotFoundError:  # deleted since the profile was read
                continue
            out.append(_decode(qpn, ev, value, 0))
        return out

    def _scan_all(self, mine: dict) -> list[EvScan]:
        """One batch read of nic_evs into buffers kept between scans, decoded
        only for our QPs."""
        if self._reader is None:
            fd = self.maps.fd(nic.EVS_MAP)
            self._reader = bpfsys.BatchReader(
                fd,
                ctypes.sizeof(nic.EvKey),
                ctypes.sizeof(nic.EvStateLayout),
                bpfsys.map_info(fd).max_entries,
            )
        keys, values, count = self._reader.read()
        keys = keys[: count * _EV_KEY_SIZE]
        size = ctypes.sizeof(nic.EvStateLayout)
        out = []
        for qpn in mine:  # find our keys by their first 4 bytes, at C speed
            needle = qpn.to_bytes(4, "little")
            at = keys.find(needle)
            while at >= 0:
                if at % _EV_KEY_SIZE == 0:
                    (ev,) = _U32.unpack_from(keys, at + _EV_KEY_EV)
                    out.append(_decode(qpn, ev, values, at // _EV_KEY_SIZE * size))
                at = keys.find(needle, at + 1)
        return out

    def _send(self, sq, ev: int, plane: int) -> None:
        bitmap = self.maps.port_bitmap(self.host)
        if not bitmap >> plane & 1:
            return  # the port is down or DISABLED: no probe leaves it, the EV stays out
        key = (sq.qp.qpn, sq.remote["qpn"], plane, bitmap)
        template = self._templates.get(key)
        if template is None:
            port = self.maps.port(self.host, plane)
            ends = wire.Endpoints(
                src_mac=port["mac"],
                dst_mac=port["nh_mac"],
                src_ip=str(self.topo.host_address(self.host, plane)),
                dst_ip=str(self.topo.host_address(sq.qp.attrs.dest_host, plane)),
            )
            probe = wire.probe(
                ends, ev=1, dqpn=sq.remote["qpn"], psn=0, tx_ts=0, port_bitmap=bitmap
            )
            if len(self._templates) >= TEMPLATES_MAX:
                self._templates.clear()
            template = self._templates[key] = bytes(probe)
        # tx_ts: CLOCK_MONOTONIC, as the NIC's bpf_ktime_get_ns
        frame = probe_frame(template, ev, self.sent, time.monotonic_ns(), sq.send_key)
        try:
            self._sock(plane).send(frame)
            self.sent += 1
        except OSError:
            pass  # the port is down: the EV stays out until it is back
