"""What an application process reaches of its host's NIC: DeviceMaps.

A process gets nothing of the NIC by name. Its daemon hands its session a
file descriptor for each NIC resource the session made (contract.appops,
SCM_RIGHTS): at hello the doorbell program and the CQs' lost counts (a map
no process may write), then an MR's memory, a QP's send queue and a CQ's
ring. The host's doorbell port, a faster doorbell, is a packet socket that
only a process with CAP_NET_RAW (root) opens itself. DeviceMaps maps those, and only
those, into the process (docs/api.md, "Isolation"): no pin is opened and no
privilege is needed, and another session's queues and memory cannot be
named at all.

The QPs' state in the NIC (statistics: nic_send_state and the like) is in
lab-wide maps: reading it opens them, which takes root.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket

from mrc_nic.kernel import bpfsys
from mrc_nic.nic.cq_maps import CQ_LOST_BYTES
from mrc_nic.nic.driver.cq import CqRing
from mrc_nic.nic.driver.doorbell import Ring, doorbell, open_doorbell
from mrc_nic.nic.driver.formats import WQ_SIZE
from mrc_nic.nic.driver.sq import SendQueue
from mrc_nic.nic.layout import SQ_DEPTH
from mrc_nic.nic.maps_base import detach
from mrc_nic.nic.snapshots import RqSnapshot, SqSnapshot


def _map_fd(fd: int, size: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> mmap.mmap:
    """The first `size` bytes of the map behind fd, shared with BPF; fd is closed
    (the mapping keeps the map alive)."""
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=prot)
    finally:
        os.close(fd)


class DeviceMaps:
    """One host's NIC as an application process reaches it: what its session got."""

    def __init__(
        self, lab: str, *, kick_fd: int, cq_lost_fd: int, netns_name: str | None = None
    ) -> None:
        """The hello reply's descriptors (contract.appops.HelloReply), which this
        object owns from now on. netns_name: the host's namespace, where its
        doorbell port is (None: this process's own)."""
        self.lab = lab
        self._views: list[mmap.mmap] = []  # writable mappings: private pages at close
        self.program_fd = kick_fd
        self.port: tuple[socket.socket, int] | None = None
        self._cq_lost: mmap.mmap | None = None
        self._stats = None  # the lab's NicMaps, opened for statistics only (root)
        try:
            self.port = open_doorbell(netns_name)  # root's (CAP_NET_RAW); None: kick_fd
            size = bpfsys.map_info(cq_lost_fd).max_entries * CQ_LOST_BYTES
        except BaseException:
            os.close(cq_lost_fd)
            self.close()
            raise
        # frozen: PROT_WRITE is refused, and so is every update
        self._cq_lost = _map_fd(cq_lost_fd, size, mmap.PROT_READ)

    # ---- a QP's queues ---------------------------------------------------------------
    def send_queue(self, sq_fd: int, depth: int = SQ_DEPTH) -> SendQueue:
        """The send queue the daemon gave a QP (create_qp's sq_fd, now owned here)."""
        view = _map_fd(sq_fd, WQ_SIZE)
        self._views.append(view)
        return SendQueue(view, 0, depth)

    def doorbell(self, qpn: int) -> Ring:
        """QP qpn's doorbell (driver.doorbell.doorbell): the port, else the program."""
        return doorbell(self.program_fd, qpn, self.port)

    def cq_ring(self, index: int, ring_fd: int, lost_base: int) -> CqRing:
        """CQ `index`'s ring buffer (create_cq's ring_fd, now the ring's); its
        losses are what nic_cq_lost[index] gains over lost_base."""
        return CqRing(ring_fd, index, self._cq_lost, lost_base)

    # ---- an MR's memory --------------------------------------------------------------
    def memory_window(
        self, memory_fd: int, start: int, length: int
    ) -> tuple[mmap.mmap, memoryview]:
        """An MR's memory (reg_mr's memory_fd, closed here) mapped whole, and a
        view of its bytes [start, start + length). The mapping is the caller's:
        closing it fails (BufferError) while a view of it is alive."""
        try:
            info = bpfsys.map_info(memory_fd)
            size = info.max_entries * info.value_size
            if not (start >= 0 and length >= 1 and start + length <= size):
                raise ValueError(f"bytes [{start}, {start + length}) are outside the MR's {size}")
        except BaseException:
            os.close(memory_fd)
            raise
        mapping = _map_fd(memory_fd, size)
        return mapping, memoryview(mapping)[start : start + length]

    # ---- a QP's state in the NIC, for statistics (root) -------------------------------
    def _lab_maps(self):
        if self._stats is None:
            from mrc_nic.nic.maps import NicMaps  # the whole NIC: root's

            self._stats = NicMaps.open(self.lab)
        return self._stats

    def send_state(self, qpn: int) -> SqSnapshot:
        """A send QP's state (KeyError before RTS, or once destroyed)."""
        return self._lab_maps().sq(qpn)

    def recv_state(self, qpn: int) -> RqSnapshot:
        """A receive QP's state (KeyError before RTR, or once destroyed)."""
        return self._lab_maps().rq(qpn)

    def tx_per_plane(self, qpn: int) -> dict[int, int]:
        """Data packets a send QP has sent on each plane, over its current EVs."""
        out: dict[int, int] = {}
        for (owner, _), ev in self._lab_maps().evs_raw().items():
            if owner == qpn:
                out[ev.plane] = out.get(ev.plane, 0) + ev.stats.tx_pkts
        return out

    def close(self) -> None:
        """Unmap and close everything; pages a caller's view still reaches become
        private ones first (as NicMaps.close)."""
        for view in self._views:
            detach(view)
            with contextlib.suppress(BufferError):
                view.close()
        self._views.clear()
        if self.port is not None:
            self.port[0].close()
            self.port = None
        if self.program_fd >= 0:
            os.close(self.program_fd)
            self.program_fd = -1
        if self._cq_lost is not None:
            self._cq_lost.close()
            self._cq_lost = None
        if self._stats is not None:
            self._stats.close()
            self._stats = None
