"""What an application process reaches of its lab's NIC maps: DeviceMaps.

NicMaps is the whole NIC (every QP's state, every map, 70-odd methods), for
the daemons and the tests. An application (verbs, the native library's
Python twin) needs far less: its send queues, its CQs' rings, windows of
NIC memory for its MRs, the program to kick, and reads of its own QPs'
state for statistics. DeviceMaps holds the NicMaps privately and offers
only that, so application code cannot come to depend on the rest.
"""

from __future__ import annotations

import mmap

from mrc_nic.nic.driver.cq import CqRing
from mrc_nic.nic.driver.doorbell import Ring, doorbell, open_doorbell
from mrc_nic.nic.driver.formats import WQ_SIZE
from mrc_nic.nic.driver.sq import SendQueue
from mrc_nic.nic.layout import SQ_DEPTH
from mrc_nic.nic.maps import NicMaps
from mrc_nic.nic.snapshots import RqSnapshot, SqSnapshot


class DeviceMaps:
    """One lab's NIC as an application process uses it (MapsMissing if the lab is down)."""

    def __init__(self, lab: str, netns_name: str | None = None) -> None:
        """netns_name: the host's namespace, where its doorbell port is (None:
        this process's own; no port: kicks take BPF_PROG_RUN)."""
        self._maps = NicMaps.open(lab)
        try:
            self.program_fd = self._maps.program_fd()
            self._wq = self._maps.wq_memory()
            self._wq_rings = len(self._wq) // WQ_SIZE
            self.port = open_doorbell(netns_name)  # shared by the QPs
        except BaseException:
            self._maps.close()
            raise

    # ---- a QP's queues ---------------------------------------------------------------
    def send_queue(self, ring: int, depth: int = SQ_DEPTH) -> SendQueue:
        """The send queue the daemon gave a QP (create_qp's ring)."""
        if not 0 <= ring < self._wq_rings:
            raise ValueError(f"ring {ring} is not one of nic_wq's {self._wq_rings}")
        return SendQueue(self._wq, ring, depth)

    def doorbell(self, qpn: int) -> Ring:
        """QP qpn's doorbell (driver.doorbell.doorbell)."""
        return doorbell(self.program_fd, qpn, self.port)

    def cq_ring(self, index: int) -> CqRing:
        """A new ring buffer for CQ `index` (create_cq's), the NIC pointed at it."""
        return CqRing(self._maps, index)

    # ---- an MR's memory --------------------------------------------------------------
    def memory_window(self, start: int, length: int) -> tuple[mmap.mmap, memoryview]:
        """Bytes [start, start + length) of NIC memory, mapped (NicMaps.memory_window)."""
        return self._maps.memory_window(start, length)

    # ---- a QP's state in the NIC, for statistics ---------------------------------------
    def send_state(self, qpn: int) -> SqSnapshot:
        """A send QP's state (KeyError before RTS, or once destroyed)."""
        return self._maps.sq(qpn)

    def recv_state(self, qpn: int) -> RqSnapshot:
        """A receive QP's state (KeyError before RTR, or once destroyed)."""
        return self._maps.rq(qpn)

    def tx_per_plane(self, qpn: int) -> dict[int, int]:
        """Data packets a send QP has sent on each plane, over its current EVs."""
        out: dict[int, int] = {}
        for (owner, _), ev in self._maps.evs_raw().items():
            if owner == qpn:
                out[ev.plane] = out.get(ev.plane, 0) + ev.stats.tx_pkts
        return out

    def close(self) -> None:
        """Unmap and close everything; pages a caller's view still reaches become
        private ones first (NicMaps.close)."""
        if self.port is not None:
            self.port[0].close()
            self.port = None
        self._maps.close()
