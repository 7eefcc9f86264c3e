"""The CQ ring reader: a completion queue's BPF ring buffer, read by the
process that owns the CQ (docs/nic-program.md, "Completion queues").

The daemon creates the ring (the size of the lab's template), points
its index of nic_cq_rings at it and hands the session its fd (create_cq's
ring_fd); records() reads every completion the NIC wrote, through shared
memory (no syscall), as formats.CQE tuples. lost() is the NIC's count of
what it could not write into a full ring: what its index of nic_cq_lost
(mapped read-only; the map is frozen) gained since the CQ was made.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os

from mrc_nic.nic.cq_maps import CQ_LOST_BYTES
from mrc_nic.nic.driver.formats import CQE
from mrc_nic.nic.events import EventReader


class CqRing:
    """CQ `index` + 1's ring, read through ring_fd (owned from now on)."""

    def __init__(self, ring_fd: int, index: int, lost: mmap.mmap, lost_base: int = 0) -> None:
        """lost: nic_cq_lost mapped (read-only), a __u64 per CQ index; lost_base:
        its count at `index` when the CQ was made (create_cq's lost_base).
        OSError, ValueError: the fd is closed, nothing is left open."""
        self.index, self.fd, self._lost, self._base = index, ring_fd, lost, lost_base
        self.reader = None
        try:
            self.reader = EventReader(self.fd)  # the mapped ring, read without syscalls
        except BaseException:
            self.close()
            raise
        # records(): every completion record in the ring now, oldest first, consumed
        # (a partial: the poll path pays one C-level call for it)
        self.records = functools.partial(self.reader.read_unpacked, CQE)

    def lost(self) -> int:
        """Completions the NIC lost to this ring being full (the CQ is in error)."""
        at = self.index * CQ_LOST_BYTES
        return int.from_bytes(self._lost[at : at + CQ_LOST_BYTES], "little") - self._base

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        """This process's side: the mapping and the fd (the daemon clears the index)."""
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
