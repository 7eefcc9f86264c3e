"""Decoded views of a QP's or an EV's map entry, for the daemon, stats and tests."""

from __future__ import annotations

import ctypes
import dataclasses
import enum
from typing import Any

from mrc_nic.kernel import pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.layout import RETX_SLOTS, EvState, QpState, RetxCause, SqLayout


@dataclasses.dataclass
class RqSnapshot:
    """The receive state of one QP, read under its lock."""

    qpn: int
    state: QpState | int
    local_host: int
    peer_host: int
    peer_qpn: int
    mpr: int
    region: int
    cum_psn: int
    msn: int
    received: list[int]  # PSNs at or after cum_psn that have arrived, in window order
    pending_msgs: list[dict[str, int]]  # LAST packets seen, messages not complete yet
    stats: dict[str, int]
    # Delivery gaps of at least GAP_MIN_NS, (end_ns, gap_ns) by end, the longest
    # of each 67 ms bin of the last 4.3 s (struct nic_gap_bin)
    long_gaps: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    recv_cq: int = 0  # the receive CQ, index + 1 of nic_cq_rings (0: none: nic_events)
    max_wimm_dest: int = 0  # OCP max_wimm_dest: WRITE_WITH_IMMs held incomplete (0: MSG_SLOTS)
    wimm_held: int = 0  # WRITE_WITH_IMM messages held now
    dyn_mpr: bool = True  # our answers advertise mpr (dynamic MPR)

    @property
    def window(self) -> int:
        return self.mpr * wireconst.MPR_UNIT


@dataclasses.dataclass
class SqSnapshot:
    """The send state of one QP, read under its lock."""

    qpn: int
    state: QpState | int
    local_host: int
    peer_host: int
    peer_qpn: int
    mpr: int
    ring: int
    evs: list[int]  # the EV profile, in order
    ev_min_active: int
    snd_una: int
    snd_nxt: int
    peer_ports: int
    reo_wnd_ns: int  # the head scan's reorder window (0: off)
    # PSNs in [snd_una, snd_nxt) acknowledged (out of order), and queued and
    # not resent yet; None when only counted (acked_n, retx_pending_n)
    acked: list[int] | None
    retx_pending: list[int] | None
    retx_queue: list[dict[str, int]]  # the queue, oldest first (see NicMaps.retx_queue)
    stats: dict[str, int]
    # the send engine
    engine: bool = False
    cwnd: int = 0  # 0: the window
    snd_msn: int = 0  # MSN of WQE wqe_sent
    wqe_sent: int = 0  # WQEs whose every packet has been sent once
    wqe_done: int = 0  # WQEs completed
    wqe_off: int = 0  # bytes of WQE wqe_sent sent
    ev_next: int = 0  # the EV round robin's cursor
    tx_stats: dict[str, int] = dataclasses.field(default_factory=dict)
    cc: dict[str, int] = dataclasses.field(default_factory=dict)  # struct nic_sq_cc
    rtt_recent_ns: int = 0  # the head scan's largest recent RTT (BPF's; docs/nic-program.md)
    reo_learned_ns: int = 0  # how late a packet may be, learned from duplicates (BPF's)
    send_cq: int = 0  # the send CQ, index + 1 of nic_cq_rings (0: none: nic_events)
    max_wimm: int = 0  # OCP max_wimm: WRITE_WITH_IMM WQEs started, not completed (0: no bound)
    wimm_out: int = 0  # WRITE_WITH_IMM WQEs outstanding now
    wimm_full: int = 0  # engine runs that held a WRITE_WITH_IMM back for max_wimm
    dyn_mpr: bool = False  # dynamic MPR: the window follows the peer's advertised MPR
    peer_mpr: int = 0  # the MPR of the peer's latest ACK (0: not advertised)
    probe_good: int = 1  # PROBE_REPLYs that bring an ASSUMED_BAD EV back
    # How many PSNs acked and retx_pending hold, when sq(psns=False) counted
    # them instead of listing them (None: the lists are there)
    acked_n: int | None = None
    retx_pending_n: int | None = None

    @property
    def window(self) -> int:
        """The PSN range the engine may have in flight (the NIC's sq_window)."""
        mpr = self.mpr
        if self.dyn_mpr:  # the peer's advertised MPR; 1 until it has advertised one
            mpr = min(mpr, self.peer_mpr or 1)
        return mpr * wireconst.MPR_UNIT

    @property
    def in_flight(self) -> int:
        return (self.snd_nxt - self.snd_una) & wireconst.PSN_MASK

    @property
    def window_free(self) -> int:
        """PSNs the engine may still send: window - in flight."""
        return self.window - self.in_flight

    @property
    def acked_count(self) -> int:
        """PSNs in flight already acknowledged (out of order)."""
        return len(self.acked or ()) if self.acked_n is None else self.acked_n

    @property
    def in_network(self) -> int:
        """Packets that may still draw a SACK: in flight, neither acknowledged
        nor queued for retransmission (lost ones not found yet count too)."""
        retx = len(self.retx_pending or ()) if self.retx_pending_n is None else self.retx_pending_n
        return self.in_flight - self.acked_count - retx


@dataclasses.dataclass
class EvSnapshot:
    """One EV of a send QP, read under its lock."""

    qpn: int
    ev: int
    plane: int
    state: EvState | int
    skip_until: int  # bpf_ktime_get_ns() (CLOCK_MONOTONIC) at which a SKIP ends
    rtt_last: int  # ns; 0: no sample yet
    rtt_min: int
    srtt: int
    last_tx_psn: int
    last_tx_ts: int
    stats: dict[str, int]


def _fields(struct: ctypes.Structure) -> dict[str, int]:
    """A struct of counters (or any flat struct) as {field: value}, in field order."""
    return {name: getattr(struct, name) for name, _ in struct._fields_}


def _enum_or_int(kind: type[enum.IntEnum], value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return value


def _retx_entries(raw: SqLayout) -> list[dict[str, int]]:
    count = (raw.retx_tail - raw.retx_head) & pins.U32_MAX
    out = []
    for i in range(min(count, RETX_SLOTS)):
        entry = raw.retxq[(raw.retx_head + i) % RETX_SLOTS]
        out.append(
            {
                "psn": entry.psn,
                "ev": entry.ev,
                "cause": _enum_or_int(RetxCause, entry.cause),
                "nack_reason": entry.nack_reason,
            }
        )
    return out
