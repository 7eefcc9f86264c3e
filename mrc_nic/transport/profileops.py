"""The controller's profiles (OCP mrc_ctl.h): EV Format, EV and CC profiles, served.

The profile table (transport.profiles) checks and keeps them; what changes
QPs that are live goes to the NIC maps at once: an EV DENIED
(MODIFY_EV_STATE) on a profile is DENIED on every QP of this host using it,
and GOOD again when allowed; an EV replaced (REPLACE_EV) on an ONLINE
profile is swapped in every such QP as the EV replacer swaps its own
(evreplace.Replacer.swap).
"""

from __future__ import annotations

import contextlib
import time
from typing import ClassVar

from mrc_nic import nic
from mrc_nic.contract import ctlops
from mrc_nic.contract.enums import EvState
from mrc_nic.lab.service import Conn
from mrc_nic.transport import profiles
from mrc_nic.transport.evevents import NIC_TO_OCP, EvEvents
from mrc_nic.transport.evreplace import Replacer
from mrc_nic.transport.host import HostContext, Part
from mrc_nic.transport.sessions import AppQp


class ProfileOps(Part):
    handles: ClassVar = {
        ctlops.CtlQueryDevice: "query_device",
        ctlops.EvFmtProfileModify: "ev_fmt_modify",
        ctlops.EvFmtProfileQuery: "ev_fmt_query",
        ctlops.EvProfileModify: "ev_modify",
        ctlops.EvProfileQuery: "ev_query",
        ctlops.CcProfileModify: "cc_modify",
        ctlops.CcProfileQuery: "cc_query",
    }

    def __init__(self, ctx: HostContext, events: EvEvents, replacer: Replacer) -> None:
        self.ctx, self.table = ctx, ctx.table
        self.events = events  # DENIED and GOOD posted as they are set
        self.replacer = replacer  # REPLACE_EV swaps in live QPs as its own

    def _users(self, p: profiles.EvProfile) -> list[AppQp]:
        """The send QPs with EVs in the NIC that use profile p."""
        return [
            q for q in self.ctx.sessions.qps() if q.evs and (q.qp.attrs.ev_profile_id or 0) == p.id
        ]

    def _push_denied(self, p: profiles.EvProfile) -> None:
        """Apply a profile's DENIED set to the live QPs using it."""
        fmt = self.table.fmt.get(p.fmt_id) if p.fmt_id is not None else None
        denied = p.denied_wire(fmt)
        for q in self._users(p):
            for ev in q.evs:
                with contextlib.suppress(KeyError, OSError):
                    state = self.ctx.maps.ev(q.qp.qpn, ev).state
                    if ev in denied and state != nic.EvState.DENIED:
                        self.events.set_ev_state(q, ev, nic.EvState.DENIED, "MODIFY_EV_STATE")
                    elif ev not in denied and state == nic.EvState.DENIED:
                        self.events.set_ev_state(q, ev, nic.EvState.GOOD, "MODIFY_EV_STATE")

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
                if live and self.replacer.swap(now, q, was, new, plane, cause="REPLACE_EV"):
                    done.append({"qpn": q.qp.qpn, "old_wire": was, "new_wire": new})
        return done

    # ---- operations --------------------------------------------------------------------
    def query_device(self, req: ctlops.CtlQueryDevice, conn: Conn | None) -> ctlops.CtlDeviceReply:
        return ctlops.CtlDeviceReply(attr=self.table.device_attr())

    def ev_fmt_modify(
        self, req: ctlops.EvFmtProfileModify, conn: Conn | None
    ) -> ctlops.ProfileReply:
        return ctlops.ProfileReply(profile=self.table.modify_ev_fmt(req.id, req.attrs).as_dict())

    def ev_fmt_query(
        self, req: ctlops.EvFmtProfileQuery, conn: Conn | None
    ) -> ctlops.ProfilesReply:
        ids = sorted(self.table.fmt) if req.id is None else [req.id]
        return ctlops.ProfilesReply(profiles=[self.table.query_ev_fmt(i).as_dict() for i in ids])

    def ev_modify(self, req: ctlops.EvProfileModify, conn: Conn | None) -> ctlops.ProfileReply:
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

    def ev_query(self, req: ctlops.EvProfileQuery, conn: Conn | None) -> ctlops.ProfilesReply:
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
        for q in self.ctx.sessions.qps():
            if not q.evs or q.qp.attrs.ev_profile_id != p.id:
                continue
            for ev in q.evs:
                with contextlib.suppress(KeyError, OSError):
                    state = self.ctx.maps.ev(q.qp.qpn, ev).state
                    s = NIC_TO_OCP.get(int(state), EvState.UNKNOWN)
                    if s == EvState.UNKNOWN or rank[s] >= rank.get(out.get(ev), -1):
                        out[ev] = s
        return {str(ev): s.name for ev, s in sorted(out.items())}

    def cc_modify(self, req: ctlops.CcProfileModify, conn: Conn | None) -> ctlops.ProfileReply:
        return ctlops.ProfileReply(profile=self.table.modify_cc(req.id, req.attrs).as_dict())

    def cc_query(self, req: ctlops.CcProfileQuery, conn: Conn | None) -> ctlops.ProfilesReply:
        ids = sorted(self.table.cc) if req.id is None else [req.id]
        out = []
        for i in ids:
            d = self.table.cc_profile(i).as_dict()
            d["qps"] = sorted(self.table.cc_users.get(i, ()))
            out.append(d)
        return ctlops.ProfilesReply(profiles=out)
