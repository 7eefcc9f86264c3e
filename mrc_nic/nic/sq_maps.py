"""Send QPs: their state in nic_tx_qps (setup, reads, changes); their queues and
kicks are sq_work_maps', their PSN -> EV tables tx_ring_maps'."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.cq_maps import check_cq
from mrc_nic.nic.layout import (
    ALL_PLANES,
    BITMAP_BITS,
    BPF_F_LOCK,
    EVS_MAP,
    MAX_PLANES,
    MAX_QP_EVS,
    SQ_DEPTH,
    TX_QPS_MAP,
    EvKey,
    QpState,
    SqCc,
    SqLayout,
    TxRing,
)
from mrc_nic.nic.maps_base import check_qp_ends, locked_lookup, set_auth_key, u32_key
from mrc_nic.nic.snapshots import SqSnapshot, _enum_or_int, _fields, _retx_entries


def _ring_window(bitmap: ctypes.Array, start: int, count: int) -> int:
    """The bits of [start, start + count) of a PSN ring (bit psn % BITMAP_BITS
    of the c_uint64 words) as one integer, start's bit lowest."""
    pos = start % BITMAP_BITS
    ring = 0
    for i, word in enumerate(bitmap):
        ring |= word << (64 * i)
    return (ring >> pos | ring << (BITMAP_BITS - pos)) & ((1 << count) - 1)


def ring_count(bitmap: ctypes.Array, start: int, count: int) -> int:
    """How many PSNs of [start, start + count) are set in a PSN ring."""
    return _ring_window(bitmap, start, count).bit_count()


def ring_psns(bitmap: ctypes.Array, start: int, count: int) -> list[int]:
    """The PSNs in [start, start + count) whose bit is set in a PSN ring, in
    order. Walks the set bits only, as one integer: the daemon reads a send
    QP's rings every tick, and a Python loop over every PSN in flight cost it
    0.1 ms a tick."""
    ring = _ring_window(bitmap, start, count)
    out = []
    while ring:
        low = ring & -ring
        out.append((start + low.bit_length() - 1) & wireconst.PSN_MASK)
        ring ^= low
    return out


