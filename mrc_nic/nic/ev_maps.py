"""Per-EV state of send QPs: map nic_evs, keyed by (QPN, EV)."""

from __future__ import annotations

import contextlib
import ctypes

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.driver.doorbell import run_kick
from mrc_nic.nic.layout import (
    BPF_F_LOCK,
    EVS_MAP,
    MAX_PLANES,
    EvKey,
    EvState,
    EvStateLayout,
    KickOp,
)
from mrc_nic.nic.maps_base import locked_lookup
from mrc_nic.nic.snapshots import EvSnapshot, _enum_or_int, _fields


class EvMaps:
    """NicMaps' part for per-EV state of send QPs: map nic_evs, keyed by (QPN, EV)."""

    def setup_ev(self, qpn: int, ev: int, *, plane: int, state: EvState = EvState.GOOD) -> None:
        """Create (or reset) one EV of a send QP: counters and RTT zero."""
        pins.check_range("qpn", qpn, wireconst.QPN_MASK)
        pins.check_range("ev", ev, wireconst.EV_MAX)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        value = EvStateLayout(plane=plane, state=EvState(state))
        bpfsys.map_update(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)), bytes(value))

    def ev_raw(self, qpn: int, ev: int) -> EvStateLayout:
        """One EV as stored, read under its lock (KeyError if none)."""
        try:
            raw = locked_lookup(
                self._fds[EVS_MAP], bytes(EvKey(qpn, ev)), ctypes.sizeof(EvStateLayout)
            )
        except FileNotFoundError:
            raise KeyError(f"no state for EV {ev:#x} of QP {qpn:#x}") from None
        return EvStateLayout.from_buffer_copy(raw)

    def ev(self, qpn: int, ev: int) -> EvSnapshot:
        """One EV, decoded (KeyError if none)."""
        raw = self.ev_raw(qpn, ev)
        return EvSnapshot(
            qpn=qpn,
            ev=ev,
            plane=raw.plane,
            state=_enum_or_int(EvState, raw.state),
            skip_until=raw.skip_until,
            rtt_last=raw.rtt_last,
            rtt_min=raw.rtt_min,
            srtt=raw.srtt,
            last_tx_psn=raw.last_tx_psn,
            last_tx_ts=raw.last_tx_ts,
            stats=_fields(raw.stats),
        )

    def set_ev_state(self, qpn: int, ev: int, state: EvState) -> None:
        """The controller's word on an EV (DENIED, UNKNOWN, GOOD...), keeping the rest.

        Not atomic with the program (see set_rq_state): an ACK processed
        between the read and the write loses its update of this EV.
        """
        value = self.ev_raw(qpn, ev)
        value.state = EvState(state)
        bpfsys.map_update(
            self._fds[EVS_MAP],
            bytes(EvKey(qpn, ev)),
            bytes(value),
            flags=BPF_F_LOCK | bpfsys.BPF_EXIST,
        )

    def replace_ev(
        self, qpn: int, slot: int, old: int, new: int, *, plane: int | None = None
    ) -> bool:
        """Put EV `new` in slot `slot` of a sending QP's EV profile, where EV
        `old` is (OCP: MRC_CTL_EV_OP_REPLACE_EV). The new EV gets `plane` (None:
        the old one's), state GOOD and zero counters. The swap itself is a
        NIC_KICK_EV_REPLACE kick, under the QP's lock, so it is safe while
        packets flow. False (and nothing changed) if the slot no longer holds
        `old`. KeyError: no such QP or EV.

        The old EV's state stays: a program that looked it up just before
        the swap may still write to it, and nic_evs is a preallocated hash
        whose freed elements are reused at once (by the next EV created).
        Delete it with delete_ev once such runs are over (a few ms later)."""
        pins.check_range("ev", new, wireconst.EV_MAX)
        if new == wireconst.EV_INVALID:
            raise ValueError("EV 0 is invalid")
        raw = self.sq_raw(qpn)
        if new in raw.evs[: raw.n_evs]:
            raise ValueError(f"EV {new} is in QP {qpn:#x}'s profile already")
        old_plane = self.ev_raw(qpn, old).plane
        self.setup_ev(qpn, new, plane=old_plane if plane is None else plane)
        run_kick(self.program_fd(), qpn, 1, op=KickOp.EV_REPLACE, arg=slot, age_ns=old << 16 | new)
        swapped = self.sq_raw(qpn).evs[slot] == new
        if not swapped:  # never in the profile: no program has seen it
            self.delete_ev(qpn, new)
        return swapped

    def delete_ev(self, qpn: int, ev: int) -> None:
        """Forget one EV's state (nothing if there is none)."""
        with contextlib.suppress(FileNotFoundError):
            bpfsys.map_delete(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)))

    def evs_raw(self) -> dict[tuple[int, int], EvStateLayout]:
        """Every EV of every send QP, {(qpn, ev): state}, in one batch read
        (each value copied under its lock)."""
        pairs = bpfsys.map_lookup_batch(
            self._fds[EVS_MAP],
            ctypes.sizeof(EvKey),
            ctypes.sizeof(EvStateLayout),
            elem_flags=BPF_F_LOCK,
        )
        out = {}
        for key, value in pairs:
            k = EvKey.from_buffer_copy(key)
            out[(k.qpn, k.ev)] = EvStateLayout.from_buffer_copy(value)
        return out
