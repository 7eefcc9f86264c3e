"""A send QP's state in the NIC at RTS: its EVs from its EV profile, window, NSCC.

transport.qplife calls setup_send when an application's QP goes to RTS;
what the EV profile gives a QP (qp_evs) and how its EVs are replaced
(backup_for) come from the host's profile table (transport.profiles).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable

from mrc_nic import nic
from mrc_nic.kernel import pins
from mrc_nic.transport import nscc, profiles
from mrc_nic.transport.host import HostContext
from mrc_nic.transport.qp import QpError
from mrc_nic.transport.qpattrs import SendSetup
from mrc_nic.transport.sessions import AppQp


def qp_evs(
    table: profiles.ProfileTable,
    planes: int,
    qpn: int,
    ev_profile_id: int | None,
    ev_count: int | None = None,
) -> tuple[dict[int, int], int, set[int]]:
    """What a QP connecting on profile `ev_profile_id` gets: {wire EV:
    plane}, ev_min_active, the wire EVs DENIED. Records the QP as a user."""
    pid = profiles.DEFAULT_EV_PROFILE if ev_profile_id is None else ev_profile_id
    p, fmt = table.online_ev_profile(pid)
    evs = p.qp_evs(fmt, planes, ev_count)
    default = pid == profiles.DEFAULT_EV_PROFILE  # its floor: a quarter of the EVs
    floor = (ev_count or p.ev_count) // 4 if default else p.ev_min_active
    table.attach(qpn, pid, None)
    return evs, floor, p.denied_wire(fmt) & set(evs)


def backup_for(
    table: profiles.ProfileTable, ev_profile_id: int | None
) -> Callable[[int, set[int]], int | None] | None:
    """A replacement picker for the EV replacer: (plane, taken) -> wire EV or None."""
    if not ev_profile_id:
        return None
    p = table.ev.get(ev_profile_id)
    if p is None or p.mode == profiles.EvMode.AUTO:
        return None
    fmt = table.fmt.get(p.fmt_id)
    return lambda plane, taken: p.next_backup(fmt, plane, taken)


def _qp_cc(ctx: HostContext, send: SendSetup, mpr: int) -> nscc.QpCc | None:
    if send.nscc is None:
        return None
    topo = ctx.topo
    return nscc.QpCc(
        nscc.Nscc(
            send.nscc,
            link_bps=topo.rate_bps * topo.planes if topo.rate_bps else None,
            window_pkts=mpr * nic.wire.MPR_UNIT,
            lab_rtt_ns=topo.queues.base_rtt_ns,
            mss=nic.seg_size(topo.mtu),
        )
    )


SILENT_REORDER_WINDOWS = 4  # an overdue packet's EV is blamed after this many windows of silence


def silent_ns(timeout_s: float, reorder_ns: int) -> int:
    """How long a suspected EV may stay unanswered before it is blamed
    (struct nic_sq.silent_ns; docs/nic-program.md, "Blame"): MRC's rule is
    the QP's timeout; a few reorder windows when that is shorter, so that a
    dead plane stops taking new packets within about a millisecond on a fast
    lab, while a late packet (a CPU that stalled for less) is still cleared."""
    timeout_ns = round(timeout_s * 1e9)
    if reorder_ns:
        timeout_ns = min(timeout_ns, SILENT_REORDER_WINDOWS * reorder_ns)
    return min(timeout_ns, pins.U32_MAX)


def setup_send(ctx: HostContext, aq: AppQp, send: SendSetup, mpr: int, sq_psn: int) -> None:
    """The send side in the NIC maps: EVs, window, NSCC; nothing left of it on failure."""
    table, attrs = ctx.table, aq.qp.attrs  # the QP's EV profile (OCP ev_profile_id)
    aq.evs, floor, denied = qp_evs(
        table, ctx.topo.planes, aq.qp.qpn, attrs.ev_profile_id, send.ev_count
    )
    table.attach(aq.qp.qpn, None, attrs.cc_profile_id)
    aq.backup = backup_for(table, attrs.ev_profile_id)
    aq.ev_min_active = floor if send.ev_min_active is None else send.ev_min_active
    aq.cc = _qp_cc(ctx, send, mpr)
    cwnd, rtt_target = aq.cc.initial() if aq.cc is not None else (send.cwnd, 0)
    try:
        ctx.maps.setup_sq(
            aq.qp.qpn,
            local_host=ctx.index,
            peer_host=attrs.dest_host,
            peer_qpn=attrs.dest_qpn,
            ring=aq.ring,
            evs=aq.evs,
            mpr=mpr,
            psn=sq_psn,
            engine=True,
            reo_wnd_ns=send.reorder_ns,
            cwnd=cwnd,
            cc_rtt_target_ns=rtt_target,
            ev_min_active=aq.ev_min_active,
            cq=aq.send_cq + 1,
            max_wimm=attrs.max_wimm,
            dyn_mpr=attrs.dynamic_mpr,
            probe_good=table.probe_good(attrs.ev_profile_id),
            auth_key=send.auth_key,
            pd=aq.pd,
            silent_ns=silent_ns(attrs.timeout_s, send.reorder_ns),
        )
        aq.auth = aq.auth or send.auth_key is not None
        aq.send_key = send.auth_key
        for ev in denied:  # the controller's DENIED EVs (MODIFY_EV_STATE)
            ctx.maps.set_ev_state(aq.qp.qpn, ev, nic.EvState.DENIED)
    except OSError as e:
        for ev in aq.evs:  # what setup_sq made before it failed
            ctx.maps.delete_ev(aq.qp.qpn, ev)
        with contextlib.suppress(KeyError):
            ctx.maps.delete_sq(aq.qp.qpn)
        raise QpError(
            errno.ENOSPC,
            f"the NIC has no room for QP {aq.qp.qpn:#x}'s {len(aq.evs)} EVs ({e.strerror}): "
            "the lab's EV table (nic_evs) is full; destroy QPs first",
        ) from None
