"""Every switch port's BPF counters in one batch read.

SwitchPortMaps.counters() costs one bpf(2) lookup per port direction: 80 for
the default lab, 512 for clos-8, each decoded on its own. A stream at 10 Hz
reads them all every time, so this reads the whole per-CPU array with
BPF_MAP_LOOKUP_BATCH (one or two syscalls) and sums the CPUs once (the
backlog high-water mark takes the largest CPU's value instead).
"""

from __future__ import annotations

import ctypes
import os
import struct

from mrc_nic import bpfsys, pins
from mrc_nic.switchport import (
    COUNTERS_MAP,
    MAX_COUNTERS,
    CountersLayout,
    PortCounters,
    pin_dir,
    port_key,
)

FIELDS = [name for name, _ in CountersLayout._fields_]
_MAX_AT = [i for i, name in enumerate(FIELDS) if name in MAX_COUNTERS]
# Every field of struct sp_counters is a u64 (the layout test checks the struct).
_ONE_CPU = struct.Struct(f"={len(FIELDS)}Q")


class PortCounterTable:
    """The open counters map of a lab's switch ports; read() takes a fresh copy."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        self._fd = pins.open_pinned(
            lab, pin_dir(lab) / COUNTERS_MAP, "BPF maps", ctypes.sizeof(CountersLayout)
        )
        self._value_size = bpfsys.percpu_slot_size(_ONE_CPU.size) * bpfsys.possible_cpus()
        self._rows: dict[int, PortCounters] = {}

    def __enter__(self) -> PortCounterTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self) -> PortCounterTable:
        """Copy every port key's counters, summed over CPUs; returns self."""
        slot = bpfsys.percpu_slot_size(_ONE_CPU.size)
        cpus = range(bpfsys.possible_cpus())
        rows = {}
        for key, value in bpfsys.map_lookup_batch(self._fd, 4, self._value_size):
            per_cpu = [_ONE_CPU.unpack_from(value, i * slot) for i in cpus]
            totals = list(map(sum, zip(*per_cpu, strict=True)))
            for i in _MAX_AT:
                totals[i] = max(cpu[i] for cpu in per_cpu)
            rows[int.from_bytes(key, "little")] = dict(zip(FIELDS, totals, strict=True))
        self._rows = rows
        return self

    def as_dict(self, port_id: int, direction: int) -> dict[str, int]:
        """Counters of one port direction as of the last read() (zeros if never seen)."""
        row = self._rows.get(port_key(port_id, direction))
        return dict(row) if row is not None else dict.fromkeys(FIELDS, 0)

    def counters(self, port_id: int, direction: int) -> PortCounters:
        """The same as SwitchPortMaps.counters, so faults.fault_drops takes either."""
        return PortCounters(**self.as_dict(port_id, direction))
