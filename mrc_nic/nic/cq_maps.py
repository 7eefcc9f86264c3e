"""Completion queues: nic_cq_rings, an array of ring buffers, and their lost counts.

A CQ is a BPF ring buffer the daemon creates (create_cq_ring) for a session,
which polls it (events.EventReader over its fd: mmap, and epoll on fileno()).
Putting its fd at an index of nic_cq_rings (set_cq_ring) lets the NIC write
completion records there: QP setup names the CQ as index + 1
(setup_sq(cq=...), setup_rq(cq=...); 0 is "no CQ": records go to
nic_events). The array holds a reference to the ring, so the NIC can write
it after the application closed its fd; clear_cq_ring drops it (records for
that index then count CQ_OVERRUN). What a full ring lost is counted at the
same index of nic_cq_lost, a map no process may write (the loader freezes
it): a CQ's own losses are what its index gained since the CQ was made.
docs/nic-program.md, "Completion queues".
"""

from __future__ import annotations

import contextlib
import mmap

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic.layout import BPF_MAP_TYPE_RINGBUF, CQ_LOST_MAP, CQ_RINGS_MAP
from mrc_nic.nic.maps_base import u32_key

CQ_LOST_BYTES = 8  # a __u64 per CQ


class CqMaps:
    """NicMaps' part for completion queues: nic_cq_rings and its template's size."""

    def create_cq_ring(self, *, name: str = "mrc_cq") -> int:
        """A new ring buffer of cq_ring_bytes for a CQ; its fd (the caller owns it:
        close it when done, after clear_cq_ring)."""
        return bpfsys.ringbuf_create(self.cq_ring_bytes, name=name)

    def set_cq_ring(self, index: int, ring_fd: int) -> None:
        """Make the ring buffer behind ring_fd CQ index + 1 (index 0 .. max_cqs - 1):
        from now on, completions of the QPs set up with cq=index + 1 go there.
        Replaces a ring already at that index."""
        pins.check_range("index", index, self.max_cqs - 1)
        if not (isinstance(ring_fd, int) and ring_fd >= 0):
            raise ValueError(f"ring_fd must be an open file descriptor, not {ring_fd!r}")
        info = bpfsys.map_info(ring_fd)  # OSError (EBADF, EINVAL) if not a BPF map
        if info.type != BPF_MAP_TYPE_RINGBUF:
            raise ValueError(f"fd {ring_fd} is not a BPF ring buffer (map type {info.type})")
        bpfsys.map_update(self._fds[CQ_RINGS_MAP], u32_key(index), u32_key(ring_fd))

    def clear_cq_ring(self, index: int) -> None:
        """Take the ring out of index (nothing there: nothing to do). Records for
        its QPs are then lost, counted CQ_OVERRUN."""
        pins.check_range("index", index, self.max_cqs - 1)
        with contextlib.suppress(FileNotFoundError):
            bpfsys.map_delete(self._fds[CQ_RINGS_MAP], u32_key(index))

    def cq_lost_memory(self) -> mmap.mmap:
        """nic_cq_lost mapped into this process (read-only): completions each CQ
        lost to a full ring, a __u64 per index."""
        return self._mapped(CQ_LOST_MAP, self.max_cqs * CQ_LOST_BYTES, mmap.PROT_READ)

    def cq_lost_fd(self) -> int:
        """A new fd of nic_cq_lost (the caller owns it): what an application maps.
        The map is frozen (the loader's): no process writes it, BPF alone counts."""
        return bpfsys.obj_get(pins.pin_dir(self.lab) / CQ_LOST_MAP)

    def cq_lost(self, index: int) -> int:
        """Completions CQ index + 1 lost because its ring was full, since the lab
        began: a CQ's own are what its index gained since the CQ was created."""
        pins.check_range("index", index, self.max_cqs - 1)
        at = index * CQ_LOST_BYTES
        return int.from_bytes(self.cq_lost_memory()[at : at + CQ_LOST_BYTES], "little")

    def cq_ring_id(self, index: int) -> int | None:
        """The map id of the ring at index (bpf(2) gives ids, not fds), or None."""
        pins.check_range("index", index, self.max_cqs - 1)
        try:
            raw = bpfsys.map_lookup(self._fds[CQ_RINGS_MAP], u32_key(index), 4)
        except FileNotFoundError:
            return None
        return int.from_bytes(raw, "little")


def check_cq(name: str, cq: int, max_cqs: int) -> None:
    """A QP's CQ: 0 (none) or index + 1 of nic_cq_rings."""
    if not (isinstance(cq, int) and 0 <= cq <= max_cqs):
        raise ValueError(
            f"{name} must be 0 (no CQ) or a CQ index + 1 in [1, {max_cqs}], not {cq!r}"
        )
