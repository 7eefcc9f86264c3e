"""The QP section of a snapshot: every QP in the lab's NIC maps, both sides.

A QPN is lab-unique (host << 16 | index), so one record per QPN holds its
send side (nic_tx_qps: window, counters, and its EVs from nic_evs) and its
receive side (nic_rx_qps), whichever exist. EVs are read for all QPs at
once in a batch (NicMaps.evs_raw); per-EV records are built only when asked
(`--by ev`), since a QP has up to 256 of them.

Counter dicts mirror the structs of bpf/nic_structs.h field by field (through
nic.py's ctypes views), so a field the fast path adds shows up here too.
"""

from __future__ import annotations

import collections
import ctypes
import struct

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.observe.jsonenc import Frozen

EV_STATES = [s.name for s in nic.EvState]
EV_PLANE_COUNTERS = (
    "tx_pkts",
    "tx_bytes",
    "retx_pkts",
    "acks",
    "lost_pkts",
    "ecn_marks",
    "nack_trimmed",
)


def host_name(index: int) -> str:
    return f"h{index}"


def qp_label(qpn: int) -> str:
    """The QPN as people and Prometheus labels show it: 0x010001 (host 1, QP 1)."""
    return f"{qpn:#08x}"


def read(maps: nic.NicMaps, *, ev_detail: bool = False) -> list[dict]:
    """One record per QPN with send and/or receive state, ascending."""
    return QpReader(maps).read(ev_detail=ev_detail)


class QpReader:
    """read() again and again: the EVs of every QP (nic_evs) in one batch
    syscall into buffers kept between reads, each EV unpacked in one struct
    call from the bytes the kernel copied (no ctypes object per EV)."""

    CHUNK = 1024  # EVs per syscall (a QP has up to 256)

    def __init__(self, maps: nic.NicMaps) -> None:
        self.maps = maps
        self._key_size = ctypes.sizeof(nic.EvKey)
        self._value_size = ctypes.sizeof(nic.EvStateLayout)
        self._evs = bpfsys.BatchReader(
            maps.fd(nic.EVS_MAP),
            self._key_size,
            self._value_size,
            self.CHUNK,
            elem_flags=nic.BPF_F_LOCK,  # each value copied under its lock
        )

    def evs(self) -> dict[tuple[int, int], bytes]:
        """{(qpn, ev): the bytes of its struct nic_ev} of every EV of every send QP."""
        keys, values, count = self._evs.read()
        size = self._value_size
        pairs = _EV_KEYS.iter_unpack(keys[: count * self._key_size])
        return {pair: values[i * size : (i + 1) * size] for i, pair in enumerate(pairs)}

    def read(self, *, ev_detail: bool = False) -> list[dict]:
        """One record per QPN with send and/or receive state, ascending."""
        maps = self.maps
        tx_qpns = maps.tx_qpns()
        evs = self.evs() if tx_qpns else {}
        records: dict[int, dict] = {}
        for qpn in tx_qpns:
            try:
                sq = maps.sq(qpn)
            except KeyError:  # deleted since the key was listed
                continue
            rec = _record(records, qpn, sq.local_host, sq.peer_host, sq.peer_qpn)
            rec["send"] = _send_side(sq, evs, ev_detail)
        for qpn in maps.rx_qpns():
            try:
                rq = maps.rq(qpn)
            except KeyError:
                continue
            rec = _record(records, qpn, rq.local_host, rq.peer_host, rq.peer_qpn)
            rec["recv"] = {
                "state": _name(rq.state),
                "mpr": rq.mpr,
                "window": rq.window,
                "dynamic_mpr": rq.dyn_mpr,
                "max_wimm_dest": rq.max_wimm_dest or nic.MSG_SLOTS,
                "wimm_held": rq.wimm_held,
                "cum_psn": rq.cum_psn,
                "msn": rq.msn,
                "received_ahead": len(rq.received),
                "pending_msgs": len(rq.pending_msgs),
                "counters": rq.stats,
            }
        return [records[q] for q in sorted(records)]


def nic_counters(maps: nic.NicMaps) -> dict[str, int]:
    """The lab's NIC outcome counters (NicMaps.counters), read in one batch syscall."""
    return dict(NicCounterReader(maps).read())


