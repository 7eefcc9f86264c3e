"""Reverse EV sets of receive QPs: maps nic_rev_evs (the daemon writes) and
nic_rev_probes (BPF records the replies to their probes); docs/nic-program.md,
"Reverse EVs". And nic_ep_probes: the replies to a host's endpoint probes
(the controller's connectionless EV probes; "Endpoint probes")."""

from __future__ import annotations

import ctypes
import dataclasses

from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst as wire
from mrc_nic.nic.layout import (
    EP_PROBES_MAP,
    MAX_PLANES,
    REV_EVS_MAP,
    REV_PROBES_MAP,
    RQ_TAG_USED,
)

REV_EVS = defs.NIC_REV_EVS
EP_SLOTS = defs.NIC_EP_SLOTS


class RevState:
    """struct nic_rev_ev.state (NIC_REV_*)."""

    UNTRIED = defs.NIC_REV_UNTRIED
    GOOD = defs.NIC_REV_GOOD
    ASSUMED_BAD = defs.NIC_REV_ASSUMED_BAD
    NAMES = {UNTRIED: "UNTRIED", GOOD: "GOOD", ASSUMED_BAD: "ASSUMED_BAD"}


@dataclasses.dataclass(frozen=True)
class RevEv:
    """One reverse EV of a set: its value, plane and state (RevState)."""

    ev: int
    plane: int
    state: int = RevState.UNTRIED


@dataclasses.dataclass(frozen=True)
class RevProbe:
    """What the replies to one reverse EV's probes said (struct nic_rev_probe)."""

    ev: int
    replies: int
    last_ns: int
    last_psn: int
    rtt_ns: int


def rev_ev_set(qpn: int, evs: list[RevEv]) -> defs.NicRevEvSet:
    """The map value of a receive QP's set: the entries, and per plane (and for
    every plane, row MAX_PLANES) the list of the GOOD ones the answers pick from."""
    if len(evs) > REV_EVS:
        raise ValueError(f"a reverse EV set holds at most {REV_EVS} EVs, not {len(evs)}")
    value = defs.NicRevEvSet(qpn=qpn | RQ_TAG_USED, n=len(evs))
    rows: dict[int, list[int]] = {}
    for i, e in enumerate(evs):
        pins.check_range("ev", e.ev, wire.EV_MAX)
        pins.check_range("plane", e.plane, MAX_PLANES - 1)
        value.evs[i] = defs.NicRevEv(ev=e.ev, plane=e.plane, state=e.state)
        if e.state == RevState.GOOD:
            rows.setdefault(e.plane, []).append(i)
            rows.setdefault(MAX_PLANES, []).append(i)
    for row, idx in rows.items():
        value.n_use[row] = len(idx)
        for k, i in enumerate(idx):
            value.use[row * REV_EVS + k] = i
    return value


class RevEvMaps:
    """NicMaps' part for the reverse EV sets of receive QPs (slot as nic_rx_qps)."""

    def set_rev_evs(self, qpn: int, evs: list[RevEv]) -> None:
        """Write receive QP qpn's reverse EV set whole; its answers take it from
        the next packet on. An EV's probe replies are kept while its value stays
        at the same index (the daemon keeps indexes stable)."""
        pins.check_range("qpn", qpn, wire.QPN_MASK)
        bpfsys.map_update(self._fds[REV_EVS_MAP], self._rx_key(qpn), bytes(rev_ev_set(qpn, evs)))

    def clear_rev_evs(self, qpn: int) -> None:
        """No reverse EV set for qpn's slot (answers go back in place), no replies kept."""
        key = self._rx_key(qpn)
        bpfsys.map_update(self._fds[REV_EVS_MAP], key, bytes(defs.NicRevEvSet()))
        bpfsys.map_update(self._fds[REV_PROBES_MAP], key, bytes(defs.NicRevProbes()))

    def rev_evs(self, qpn: int) -> list[RevEv] | None:
        """Receive QP qpn's reverse EV set as stored, or None if it has none."""
        raw = bpfsys.map_lookup(
            self._fds[REV_EVS_MAP], self._rx_key(qpn), ctypes.sizeof(defs.NicRevEvSet)
        )
        value = defs.NicRevEvSet.from_buffer_copy(raw)
        if value.qpn != (qpn | RQ_TAG_USED):
            return None
        n = min(value.n, REV_EVS)
        return [RevEv(e.ev, e.plane, e.state) for e in value.evs[:n]]

    def rev_probes(self, qpn: int) -> list[RevProbe]:
        """The replies BPF recorded for qpn's reverse EVs, entry i for its set's EV i."""
        raw = bpfsys.map_lookup(
            self._fds[REV_PROBES_MAP], self._rx_key(qpn), ctypes.sizeof(defs.NicRevProbes)
        )
        value = defs.NicRevProbes.from_buffer_copy(raw)
        return [RevProbe(p.ev, p.replies, p.last_ns, p.last_psn, p.rtt_ns) for p in value.evs]

    def forget_rev_probe(self, qpn: int, index: int) -> None:
        """Zero the replies of entry `index` (a new EV takes it)."""
        probes = defs.NicRevProbes.from_buffer_copy(
            bpfsys.map_lookup(
                self._fds[REV_PROBES_MAP], self._rx_key(qpn), ctypes.sizeof(defs.NicRevProbes)
            )
        )
        probes.evs[index] = defs.NicRevProbe()
        bpfsys.map_update(self._fds[REV_PROBES_MAP], self._rx_key(qpn), bytes(probes))

    def ep_probes(self, host: int) -> list[defs.NicEpProbe]:
        """Host host's endpoint probe replies as BPF recorded them, slot by slot
        (slot psn % EP_SLOTS; rx_ns 0: never written). One lookup."""
        raw = bpfsys.map_lookup(
            self._fds[EP_PROBES_MAP], host.to_bytes(4, "little"), ctypes.sizeof(defs.NicEpProbes)
        )
        return list(defs.NicEpProbes.from_buffer_copy(raw).slots)

    def clear_ep_probes(self, host: int) -> None:
        """Forget host's endpoint probe replies (tests)."""
        key = host.to_bytes(4, "little")
        bpfsys.map_update(self._fds[EP_PROBES_MAP], key, bytes(defs.NicEpProbes()))
