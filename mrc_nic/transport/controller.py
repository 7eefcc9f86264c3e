"""The host daemon's controller side (OCP mrc_ctl.h): profiles, EV events, port admin.

The daemon (mrc_nic.transport.daemon) owns one Controller; its op_* methods
for mrc_nic.transport.ctlops hand the requests here. What changes QPs that
are live goes to the NIC maps at once: an EV DENIED (MODIFY_EV_STATE) on a
profile is DENIED on every QP of this host using it, and GOOD again when
allowed; a DISABLED port leaves nic_port_up.

EV events (mrc_ctl_poll_ev_event): the EV states the prober's scans read
(every SCAN_INTERVAL_S while EVs fail, transport.prober) are compared with
the last scan's; a change to a state in the profile's ev_event_mask is an
event on the host's queue (EVENT_QUEUE entries; when it is full events are
dropped and the next one delivered says how many: drop_count, precise). A
state that flips and flips back between two scans is not seen.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import time
from typing import Any

from mrc_nic import nic
from mrc_nic.transport import ctlops, epprobe, profiles
from mrc_nic.transport.profiles import EvState, ProfileError

EVENT_QUEUE = 4096
# NIC EV state -> OCP state (SKIP is GOOD in the API: a short detour)
NIC_TO_OCP = {
    int(nic.EvState.GOOD): EvState.GOOD,
    int(nic.EvState.SKIP): EvState.GOOD,
    int(nic.EvState.ASSUMED_BAD): EvState.ASSUMED_BAD,
    int(nic.EvState.DENIED): EvState.DENIED,
}


class Controller:
    def __init__(self, daemon: Any) -> None:
        self.d = daemon
        self.table = profiles.ProfileTable(daemon.topo.planes)
        self.events: collections.deque[dict] = collections.deque()
        self._dropped = 0
        self._seen: dict[tuple[int, int], EvState] = {}
        self.ports_disabled = 0  # bitmap of planes whose port is administratively DISABLED
        self.ep = epprobe.EpProber(daemon.topo, daemon.index, daemon.maps)  # EV probe batches

    def close(self) -> None:
        self.ep.close()

    # ---- QPs -------------------------------------------------------------------------
    def live_qps(self) -> list[Any]:
        """This host's send QPs with EVs in the NIC: applications' (every WRITE is a
        verbs application's since `write` moved onto the verbs API)."""
        return [aq for aq in self.d.apps.qps() if getattr(aq, "evs", None)]

    def qp_evs(
        self, qpn: int, ev_profile_id: int | None, ev_count: int | None = None
    ) -> tuple[dict[int, int], int, set[int]]:
        """What a QP connecting on profile `ev_profile_id` gets: {wire EV:
        plane}, ev_min_active, the wire EVs DENIED. Records the QP as a user."""
        pid = profiles.DEFAULT_EV_PROFILE if ev_profile_id is None else ev_profile_id
        p, fmt = self.table.online_ev_profile(pid)
        evs = p.qp_evs(fmt, self.d.topo.planes, ev_count)
        if pid == profiles.DEFAULT_EV_PROFILE:
            floor = (ev_count or p.ev_count) // 4
        else:
            floor = p.ev_min_active
        self.table.attach(qpn, pid, None)
        return evs, floor, p.denied_wire(fmt) & set(evs)

    def backup_for(self, ev_profile_id: int | None):
        """A replacement picker for the EV replacer: (plane, taken) -> wire EV or None."""
        if not ev_profile_id:
            return None
        p = self.table.ev.get(ev_profile_id)
        if p is None or p.mode == profiles.EvMode.AUTO:
            return None
        fmt = self.table.fmt.get(p.fmt_id)
        return lambda plane, taken: p.next_backup(fmt, plane, taken)

    def forget_qp(self, qpn: int) -> None:
        self.table.detach(qpn)
        for key in [k for k in self._seen if k[0] == qpn]:
            del self._seen[key]

    def _push_denied(self, p: profiles.EvProfile) -> None:
        """Apply a profile's DENIED set to the live QPs using it."""
        fmt = self.table.fmt.get(p.fmt_id) if p.fmt_id is not None else None
        denied = p.denied_wire(fmt)
        for q in self.live_qps():
            if q.qp.attrs.ev_profile_id != p.id:
                continue
            for ev in q.evs:
                with contextlib.suppress(KeyError, OSError):
                    state = self.d.maps.ev(q.qp.qpn, ev).state
                    if ev in denied and state != nic.EvState.DENIED:
                        self.d.maps.set_ev_state(q.qp.qpn, ev, nic.EvState.DENIED)
                    elif ev not in denied and state == nic.EvState.DENIED:
                        self.d.maps.set_ev_state(q.qp.qpn, ev, nic.EvState.GOOD)

    # ---- operations --------------------------------------------------------------------
    def query_device(self, req: ctlops.CtlQueryDevice) -> ctlops.CtlDeviceReply:
        return ctlops.CtlDeviceReply(attr=self.table.device_attr())

    def ev_fmt_modify(self, req: ctlops.EvFmtProfileModify) -> ctlops.ProfileReply:
        return ctlops.ProfileReply(profile=self.table.modify_ev_fmt(req.id, req.attrs).as_dict())

    def ev_fmt_query(self, req: ctlops.EvFmtProfileQuery) -> ctlops.ProfilesReply:
        ids = sorted(self.table.fmt) if req.id is None else [req.id]
        return ctlops.ProfilesReply(profiles=[self.table.query_ev_fmt(i).as_dict() for i in ids])

    def ev_modify(self, req: ctlops.EvProfileModify) -> ctlops.ProfileReply:
        p = self.table.modify_ev(req.id, req.attrs)
        if "ev_op" in req.attrs:
            self._push_denied(p)
        return ctlops.ProfileReply(profile=self._ev_dict(p, False))

    def ev_query(self, req: ctlops.EvProfileQuery) -> ctlops.ProfilesReply:
        ids = sorted(self.table.ev) if req.id is None else [req.id]
        return ctlops.ProfilesReply(
            profiles=[self._ev_dict(self.table.ev_profile(i), req.evs) for i in ids]
        )

    def _ev_dict(self, p: profiles.EvProfile, evs: bool) -> dict:
        fmt = self.table.fmt.get(p.fmt_id) if p.fmt_id is not None else None
        d = p.as_dict(fmt, evs=evs)
        d["qps"] = sorted(self.table.users_of(p.id))
        if evs:
            d["ev_states"] = self._ev_states(p)
        return d

    def _ev_states(self, p: profiles.EvProfile) -> dict[str, str]:
        """QUERY_EV_STATE over the QPs using the profile: {wire EV: state},
        the worst of them (DENIED, ASSUMED_BAD, GOOD)."""
        rank = {EvState.GOOD: 0, EvState.ASSUMED_BAD: 1, EvState.DENIED: 2}
        out: dict[int, EvState] = {}
        for q in self.live_qps():
            if q.qp.attrs.ev_profile_id != p.id:
                continue
            for ev in q.evs:
                with contextlib.suppress(KeyError, OSError):
                    s = NIC_TO_OCP.get(int(self.d.maps.ev(q.qp.qpn, ev).state), EvState.UNKNOWN)
                    if s == EvState.UNKNOWN or rank[s] >= rank.get(out.get(ev), -1):
                        out[ev] = s
        return {str(ev): s.name for ev, s in sorted(out.items())}

    def cc_modify(self, req: ctlops.CcProfileModify) -> ctlops.ProfileReply:
        return ctlops.ProfileReply(profile=self.table.modify_cc(req.id, req.attrs).as_dict())

    def cc_query(self, req: ctlops.CcProfileQuery) -> ctlops.ProfilesReply:
        ids = sorted(self.table.cc) if req.id is None else [req.id]
        out = []
        for i in ids:
            d = self.table.cc_profile(i).as_dict()
            d["qps"] = sorted(self.table.cc_users.get(i, ()))
            out.append(d)
        return ctlops.ProfilesReply(profiles=out)

    # ---- EV events -----------------------------------------------------------------------
    def scan(self, now: float, mine: dict, states: list) -> None:
        """Turn EV state changes of one scan (prober.EvScan) into events."""
        for e in states:
            q = mine.get(e.qpn)
            if q is None or e.ev not in q.evs:
                continue
            state = NIC_TO_OCP.get(int(e.state), EvState.UNKNOWN)
            key = (e.qpn, e.ev)
            before = self._seen.get(key, EvState.GOOD)
            self._seen[key] = state
            if state == before:
                continue
            pid = q.qp.attrs.ev_profile_id or 0
            p = self.table.ev.get(pid)
            if p is None or not p.ev_event_mask & state:
                continue
            self._post(
                {
                    "profile_id": pid,
                    "ev": {"val": self._val_of(p, e.ev), "port": e.plane + 1},
                    "state": state.name,
                    "qpn": e.qpn,
                    "wire": e.ev,
                    "time": time.time(),
                }
            )

    def _val_of(self, p: profiles.EvProfile, wire: int) -> int:
        if p.mode == profiles.EvMode.AUTO:
            return wire
        fmt = self.table.fmt.get(p.fmt_id)
        for e in p.evs:
            if not e.unpopulated and p.wire(e.val, fmt) == wire:
                return e.val
        return wire  # a replacement of the NIC's own choosing

    def _post(self, event: dict) -> None:
        if len(self.events) >= EVENT_QUEUE:
            self._dropped += 1
            return
        event["drop_count"], self._dropped = self._dropped, 0
        self.events.append(event)

    def poll_events(self, req: ctlops.EvEventPoll) -> ctlops.EvEventsReply:
        if not 1 <= req.num_entries <= EVENT_QUEUE:
            raise ProfileError(
                errno.EINVAL, f"num_entries must be 1..{EVENT_QUEUE}, not {req.num_entries}"
            )
        out, keep = [], collections.deque()
        while self.events:
            ev = self.events.popleft()
            if len(out) < req.num_entries and req.profile_id in (None, ev["profile_id"]):
                out.append(ev)
            else:
                keep.append(ev)
        self.events = keep
        return ctlops.EvEventsReply(events=out)

    # ---- ports ---------------------------------------------------------------------------
    def port_query(self, req: ctlops.PortQuery) -> ctlops.PortsReply:
        planes = self.d.topo.planes
        if req.port is not None and not 1 <= req.port <= planes:
            raise ProfileError(
                errno.EINVAL, f"port must be 1..{planes} (plane + 1), not {req.port}"
            )
        ports = range(planes) if req.port is None else [req.port - 1]
        carrier = self.d.carrier_bits or 0
        up = self.d.maps.port_bitmap(self.d.index)
        out = []
        for p in ports:
            disabled = self.ports_disabled >> p & 1
            out.append(
                {
                    "port": p + 1,
                    "plane": p,
                    "port_admin_state": "DISABLED" if disabled else "ENABLED",
                    "carrier": bool(carrier >> p & 1),
                    "state": "ACTIVE" if up >> p & 1 else "DOWN",  # ibv_query_port's view
                }
            )
        return ctlops.PortsReply(ports=out)

    def port_modify(self, req: ctlops.PortModify) -> ctlops.PortsReply:
        planes = self.d.topo.planes
        if not 1 <= req.port <= planes:
            raise ProfileError(
                errno.EINVAL, f"port must be 1..{planes} (plane + 1), not {req.port}"
            )
        state = str(req.port_admin_state).upper()
        if state not in ("ENABLED", "DISABLED"):
            raise ProfileError(
                errno.EINVAL, f"port_admin_state must be ENABLED or DISABLED, not {state!r}"
            )
        bit = 1 << (req.port - 1)
        self.ports_disabled = (
            self.ports_disabled | bit if state == "DISABLED" else self.ports_disabled & ~bit
        )
        self.d.update_ports()
        return self.port_query(ctlops.PortQuery(port=req.port))

    # ---- endpoint operations: EV probes ------------------------------------------------
    def ep_batch_start(self, req: ctlops.EpBatchSendWait, conn: Any) -> None:
        """Send the batch; its reply comes from ep_step."""
        self.ep.start(req, conn)

    def ep_step(self) -> list[tuple[Any, ctlops.EpBatchReply]]:
        """Batches that are done: (connection, reply)."""
        return [(conn, ctlops.EpBatchReply(rsps=rsps)) for conn, rsps in self.ep.step()]
