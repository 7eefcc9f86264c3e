"""The host daemon's controller side (OCP mrc_ctl.h): profiles, EV events, ports.

The daemon (mrc_nic.transport.daemon) owns one Controller; its op_* methods
for mrc_nic.contract.ctlops hand the requests here. What changes QPs that
are live goes to the NIC maps at once: an EV DENIED (MODIFY_EV_STATE) on a
profile is DENIED on every QP of this host using it, and GOOD again when
allowed; an EV replaced (REPLACE_EV) on an ONLINE profile is swapped in every
such QP as the EV replacer swaps its own (evreplace.Replacer.swap); a
DISABLED port leaves nic_port_up and answers no probe (nic_host_ctl).

EV events (mrc_ctl_poll_ev_event) are made where the state changes: the NIC
writes a copy of every EV state record of this host's send QPs into the
host's EV event queue, a CQ ring the controller owns (nic_host_ctl.ev_event_cq,
docs/nic-program.md "EV states"), and the daemon's loop drains it when its fd
is readable; the changes the daemon makes itself (DENIED, GOOD, a port down)
are posted as it makes them. Each change to a state in the profile's
ev_event_mask is an event on the host's queue (EVENT_QUEUE entries; when it
is full, or the ring was, events are dropped and the next one delivered says
how many: drop_count, precise). So an EV that flips and flips back between
two of the prober's scans leaves both events.

Port status updates (mrc_ctl_ep_batch_send_wait, PORT_STATUS_UPDATE) go out
with the EV probes (transport.epprobe); those peers sent to this host are in
nic_peer_ports, shown by port_query as `peers`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import time
from typing import Any

from mrc_nic import nic
from mrc_nic.contract import ctlops
from mrc_nic.transport import epprobe, profiles
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
        self.ports_disabled = 0  # bitmap of planes whose port is administratively DISABLED
        daemon.maps.set_ports_disabled(daemon.index, 0)
        self.ep = epprobe.EpProber(daemon.topo, daemon.index, daemon.maps)  # EV probe batches
        self._wall_minus_mono = time.time() - time.monotonic()  # the NIC's ts: CLOCK_MONOTONIC
        self._open_ev_queue()

    def _open_ev_queue(self) -> None:
        """The host's EV event queue in the NIC: a CQ slot of this host's, its ring
        (the NIC writes a copy of every EV state record of our send QPs there)."""
        maps = self.d.maps
        self.ev_cq = self.d.apps.cq_slots.take()
        self._ev_fd = maps.create_cq_ring(name="mrc_ev_events")
        try:
            maps.set_cq_ring(self.ev_cq, self._ev_fd)
            maps.reset_cq_lost(self.ev_cq)
            self.ev_queue = nic.EventReader(self._ev_fd)
        except BaseException:
            os.close(self._ev_fd)
            raise
        self._ev_lost = 0
        maps.set_ev_event_cq(self.d.index, self.ev_cq + 1)

    def close(self) -> None:
        self.ep.close()
        with contextlib.suppress(OSError):
            self.d.maps.set_ev_event_cq(self.d.index, 0)
            self.d.maps.clear_cq_ring(self.ev_cq)
        self.ev_queue.close()
        os.close(self._ev_fd)

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

    def _users(self, p: profiles.EvProfile) -> list[Any]:
        return [q for q in self.live_qps() if (q.qp.attrs.ev_profile_id or 0) == p.id]

    def _push_denied(self, p: profiles.EvProfile) -> None:
        """Apply a profile's DENIED set to the live QPs using it."""
        fmt = self.table.fmt.get(p.fmt_id) if p.fmt_id is not None else None
        denied = p.denied_wire(fmt)
        for q in self._users(p):
            for ev in q.evs:
                with contextlib.suppress(KeyError, OSError):
                    state = self.d.maps.ev(q.qp.qpn, ev).state
                    if ev in denied and state != nic.EvState.DENIED:
                        self.set_ev_state(q, ev, nic.EvState.DENIED, "MODIFY_EV_STATE")
                    elif ev not in denied and state == nic.EvState.DENIED:
                        self.set_ev_state(q, ev, nic.EvState.GOOD, "MODIFY_EV_STATE")

    def _push_replaced(self, old: profiles.EvProfile, p: profiles.EvProfile) -> list[dict]:
        """REPLACE_EV on an ONLINE profile: each EV the call changed is swapped in
        the live QPs using it that still hold it (one the NIC replaced of its own
        accord keeps its replacement), onto the new EV's port. What was swapped."""
        fmt = self.table.fmt.get(p.fmt_id) if p.fmt_id is not None else None
        pairs = [
            (p.wire(a.val, fmt), p.wire(b.val, fmt), b.port - 1)
            for a, b in zip(old.evs, p.evs, strict=True)
            if a != b and not a.unpopulated
        ]
        done = []
        now = time.monotonic()
        for q in self._users(p):
            for was, new, plane in pairs:
                live = was in q.evs and new not in q.evs
                if live and self.d.replacer.swap(now, q, was, new, plane, cause="REPLACE_EV"):
                    done.append({"qpn": q.qp.qpn, "old_wire": was, "new_wire": new})
        return done

    def set_ev_state(self, q: Any, wire: int, state: nic.EvState, cause: str) -> None:
        """The daemon's own word on an EV of send QP q (the controller's DENIED or
        GOOD, a port gone down): set in the NIC and posted as an event as it is
        made (the NIC's own changes come from the EV event queue)."""
        before = self.d.maps.ev(q.qp.qpn, wire).state
        self.d.maps.set_ev_state(q.qp.qpn, wire, state)
        self._ev_changed(q, wire, int(before), int(state), cause, time.time())

    # ---- operations --------------------------------------------------------------------
    def query_device(self, req: ctlops.CtlQueryDevice) -> ctlops.CtlDeviceReply:
        return ctlops.CtlDeviceReply(attr=self.table.device_attr())

    def ev_fmt_modify(self, req: ctlops.EvFmtProfileModify) -> ctlops.ProfileReply:
        return ctlops.ProfileReply(profile=self.table.modify_ev_fmt(req.id, req.attrs).as_dict())

    def ev_fmt_query(self, req: ctlops.EvFmtProfileQuery) -> ctlops.ProfilesReply:
        ids = sorted(self.table.fmt) if req.id is None else [req.id]
        return ctlops.ProfilesReply(profiles=[self.table.query_ev_fmt(i).as_dict() for i in ids])

    def ev_modify(self, req: ctlops.EvProfileModify) -> ctlops.ProfileReply:
        old = self.table.ev.get(req.id)
        p = self.table.modify_ev(req.id, req.attrs)
        swapped = None
        if "ev_op" in req.attrs:
            if old is not None and old.state == profiles.ProfileState.ONLINE:
                swapped = self._push_replaced(old, p)
            self._push_denied(p)
        profile = self._ev_dict(p, False)
        if swapped is not None:
            profile["replaced_in_qps"] = swapped  # extension: the live QPs' swaps
        return ctlops.ProfileReply(profile=profile)

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
    def drain_ev_queue(self) -> None:
        """The NIC's EV state records of our send QPs (the EV event queue's ring is
        readable) as events; records the full ring lost count as dropped."""
        lost = self.d.maps.cq_lost(self.ev_cq)
        if lost > self._ev_lost:
            self._dropped += lost - self._ev_lost
            self._ev_lost = lost
        sending = self.d.apps.sending()
        for r in self.ev_queue.read():
            q = sending.get(r.qpn)
            if r.type != nic.EventType.EV_STATE or q is None:
                continue  # not ours, or the QP is gone
            try:
                cause = nic.EvCause(r.cause).name
            except ValueError:
                cause = str(r.cause)
            when = r.ts / 1e9 + self._wall_minus_mono
            self._ev_changed(q, r.ev, r.old_state, r.new_state, cause, when)

    def _ev_changed(self, q: Any, wire: int, old: int, new: int, cause: str, when: float) -> None:
        """An event for EV `wire` of send QP q going from NIC state old to new,
        if that is a change of OCP state the profile's ev_event_mask takes."""
        before = NIC_TO_OCP.get(old, EvState.UNKNOWN)
        state = NIC_TO_OCP.get(new, EvState.UNKNOWN)
        if state == before:
            return
        pid = q.qp.attrs.ev_profile_id or 0
        p = self.table.ev.get(pid)
        if p is None or not p.ev_event_mask & state:
            return
        plane = q.evs.get(wire)
        if plane is None:  # replaced since: its state is still there for a while
            try:
                plane = self.d.maps.ev_raw(q.qp.qpn, wire).plane
            except KeyError:
                return
        self._post(
            {
                "profile_id": pid,
                "ev": {"val": self._val_of(p, wire), "port": plane + 1},
                "state": state.name,
                "qpn": q.qp.qpn,
                "wire": wire,
                "cause": cause,
                "time": when,
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
        self.drain_ev_queue()  # what the NIC wrote since the loop last woke
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
        return ctlops.PortsReply(ports=out, peers=self._peer_ports())

    def _peer_ports(self) -> list[dict]:
        """The port status each peer last sent this host (PORT_STATUS_UPDATE), as
        its NIC recorded it (nic_peer_ports)."""
        topo, now = self.d.topo, time.monotonic_ns()
        view = self.d.maps.peer_ports(self.d.index)
        out = []
        for name in topo.host_names():
            index = topo.nodes[name].index
            e = view[index] if index < len(view) else None
            if e is None or not e.rx_ns or index == self.d.index:
                continue
            out.append(
                {
                    "host": name,
                    "port_status": e.ports << 1 & ((1 << topo.planes) - 1 << 1),
                    "ports": [
                        {"port": p + 1, "state": "UP" if e.ports >> p & 1 else "DOWN"}
                        for p in range(topo.planes)
                    ],
                    "updates": e.updates,
                    "age_s": round(max(0, now - e.rx_ns) / 1e9, 6),
                    "via_port": e.plane + 1,
                }
            )
        return out

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
        self.d.maps.set_ports_disabled(self.d.index, self.ports_disabled)  # answers no probe
        self.d.update_ports()
        return self.port_query(ctlops.PortQuery(port=req.port))

    # ---- endpoint operations: EV probes ------------------------------------------------
    def ep_batch_start(self, req: ctlops.EpBatchSendWait, conn: Any) -> None:
        """Send the batch; its reply comes from ep_step."""
        self.ep.start(req, conn)

    def ep_step(self) -> list[tuple[Any, ctlops.EpBatchReply]]:
        """Batches that are done: (connection, reply)."""
        return [
            (conn, ctlops.EpBatchReply(rsps=rsps, unsent=unsent))
            for conn, rsps, unsent in self.ep.step()
        ]
