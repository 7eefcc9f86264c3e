"""Send QPs: nic_tx_qps, work queues, PSN -> EV rings, kicks."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import sys

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.cq_maps import check_cq
from mrc_nic.nic.kick import run_kick
from mrc_nic.nic.layout import (
    ALL_PLANES,
    BITMAP_BITS,
    BPF_F_LOCK,
    EVS_MAP,
    MAX_PLANES,
    MAX_QP_EVS,
    MR_ELEM_SIZE,
    SQ_DEPTH,
    TIMEOUT_F_REORDER,
    TIMEOUT_MAX,
    TX_F_PREV,
    TX_F_RETX,
    TX_QPS_MAP,
    TX_RING_MAP,
    WQ_MAP,
    WQE_F_SIGNALED,
    EvKey,
    KickOp,
    QpError,
    QpState,
    SqCc,
    SqLayout,
    TxPkt,
    TxRing,
    Wq,
    Wqe,
)
from mrc_nic.nic.maps_base import check_qp_ends, locked_lookup, set_auth_key, u32_key
from mrc_nic.nic.snapshots import SqSnapshot, _enum_or_int, _fields, _retx_entries


def ring_psns(bitmap: ctypes.Array, start: int, count: int) -> list[int]:
    """The PSNs in [start, start + count) whose bit is set in a PSN ring
    (bit psn % BITMAP_BITS of the c_uint64 words), in order. Walks the set
    bits only, as one integer: the daemon reads a send QP's rings every
    tick, and a Python loop over every PSN in flight cost it 0.1 ms a tick."""
    pos = start % BITMAP_BITS
    ring = 0
    for i, word in enumerate(bitmap):
        ring |= word << (64 * i)
    ring = (ring >> pos | ring << (BITMAP_BITS - pos)) & ((1 << count) - 1)
    out = []
    while ring:
        low = ring & -ring
        out.append((start + low.bit_length() - 1) & wireconst.PSN_MASK)
        ring ^= low
    return out


class SendQpMaps:
    """NicMaps' part for send QPs: nic_tx_qps, work queues, PSN -> EV rings, kicks."""

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
        value = SqLayout(
            state=QpState(state),
            local_host=local_host,
            peer_host=peer_host,
            peer_qpn=peer_qpn,
            mpr=mpr,
            ring=ring,
            n_evs=len(evs),
            ev_min_active=ev_min_active,
            snd_una=psn,
            snd_nxt=snd_nxt,
            peer_ports=peer_ports,
            reo_wnd_ns=reo_wnd_ns,
            engine=int(bool(engine)),
            cwnd=cwnd,
            snd_msn=msn,
            cc=SqCc(rtt_target_ns=cc_rtt_target_ns),
            send_cq=cq,
            max_wimm=max_wimm,
            dyn_mpr=int(bool(dyn_mpr)),
            probe_good=probe_good,
            pd=pd,
            silent_ns=silent_ns,
        )
        set_auth_key(value, auth_key)  # data carries a MAC, ACKs must
        for i, ev in enumerate(evs):
            value.evs[i] = ev
        for ev, plane in evs.items():
            self.setup_ev(qpn, ev, plane=plane)
        size = ctypes.sizeof(TxRing)
        self.tx_ring_memory()[ring * size : (ring + 1) * size] = bytes(size)
        size = ctypes.sizeof(Wq)
        self.wq_memory()[ring * size : (ring + 1) * size] = bytes(size)
        bpfsys.map_update(self._fds[TX_QPS_MAP], u32_key(qpn), bytes(value))

    def sq_raw(self, qpn: int) -> SqLayout:
        """The send state of a QP as stored, read under its lock (KeyError if none)."""
        try:
            raw = locked_lookup(self._fds[TX_QPS_MAP], u32_key(qpn), ctypes.sizeof(SqLayout))
        except FileNotFoundError:
            raise KeyError(f"no send state for QP {qpn:#x}") from None
        return SqLayout.from_buffer_copy(raw)

    def sq(self, qpn: int) -> SqSnapshot:
        """The send state of a QP, decoded (KeyError if none)."""
        raw = self.sq_raw(qpn)
        in_flight = min((raw.snd_nxt - raw.snd_una) & wireconst.PSN_MASK, BITMAP_BITS)

        def in_ring(bitmap: ctypes.Array) -> list[int]:
            return ring_psns(bitmap, raw.snd_una, in_flight)

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
            send_cq=raw.send_cq,
            max_wimm=raw.max_wimm,
            wimm_out=raw.wimm_out,
            wimm_full=raw.wimm_full,
            dyn_mpr=bool(raw.dyn_mpr),
            peer_mpr=raw.peer_mpr,
            probe_good=raw.probe_good,
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

    def wq_memory(self) -> mmap.mmap:
        """nic_wq mapped into this process: every send QP's queue (struct nic_wq)."""
        return self._mapped(WQ_MAP, self.tx_rings * ctypes.sizeof(Wq))

    def wq_head(self, ring: int) -> tuple[int, int]:
        """(posted, done) of the send queue in ring `ring`: WQEs given to the
        NIC and completed by it (free-running), read from the mapped queue."""
        pins.check_range("ring", ring, self.tx_rings - 1)
        at = ring * ctypes.sizeof(Wq)
        head = self.wq_memory()[at : at + 8]
        return int.from_bytes(head[:4], "little"), int.from_bytes(head[4:], "little")

    def wq(self, qpn: int) -> Wq:
        """A copy of a QP's send queue (posted, done, and the WQE slots)."""
        ring = self.sq_raw(qpn).ring
        size = ctypes.sizeof(Wq)
        return Wq.from_buffer_copy(self.wq_memory()[ring * size : (ring + 1) * size])

    def post_write(
        self,
        qpn: int,
        *,
        length: int,
        src_region: int,
        remote_va: int,
        rkey: int,
        src_offset: int = 0,
        imm: int | None = None,
        wr_id: int = 0,
        signaled: bool = True,
    ) -> int:
        """Post an RDMA WRITE (WRITE_WITH_IMM when imm is given) on a send QP; returns
        the WQE's index (free-running; NIC_EV_SEND_DONE reports it, with wr_id).

        length bytes from byte src_offset of the local region src_region go to
        remote_va (rkey) at the peer, at any byte of either. The
        engine sends nothing until kicked (kick) or clocked by the QP's ACKs.
        signaled=False: on a QP with a send CQ, its completion writes no
        record (it still frees its slot); without a CQ every WQE reports.
        BlockingIOError when SQ_DEPTH WQEs are outstanding (not completed:
        the queue's done, which BPF publishes). One poster per QP at a time.
        """
        raw = self.sq_raw(qpn)
        if not raw.engine:
            raise ValueError(f"QP {qpn:#x} is not served by the send engine (setup_sq engine)")
        pins.check_range("length", length, pins.U32_MAX)
        pins.check_range("remote_va", remote_va, pins.U64_MAX)
        pins.check_range("rkey", rkey, pins.U32_MAX)
        pins.check_range("wr_id", wr_id, pins.U64_MAX)
        if imm is not None:
            pins.check_range("imm", imm, pins.U32_MAX)
        self._span(src_region, src_offset, length)  # KeyError / ValueError if outside
        at = raw.ring * ctypes.sizeof(Wq)
        memory = self.wq_memory()
        posted = int.from_bytes(memory[at : at + 4], "little")
        done = int.from_bytes(memory[at + Wq.done.offset : at + Wq.done.offset + 4], "little")
        if (posted - done) & pins.U32_MAX >= SQ_DEPTH:
            raise BlockingIOError(
                errno.EAGAIN, f"send queue of QP {qpn:#x} is full ({SQ_DEPTH} WQEs outstanding)"
            )
        wqe = Wqe(
            wr_id=wr_id,
            remote_va=remote_va,
            rkey=rkey,
            len=length,
            src_region=src_region,
            src_off=src_offset,
            imm=imm or 0,
            opcode=wireconst.Opcode.WRITE if imm is None else wireconst.Opcode.WRITE_IMM,
            flags=WQE_F_SIGNALED if signaled else 0,
        )
        slot = at + Wq.wqes.offset + (posted % SQ_DEPTH) * ctypes.sizeof(Wqe)
        memory[slot : slot + ctypes.sizeof(Wqe)] = bytes(wqe)
        # The WQE first, then posted: the engine reads them in the other order.
        memory[at : at + 4] = ((posted + 1) & pins.U32_MAX).to_bytes(4, "little")
        return posted

    def kick(
        self, qpn: int, packets: int, *, live: bool = True, batch_size: int = 0
    ) -> bpfsys.TestRunResult:
        """Run the send engine for a QP, `packets` times, through the pinned program:
        with live frames, up to `packets` data packets leave (see run_kick)."""
        return run_kick(self.program_fd(), qpn, packets, live=live, batch_size=batch_size)

    def timeout_kick(
        self,
        qpn: int,
        packets: int,
        *,
        max_psns: int = TIMEOUT_MAX,
        age_ns: int = 0,
        reorder: bool = False,
    ) -> None:
        """The retransmission timeout of a QP: a timeout kick queues up to
        max_psns of its oldest unacknowledged PSNs last sent age_ns ago or more
        (in BPF, under the QP's lock) and puts their EVs in ASSUMED_BAD, then a
        send kick of `packets` runs sends them (and new data, if there is
        room). The counters timeout_kicks and timeout_queued say what it did.
        reorder: the reorder timer's kick, not a timeout: what it queues is
        overdue, and no EV is blamed for it (docs/nic-program.md, "Blame")."""
        if not (isinstance(max_psns, int) and 1 <= max_psns <= TIMEOUT_MAX):
            raise ValueError(f"max_psns must be 1..{TIMEOUT_MAX}, not {max_psns!r}")
        arg = max_psns | (TIMEOUT_F_REORDER if reorder else 0)
        run_kick(self.program_fd(), qpn, 1, op=KickOp.TIMEOUT, arg=arg, age_ns=age_ns)
        if packets:
            self.kick(qpn, packets, batch_size=packets)

    def fail_qp(self, qpn: int, reason: QpError = QpError.RETRY_EXCEEDED) -> None:
        """Move a send QP to ERR for a local reason (the daemon: its retry budget
        is spent) with a NIC_KICK_FAIL kick: in BPF, under the QP's lock, and
        its QP_ERR record (error = reason, psn = snd_una) goes to nic_events and
        to the QP's send CQ, as a fatal NACK's does. A QP already in ERR is left
        as it is (it was reported); an unknown one counts drop_unknown_qp."""
        pins.check_range("qpn", qpn, wireconst.QPN_MASK)
        if not isinstance(reason, int) or reason not in set(QpError) - {QpError.NONE}:
            raise ValueError(
                f"reason must be a QpError other than NONE (a fatal NACK's), not {reason!r}"
            )
        run_kick(self.program_fd(), qpn, 1, op=KickOp.FAIL, arg=int(reason))

    def cwnd_kick(self, qpn: int, cwnd: int, *, rtt_target_ns: int = 0, packets: int = 1) -> None:
        """Congestion control's new window for a QP that may be sending: a
        NIC_KICK_CWND kick sets cwnd (packets in flight; 0: the window) and
        cc.rtt_target_ns (the RTT at or above which its SACKs count as high
        delay, struct nic_sq_cc) under the QP's lock, then runs the engine
        `packets` times with live frames, so that a window that grew is
        filled at once (the ACK clock sends one packet per ACK, never more)."""
        if not (isinstance(cwnd, int) and 0 <= cwnd <= 0xFFFF):
            raise ValueError(f"cwnd must be 0..65535 packets, not {cwnd!r}")
        pins.check_range("rtt_target_ns", rtt_target_ns, pins.U64_MAX)
        run_kick(
            self.program_fd(),
            qpn,
            max(1, packets),
            op=KickOp.CWND,
            arg=cwnd,
            age_ns=rtt_target_ns,
            batch_size=max(1, packets),
        )

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

    def tx_qpns(self) -> list[int]:
        """QPNs with send state (nic_tx_qps), ascending."""
        keys = bpfsys.map_keys(self._fds[TX_QPS_MAP], 4)
        return sorted(int.from_bytes(k, sys.byteorder) for k in keys)
