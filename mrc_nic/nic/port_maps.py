"""Host ports: port bitmaps, admin state, peers' port status, MACs, counters, the event ring."""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any

from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic.events import EventReader
from mrc_nic.nic.layout import (
    COUNTERS_MAP,
    EVENTS_MAP,
    FANOUT_MAP,
    HOST_CTL_MAP,
    MAX_HOSTS,
    MAX_PLANES,
    PEER_PORTS_MAP,
    PORT_UP_MAP,
    PORTS_MAP,
    TX_PORTS_MAP,
    Counter,
    Port,
)
from mrc_nic.nic.maps_base import mac_bytes, u32_key


class PortMaps:
    """NicMaps' part for host ports: port bitmaps, MACs, counters, the event ring."""

    def set_port_bitmap(self, host: int, bitmap: int) -> None:
        """Bit p: host's port p is up. Copied into every SACK/NACK the host sends."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("bitmap", bitmap, pins.U32_MAX)
        bpfsys.map_update(self._fds[PORT_UP_MAP], u32_key(host), u32_key(bitmap))

    def port_bitmap(self, host: int) -> int:
        pins.check_range("host", host, MAX_HOSTS - 1)
        return int.from_bytes(bpfsys.map_lookup(self._fds[PORT_UP_MAP], u32_key(host), 4), "little")

    def host_ctl(self, host: int) -> defs.NicHostCtl:
        """What host's daemon told the NIC (struct nic_host_ctl)."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        raw = bpfsys.map_lookup(
            self._fds[HOST_CTL_MAP], u32_key(host), ctypes.sizeof(defs.NicHostCtl)
        )
        return defs.NicHostCtl.from_buffer_copy(raw)

    def _set_host_ctl(self, host: int, **fields: int) -> None:
        value = self.host_ctl(host)
        for name, v in fields.items():
            setattr(value, name, v)
        bpfsys.map_update(self._fds[HOST_CTL_MAP], u32_key(host), bytes(value))

    def set_ports_disabled(self, host: int, bitmap: int) -> None:
        """Bit p: host's port p is administratively DISABLED: it answers no PROBE.
        (The port bitmap, set_port_bitmap, is what tells peers; the caller takes
        DISABLED ports out of it too.)"""
        pins.check_range("bitmap", bitmap, pins.U32_MAX)
        self._set_host_ctl(host, ports_disabled=bitmap)

    def ports_disabled(self, host: int) -> int:
        return self.host_ctl(host).ports_disabled

    def set_ev_event_cq(self, host: int, cq: int) -> None:
        """The CQ (index + 1 of nic_cq_rings; 0: none) whose ring takes a copy of
        every EV state record of host's send QPs: its daemon's EV event queue."""
        pins.check_range("cq", cq, self.max_cqs)
        self._set_host_ctl(host, ev_event_cq=cq)

    def peer_ports(self, host: int) -> list[defs.NicPeerPort]:
        """The port status updates host took, by peer host id (rx_ns 0: none from
        that peer). One lookup."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        raw = bpfsys.map_lookup(
            self._fds[PEER_PORTS_MAP], u32_key(host), ctypes.sizeof(defs.NicPeerPorts)
        )
        return list(defs.NicPeerPorts.from_buffer_copy(raw).peers)

    def forget_peer_ports(self, host: int) -> None:
        """Forget every port status update host took (its send QPs go by ACKs alone)."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        bpfsys.map_update(
            self._fds[PEER_PORTS_MAP], u32_key(host), bytes(ctypes.sizeof(defs.NicPeerPorts))
        )

    def counters(self) -> dict[str, int]:
        """Outcome counters (Counter names, lower case), summed over CPUs."""
        return {c.name.lower(): self.counter(c) for c in Counter}

    def counter(self, which: Counter) -> int:
        """One outcome counter, summed over CPUs."""
        values = bpfsys.map_lookup_percpu(self._fds[COUNTERS_MAP], u32_key(which), 8)
        return sum(int.from_bytes(v, "little") for v in values)

    def events(self) -> EventReader:
        """A reader of the event ring buffer (one consumer at a time)."""
        return EventReader(self._fds[EVENTS_MAP])

    def set_port(
        self,
        host: int,
        plane: int,
        *,
        ifindex: int,
        mac: str,
        nh_mac: str,
        netns: str | None = None,
    ) -> None:
        """Tell the send engine about host port `plane` of `host`: its MAC, the next
        hop's MAC (data packets' Ethernet source and destination) and its device.

        ifindex is the port's index inside netns (the host's namespace; None:
        this process's), where the devmap entry is written, since the kernel
        resolves it in the writer's namespace. ifindex 0 removes the device.
        """
        from mrc_nic.kernel import netns as netns_mod  # pyroute2: only for this

        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        pins.check_range("ifindex", ifindex, pins.U32_MAX)
        value = Port(mac=mac_bytes(mac), nh_mac=mac_bytes(nh_mac), ifindex=ifindex)
        key = u32_key(host * MAX_PLANES + plane)
        with netns_mod.entered(netns) if netns else contextlib.nullcontext():
            if ifindex:
                bpfsys.map_update(self._fds[TX_PORTS_MAP], key, u32_key(ifindex))
            else:
                with contextlib.suppress(FileNotFoundError):
                    bpfsys.map_delete(self._fds[TX_PORTS_MAP], key)
        bpfsys.map_update(self._fds[PORTS_MAP], key, bytes(value))

    def set_fanout(self, host: int, ifindex: int, *, netns: str | None = None) -> None:
        """Give `host` its ACK fan-out (docs/nic-program.md, "ACK coalescing"): for
        each k of 1 .. NIC_FANOUT_MAX, a devmap whose first k entries are device
        ifindex (the host's `doorbell`, whose peer runs the NIC program), so that a
        SACK acknowledging k PSNs becomes k kicks. ifindex is resolved in netns
        (the host's namespace; None: this process's), as set_port's. ifindex 0
        removes the host's maps: SACKs then run the engine once, in place.
        """
        from mrc_nic.kernel import netns as netns_mod  # pyroute2: only for this

        fan = defs.NIC_FANOUT_MAX
        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("ifindex", ifindex, pins.U32_MAX)
        for k in range(1, fan + 1):
            key = u32_key(host * fan + k - 1)
            if not ifindex:
                with contextlib.suppress(FileNotFoundError):
                    bpfsys.map_delete(self._fds[FANOUT_MAP], key)
                continue
            # The shape of nic_fanout_template: an inner map must match it.
            fd = bpfsys.map_create(bpfsys.BPF_MAP_TYPE_DEVMAP, 4, 4, fan, name=f"nic_fanout{k}")
            try:
                with netns_mod.entered(netns) if netns else contextlib.nullcontext():
                    for i in range(k):
                        bpfsys.map_update(fd, u32_key(i), u32_key(ifindex))
                bpfsys.map_update(self._fds[FANOUT_MAP], key, u32_key(fd))
            finally:
                os.close(fd)  # the outer map holds it

    def port(self, host: int, plane: int) -> dict[str, Any]:
        """What set_port stored: mac, nh_mac, ifindex."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        raw = bpfsys.map_lookup(
            self._fds[PORTS_MAP], u32_key(host * MAX_PLANES + plane), ctypes.sizeof(Port)
        )
        value = Port.from_buffer_copy(raw)
        return {
            "mac": ":".join(f"{b:02x}" for b in value.mac),
            "nh_mac": ":".join(f"{b:02x}" for b in value.nh_mac),
            "ifindex": value.ifindex,
        }
