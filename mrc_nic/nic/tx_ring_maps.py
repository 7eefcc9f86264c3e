"""Send QPs' PSN -> EV tables (nic_tx_ring): what the engine recorded per transmission."""

from __future__ import annotations

import ctypes
import mmap

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.layout import (
    BITMAP_BITS,
    BPF_F_LOCK,
    EVS_MAP,
    MR_ELEM_SIZE,
    TX_F_PREV,
    TX_F_RETX,
    TX_RING_MAP,
    EvKey,
    TxPkt,
    TxRing,
)


class TxRingMaps:
    """NicMaps' part for the PSN -> EV tables: read them, record as the engine does."""

    def tx_ring_memory(self) -> mmap.mmap:
        """nic_tx_ring mapped into this process: every send QP's PSN -> EV table."""
        return self._mapped(TX_RING_MAP, self.tx_rings * ctypes.sizeof(TxRing))

    def _tx_offset(self, qpn: int, psn: int) -> int:
        pins.check_range("psn", psn, wireconst.PSN_MASK)
        ring = self.sq_raw(qpn).ring
        if ring >= self.tx_rings:
            raise ValueError(f"QP {qpn:#x} has ring {ring}, beyond the {self.tx_rings} rings")
        return ring * ctypes.sizeof(TxRing) + (psn % BITMAP_BITS) * ctypes.sizeof(TxPkt)

    def tx_entry(self, qpn: int, psn: int) -> TxPkt:
        """The PSN -> EV table entry where psn lives (its psn field says whose it is)."""
        at = self._tx_offset(qpn, psn)
        return TxPkt.from_buffer_copy(self.tx_ring_memory()[at : at + ctypes.sizeof(TxPkt)])

    def record_tx(
        self,
        qpn: int,
        psn: int,
        ev: int,
        *,
        tx_ts: int,
        length: int = MR_ELEM_SIZE,
        retx: bool = False,
    ) -> TxPkt:
        """Record a transmission as the send engine does: link it to the previous
        packet on the same EV, update the EV's last PSN and tx counters, and
        write the table entry. For tests and tools: the engine does this in
        BPF, under the EV's lock; here the EV is read and written back, so do
        not use it while ACKs for the QP are being processed.
        """
        pins.check_range("tx_ts", tx_ts, pins.U64_MAX)
        pins.check_range("length", length, pins.U32_MAX)
        at = self._tx_offset(qpn, psn)
        state = self.ev_raw(qpn, ev)
        entry = TxPkt(tx_ts=tx_ts, psn=psn, ev=ev, len=length)
        if state.stats.tx_pkts:
            entry.prev_psn = state.last_tx_psn
            entry.flags |= TX_F_PREV
        if retx:
            entry.flags |= TX_F_RETX
            state.stats.retx_pkts += 1
        state.last_tx_psn = psn
        state.last_tx_ts = tx_ts
        state.stats.tx_pkts += 1
        state.stats.tx_bytes += length
        bpfsys.map_update(
            self._fds[EVS_MAP],
            bytes(EvKey(qpn, ev)),
            bytes(state),
            flags=BPF_F_LOCK | bpfsys.BPF_EXIST,
        )
        self.tx_ring_memory()[at : at + ctypes.sizeof(TxPkt)] = bytes(entry)
        return entry
