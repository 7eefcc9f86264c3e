"""Probes that bring ASSUMED_BAD EVs back (run by the host daemon).

An EV goes ASSUMED_BAD in BPF the moment a packet sent on it is declared
lost. Nothing else brings it back: the daemon sends a PROBE on that EV (the
EV is the UDP source port, so the probe takes the same path through the
fabric's ECMP) every PROBE_INTERVAL_S until the peer's NIC answers with a
PROBE_REPLY, which the NIC's XDP program turns into GOOD (and an RTT
sample). While the path is still broken the probes are lost too and the EV
stays out. Probes are control traffic, a few per millisecond at most, so
they are built with mrc_nic.wire and sent from Python on an AF_PACKET socket
bound to the EV's plane port; the data path never waits for them.
"""

from __future__ import annotations

import socket
import time

from mrc_nic import nic, wire
from mrc_nic.topology import Topology

PROBE_INTERVAL_S = 0.002  # per EV; about 20 RTTs of this lab
SCAN_INTERVAL_S = 0.002  # how often EV states are read (one batch read)


class Prober:
    def __init__(self, topo: Topology, host: int, maps: nic.NicMaps) -> None:
        self.topo, self.host, self.maps = topo, host, maps
        self._socks: dict[int, socket.socket] = {}
        self._last_probe: dict[tuple[int, int], float] = {}
        self._next_scan = 0.0
        self.sent = 0

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def _sock(self, plane: int) -> socket.socket:
        s = self._socks.get(plane)
        if s is None:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((f"eth{plane}", 0))
            s.setblocking(False)
            self._socks[plane] = s
        return s

    def step(self, now: float, send_qps) -> None:
        """Probe the ASSUMED_BAD EVs of these send QPs that are due."""
        if now < self._next_scan:
            return
        self._next_scan = now + SCAN_INTERVAL_S
        mine = {sq.qp.qpn: sq for sq in send_qps if sq.remote}
        if not mine:
            return
        for (qpn, ev), state in self.maps.evs_raw().items():
            sq = mine.get(qpn)
            if sq is None or state.state != nic.EvState.ASSUMED_BAD:
                continue
            if now - self._last_probe.get((qpn, ev), 0.0) < PROBE_INTERVAL_S:
                continue
            self._last_probe[(qpn, ev)] = now
            self._send(sq, ev, state.plane)

    def _send(self, sq, ev: int, plane: int) -> None:
        port = self.maps.port(self.host, plane)
        ends = wire.Endpoints(
            src_mac=port["mac"],
            dst_mac=port["nh_mac"],
            src_ip=str(self.topo.host_address(self.host, plane)),
            dst_ip=str(self.topo.host_address(sq.qp.attrs.dest_host, plane)),
        )
        frame = wire.probe(
            ends,
            ev=ev,
            dqpn=sq.remote["qpn"],
            psn=self.sent & wire.PSN_MASK,
            tx_ts=time.monotonic_ns(),  # CLOCK_MONOTONIC, as the NIC's bpf_ktime_get_ns
            port_bitmap=self.maps.port_bitmap(self.host),
        )
        try:
            self._sock(plane).send(bytes(frame))
            self.sent += 1
        except OSError:
            pass  # the port is down: the EV stays out until it is back
