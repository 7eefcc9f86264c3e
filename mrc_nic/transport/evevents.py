"""EV events (OCP mrc_ctl_poll_ev_event): made where an EV's state changes.

The NIC writes a copy of every EV state record of this host's send QPs into
the host's EV event queue, a CQ ring this part owns (nic_host_ctl.ev_event_cq,
docs/nic-program.md "EV states"), and the daemon's loop drains it when its
fd is readable; the changes the daemon makes itself (the controller's DENIED
or GOOD, a port down) are posted as it makes them (set_ev_state). Each
change to a state in the profile's ev_event_mask is an event on the host's
queue (EVENT_QUEUE entries; when it is full, or the ring was, events are
dropped and the next one delivered says how many: drop_count, precise). So
an EV that flips and flips back between two of the prober's scans leaves
both events.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import time
from collections.abc import Callable
from typing import ClassVar

from mrc_nic import nic
from mrc_nic.contract import ctlops
from mrc_nic.contract.enums import EvState
from mrc_nic.lab.service import Conn
from mrc_nic.transport import profiles
from mrc_nic.transport.host import HostContext, Part
from mrc_nic.transport.profiles import ProfileError
from mrc_nic.transport.sessions import AppQp

EVENT_QUEUE = 4096
# NIC EV state -> OCP state (SKIP is GOOD in the API: a short detour)
NIC_TO_OCP = {
    int(nic.EvState.GOOD): EvState.GOOD,
    int(nic.EvState.SKIP): EvState.GOOD,
    int(nic.EvState.ASSUMED_BAD): EvState.ASSUMED_BAD,
    int(nic.EvState.DENIED): EvState.DENIED,
}


class EvEvents(Part):
    handles: ClassVar = {ctlops.EvEventPoll: "poll_events"}

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self.events: collections.deque[dict] = collections.deque()
        self._dropped = 0
        self._wall_minus_mono = time.time() - time.monotonic()  # the NIC's ts: CLOCK_MONOTONIC
        self.on_bad: Callable[[], None] | None = None  # an EV of ours went ASSUMED_BAD
        self._open_queue()

    def _open_queue(self) -> None:
        """The host's EV event queue in the NIC: a CQ slot of this host's, its ring
        (the NIC writes a copy of every EV state record of our send QPs there)."""
        maps = self.ctx.maps
        self.ev_cq = self.ctx.cq_slots.take()
        self._ev_fd = maps.create_cq_ring(name="mrc_ev_events")
        try:
            maps.set_cq_ring(self.ev_cq, self._ev_fd)
            self._ev_lost = maps.cq_lost(self.ev_cq)  # an earlier CQ's losses are not ours
            self.queue = nic.EventReader(self._ev_fd)
        except BaseException:
            os.close(self._ev_fd)
            raise
        maps.set_ev_event_cq(self.ctx.index, self.ev_cq + 1)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ctx.maps.set_ev_event_cq(self.ctx.index, 0)
            self.ctx.maps.clear_cq_ring(self.ev_cq)
        self.queue.close()
        os.close(self._ev_fd)

    def set_ev_state(self, q: AppQp, wire: int, state: nic.EvState, cause: str) -> None:
        """The daemon's own word on an EV of send QP q (the controller's DENIED or
        GOOD, a port gone down): set in the NIC and posted as an event as it is
        made (the NIC's own changes come from the EV event queue)."""
        before = self.ctx.maps.ev(q.qp.qpn, wire).state
        self.ctx.maps.set_ev_state(q.qp.qpn, wire, state)
        self._changed(q, wire, int(before), int(state), cause, time.time())

    def drain(self) -> None:
        """The NIC's EV state records of our send QPs (the EV event queue's ring is
        readable) as events; records the full ring lost count as dropped."""
        lost = self.ctx.maps.cq_lost(self.ev_cq)
        if lost > self._ev_lost:
            self._dropped += lost - self._ev_lost
            self._ev_lost = lost
        sending = self.ctx.sessions.sending()
        for r in self.queue.read():
            q = sending.get(r.qpn)
            if r.type != nic.EventType.EV_STATE or q is None:
                continue  # not ours, or the QP is gone
            try:
                cause = nic.EvCause(r.cause).name
            except ValueError:
                cause = str(r.cause)
            when = r.ts / 1e9 + self._wall_minus_mono
            self._changed(q, r.ev, r.old_state, r.new_state, cause, when)

    def _changed(self, q: AppQp, wire: int, old: int, new: int, cause: str, when: float) -> None:
        """An event for EV `wire` of send QP q going from NIC state old to new,
        if that is a change of OCP state the profile's ev_event_mask takes."""
        if new == nic.EvState.ASSUMED_BAD and self.on_bad is not None:
            self.on_bad()  # (before the mask: the prober probes it whoever listens)
        before = NIC_TO_OCP.get(old, EvState.UNKNOWN)
        state = NIC_TO_OCP.get(new, EvState.UNKNOWN)
        if state == before:
            return
        pid = q.qp.attrs.ev_profile_id or 0
        p = self.ctx.table.ev.get(pid)
        if p is None or not p.ev_event_mask & state:
            return
        plane = q.evs.get(wire)
        if plane is None:  # replaced since: its state is still there for a while
            try:
                plane = self.ctx.maps.ev_raw(q.qp.qpn, wire).plane
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
        fmt = self.ctx.table.fmt.get(p.fmt_id)
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

    def poll_events(self, req: ctlops.EvEventPoll, conn: Conn | None) -> ctlops.EvEventsReply:
        if not 1 <= req.num_entries <= EVENT_QUEUE:
            raise ProfileError(
                errno.EINVAL, f"num_entries must be 1..{EVENT_QUEUE}, not {req.num_entries}"
            )
        self.drain()  # what the NIC wrote since the loop last woke
        out, keep = [], collections.deque()
        while self.events:
            ev = self.events.popleft()
            if len(out) < req.num_entries and req.profile_id in (None, ev["profile_id"]):
                out.append(ev)
            else:
                keep.append(ev)
        self.events = keep
        return ctlops.EvEventsReply(events=out)
