"""Host ports: port bitmaps, MACs, counters, the event ring."""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic.events import EventReader
from mrc_nic.nic.layout import (
    COUNTERS_MAP,
    EVENTS_MAP,
    MAX_HOSTS,
    MAX_PLANES,
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
