"""NicMaps: the lab's NIC maps through their pins, one part per role."""

from __future__ import annotations

from mrc_nic.nic.cq_maps import CqMaps
from mrc_nic.nic.ev_maps import EvMaps
from mrc_nic.nic.maps_base import MapsBase
from mrc_nic.nic.memory_maps import MemoryMaps
from mrc_nic.nic.port_maps import PortMaps
from mrc_nic.nic.rev_maps import RevEvMaps
from mrc_nic.nic.rx_maps import RxQpMaps
from mrc_nic.nic.sq_maps import SendQpMaps
from mrc_nic.nic.sq_work_maps import SendWorkMaps
from mrc_nic.nic.tx_ring_maps import TxRingMaps


class NicMaps(
    RxQpMaps, RevEvMaps, MemoryMaps, SendQpMaps, SendWorkMaps, TxRingMaps, EvMaps, PortMaps,
    CqMaps, MapsBase,
):  # fmt: skip
    """QPs (both sides), EVs, regions, port bitmaps, counters and completion queues
    of a lab, through the pins.

    One class made of one part per role (rx_maps, rev_maps, sq_maps, sq_work_maps,
    tx_ring_maps, ev_maps, memory_maps, port_maps, cq_maps) over the fds and mmaps of MapsBase."""
