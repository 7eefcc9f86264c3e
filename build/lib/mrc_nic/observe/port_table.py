"""Every switch port's BPF counters in one batch read.

SwitchPortMaps.counters() costs one bpf(2) lookup per port direction: 80 for
the default lab, 512 for clos-8, each decoded on its own. A stream at 10 Hz
reads them all every time, so this reads the whole per-CPU array with one
BPF_MAP_LOOKUP_BATCH into buffers kept between reads, and sums the CPUs once
(the backlog high-water mark takes the largest CPU's value instead). A port
direction whose bytes did not change since the previous read keeps its
record, the same read-only object (jsonenc.Frozen): most ports of a big lab
are idle at any moment, and an unchanged record costs neither decoding nor,
in a stream, JSON encoding.
"""

from __future__ import annotations

import ctypes
import os
import struct

from mrc_nic.fabric.switchport import (
    COUNTERS_MAP,
    MAX_COUNTERS,
    CountersLayout,
    PortCounters,
    pin_dir,
    port_key,
)
from mrc_nic.kernel import bpfsys, pins
from mrc_nic.observe.jsonenc import Frozen

FIELDS = [name for name, _ in CountersLayout._fields_]
_MAX_AT = [i for i, name in enumerate(FIELDS) if name in MAX_COUNTERS]
# Every field of struct sp_counters is a u64 (the layout test checks the struct).
_ONE_CPU = struct.Struct(f"={len(FIELDS)}Q")
ZERO = Frozen(dict.fromkeys(FIELDS, 0))


class PortCounterTable:
    """The open counters map of a lab's switch ports; read() takes a fresh copy."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        self._fd = pins.open_pinned(
            lab, pin_dir(lab) / COUNTERS_MAP, "BPF maps", ctypes.sizeof(CountersLayout)
        )
        try:
            slot = bpfsys.percpu_slot_size(_ONE_CPU.size)
            cpus = bpfsys.possible_cpus()
            self._value_size = slot * cpus
            self._batch = bpfsys.BatchReader(
                self._fd, 4, self._value_size, bpfsys.map_info(self._fd).max_entries
            )
        except BaseException:
            self.close()
            raise
        # One CPU's values follow another's; a slot may end in padding.
        self._cpu_starts = [i * slot // 8 for i in range(cpus)]
        self._all_cpus = struct.Struct(f"={self._value_size // 8}Q")
        self._last: tuple[bytes, bytes] = (b"", b"")
        self._raw: dict[int, bytes] = {}
        self._rows: dict[int, Frozen] = {}

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
        keys, values, count = self._batch.read()
        if (keys, values) == self._last:
            return self  # not a packet anywhere since the last read
        self._last = (keys, values)
        size = self._value_size
        old_raw, old_rows = self._raw, self._rows
        raw_by_key: dict[int, bytes] = {}
        rows: dict[int, Frozen] = {}
        n = len(FIELDS)
        starts = self._cpu_starts
        unpack = self._all_cpus.unpack_from
        for i, key in enumerate(struct.unpack_from(f"={count}I", keys)):
            raw = values[i * size : (i + 1) * size]
            raw_by_key[key] = raw
            if old_raw.get(key) == raw:
                rows[key] = old_rows[key]
                continue
            words = unpack(raw)
            per_cpu = [words[s : s + n] for s in starts]
            totals = list(map(sum, zip(*per_cpu, strict=True)))
            for f in _MAX_AT:
                totals[f] = max(cpu[f] for cpu in per_cpu)
            rows[key] = Frozen(zip(FIELDS, totals, strict=True))
        self._raw, self._rows = raw_by_key, rows
        return self

    @property
    def rows(self) -> dict[int, Frozen]:
        """{port key: counters} as of the last read(), for lookups only (ZERO if
        a key is missing): read-only records, each the same object while its
        counters stay the same."""
        return self._rows

    def row(self, key: int) -> Frozen:
        """Counters of one port key (switchport.port_key) as of the last read(), zeros
        if never seen: a read-only record, the same object while the counters stay."""
        return self._rows.get(key, ZERO)

    def as_dict(self, port_id: int, direction: int) -> dict[str, int]:
        """Counters of one port direction as of the last read() (zeros if never seen)."""
        return dict(self._rows.get(port_key(port_id, direction), ZERO))

    def counters(self, port_id: int, direction: int) -> PortCounters:
        """The same as SwitchPortMaps.counters, so faults.fault_drops takes either."""
        return PortCounters(**self.as_dict(port_id, direction))
