"""Receive QPs: nic_rx_qps (slot by QPN), owners, receive locks."""

from __future__ import annotations

import ctypes
import errno
import sys

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.cq_maps import check_cq
from mrc_nic.nic.layout import (
    BITMAP_BITS,
    BPF_F_LOCK,
    MPR_MAX,
    MSG_F_IMM,
    MSG_F_VALID,
    MSG_SLOTS,
    REGION_BY_RKEY,
    REGION_NONE,
    RQ_TAG_USED,
    RX_LOCK_SIZE,
    RX_LOCKS_MAP,
    RX_QPS_MAP,
    RX_SLOTS_MAP,
    TIMELINE_BINS,
    TIMELINE_MAP,
    QpState,
    RqLayout,
    rx_lock_slot,
)
from mrc_nic.nic.maps_base import check_qp_ends, locked_lookup, set_auth_key, u32_key
from mrc_nic.nic.snapshots import RqSnapshot, _enum_or_int, _fields


class RxQpMaps:
    """NicMaps' part for receive QPs: nic_rx_qps (slot by QPN), owners, receive locks."""

    def setup_rq(
        self,
        qpn: int,
        *,
        local_host: int,
        peer_host: int,
        peer_qpn: int,
        region: int,
        mpr: int = 1,
        state: QpState = QpState.RTR,
        psn: int = 0,
        msn: int = 0,
        cq: int = 0,
        auth_key: bytes | None = None,
        max_wimm_dest: int = 0,
        dyn_mpr: bool = True,
        pd: int = 0,
        ack_every: int = 0,
        ack_delay_ns: int = 0,
    ) -> None:
        """Create (or reset) the receive state of a QP: nothing received, cum_psn = psn.

        cq: the receive CQ, index + 1 of nic_cq_rings (set_cq_ring); its
        WRITE_WITH_IMM completions go there instead of nic_events (0: no CQ).
        auth_key: the connection's 16-byte key (nic.auth): a data packet without
        a right MAC is dropped, and every answer carries one.
        max_wimm_dest: the most WRITE_WITH_IMM messages held incomplete (OCP
        max_wimm_dest; 0: MSG_SLOTS); one more is NACKed NO_RESOURCE.
        dyn_mpr: our answers advertise mpr (OCP MRC_QP_CAP_DYNAMIC_MPR; else MPR 0).
        pd: the QP's protection domain: a WRITE into a region of another PD
        (set_region pd) is a remote access error (0: the daemon's QPs and regions).
        ack_every, ack_delay_ns: ACK coalescing (docs/nic-program.md): answer one
        data packet in ack_every, or the next after ack_delay_ns (0: the lab's
        NIC_ACK_EVERY and NIC_ACK_DELAY_NS; ack_every 1: every packet).
        The whole value is written, so counters, bitmap and messages start at
        zero. Do it before data flows to this QP: a packet being processed
        meanwhile may be lost (the sender resends it).
        """
        check_qp_ends(
            qpn, local_host=local_host, peer_host=peer_host, peer_qpn=peer_qpn, mpr=mpr, psn=psn
        )
        if region not in (REGION_BY_RKEY, REGION_NONE):  # else: rkey names the MR, or none
            pins.check_range("region", region, self.max_regions - 1)
        pins.check_range("msn", msn, wireconst.MSN_MASK)
        pins.check_range("max_wimm_dest", max_wimm_dest, MSG_SLOTS)
        pins.check_range("pd", pd, pins.U32_MAX)
        pins.check_range("ack_every", ack_every, 0xFFFF)
        pins.check_range("ack_delay_ns", ack_delay_ns, pins.U32_MAX)
        check_cq("cq", cq, self.max_cqs)
        owner = self._free_rx_slot_owner(qpn)
        value = RqLayout(
            state=QpState(state),
            local_host=local_host,
            peer_host=peer_host,
            peer_qpn=peer_qpn,
            mpr=mpr,
            region=region,
            cum_psn=psn,
            msn=msn,
            recv_cq=cq,
            max_wimm_dest=max_wimm_dest,
            dyn_mpr=int(bool(dyn_mpr)),
            pd=pd,
            ack_every=ack_every,
            ack_delay_ns=ack_delay_ns,
        )
        set_auth_key(value, auth_key)  # data must carry a MAC, our answers do
        # The slot first, then its owner (and a QP set up again loses its owner
        # meanwhile): a packet that arrives after the write finds the new value
        # whole. One that passed the owner check before it may still finish
        # on the old or a mixed value (docs/nic-program.md, "Receive QPs").
        if owner:
            bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), u32_key(0))
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(value))
        bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), u32_key(qpn | RQ_TAG_USED))

    def _free_rx_slot_owner(self, qpn: int) -> int:
        """The owner of QP qpn's receive slot: none (0) or qpn itself, else
        FileExistsError naming the QP that holds it and what to do."""
        owner = self._rx_slot_owner(qpn)
        if owner not in (0, qpn | RQ_TAG_USED):
            holder = owner & wireconst.QPN_MASK
            raise FileExistsError(
                errno.EEXIST,
                f"QP {qpn:#x} cannot receive: its receive slot {self.rx_slot(qpn)} "
                f"(QPN & {self.max_qps - 1:#x}) is QP {holder:#x}'s. "
                f"Use a QPN that differs from it in the low {self.max_qps.bit_length() - 1} "
                f"bits, or free the slot first (NicMaps.delete_rq({holder:#x}))",
            )
        return owner

    def rx_slot(self, qpn: int) -> int:
        """The slot of nic_rx_qps (and nic_rx_slots) where QP qpn receives."""
        return qpn & (self.max_qps - 1)

    def _rx_key(self, qpn: int) -> bytes:
        return u32_key(self.rx_slot(qpn))

    def _rx_slot_owner(self, qpn: int) -> int:
        """The owner word of QP qpn's receive slot: QPN | RQ_TAG_USED, or 0."""
        raw = bpfsys.map_lookup(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), 4)
        return int.from_bytes(raw, sys.byteorder)

    def _check_rx_owner(self, qpn: int) -> None:
        """KeyError unless QP qpn owns its receive slot. One writer per slot is
        assumed (the daemons' QPNs never share one): a check and the access
        after it are two syscalls."""
        if qpn & ~wireconst.QPN_MASK or self._rx_slot_owner(qpn) != qpn | RQ_TAG_USED:
            raise KeyError(f"no receive state for QP {qpn:#x}")

    def rq_raw(self, qpn: int) -> RqLayout:
        """The receive state of a QP as stored, read under its lock (KeyError if none)."""
        self._check_rx_owner(qpn)
        raw = locked_lookup(self._fds[RX_QPS_MAP], self._rx_key(qpn), ctypes.sizeof(RqLayout))
        self._check_rx_owner(qpn)  # not deleted (nor replaced) while we read
        return RqLayout.from_buffer_copy(raw)

    def rq(self, qpn: int) -> RqSnapshot:
        """The receive state of a QP, decoded (KeyError if none)."""
        raw = self.rq_raw(qpn)
        window = raw.mpr * wireconst.MPR_UNIT if 1 <= raw.mpr <= MPR_MAX else BITMAP_BITS
        received = []
        for i in range(window):
            psn = (raw.cum_psn + i) & wireconst.PSN_MASK
            pos = psn % BITMAP_BITS
            if raw.bitmap[pos // 64] >> (pos % 64) & 1:
                received.append(psn)
        pending = []
        for i in range(MSG_SLOTS):
            msn = (raw.msn + i) & wireconst.MSN_MASK
            slot = raw.msgs[msn % MSG_SLOTS]
            if slot.flags & MSG_F_VALID:
                pending.append(
                    {
                        "msn": msn,
                        "last_psn": slot.last_psn,
                        "va": slot.va,
                        "len": slot.len,
                        "imm": slot.imm if slot.flags & MSG_F_IMM else None,
                    }
                )
        return RqSnapshot(
            qpn=qpn,
            state=_enum_or_int(QpState, raw.state),
            local_host=raw.local_host,
            peer_host=raw.peer_host,
            peer_qpn=raw.peer_qpn,
            mpr=raw.mpr,
            region=raw.region,
            cum_psn=raw.cum_psn,
            msn=raw.msn,
            received=received,
            pending_msgs=pending,
            stats=_fields(raw.stats),
            long_gaps=sorted((g.end_ns, g.gap_ns) for g in raw.gaps if g.end_ns),
            recv_cq=raw.recv_cq,
            max_wimm_dest=raw.max_wimm_dest,
            wimm_held=raw.wimm_held,
            dyn_mpr=bool(raw.dyn_mpr),
        )

    def set_rq_state(self, qpn: int, state: QpState) -> None:
        """Change the state of a QP, keeping the rest (KeyError if none).

        Read and write each take the value's bpf_spin_lock, which the
        program does not take (it takes the QP's receive lock, nic_rx_locks):
        the updates of a packet processed between them are lost, and a write
        during one can mix two states (a new cum_psn with stale bitmap bits:
        a later PSN taken for a duplicate, never placed). Only for
        transitions made while no data flows to the QP, and for ERR/RESET.
        TODO: when the daemon moves live QPs (RTR -> RTS under traffic), keep
        the state word in a map BPF does not write, or change it by a kick.
        """
        value = self.rq_raw(qpn)
        value.state = QpState(state)
        self._check_rx_owner(qpn)
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(value), flags=BPF_F_LOCK)

    def delete_rq(self, qpn: int) -> None:
        """Forget a QP's receive state (KeyError if none): its packets are
        dropped, and its slot is free for another QP."""
        self._check_rx_owner(qpn)
        # The owner first, then the slot: the program stops using it before it is wiped.
        bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), u32_key(0))
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(RqLayout()))
        self.clear_rev_evs(qpn)  # its answers' paths go with it

    def rx_lock_taken(self, qpn: int) -> bool:
        """Is QP qpn's receive lock taken right now? (It is held for about 30 ns
        per packet; one seen taken twice apart means a holder that never let go.)"""
        raw = bpfsys.map_lookup(self._fds[RX_LOCKS_MAP], u32_key(rx_lock_slot(qpn)), RX_LOCK_SIZE)
        return int.from_bytes(raw[:8], "little") != 0

    def set_rx_lock(self, qpn: int, taken: bool) -> None:
        """Take or free QP qpn's receive lock from user space: what a holder held
        up looks like to the receiver (tests). Freeing a lock a packet holds
        lets a second one in: only while no traffic runs."""
        value = (1 if taken else 0).to_bytes(8, "little") + bytes(RX_LOCK_SIZE - 8)
        bpfsys.map_update(self._fds[RX_LOCKS_MAP], u32_key(rx_lock_slot(qpn)), value)

    def rx_timeline(self) -> dict[int, int]:
        """Payload bytes placed per timeline bin (bin = ktime_ns >> TIMELINE_SHIFT),
        summed over CPUs: the last TIMELINE_BINS bins of the whole lab, one batch read."""
        slot = bpfsys.percpu_slot_size(16)
        value_size = slot * bpfsys.possible_cpus()
        bins: dict[int, int] = {}
        entries = bpfsys.map_lookup_batch(
            self._fds[TIMELINE_MAP], 4, value_size, chunk=TIMELINE_BINS
        )
        for _key, value in entries:
            for at in range(0, value_size, slot):
                b = int.from_bytes(value[at : at + 8], "little")
                n = int.from_bytes(value[at + 8 : at + 16], "little")
                if n:
                    bins[b] = bins.get(b, 0) + n
        return bins

    def rx_qpns(self) -> list[int]:
        """QPNs with receive state (the owners in nic_rx_slots), ascending."""
        pairs = bpfsys.map_lookup_batch(self._fds[RX_SLOTS_MAP], 4, 4, chunk=self.max_qps)
        owners = (int.from_bytes(value, sys.byteorder) for _, value in pairs)
        return sorted(o & wireconst.QPN_MASK for o in owners if o & RQ_TAG_USED)