class NicCounterReader:
    """nic_counters again and again: one batch syscall into buffers kept between
    reads; while no counter moves, read() returns the same read-only record
    (jsonenc.Frozen), which a stream then does not encode again."""

    def __init__(self, maps: nic.NicMaps) -> None:
        fd = maps.fd(nic.COUNTERS_MAP)
        self._cpus = bpfsys.possible_cpus()
        self._batch = bpfsys.BatchReader(fd, 4, 8 * self._cpus, bpfsys.map_info(fd).max_entries)
        self._raw: tuple[bytes, bytes] | None = None
        self._counters: Frozen | None = None

    def read(self) -> Frozen:
        keys, values, count = self._batch.read()
        if self._counters is not None and self._raw == (keys, values):
            return self._counters
        cpus = self._cpus
        indices = struct.unpack_from(f"={count}I", keys)
        words = struct.unpack_from(f"={count * cpus}Q", values)
        totals = {index: sum(words[i * cpus : (i + 1) * cpus]) for i, index in enumerate(indices)}
        self._raw = (keys, values)
        self._counters = Frozen((name, totals.get(value, 0)) for name, value in _NIC_COUNTERS)
        return self._counters


_NIC_COUNTERS = [(c.name.lower(), c.value) for c in nic.Counter]


def _record(records: dict, qpn: int, local: int, peer: int, peer_qpn: int) -> dict:
    return records.setdefault(
        qpn,
        {
            "qpn": qpn,
            "qp": qp_label(qpn),
            "host": host_name(local),
            "peer": host_name(peer),
            "peer_qp": qp_label(peer_qpn),
            "send": None,
            "recv": None,
            "rates": None,
        },
    )


def _layout_struct(fields: list[tuple[int, type]], size: int = 0) -> struct.Struct:
    """A struct that unpacks the unsigned ctypes fields at these (offset, type)
    in one call; padded to size bytes if given."""
    fmt, at = "=", 0
    for offset, ctype in sorted(fields, key=lambda f: f[0]):
        fmt += f"{offset - at}x" if offset > at else ""
        fmt += {4: "I", 8: "Q"}[ctypes.sizeof(ctype)]
        at = offset + ctypes.sizeof(ctype)
    return struct.Struct(fmt + (f"{size - at}x" if size > at else ""))


def _ev_fields() -> tuple[struct.Struct, list[str]]:
    """What _send_side takes from each EV (struct nic_ev, through nic.py's layout):
    its plane, state, srtt and rtt_min, then the EV_PLANE_COUNTERS."""
    layout, stats = nic.EvStateLayout, nic.EvStats
    types = {**dict(layout._fields_), **{f"stats.{n}": t for n, t in stats._fields_}}
    names = ["plane", "state", "srtt", "rtt_min", *(f"stats.{c}" for c in EV_PLANE_COUNTERS)]

    def offset(name: str) -> int:
        if name.startswith("stats."):
            return layout.stats.offset + getattr(stats, name[6:]).offset
        return getattr(layout, name).offset

    by_offset = sorted(names, key=offset)
    return _layout_struct([(offset(n), types[n]) for n in by_offset]), by_offset


_EV_STRUCT, _EV_ORDER = _ev_fields()
# struct nic_ev_key: (qpn, ev), as nic.EvKey lays it out.
_EV_KEYS = _layout_struct(
    [(nic.EvKey.qpn.offset, ctypes.c_uint32), (nic.EvKey.ev.offset, ctypes.c_uint32)],
    ctypes.sizeof(nic.EvKey),
)
# Positions in what _EV_STRUCT unpacks (fields come out by offset).
_EV_AT = {name: i for i, name in enumerate(_EV_ORDER)}
_EV_PLANE, _EV_STATE, _EV_SRTT, _EV_RTT_MIN = (
    _EV_AT[n] for n in ("plane", "state", "srtt", "rtt_min")
)
_EV_COUNTERS_AT = [(c, _EV_AT[f"stats.{c}"]) for c in EV_PLANE_COUNTERS]


