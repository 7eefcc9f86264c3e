"""The QP section of a snapshot: every QP in the lab's NIC maps, both sides.

A QPN is lab-unique (host << 16 | index), so one record per QPN holds its
send side (nic_tx_qps: window, counters, and its EVs from nic_evs) and its
receive side (nic_rx_qps), whichever exist. EVs are read for all QPs at
once in a batch (NicMaps.evs_raw); per-EV records are built only when asked
(`--by ev`), since a QP has up to 256 of them.

Counter dicts mirror the structs of bpf/nic_maps.h field by field (through
nic.py's ctypes views), so a field the fast path adds shows up here too.
"""

from __future__ import annotations

from mrc_nic import bpfsys, nic

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
    tx_qpns = maps.tx_qpns()
    evs = maps.evs_raw() if tx_qpns else {}
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
            "cum_psn": rq.cum_psn,
            "msn": rq.msn,
            "received_ahead": len(rq.received),
            "pending_msgs": len(rq.pending_msgs),
            "counters": rq.stats,
        }
    return [records[q] for q in sorted(records)]


def nic_counters(maps: nic.NicMaps) -> dict[str, int]:
    """The lab's NIC outcome counters (NicMaps.counters), read in one batch syscall."""
    cpus = bpfsys.possible_cpus()
    rows = bpfsys.map_lookup_batch(maps.fd(nic.COUNTERS_MAP), 4, 8 * cpus)
    totals = {}
    for key, value in rows:
        index = int.from_bytes(key, "little")
        totals[index] = sum(int.from_bytes(value[i * 8 : i * 8 + 8], "little") for i in range(cpus))
    return {c.name.lower(): totals.get(c.value, 0) for c in nic.Counter}


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


def _send_side(sq: nic.SqSnapshot, evs: dict, ev_detail: bool) -> dict:
    mine = [(ev, evs[(sq.qpn, ev)]) for ev in sq.evs if (sq.qpn, ev) in evs]
    by_state = dict.fromkeys(EV_STATES, 0)
    planes: dict[int, dict] = {}
    srtts_by_plane: dict[int, list[int]] = {}
    for _, raw in mine:
        state = _ev_state(raw.state)
        by_state[state] = by_state.get(state, 0) + 1
        plane = planes.get(raw.plane)
        if plane is None:
            plane = planes[raw.plane] = {
                "plane": raw.plane,
                "evs_by_state": dict.fromkeys(EV_STATES, 0),
                **dict.fromkeys(EV_PLANE_COUNTERS, 0),
                "srtt_ns": None,
            }
            srtts_by_plane[raw.plane] = []
        plane["evs_by_state"][state] = plane["evs_by_state"].get(state, 0) + 1
        stats = raw.stats
        for c in EV_PLANE_COUNTERS:
            plane[c] += getattr(stats, c)
        if raw.srtt:
            srtts_by_plane[raw.plane].append(raw.srtt)
    for number, srtts in srtts_by_plane.items():
        planes[number]["srtt_ns"] = sum(srtts) // len(srtts) if srtts else None
    srtts = [raw.srtt for _, raw in mine if raw.srtt]
    mins = [raw.rtt_min for _, raw in mine if raw.rtt_min]
    return {
        "state": _name(sq.state),
        "engine": sq.engine,
        "mpr": sq.mpr,
        "window": sq.window,
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
        "ev_list": [_ev_record(ev, raw) for ev, raw in mine] if ev_detail else None,
    }


def ev_records(maps: nic.NicMaps, qpn: int) -> list[dict]:
    """One record per EV of send QP qpn, in profile order (KeyError if no such QP)."""
    profile = maps.sq(qpn).evs
    evs = maps.evs_raw()
    return [_ev_record(ev, evs[(qpn, ev)]) for ev in profile if (qpn, ev) in evs]


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


def _ev_state(value: int) -> str:
    return _EV_STATE_NAMES.get(value) or str(value)


def _name(value: object) -> str:
    """An enum member's name; a value outside the enum as its number."""
    return getattr(value, "name", None) or str(value)
