"""The WQE writer: one QP's send queue, its own map mapped here (struct nic_wq).

User space writes a whole WQE into slot `index % depth`, then publishes
`posted = index + 1`; the engine reads them in the other order and copies
its progress into `done`, so a poster sees free slots without a syscall
(docs/nic-program.md, "Send queues"). verbs.QP posts through this (its
post_send inlines write's two lines in its loop), and so does
NicMaps.post_write (the daemon's transfers, the tests).
"""

from __future__ import annotations

import mmap

from mrc_nic.nic.driver.formats import U32, WQ_DONE, WQ_HEAD, WQ_POSTED, WQ_SIZE, WQ_SLOTS, WQE
from mrc_nic.nic.layout import SQ_DEPTH


class SendQueue:
    """The send queue in `memory` (its map, mapped into this process) at byte `at`."""

    __slots__ = ("at", "depth", "memory", "slots")

    def __init__(self, memory: mmap.mmap | bytearray, at: int = 0, depth: int = SQ_DEPTH) -> None:
        self.memory, self.depth = memory, depth
        self.at = at  # the queue's struct nic_wq
        self.slots = self.at + WQ_SLOTS  # its first WQE slot

    def close(self) -> None:
        """Unmap the queue (a view of a map: the mmap this process made)."""
        if isinstance(self.memory, mmap.mmap):
            self.memory.close()

    def head(self) -> tuple[int, int]:
        """(posted, done): WQEs given to the NIC and completed by it (free-running)."""
        return WQ_HEAD.unpack_from(self.memory, self.at)

    def done(self) -> int:
        return U32.unpack_from(self.memory, self.at + WQ_DONE)[0]

    def write(self, index: int, wqe: tuple) -> None:
        """WQE number `index` (formats.WQE_FIELDS, in order) into its slot."""
        WQE.pack_into(self.memory, self.slots + (index % self.depth) * WQE.size, *wqe)

    def publish(self, posted: int) -> None:
        """Give the NIC every WQE below `posted`: after the WQEs, never before."""
        U32.pack_into(self.memory, self.at + WQ_POSTED, posted)

    def clear(self) -> None:
        """An empty queue (a QP set up again): posted = done = 0, no WQEs."""
        self.memory[self.at : self.at + WQ_SIZE] = bytes(WQ_SIZE)


def watch_send_queue(sq_fd: int) -> SendQueue:
    """A read-only view of the send queue behind sq_fd (which stays the
    caller's): its head() without a syscall, for whoever supervises it."""
    return SendQueue(mmap.mmap(sq_fd, WQ_SIZE, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ))