def _send_side(sq: nic.SqSnapshot, evs: dict, ev_detail: bool) -> dict:
    mine = [(ev, evs[(sq.qpn, ev)]) for ev in sq.evs if (sq.qpn, ev) in evs]
    unpack = _EV_STRUCT.unpack_from
    rows = [unpack(raw) for _, raw in mine]  # one call per EV, not a read per field
    by_plane: dict[int, list[tuple]] = {}
    for row in rows:
        by_plane.setdefault(row[_EV_PLANE], []).append(row)
    planes = {}
    for number, plane_rows in by_plane.items():
        columns = list(zip(*plane_rows, strict=True))
        plane_srtts = [x for x in columns[_EV_SRTT] if x]
        planes[number] = {
            "plane": number,
            "evs_by_state": _count_states(columns[_EV_STATE]),
            **{c: sum(columns[at]) for c, at in _EV_COUNTERS_AT},
            "srtt_ns": sum(plane_srtts) // len(plane_srtts) if plane_srtts else None,
        }
    by_state = _count_states([row[_EV_STATE] for row in rows])
    srtts = [row[_EV_SRTT] for row in rows if row[_EV_SRTT]]
    mins = [row[_EV_RTT_MIN] for row in rows if row[_EV_RTT_MIN]]
    return {
        "state": _name(sq.state),
        "engine": sq.engine,
        "mpr": sq.mpr,
        "dynamic_mpr": sq.dyn_mpr,
        "peer_mpr": sq.peer_mpr,
        "window": sq.window,
        "max_wimm": sq.max_wimm,
        "wimm_out": sq.wimm_out,
        "wimm_full": sq.wimm_full,
        "probe_good": sq.probe_good,
        "cwnd": sq.cwnd,
        "in_flight": sq.in_flight,
        "snd_una": sq.snd_una,
        "snd_nxt": sq.snd_nxt,
        "ev_min_active": sq.ev_min_active,
        "wqes_done": sq.wqe_done,
        "retx_queue": len(sq.retx_queue),
        "counters": sq.stats,
        "tx_counters": sq.tx_stats,
        "rtt_ns": {
            "min": min(mins) if mins else None,
            "srtt_mean": sum(srtts) // len(srtts) if srtts else None,
            "srtt_max": max(srtts) if srtts else None,
        },
        "evs": {"total": len(mine), "by_state": by_state},
        "planes": [planes[p] for p in sorted(planes)],
        "ev_list": [_ev_record(ev, _ev_layout(raw)) for ev, raw in mine] if ev_detail else None,
    }


def ev_records(maps: nic.NicMaps, qpn: int) -> list[dict]:
    """One record per EV of send QP qpn, in profile order (KeyError if no such QP)."""
    profile = maps.sq(qpn).evs
    evs = maps.evs_raw()
    return [_ev_record(ev, evs[(qpn, ev)]) for ev in profile if (qpn, ev) in evs]


def reverse_ev_records(maps: nic.NicMaps, qpn: int) -> list[dict]:
    """The reverse EV set that send QP qpn's ACKs come back over: its peer
    receive QP's (the receiver's daemon keeps it; KeyError if no such QP),
    one record per EV: value, plane, state, probe replies and the last RTT.
    Empty when the peer has none (its answers come back in place)."""
    peer = maps.sq_raw(qpn).peer_qpn
    evs = maps.rev_evs(peer) or []
    probes = maps.rev_probes(peer)
    return [
        {
            "ev": e.ev,
            "plane": e.plane,
            "state": nic.RevState.NAMES.get(e.state, str(e.state)),
            "receive_qpn": peer,
            "probe_replies": p.replies if p.ev == e.ev else 0,
            "rtt_us": round(p.rtt_ns / 1e3, 1) if p.ev == e.ev else 0.0,
        }
        for e, p in zip(evs, probes, strict=False)
    ]


def _ev_layout(raw: nic.EvStateLayout | bytes) -> nic.EvStateLayout:
    return raw if isinstance(raw, nic.EvStateLayout) else nic.EvStateLayout.from_buffer_copy(raw)


def _ev_record(ev: int, raw: nic.EvStateLayout) -> dict:
    return {
        "ev": ev,
        "plane": raw.plane,
        "state": _ev_state(raw.state),
        "rtt_last_ns": raw.rtt_last,
        "rtt_min_ns": raw.rtt_min,
        "srtt_ns": raw.srtt,
        "counters": {name: getattr(raw.stats, name) for name, _ in nic.EvStats._fields_},
        "rates": None,
    }


_EV_STATE_NAMES = {s.value: s.name for s in nic.EvState}


def _count_states(values) -> dict[str, int]:
    """EVs by state name: every known state (0 if none), then any unknown value."""
    counts = dict.fromkeys(EV_STATES, 0)
    for value, n in collections.Counter(values).items():
        state = _ev_state(value)
        counts[state] = counts.get(state, 0) + n
    return counts


def _ev_state(value: int) -> str:
    return _EV_STATE_NAMES.get(value) or str(value)


def _name(value: object) -> str:
    """An enum member's name; a value outside the enum as its number."""
    return getattr(value, "name", None) or str(value)