class SendQpMaps:
    """NicMaps' part for send QPs' state: nic_tx_qps (and a new QP's EVs and queues)."""

    def setup_sq(
        self,
        qpn: int,
        *,
        local_host: int,
        peer_host: int,
        peer_qpn: int,
        ring: int,
        evs: dict[int, int],
        mpr: int = 1,
        state: QpState = QpState.RTS,
        psn: int = 0,
        snd_nxt: int | None = None,
        ev_min_active: int = 0,
        engine: bool = False,
        cwnd: int = 0,
        msn: int = 0,
        peer_ports: int = ALL_PLANES,
        reo_wnd_ns: int = 0,
        cc_rtt_target_ns: int = 0,
        cq: int = 0,
        auth_key: bytes | None = None,
        max_wimm: int = 0,
        dyn_mpr: bool = False,
        probe_good: int = 1,
        pd: int = 0,
        silent_ns: int = 0,
    ) -> None:
        """Create (or reset) the send state of a QP, its EVs, its PSN -> EV table and
        its send queue.

        evs is the EV profile, {EV value: plane}, in the order the engine
        uses them; every EV starts GOOD with zero counters. snd_una = psn and
        snd_nxt = snd_nxt (default psn: nothing in flight); the send engine
        advances snd_nxt, tests set it here. engine: the send engine serves
        the QP (post_write, kick, the ACK clock); cwnd: most packets in flight
        (0: the window); msn: the MSN of the first WQE; peer_ports: the
        peer's port bitmap until its first ACK says otherwise; reo_wnd_ns:
        the head scan's reorder window (0: off; docs/nic-program.md, "Loss detection");
        cc_rtt_target_ns: the RTT that splits its congestion signals (struct
        nic_sq_cc; later changes go with the window, cwnd_kick); cq: the send
        CQ, index + 1 of nic_cq_rings (set_cq_ring), where signaled WQEs'
        completions and the QP's error go (0: no CQ: every completion to
        nic_events). auth_key: the connection's 16-byte key (nic.auth): every
        data packet carries a MAC, and an ACK without a right one is dropped.
        max_wimm: the most WRITE_WITH_IMM WQEs the engine has started and not
        completed (OCP max_wimm; 0: no bound). dyn_mpr: the window follows the
        MPR the peer's ACKs advertise when that is smaller (OCP
        MRC_QP_CAP_DYNAMIC_MPR). probe_good: the PROBE_REPLYs an ASSUMED_BAD EV
        needs to be GOOD again (0 and 1: the first). pd: the QP's protection
        domain: a WQE whose src_region is of another PD or host (set_region pd,
        owner) moves the QP to ERR as a local protection error (0: the daemon's).
        silent_ns: how long an EV with an overdue packet (the head scan, a
        reorder kick) may stay unanswered before it is ASSUMED_BAD, the QP's
        timeout (0: at once; docs/nic-program.md, "Blame").
        The whole values are written: do it before packets flow for this QP.
        """
        self._check_sq(
            qpn, local_host=local_host, peer_host=peer_host, peer_qpn=peer_qpn, mpr=mpr,
            psn=psn, snd_nxt=snd_nxt, ring=ring, evs=evs, ev_min_active=ev_min_active,
            cwnd=cwnd, msn=msn, peer_ports=peer_ports, reo_wnd_ns=reo_wnd_ns,
            silent_ns=silent_ns, cc_rtt_target_ns=cc_rtt_target_ns, cq=cq,
            max_wimm=max_wimm, probe_good=probe_good, pd=pd,
        )  # fmt: skip
        snd_nxt = psn if snd_nxt is None else snd_nxt
        value = SqLayout(
            state=QpState(state), local_host=local_host, peer_host=peer_host,
            peer_qpn=peer_qpn, mpr=mpr, ring=ring, n_evs=len(evs), ev_min_active=ev_min_active,
            snd_una=psn, snd_nxt=snd_nxt, peer_ports=peer_ports, reo_wnd_ns=reo_wnd_ns,
            engine=int(bool(engine)), cwnd=cwnd, snd_msn=msn,
            cc=SqCc(rtt_target_ns=cc_rtt_target_ns), send_cq=cq, max_wimm=max_wimm,
            dyn_mpr=int(bool(dyn_mpr)), probe_good=probe_good, pd=pd, silent_ns=silent_ns,
        )  # fmt: skip
        set_auth_key(value, auth_key)  # data carries a MAC, ACKs must
        for i, ev in enumerate(evs):
            value.evs[i] = ev
        for ev, plane in evs.items():
            self.setup_ev(qpn, ev, plane=plane)
        self._fresh_rings(ring)
        bpfsys.map_update(self._fds[TX_QPS_MAP], u32_key(qpn), bytes(value))

    def _fresh_rings(self, ring: int) -> None:
        """Ring `ring`'s PSN -> EV table zeroed and its send queue empty (a queue
        of its own: the one create_qp gave, or a new one)."""
        size = ctypes.sizeof(TxRing)
        self.tx_ring_memory()[ring * size : (ring + 1) * size] = bytes(size)
        try:
            self.send_queue(ring).clear()
        except KeyError:  # a ring given no queue yet (the daemon's transfers, the tests)
            os.close(self.new_send_queue(ring))

    def _check_sq(
        self, qpn: int, *, local_host: int, peer_host: int, peer_qpn: int, mpr: int, psn: int,
        snd_nxt: int | None, ring: int, evs: dict[int, int], ev_min_active: int, cwnd: int,
        msn: int, peer_ports: int, reo_wnd_ns: int, silent_ns: int, cc_rtt_target_ns: int,
        cq: int, max_wimm: int, probe_good: int, pd: int,
    ) -> None:  # fmt: skip
        """setup_sq's arguments, every one checked before anything is written."""
        check_qp_ends(
            qpn, local_host=local_host, peer_host=peer_host, peer_qpn=peer_qpn, mpr=mpr, psn=psn
        )
        pins.check_range("max_wimm", max_wimm, SQ_DEPTH)
        pins.check_range("probe_good", probe_good, pins.U32_MAX)
        pins.check_range("pd", pd, pins.U32_MAX)
        pins.check_range("ring", ring, self.tx_rings - 1)
        snd_nxt = psn if snd_nxt is None else snd_nxt
        pins.check_range("snd_nxt", snd_nxt, wireconst.PSN_MASK)
        if wireconst.psn_diff(snd_nxt, psn) not in range(mpr * wireconst.MPR_UNIT + 1):
            raise ValueError(
                f"snd_nxt {snd_nxt} must be psn {psn} plus at most the window "
                f"({mpr * wireconst.MPR_UNIT} PSNs)"
            )
        if not 1 <= len(evs) <= MAX_QP_EVS:
            raise ValueError(f"a QP needs 1 to {MAX_QP_EVS} EVs, not {len(evs)}")
        for ev, plane in evs.items():
            pins.check_range("ev", ev, wireconst.EV_MAX)
            if ev == wireconst.EV_INVALID:
                raise ValueError("EV 0 is invalid")
            pins.check_range("plane", plane, MAX_PLANES - 1)
        pins.check_range("ev_min_active", ev_min_active, len(evs))
        pins.check_range("cwnd", cwnd, pins.U32_MAX)
        pins.check_range("msn", msn, wireconst.MSN_MASK)
        pins.check_range("peer_ports", peer_ports, pins.U32_MAX)
        pins.check_range("reo_wnd_ns", reo_wnd_ns, pins.U32_MAX)
        pins.check_range("silent_ns", silent_ns, pins.U32_MAX)
        pins.check_range("cc_rtt_target_ns", cc_rtt_target_ns, pins.U64_MAX)
        check_cq("cq", cq, self.max_cqs)

    def sq_raw(self, qpn: int) -> SqLayout:
        """The send state of a QP as stored, read under its lock (KeyError if none)."""
        try:
            raw = locked_lookup(self._fds[TX_QPS_MAP], u32_key(qpn), ctypes.sizeof(SqLayout))
        except FileNotFoundError:
            raise KeyError(f"no send state for QP {qpn:#x}") from None
        return SqLayout.from_buffer_copy(raw)

    def sq(self, qpn: int, *, psns: bool = True) -> SqSnapshot:
        """The send state of a QP, decoded (KeyError if none). psns=False:
        acked and retx_pending are counted (acked_n, retx_pending_n), not
        listed (they are None), which the daemon's every-tick supervision
        does not need."""
        raw = self.sq_raw(qpn)
        in_flight = min((raw.snd_nxt - raw.snd_una) & wireconst.PSN_MASK, BITMAP_BITS)

        def in_ring(bitmap: ctypes.Array) -> list[int] | None:
            return ring_psns(bitmap, raw.snd_una, in_flight) if psns else None

        def counted(bitmap: ctypes.Array) -> int | None:
            return None if psns else ring_count(bitmap, raw.snd_una, in_flight)

        return SqSnapshot(
            qpn=qpn,
            state=_enum_or_int(QpState, raw.state),
            local_host=raw.local_host,
            peer_host=raw.peer_host,
            peer_qpn=raw.peer_qpn,
            mpr=raw.mpr,
            ring=raw.ring,
            evs=list(raw.evs[: min(raw.n_evs, MAX_QP_EVS)]),
            ev_min_active=raw.ev_min_active,
            snd_una=raw.snd_una,
            snd_nxt=raw.snd_nxt,
            peer_ports=raw.peer_ports,
            reo_wnd_ns=raw.reo_wnd_ns,
            acked=in_ring(raw.acked),
            retx_pending=in_ring(raw.retx),
            retx_queue=_retx_entries(raw),
            stats=_fields(raw.stats),
            engine=bool(raw.engine),
            cwnd=raw.cwnd,
            snd_msn=raw.snd_msn,
            wqe_sent=raw.wqe_sent,
            wqe_done=raw.wqe_done,
            wqe_off=raw.wqe_off,
            ev_next=raw.ev_next,
            tx_stats=_fields(raw.tx_stats),
            cc=_fields(raw.cc),
            rtt_recent_ns=raw.rtt_recent_ns,
            reo_learned_ns=raw.reo_learned_ns,
            send_cq=raw.send_cq,
            max_wimm=raw.max_wimm,
            wimm_out=raw.wimm_out,
            wimm_full=raw.wimm_full,
            dyn_mpr=bool(raw.dyn_mpr),
            peer_mpr=raw.peer_mpr,
            probe_good=raw.probe_good,
            acked_n=counted(raw.acked),
            retx_pending_n=counted(raw.retx),
        )

    def retx_queue(self, qpn: int) -> list[dict[str, int]]:
        """The retransmit queue of a QP, oldest first: psn, ev (the EV that lost it:
        resend on another), cause (RetxCause) and nack_reason (for NACK)."""
        return _retx_entries(self.sq_raw(qpn))

    def set_sq_state(self, qpn: int, state: QpState) -> None:
        """Change the state of a send QP, keeping the rest (KeyError if none).

        Not atomic with the program (see set_rq_state): safe while no ACKs
        for the QP are being processed, and for ERR/RESET.
        """
        self._sq_modify(qpn, state=QpState(state))

    def set_snd_nxt(self, qpn: int, snd_nxt: int) -> None:
        """Set snd_nxt, as the send engine advances it (tests and tools; same caveat
        as set_sq_state: the engine does it in BPF under the QP's lock)."""
        raw = self.sq_raw(qpn)
        pins.check_range("snd_nxt", snd_nxt, wireconst.PSN_MASK)
        if wireconst.psn_diff(snd_nxt, raw.snd_una) not in range(raw.mpr * wireconst.MPR_UNIT + 1):
            raise ValueError(f"snd_nxt {snd_nxt} is outside the window of snd_una {raw.snd_una}")
        self._sq_modify(qpn, snd_nxt=snd_nxt)

    def set_cwnd(self, qpn: int, cwnd: int) -> None:
        """Set a QP's congestion window, most packets in flight (0: the window).

        Rewrites the whole value: same caveat as set_sq_state. While packets
        flow, use cwnd_kick (BPF sets it under the QP's lock).
        """
        pins.check_range("cwnd", cwnd, pins.U32_MAX)
        self._sq_modify(qpn, cwnd=cwnd)

    def _sq_modify(self, qpn: int, **fields: int) -> None:
        value = self.sq_raw(qpn)
        for name, v in fields.items():
            setattr(value, name, v)
        bpfsys.map_update(
            self._fds[TX_QPS_MAP], u32_key(qpn), bytes(value), flags=BPF_F_LOCK | bpfsys.BPF_EXIST
        )

    def delete_sq(self, qpn: int) -> None:
        """Forget a QP's send state and its EVs (KeyError if none): its ACKs are dropped."""
        raw = self.sq_raw(qpn)
        for ev in raw.evs[: min(raw.n_evs, MAX_QP_EVS)]:
            with contextlib.suppress(FileNotFoundError):
                bpfsys.map_delete(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)))
        try:
            bpfsys.map_delete(self._fds[TX_QPS_MAP], u32_key(qpn))
        except FileNotFoundError:
            raise KeyError(f"no send state for QP {qpn:#x}") from None

    def tx_qpns(self) -> list[int]:
        """QPNs with send state (nic_tx_qps), ascending."""
        keys = bpfsys.map_keys(self._fds[TX_QPS_MAP], 4)
        return sorted(int.from_bytes(k, sys.byteorder) for k in keys)
