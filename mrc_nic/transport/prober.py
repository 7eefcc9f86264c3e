"""Probes that bring ASSUMED_BAD EVs back (run by the host daemon).

An EV goes ASSUMED_BAD in BPF the moment a packet sent on it is declared
lost. Nothing else brings it back: the daemon sends a PROBE on that EV (the
EV is the UDP source port, so the probe takes the same path through the
fabric's ECMP) every PROBE_INTERVAL_S until the peer's NIC answers with a
PROBE_REPLY, which the NIC's XDP program turns into GOOD (and an RTT
sample). While the path is still broken the probes are lost too and the EV
stays out. Probes are control traffic, a few per millisecond at most, so
they are built with mrc_nic.nic.wire and sent from Python on an AF_PACKET socket
bound to the EV's plane port; the data path never waits for them.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import time
from typing import NamedTuple

from mrc_nic import nic
from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import auth, wire

PROBE_INTERVAL_S = 0.002  # per EV; about 20 RTTs of this lab
SCAN_INTERVAL_S = 0.002  # how often EV states are read (one batch read)
# Every EV that BPF puts in ASSUMED_BAD comes with a PSN declared lost (the
# NIC's LOST counter: loss walk, head scan, timeout kick). While that counter
# stands still and no EV of ours was ASSUMED_BAD at the last scan, there is
# nothing to probe, and the scan, a read of every EV of the lab (2048 on
# clos-8), waits: it runs at least this often.
IDLE_SCAN_S = 0.05
_EV_KEY_SIZE = ctypes.sizeof(defs.NicEvKey)
_EV_KEY_EV = defs.NicEvKey.ev.offset
_EV_PLANE = defs.NicEv.plane.offset  # plane and state: consecutive u32s
_EV_HEAD = struct.Struct("<II")
_EV_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_EV_ACKS_AT = nic.EvStateLayout.stats.offset + nic.EvStats.acks.offset
_EV_LOST_AT = nic.EvStateLayout.stats.offset + nic.EvStats.lost_pkts.offset


class EvScan(NamedTuple):
    """One EV of ours as a scan read it."""

    qpn: int
    ev: int
    plane: int
    state: int  # nic.EvState
    acks: int  # stats.acks: SACKs taken as its feedback, ever
    lost: int  # stats.lost_pkts: packets sent on it declared lost, ever


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


class Prober:
    def __init__(self, topo: Topology, host: int, maps: nic.NicMaps) -> None:
        self.topo, self.host, self.maps = topo, host, maps
        self._socks: dict[int, socket.socket] = {}
        self._last_probe: dict[tuple[int, int], float] = {}
        self._next_scan = 0.0
        self._lost_seen: int | None = None
        self._bad = False  # an EV of ours was ASSUMED_BAD at the last scan
        self._idle_until = 0.0
        self._templates: dict[tuple, bytes] = {}
        self._reader: bpfsys.BatchReader | None = None
        self.sent = 0

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def _sock(self, plane: int) -> socket.socket:
        return plane_socket(self._socks, plane)

    def step(self, now: float, mine: dict) -> list[EvScan] | None:
        """Probe the ASSUMED_BAD EVs that are due of these send QPs ({qpn:
        SendQp}). Returns what the scan read of every EV of theirs, or None
        if no scan was due."""
        if now < self._next_scan or not mine:
            return None
        self._next_scan = now + SCAN_INTERVAL_S
        lost = self.maps.counter(nic.Counter.LOST)
        if lost == self._lost_seen and not self._bad and now < self._idle_until:
            return None
        self._lost_seen, self._idle_until, self._bad = lost, now + IDLE_SCAN_S, False
        states = self._scan(mine)
        last, self._last_probe = self._last_probe, {}  # only EVs still bad are kept
        for e in states:
            if e.state != nic.EvState.ASSUMED_BAD or e.ev not in mine[e.qpn].evs:
                continue  # (not in the profile: replaced, to be deleted)
            self._bad = True
            key = (e.qpn, e.ev)
            if now - last.get(key, 0.0) < PROBE_INTERVAL_S:
                self._last_probe[key] = last[key]
                continue
            self._last_probe[key] = now
            self._send(mine[e.qpn], e.ev, e.plane)
        return states

    def _scan(self, mine: dict) -> list[EvScan]:
        """Our EVs: one batch read of nic_evs into
        buffers kept between scans, decoded only for our QPs."""
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
                    i = at // _EV_KEY_SIZE
                    plane, state = _EV_HEAD.unpack_from(values, i * size + _EV_PLANE)
                    base = i * size
                    (acks,) = _EV_U64.unpack_from(values, base + _EV_ACKS_AT)
                    (lost,) = _EV_U64.unpack_from(values, base + _EV_LOST_AT)
                    (ev,) = _U32.unpack_from(keys, at + _EV_KEY_EV)
                    out.append(EvScan(qpn, ev, plane, state, acks, lost))
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
