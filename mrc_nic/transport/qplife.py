"""Applications' QPs on one host: created, moved through INIT, RTR and RTS, destroyed.

The daemon hands out QP numbers and send rings, and puts a QP's receive
state (RTR) and send state (RTS, transport.qpsend) in the NIC maps. Every
attribute is checked before anything changes (transport.qpattrs); a map
write that fails puts the QP back as it was. A QP destroyed is announced to
whoever keeps state of it (HostContext.qp_destroyed).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import os
from collections.abc import Callable
from typing import Any, ClassVar

from mrc_nic import nic
from mrc_nic.contract import appops
from mrc_nic.contract.framing import RequestError
from mrc_nic.lab.service import Conn
from mrc_nic.transport import nscc, qpattrs, qpsend
from mrc_nic.transport.appresources import pd_of
from mrc_nic.transport.host import HostContext, Part
from mrc_nic.transport.qp import DEFAULT_MPR, DEFAULT_TIMEOUT, Qp, QpError, QpState, Retry
from mrc_nic.transport.qpattrs import ACCESS_REMOTE_WRITE, MAX_SGE, MAX_WR
from mrc_nic.transport.reverse import ReverseEvs
from mrc_nic.transport.sessions import AppQp, AppSession, einval

Apply = Callable[[], None]
CAP_LIMITS = {  # create_qp's cap: (least, most)
    "max_send_wr": (1, MAX_WR),
    "max_recv_wr": (0, MAX_WR),
    "max_send_sge": (1, MAX_SGE),
    "max_recv_sge": (0, MAX_SGE),
}
MODIFY_TARGETS = ("INIT", "RTR", "RTS", "ERR")


def check_transition(aq: AppQp, target: QpState, **changes: Any) -> None:
    """Qp.modify on a copy: its checks, nothing applied."""
    copy.deepcopy(aq.qp).modify(target, **changes)


class QpLifecycle(Part):
    """create_qp, modify_qp, query_qp, destroy_qp; a session's QPs when it ends."""

    handles: ClassVar = {
        appops.CreateQp: "create_qp",
        appops.ModifyQp: "modify_qp",
        appops.QueryQp: "query_qp",
        appops.DestroyQp: "destroy_qp",
    }

    def __init__(self, ctx: HostContext, reverse: ReverseEvs) -> None:
        self.ctx = ctx
        self.reverse = reverse  # a receive QP's answers' paths, opened at RTR

    def create_qp(self, req: appops.CreateQp, conn: Conn) -> appops.CreateQpReply:
        ctx = self.ctx
        session = ctx.sessions.session(conn)
        pd = pd_of(session, req.pd)
        for name in ("send_cq", "recv_cq"):
            if getattr(req, name) not in session.cqs:
                raise QpError(
                    errno.ENOENT, f"{name} {getattr(req, name)} is not a CQ of this session"
                )
        for name, (lo, hi) in CAP_LIMITS.items():
            value = getattr(req, name)
            if not isinstance(value, int) or not lo <= value <= hi:
                raise einval(f"cap.{name} must be {lo}..{hi}, not {value!r}")
        ctx.sessions.within_share(session, "qps", 1)
        qpn = ctx.res.new_qpn()
        try:
            ring = ctx.res.rings.take()
        except BaseException:
            ctx.res.free_qpn(qpn)
            raise
        try:  # a new queue: whoever held the ring's last one writes into nothing now
            sq_fd = ctx.maps.new_send_queue(ring)
            try:
                queue = ctx.maps.watch_send_queue(sq_fd)
            except BaseException:
                os.close(sq_fd)
                raise
        except BaseException:
            ctx.res.rings.give(ring)
            ctx.res.free_qpn(qpn)
            raise
        session.qps[qpn] = AppQp(
            qp=Qp(qpn, ctx.index),
            session=session,
            pd=pd,
            ring=ring,
            send_cq=req.send_cq,
            recv_cq=req.recv_cq,
            caps={name: getattr(req, name) for name in CAP_LIMITS},
            queue=queue,
        )
        return appops.CreateQpReply(qpn=qpn, sq_depth=nic.SQ_DEPTH, ring=ring, sq_fd=sq_fd)

    def query_qp(self, req: appops.QueryQp, conn: Conn) -> appops.ModifyQpReply:
        """A QP of this session (as ibv_query_qp takes the caller's own QP;
        `qp_list` shows every QP of the host)."""
        aq = self.ctx.sessions.session(conn).qps.get(req.qpn)
        if aq is None:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session (qp_list shows all)")
        return appops.ModifyQpReply(qp=aq.describe())

    def destroy_qp(self, req: appops.DestroyQp, conn: Conn) -> appops.Done:
        session = self.ctx.sessions.session(conn)
        if req.qpn not in session.qps:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session")
        self._destroy(session, req.qpn)
        return appops.Done()

    def release(self, session: AppSession) -> None:
        """The session ended: its QPs go (before its CQs and MRs)."""
        for qpn in list(session.qps):
            self._destroy(session, qpn)

    def _destroy(self, session: AppSession, qpn: int) -> None:
        ctx = self.ctx
        aq = session.qps.pop(qpn)
        try:
            ctx.destroyed(aq)
        finally:
            aq.queue.close()
        with contextlib.suppress(KeyError):
            ctx.maps.delete_sq(qpn)
        with contextlib.suppress(KeyError):
            ctx.maps.delete_rq(qpn)
        ctx.maps.clear_send_queue(aq.ring)  # the session's queue is the NIC's no more
        ctx.res.rings.give(aq.ring)
        ctx.res.free_qpn(qpn)

    # ---- modify_qp --------------------------------------------------------------------------
    def modify_qp(self, req: appops.ModifyQp, conn: Conn) -> appops.ModifyQpReply:
        """Every attribute is checked before anything changes; a map write that
        fails puts the QP back as it was: a refused call changes nothing."""
        aq = self.ctx.sessions.session(conn).qps.get(req.qpn)
        if aq is None:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session")
        if req.state not in QpState.__members__:
            raise einval(
                f"state must be {', '.join(MODIFY_TARGETS[:-1])} or ERR, not {req.state!r}"
            )
        target = QpState[req.state]
        plan = {
            QpState.INIT: self._plan_init,
            QpState.RTR: self._plan_rtr,
            QpState.RTS: self._plan_rts,
            QpState.ERR: self._plan_err,
        }.get(target)
        if plan is None:
            raise einval(f"modify_qp to {target.name} is not supported: destroy the QP instead")
        attrs = dict(req.attrs)
        apply = plan(aq, attrs)  # pops what it takes; checks it, changes nothing
        if attrs:
            raise einval(
                f"{target.name} does not take {', '.join(sorted(attrs))} "
                "(see docs/api.md, 'QP attributes per transition')"
            )
        before = (aq.qp.state, dataclasses.replace(aq.qp.attrs), aq.qp.err_reason, aq.access)
        try:
            apply()
        except BaseException:
            aq.qp.state, aq.qp.attrs, aq.qp.err_reason, aq.access = before
            raise
        return appops.ModifyQpReply(qp=aq.describe())

    def _plan_init(self, aq: AppQp, attrs: dict) -> Apply:
        access = qpattrs.access_flags(attrs)
        changes = {
            "ev_profile_id": attrs.pop("ev_profile_id", 0),
            "cc_profile_id": attrs.pop("cc_profile_id", nscc.DEFAULT_NSCC),
        }
        table = self.ctx.table  # the host's profiles (transport.profiles)
        try:
            table.nscc_config(changes["cc_profile_id"])
            table.online_ev_profile(changes["ev_profile_id"])
        except (ValueError, RequestError) as e:
            raise einval(str(e)) from None
        check_transition(aq, QpState.INIT, **changes)

        def apply() -> None:
            aq.qp.modify(QpState.INIT, **changes)
            aq.access = access

        return apply

    def _plan_rtr(self, aq: AppQp, attrs: dict) -> Apply:
        for name in ("dest_qp_num", "dest_gid"):
            if name not in attrs:
                raise einval(f"RTR needs {name} (the peer's QP number and its GID)")
        dest_host = qpattrs.dest_host(self.ctx.topo, attrs.pop("dest_gid"))
        dest_qpn = attrs.pop("dest_qp_num")
        qpattrs.path_mtu(attrs)
        mpr = attrs.pop("mpr_dest", DEFAULT_MPR)
        rq_psn = qpattrs.psn(attrs, "rq_psn")
        key = qpattrs.auth_key(attrs)
        changes = {
            "mpr": mpr,
            "mpr_dest": mpr,
            "dest_host": dest_host,
            "dest_qpn": dest_qpn,
            "max_wimm_dest": attrs.pop("max_wimm_dest", aq.qp.attrs.max_wimm_dest),
            "dynamic_mpr": qpattrs.dynamic_mpr(attrs, aq.qp.attrs.dynamic_mpr),
        }
        check_transition(aq, QpState.RTR, **changes)

        def apply() -> None:
            aq.qp.modify(QpState.RTR, **changes)
            self._setup_receive(aq, rq_psn, key)

        return apply

    def _setup_receive(self, aq: AppQp, rq_psn: int, key: bytes | None) -> None:
        ctx, attrs = self.ctx, aq.qp.attrs
        ctx.maps.setup_rq(
            aq.qp.qpn,
            local_host=ctx.index,
            peer_host=attrs.dest_host,
            peer_qpn=attrs.dest_qpn,
            # without REMOTE_WRITE access (INIT) the QP takes no WRITE at all
            region=(nic.REGION_BY_RKEY if aq.access & ACCESS_REMOTE_WRITE else nic.REGION_NONE),
            mpr=attrs.mpr_dest,
            psn=rq_psn,
            cq=aq.recv_cq + 1,
            max_wimm_dest=attrs.max_wimm_dest,
            dyn_mpr=attrs.dynamic_mpr,
            auth_key=key,
            pd=aq.pd,
        )
        aq.rq_set, aq.remote = True, {"qpn": attrs.dest_qpn}
        self.reverse.open(aq.qp.qpn, attrs.dest_host, attrs.dest_qpn, key)  # its answers' paths
        aq.auth = aq.auth or key is not None

    def _plan_rts(self, aq: AppQp, attrs: dict) -> Apply:
        if aq.qp.state == QpState.RTS:
            raise einval(
                f"QP {aq.qp.qpn:#x} is in RTS already: changing a live QP's attributes is "
                "not supported (it would reset its send state); destroy and recreate it"
            )
        changes = {
            "timeout": attrs.pop("timeout", DEFAULT_TIMEOUT),
            "retry": Retry(
                linear_cnt=attrs.pop("retry_linear_cnt", Retry.linear_cnt),
                exp_cnt=attrs.pop("retry_exp_cnt", Retry.exp_cnt),
            ),
            "mpr": attrs.pop("mpr", aq.qp.attrs.mpr),
            "max_wimm": attrs.pop("max_wimm", aq.qp.attrs.max_wimm),
            "dynamic_mpr": qpattrs.dynamic_mpr(attrs, aq.qp.attrs.dynamic_mpr),
        }
        sq_psn = qpattrs.psn(attrs, "sq_psn")
        check_transition(aq, QpState.RTS, **changes)
        send = qpattrs.send_extensions(
            attrs, self.ctx.topo.planes, self.ctx.table, aq.qp.attrs.cc_profile_id
        )

        def apply() -> None:
            aq.qp.modify(QpState.RTS, **changes)
            qpsend.setup_send(self.ctx, aq, send, changes["mpr"], sq_psn)
            aq.sq_set = True

        return apply

    def _plan_err(self, aq: AppQp, attrs: dict) -> Apply:
        reason = attrs.pop("reason", "moved to ERR by the application")

        def apply() -> None:
            aq.qp.to_err(reason)
            if aq.sq_set:
                with contextlib.suppress(KeyError):
                    self.ctx.maps.set_sq_state(aq.qp.qpn, nic.QpState.ERR)
            if aq.rq_set:
                with contextlib.suppress(KeyError):
                    self.ctx.maps.set_rq_state(aq.qp.qpn, nic.QpState.ERR)

        return apply
