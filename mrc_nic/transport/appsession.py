"""Applications' sessions with the host daemon: what each owns, and its cleanup.

The verbs API (mrc_nic.verbs) sets up through a session (transport.appops)
and then posts and polls without the daemon. The daemon keeps the control
plane: it hands out QP numbers, NIC memory, region ids and CQ slots, puts a
QP's receive and send state in the NIC maps at RTR and RTS, and supervises
every send QP in RTS (transport.supervisor: NSCC, top-up, reorder timer,
timeouts and the retry budget), with probes and EV replacement as for its
own transfers. A session's connection closing (the process ended, however)
releases everything it created; other sessions are untouched.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import errno
import ipaddress
import secrets
from typing import Any

from mrc_nic import nic
from mrc_nic.lab import ctl
from mrc_nic.lab.protocol import RequestError
from mrc_nic.lab.service import Conn
from mrc_nic.transport import appops, hostmem, nscc, shares, supervisor, tenancy
from mrc_nic.transport.qp import (
    DEFAULT_CWND,
    DEFAULT_MPR,
    DEFAULT_REORDER_NS,
    DEFAULT_TIMEOUT,
    EV_COUNT,
    REORDER_NS_MAX,
    TIMEOUT_MAX,
    Qp,
    QpError,
    QpState,
    Retry,
)

ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE = 1, 2
ACCESS_KNOWN = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE
MAX_WR = 4096  # work requests outstanding per queue: the NIC's SQ_DEPTH, the rest in the library
MAX_SGE = 16
# A region's address space: region r's bytes start at r << 40, so an address
# names its region and a stale one misses (RETH.va).
REGION_VA_SHIFT = 40
PD_MAX = 0xFFFFFFFF  # PD numbers are 1..PD_MAX (nic_region.pd; 0 is the daemon's own)
MAX_PDS = 4096  # PDs allocated at once on one host
PATH_MTUS = (256, 512, 1024, 2048, 4096)
# A completion in a CQ ring at worst: one record behind the ring's 8-byte header.
CQ_RECORD_BYTES = ctypes.sizeof(nic.Event) + 8


def _einval(message: str) -> QpError:
    return QpError(errno.EINVAL, message)


def _auth_key(attrs: dict) -> bytes | None:
    """The connection's per-packet authentication key (mrc-nic extension,
    nic.auth), from 32 hex digits; None: packets carry no MAC."""
    key = attrs.pop("auth_key", None)
    if key is None:
        return None
    try:
        raw = bytes.fromhex(key) if isinstance(key, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise _einval(
            "auth_key must be 32 hex digits: a 16-byte key that both ends of the connection "
            "share (secrets.token_hex(16))"
        )
    return raw


PAGE = 4096  # a program maps NIC memory over its buffer by whole pages


@dataclasses.dataclass
class MrWindow:
    """Where an MR lies in NIC memory: n_elems elements starting at a multiple
    of align, its first byte head bytes into them."""

    n_elems: int
    head: int
    align: int


@dataclasses.dataclass
class AppMr:
    pd: int
    region: int
    rkey: int
    addr: int
    length: int
    access: int
    span: hostmem.Span
    pool: hostmem.ElemAllocator


@dataclasses.dataclass(kw_only=True)
class AppQp(supervisor.Supervised):
    """A QP an application owns (send and receive side)."""

    session: AppSession
    pd: int
    ring: int
    send_cq: int
    recv_cq: int
    caps: dict[str, int]
    access: int = 0
    evs: dict[int, int] = dataclasses.field(default_factory=dict)
    ev_min_active: int = 0
    retired_tx_pkts: dict[int, int] = dataclasses.field(default_factory=dict)
    backup: Any = None  # the EV profile's replacements (evreplace)
    remote: dict = dataclasses.field(default_factory=dict)  # the prober's: {"qpn": ...}
    rq_set: bool = False
    sq_set: bool = False
    auth: bool = False  # its packets carry a MAC (an auth_key at RTR or RTS)
    send_key: bytes | None = None  # RTS's auth_key: the prober MACs its probes with it


@dataclasses.dataclass
class SendSetup:
    """A send QP's mrc-nic extension attributes (RTS), checked."""

    cwnd: int
    reorder_ns: int
    ev_count: int
    ev_min_active: int | None
    auth_key: bytes | None = None
    nscc: nscc.NsccConfig | None = None


@dataclasses.dataclass
class AppSession:
    conn: Conn
    pid: int = 0
    command: str = ""
    limits: shares.Limits | None = None  # its shares of the host (app_hello)
    pds: set[int] = dataclasses.field(default_factory=set)
    mrs: dict[int, AppMr] = dataclasses.field(default_factory=dict)
    cqs: set[int] = dataclasses.field(default_factory=set)
    qps: dict[int, AppQp] = dataclasses.field(default_factory=dict)

    @property
    def mr_bytes(self) -> int:
        return sum(mr.length for mr in self.mrs.values())

    def held(self) -> dict[str, int]:
        """What it holds, by share name (transport.shares.RESOURCES)."""
        return {
            "memory": self.mr_bytes,
            "qps": len(self.qps),
            "cqs": len(self.cqs),
            "pds": len(self.pds),
        }


class AppSessions:
    """Every application session of one host daemon."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.maps: nic.NicMaps = daemon.maps
        self.res: hostmem.HostResources = daemon.res
        self.topo, self.index, self.host = daemon.topo, daemon.index, daemon.host
        self.sessions: dict[int, AppSession] = {}
        hosts = self.topo.hosts
        per_host = max(1, self.maps.max_cqs // hosts)
        self.cq_slots = hostmem.IdPool(self.index * per_host, per_host, "completion queue")
        self.pds: set[int] = set()  # PD numbers allocated on this host, every session's
        self._next_pd = 1
        self.capacity = {  # what one host has of each shared resource (transport.shares)
            "memory": (self.res.send_mem.count + self.res.recv_mem.count) * nic.MR_ELEM_SIZE,
            "qps": min(self.res.qp_index.size, self.res.rings.size),
            "cqs": per_host,
            "pds": MAX_PDS,
        }
        self.lab_shares = shares.parse_all(self.topo.raw.get("tenants", {}), "[tenants]")

    # ---- sessions ------------------------------------------------------------------
    def session(self, conn: Conn, *, create: bool = False) -> AppSession:
        found = self.sessions.get(id(conn))
        if found is None:
            if not create:
                raise QpError(errno.EPERM, "open a session first (app_hello): verbs.Context does")
            found = self.sessions[id(conn)] = AppSession(conn)
        return found

    def hello(self, req: appops.Hello, conn: Conn) -> appops.HelloReply:
        peer = tenancy.peer_of(conn.sock)
        tenancy.check(peer, self.topo.lab, self.host)  # a host's NIC from that host only
        try:
            asked = shares.parse_all(req.shares or {}, "shares")
        except ValueError as e:
            raise _einval(str(e)) from None
        session = self.session(conn, create=True)
        session.pid, session.command = peer.pid, peer.command
        session.limits = shares.limits(self.capacity, self.lab_shares, asked)
        topo = self.topo
        return appops.HelloReply(
            host=self.host,
            index=self.index,
            planes=topo.planes,
            seg_size=nic.seg_size(topo.mtu),
            mr_align=1,  # byte-granular placement (bpf/nic_rx.h, rx_region)
            max_mr_bytes=max(self.res.recv_mem.free_elems, self.res.send_mem.free_elems)
            * nic.MR_ELEM_SIZE,
            sq_depth=nic.SQ_DEPTH,
            max_qp_wr=MAX_WR,
            max_mpr=nic.MPR_MAX,
            max_wimm=nic.SQ_DEPTH,
            cq_ring_bytes=self.maps.cq_ring_bytes,
            max_mr_size=self.res.send_mem.count * nic.MR_ELEM_SIZE,
            default_timeout=DEFAULT_TIMEOUT,
            max_timeout=TIMEOUT_MAX,
            default_reorder_ns=DEFAULT_REORDER_NS,
            max_reorder_ns=REORDER_NS_MAX,
            host_addrs=[str(topo.host_address(self.index, p)) for p in range(topo.planes)],
            shares=dict(session.limits.limits),
        )

    def _within_share(self, session: AppSession, name: str, more: int) -> None:
        """Refuse what would take the session past its share (ENOMEM for memory)."""
        if session.limits is None:
            return
        why = session.limits.check(name, session.held()[name], more, self.host)
        if why is not None:
            raise QpError(errno.ENOMEM if name == "memory" else errno.ENOSPC, why)

    def describe_sessions(self) -> list[dict]:
        """Who holds what on this host (qp list)."""
        return [
            {
                "host": self.host,
                "pid": s.pid,
                "command": s.command,
                **s.held(),
                "shares": dict(s.limits.limits) if s.limits else {},
            }
            for s in self.sessions.values()
        ]

    def drop(self, conn: Conn) -> None:
        """The session's connection closed: release all it created, QPs first."""
        session = self.sessions.pop(id(conn), None)
        if session is None:
            return
        for qpn in list(session.qps):
            self._destroy_qp(session, qpn)
        for cq in list(session.cqs):
            self._destroy_cq(session, cq)
        for region in list(session.mrs):
            self._dereg(session, region)
        self.pds -= session.pds
        session.pds.clear()

    def qps(self) -> list[AppQp]:
        return [aq for s in self.sessions.values() for aq in s.qps.values()]

    # ---- protection domains ----------------------------------------------------------
    def alloc_pd(self, req: appops.AllocPd, conn: Conn) -> appops.AllocPdReply:
        """A PD number unique on this host while allocated (the NIC compares it
        with the region's, nic_region.pd); numbers come round-robin, so a
        released one is not given again at once."""
        session = self.session(conn)
        self._within_share(session, "pds", 1)
        if len(self.pds) >= MAX_PDS:
            raise QpError(
                errno.ENOSPC,
                f"this host has {MAX_PDS} protection domains allocated, the most it holds: "
                "dealloc_pd the ones no longer used",
            )
        pd = self._next_pd
        while pd in self.pds:
            pd = pd % PD_MAX + 1
        self._next_pd = pd % PD_MAX + 1
        self.pds.add(pd)
        session.pds.add(pd)
        return appops.AllocPdReply(pd=pd)

    def dealloc_pd(self, req: appops.DeallocPd, conn: Conn) -> appops.Done:
        session = self.session(conn)
        self._pd_of(session, req.pd)
        users = [f"MR lkey {mr.region:#x}" for mr in session.mrs.values() if mr.pd == req.pd]
        users += [f"QP {q:#x}" for q, aq in session.qps.items() if aq.pd == req.pd]
        if users:
            raise QpError(
                errno.EBUSY,
                f"PD {req.pd} is used by {', '.join(users)}: deregister and destroy them first",
            )
        session.pds.discard(req.pd)
        self.pds.discard(req.pd)
        return appops.Done()

    @staticmethod
    def _pd_of(session: AppSession, pd: Any) -> int:
        if pd not in session.pds:
            raise QpError(
                errno.ENOENT,
                f"pd {pd!r} is no protection domain of this session: allocate one with alloc_pd "
                "(verbs.PD(ctx))",
            )
        return pd

    # ---- memory ----------------------------------------------------------------------
    def reg_mr(self, req: appops.RegMr, conn: Conn) -> appops.RegMrReply:
        session = self.session(conn)
        pd = self._pd_of(session, req.pd)
        if not isinstance(req.length, int) or req.length < 1:
            raise _einval(f"length must be at least 1 byte, not {req.length}")
        if req.access & ~ACCESS_KNOWN:
            raise _einval(
                f"access {req.access:#x} has flags this NIC does not know: use "
                "LOCAL_WRITE (1) and REMOTE_WRITE (2)"
            )
        window = self._window(req)
        self._within_share(session, "memory", window.n_elems * nic.MR_ELEM_SIZE)
        pool = max((self.res.recv_mem, self.res.send_mem), key=lambda p: p.free_elems)
        span = pool.alloc(
            window.n_elems, f"a memory registration of {req.length} bytes", window.align
        )
        try:
            region = self.res.regions.take()
        except BaseException:
            pool.release(span)
            raise
        bits = max(1, (self.maps.max_regions - 1).bit_length())
        rkey = (secrets.randbits(32 - bits) << bits | region) & 0xFFFFFFFF
        addr = region << REGION_VA_SHIFT if req.iova is None else req.iova
        try:
            self.maps.zero_region_elems(span.first_elem, span.n_elems)
            self.maps.set_region(
                region,
                first_elem=span.first_elem,
                n_elems=span.n_elems,
                rkey=rkey,
                base_va=addr - window.head,
                owner=self.index + 1,
                pd=pd,
                # without REMOTE_WRITE no WRITE is placed in it, whatever its rkey
                remote_write=bool(req.access & ACCESS_REMOTE_WRITE),
                head=window.head,
                tail=span.n_elems * nic.MR_ELEM_SIZE - window.head - req.length,
            )
        except BaseException:
            self.res.regions.give(region)
            pool.release(span)
            raise
        n_elems = span.n_elems
        mr = AppMr(pd, region, rkey, addr, n_elems * nic.MR_ELEM_SIZE, req.access, span, pool)
        session.mrs[region] = mr
        return appops.RegMrReply(
            region=region, rkey=rkey, addr=addr, first_elem=span.first_elem, length=mr.length
        )

    @staticmethod
    def _window(req: appops.RegMr) -> MrWindow:
        """The NIC memory an MR takes: whole elements; with page_off, whole
        pages with the MR at that offset in the first (the caller maps them
        over its buffer), and its bytes exactly [head, head + length)."""
        if req.page_off is None:
            if req.iova is not None:
                raise _einval("iova needs page_off (the buffer's offset in its page)")
            return MrWindow(n_elems=-(-req.length // nic.MR_ELEM_SIZE), head=0, align=1)
        if not isinstance(req.page_off, int) or not 0 <= req.page_off < PAGE:
            raise _einval(f"page_off must be 0..{PAGE - 1} (in a page), not {req.page_off!r}")
        iova = req.iova if req.iova is not None else req.page_off
        if not isinstance(iova, int) or not req.page_off <= iova <= (1 << 64) - req.length:
            raise _einval(f"iova must be a 64-bit address of at least page_off, not {iova!r}")
        pages = -(-(req.page_off + req.length) // PAGE)
        per_page = PAGE // nic.MR_ELEM_SIZE
        return MrWindow(n_elems=pages * per_page, head=req.page_off, align=per_page)

    def dereg_mr(self, req: appops.DeregMr, conn: Conn) -> appops.Done:
        session = self.session(conn)
        if req.region not in session.mrs:
            raise QpError(errno.ENOENT, f"no MR with region {req.region} in this session")
        self._dereg(session, req.region)
        return appops.Done()

    def _dereg(self, session: AppSession, region: int) -> None:
        mr = session.mrs.pop(region)
        self.maps.clear_region(region)  # a WRITE to it from now on: remote access error
        self.res.regions.give(region)
        mr.pool.release(mr.span)

    # ---- completion queues -------------------------------------------------------------
    def create_cq(self, req: appops.CreateCq, conn: Conn) -> appops.CreateCqReply:
        session = self.session(conn)
        most = self.maps.cq_ring_bytes // CQ_RECORD_BYTES
        if not isinstance(req.cqe, int) or not 1 <= req.cqe <= most:
            raise _einval(f"cqe must be 1..{most} (a CQ ring holds {most} completions)")
        self._within_share(session, "cqs", 1)
        cq = self.cq_slots.take()
        try:
            self.maps.reset_cq_lost(cq)  # an earlier CQ's overrun is not this one's
        except BaseException:
            self.cq_slots.give(cq)
            raise
        session.cqs.add(cq)
        return appops.CreateCqReply(cq=cq)

    def destroy_cq(self, req: appops.DestroyCq, conn: Conn) -> appops.Done:
        session = self.session(conn)
        if req.cq not in session.cqs:
            raise QpError(errno.ENOENT, f"no CQ {req.cq} in this session")
        users = [f"{q:#x}" for q, aq in session.qps.items() if req.cq in (aq.send_cq, aq.recv_cq)]
        if users:
            raise QpError(
                errno.EBUSY, f"CQ {req.cq} is used by QP {', '.join(users)}: destroy it first"
            )
        self._destroy_cq(session, req.cq)
        return appops.Done()

    def _destroy_cq(self, session: AppSession, cq: int) -> None:
        session.cqs.discard(cq)
        with contextlib.suppress(OSError):
            self.maps.clear_cq_ring(cq)
        self.cq_slots.give(cq)

    # ---- queue pairs -----------------------------------------------------------------------
    def create_qp(self, req: appops.CreateQp, conn: Conn) -> appops.CreateQpReply:
        session = self.session(conn)
        pd = self._pd_of(session, req.pd)
        for name in ("send_cq", "recv_cq"):
            if getattr(req, name) not in session.cqs:
                raise QpError(
                    errno.ENOENT, f"{name} {getattr(req, name)} is not a CQ of this session"
                )
        limits = {
            "max_send_wr": (1, MAX_WR),
            "max_recv_wr": (0, MAX_WR),
            "max_send_sge": (1, MAX_SGE),
            "max_recv_sge": (0, MAX_SGE),
        }
        for name, (lo, hi) in limits.items():
            value = getattr(req, name)
            if not isinstance(value, int) or not lo <= value <= hi:
                raise _einval(f"cap.{name} must be {lo}..{hi}, not {value!r}")
        self._within_share(session, "qps", 1)
        qpn = self.res.new_qpn()
        try:
            ring = self.res.rings.take()
        except BaseException:
            self.res.free_qpn(qpn)
            raise
        aq = AppQp(
            qp=Qp(qpn, self.index),
            session=session,
            pd=pd,
            ring=ring,
            send_cq=req.send_cq,
            recv_cq=req.recv_cq,
            caps={name: getattr(req, name) for name in limits},
        )
        session.qps[qpn] = aq
        return appops.CreateQpReply(qpn=qpn, sq_depth=nic.SQ_DEPTH, ring=ring)

    def query_qp(self, req: appops.QueryQp, conn: Conn) -> appops.ModifyQpReply:
        """A QP of this session (as ibv_query_qp takes the caller's own QP;
        `qp_list` shows every QP of the host)."""
        aq = self.session(conn).qps.get(req.qpn)
        if aq is None:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session (qp_list shows all)")
        return appops.ModifyQpReply(qp=self.describe(aq))

    def describe(self, aq: AppQp) -> dict:
        return {
            **aq.qp.as_dict(),
            "role": "app",
            "pid": aq.session.pid,
            "pd": aq.pd,
            "send_cq": aq.send_cq,
            "recv_cq": aq.recv_cq,
            "cap": dict(aq.caps),
            "access": aq.access,
            # the supervisor's counts, and packets of EVs replaced since (their counters went)
            "timeouts": aq.timeouts,
            "reorder_kicks": aq.reorder_kicks,
            "retired_tx_pkts": {str(p): n for p, n in aq.retired_tx_pkts.items()},
            "auth": aq.auth,
        }

    def destroy_qp(self, req: appops.DestroyQp, conn: Conn) -> appops.Done:
        session = self.session(conn)
        if req.qpn not in session.qps:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session")
        self._destroy_qp(session, req.qpn)
        return appops.Done()

    def _destroy_qp(self, session: AppSession, qpn: int) -> None:
        aq = session.qps.pop(qpn)
        self.daemon.replacer.forget(aq)
        self.daemon.reverse.forget(qpn)
        self.daemon.controller.forget_qp(qpn)
        with contextlib.suppress(KeyError):
            self.maps.delete_sq(qpn)
        with contextlib.suppress(KeyError):
            self.maps.delete_rq(qpn)
        self.res.rings.give(aq.ring)
        self.res.free_qpn(qpn)

    # ---- modify_qp --------------------------------------------------------------------------
    def modify_qp(self, req: appops.ModifyQp, conn: Conn) -> appops.ModifyQpReply:
        """Every attribute is checked before anything changes; a map write that
        fails puts the QP back as it was: a refused call changes nothing."""
        session = self.session(conn)
        aq = session.qps.get(req.qpn)
        if aq is None:
            raise QpError(errno.ENOENT, f"no QP {req.qpn:#x} in this session")
        try:
            target = QpState[req.state]
        except KeyError:
            raise _einval(f"state must be INIT, RTR, RTS or ERR, not {req.state!r}") from None
        plan = {
            QpState.INIT: self._plan_init,
            QpState.RTR: self._plan_rtr,
            QpState.RTS: self._plan_rts,
            QpState.ERR: self._plan_err,
        }.get(target)
        if plan is None:
            raise _einval(f"modify_qp to {target.name} is not supported: destroy the QP instead")
        attrs = dict(req.attrs)
        apply = plan(aq, attrs)  # pops what it takes; checks it, changes nothing
        if attrs:
            raise _einval(
                f"{target.name} does not take {', '.join(sorted(attrs))} "
                "(see docs/api.md, 'QP attributes per transition')"
            )
        before = (aq.qp.state, dataclasses.replace(aq.qp.attrs), aq.qp.err_reason, aq.access)
        try:
            apply()
        except BaseException:
            aq.qp.state, aq.qp.attrs, aq.qp.err_reason, aq.access = before
            raise
        return appops.ModifyQpReply(qp=self.describe(aq))

    @staticmethod
    def _check_transition(aq: AppQp, target: QpState, **changes: Any) -> None:
        """Qp.modify on a copy: its checks, nothing applied."""
        copy.deepcopy(aq.qp).modify(target, **changes)

    def _plan_init(self, aq: AppQp, attrs: dict):
        access = attrs.pop("qp_access_flags", ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
        if not isinstance(access, int) or access & ~ACCESS_KNOWN:
            raise _einval(
                f"qp_access_flags must be a mask of LOCAL_WRITE/REMOTE_WRITE, not {access!r}"
            )
        changes = {
            "ev_profile_id": attrs.pop("ev_profile_id", 0),
            "cc_profile_id": attrs.pop("cc_profile_id", nscc.DEFAULT_NSCC),
        }
        table = self.daemon.controller.table  # the host's profiles (transport.profiles)
        try:
            table.nscc_config(changes["cc_profile_id"])
            table.online_ev_profile(changes["ev_profile_id"])
        except (ValueError, RequestError) as e:
            raise _einval(str(e)) from None
        self._check_transition(aq, QpState.INIT, **changes)

        def apply() -> None:
            aq.qp.modify(QpState.INIT, **changes)
            aq.access = access

        return apply

    def _dest_host(self, gid: Any) -> int:
        """A peer host from its GID: an address of it on any plane, or its name."""
        if isinstance(gid, str) and gid in self.topo.nodes and self.topo.nodes[gid].kind == "host":
            return self.topo.nodes[gid].index
        try:
            addr = ipaddress.ip_address(gid)
        except (TypeError, ValueError):
            raise _einval(f"dest_gid must be a host's address or name, not {gid!r}") from None
        for name in self.topo.host_names():
            index = self.topo.nodes[name].index
            if any(self.topo.host_address(index, p) == addr for p in range(self.topo.planes)):
                return index
        raise _einval(f"dest_gid {gid} is no host's address in lab {self.topo.lab!r}")

    @staticmethod
    def _psn(attrs: dict, name: str) -> int:
        value = attrs.pop(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFFFF:
            raise _einval(f"{name} must be a 24-bit PSN (0..{0xFFFFFF}), not {value!r}")
        return value

    def _plan_rtr(self, aq: AppQp, attrs: dict):
        for name in ("dest_qp_num", "dest_gid"):
            if name not in attrs:
                raise _einval(f"RTR needs {name} (the peer's QP number and its GID)")
        dest_host = self._dest_host(attrs.pop("dest_gid"))
        dest_qpn = attrs.pop("dest_qp_num")
        mtu = attrs.pop("path_mtu", 4096)
        if mtu not in PATH_MTUS:
            raise _einval(f"path_mtu must be one of {PATH_MTUS}, not {mtu!r}")
        mpr = attrs.pop("mpr_dest", DEFAULT_MPR)
        rq_psn = self._psn(attrs, "rq_psn")
        key = _auth_key(attrs)
        changes = {
            "mpr": mpr,
            "mpr_dest": mpr,
            "dest_host": dest_host,
            "dest_qpn": dest_qpn,
            "max_wimm_dest": attrs.pop("max_wimm_dest", aq.qp.attrs.max_wimm_dest),
            "dynamic_mpr": self._dynamic_mpr(aq, attrs),
        }
        self._check_transition(aq, QpState.RTR, **changes)

        def apply() -> None:
            aq.qp.modify(QpState.RTR, **changes)
            self.maps.setup_rq(
                aq.qp.qpn,
                local_host=self.index,
                peer_host=dest_host,
                peer_qpn=dest_qpn,
                # without REMOTE_WRITE access (INIT) the QP takes no WRITE at all
                region=(nic.REGION_BY_RKEY if aq.access & ACCESS_REMOTE_WRITE else nic.REGION_NONE),
                mpr=mpr,
                psn=rq_psn,
                cq=aq.recv_cq + 1,
                max_wimm_dest=changes["max_wimm_dest"],
                dyn_mpr=changes["dynamic_mpr"],
                auth_key=key,
                pd=aq.pd,
            )
            aq.rq_set, aq.remote = True, {"qpn": dest_qpn}
            self.daemon.reverse.open(aq.qp.qpn, dest_host, dest_qpn, key)  # its answers' paths
            aq.auth = aq.auth or key is not None

        return apply

    def _plan_rts(self, aq: AppQp, attrs: dict):
        if aq.qp.state == QpState.RTS:
            raise _einval(
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
            "dynamic_mpr": self._dynamic_mpr(aq, attrs),
        }
        sq_psn = self._psn(attrs, "sq_psn")
        self._check_transition(aq, QpState.RTS, **changes)
        send = self._send_extensions(aq, attrs)

        def apply() -> None:
            aq.qp.modify(QpState.RTS, **changes)
            self._setup_send(aq, send, changes["mpr"], sq_psn)
            aq.sq_set = True

        return apply

    @staticmethod
    def _dynamic_mpr(aq: AppQp, attrs: dict) -> bool:
        """The QP's MRC_QP_CAP bits (mrc.h enum mrc_qp_cap): DYNAMIC_MPR is honoured;
        the two responder opt-outs are accepted and change nothing here (the
        NIC always trims and has no service time to report)."""
        cap = attrs.pop("cap", None)
        if cap is None:
            return aq.qp.attrs.dynamic_mpr
        if not isinstance(cap, int) or isinstance(cap, bool) or cap & ~0b111:
            raise _einval(
                f"cap must be MRC_QP_CAP bits (1 TRIM_NACK_DEST_UNSUPPORTED, 2 DYNAMIC_MPR, "
                f"4 SVC_TIME_DEST_UNSUPPORTED), not {cap!r}"
            )
        return bool(cap & 0b10)

    def _send_extensions(self, aq: AppQp, attrs: dict) -> SendSetup:
        """The mrc-nic extension attributes of RTS (docs/api.md), checked:
        window, reorder window, NSCC overrides, the EV count and floor."""
        setup = SendSetup(
            cwnd=attrs.pop("cwnd", DEFAULT_CWND),
            reorder_ns=attrs.pop("reorder_ns", DEFAULT_REORDER_NS),
            ev_count=attrs.pop("ev_count", EV_COUNT),
            ev_min_active=attrs.pop("ev_min_active", None),
            auth_key=_auth_key(attrs),
        )
        cc = attrs.pop("cc", None)
        for name in ("cwnd", "reorder_ns", "ev_count"):
            if not isinstance(getattr(setup, name), int):
                raise _einval(f"{name} must be an integer, not {getattr(setup, name)!r}")
        if not 0 <= setup.cwnd <= nic.BITMAP_BITS:
            raise _einval(f"cwnd must be 0 (the MPR range) .. {nic.BITMAP_BITS}, not {setup.cwnd}")
        if not 0 <= setup.reorder_ns <= REORDER_NS_MAX:
            raise _einval(f"reorder_ns must be 0 (off) .. {REORDER_NS_MAX}, not {setup.reorder_ns}")
        planes = self.topo.planes
        if not 1 <= setup.ev_count <= nic.MAX_QP_EVS or setup.ev_count % planes:
            raise _einval(
                f"ev_count must be 1..{nic.MAX_QP_EVS} and a multiple of the lab's {planes} "
                f"planes (EVs are equal per plane), not {setup.ev_count}"
            )
        # None: the EV profile's floor (a quarter of ev_count on the default profile)
        if setup.ev_min_active is not None and (
            not isinstance(setup.ev_min_active, int)
            or not 0 <= setup.ev_min_active <= setup.ev_count
        ):
            raise _einval(
                f"ev_min_active must be 0..ev_count ({setup.ev_count}), not {setup.ev_min_active!r}"
            )
        if cc is not None and not isinstance(cc, dict):
            raise _einval("cc must be an object of NSCC fields (struct mrc_ctl_cc_nscc_cfg names)")
        try:  # the host's CC profiles (transport.profiles); checked at INIT, may change since
            config = self.daemon.controller.table.nscc_config(aq.qp.attrs.cc_profile_id)
        except (ValueError, RequestError) as e:
            raise _einval(str(e)) from None
        if config is None and cc:
            raise _einval(f"CC profile {aq.qp.attrs.cc_profile_id} has no NSCC to tune (cc)")
        try:
            setup.nscc = config.with_overrides(cc) if config is not None else None
        except ValueError as e:
            raise _einval(str(e)) from None
        return setup

    def _setup_send(self, aq: AppQp, send: SendSetup, mpr: int, sq_psn: int) -> None:
        """The send side in the NIC maps: EVs, window, NSCC; nothing left of it on failure."""
        planes = self.topo.planes
        ctl = self.daemon.controller  # the QP's EV profile (OCP ev_profile_id)
        aq.evs, floor, denied = ctl.qp_evs(aq.qp.qpn, aq.qp.attrs.ev_profile_id, send.ev_count)
        ctl.table.attach(aq.qp.qpn, None, aq.qp.attrs.cc_profile_id)
        aq.backup = ctl.backup_for(aq.qp.attrs.ev_profile_id)
        aq.ev_min_active = floor if send.ev_min_active is None else send.ev_min_active
        cwnd, rtt_target, aq.cc = send.cwnd, 0, None
        if send.nscc is not None:
            aq.cc = nscc.QpCc(
                nscc.Nscc(
                    send.nscc,
                    link_bps=self.topo.rate_bps * planes if self.topo.rate_bps else None,
                    window_pkts=mpr * nic.wire.MPR_UNIT,
                    lab_rtt_ns=self.topo.queues.base_rtt_ns,
                    mss=nic.seg_size(self.topo.mtu),
                )
            )
            cwnd, rtt_target = aq.cc.initial()
        try:
            self.maps.setup_sq(
                aq.qp.qpn,
                local_host=self.index,
                peer_host=aq.qp.attrs.dest_host,
                peer_qpn=aq.qp.attrs.dest_qpn,
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
                max_wimm=aq.qp.attrs.max_wimm,
                dyn_mpr=aq.qp.attrs.dynamic_mpr,
                probe_good=self.daemon.controller.table.probe_good(aq.qp.attrs.ev_profile_id),
                auth_key=send.auth_key,
                pd=aq.pd,
                # 0: an overdue PSN blames its EV at once. The suspicion window
                # (the QP's timeout) left a blackholed plane's EVs GOOD at low
                # link rates: docs/nic-program.md, "Blame".
                silent_ns=0,
            )
            aq.auth = aq.auth or send.auth_key is not None
            aq.send_key = send.auth_key
            for ev in denied:  # the controller's DENIED EVs (MODIFY_EV_STATE)
                self.maps.set_ev_state(aq.qp.qpn, ev, nic.EvState.DENIED)
        except OSError as e:
            for ev in aq.evs:  # what setup_sq made before it failed
                self.maps.delete_ev(aq.qp.qpn, ev)
            with contextlib.suppress(KeyError):
                self.maps.delete_sq(aq.qp.qpn)
            raise QpError(
                errno.ENOSPC,
                f"the NIC has no room for QP {aq.qp.qpn:#x}'s {len(aq.evs)} EVs ({e.strerror}): "
                "the lab's EV table (nic_evs) is full; destroy QPs first",
            ) from None

    def _plan_err(self, aq: AppQp, attrs: dict):
        reason = attrs.pop("reason", "moved to ERR by the application")

        def apply() -> None:
            aq.qp.to_err(reason)
            if aq.sq_set:
                with contextlib.suppress(KeyError):
                    self.maps.set_sq_state(aq.qp.qpn, nic.QpState.ERR)
            if aq.rq_set:
                with contextlib.suppress(KeyError):
                    self.maps.set_rq_state(aq.qp.qpn, nic.QpState.ERR)

        return apply

    # ---- supervision --------------------------------------------------------------------
    def sending(self) -> dict[int, AppQp]:
        """Send QPs in RTS: the prober's and EV replacer's too."""
        return {aq.qp.qpn: aq for aq in self.qps() if aq.sq_set and aq.qp.state == QpState.RTS}

    def tick(self, now: float) -> None:
        for aq in self.sending().values():
            try:
                head = self.maps.wq_head(aq.ring)  # before the snapshot: supervisor.head_fault
                s = self.maps.sq(aq.qp.qpn)
            except KeyError:
                continue
            if s.state == nic.QpState.ERR:  # a fatal NACK: the NIC told the application
                aq.qp.to_err(
                    "the NIC put it in ERR (a fatal NACK, or a WQE it could not read from: "
                    "the QP's CQ has the error)"
                )
                self._stop_receiving(aq)
                self._report_error(aq)
                continue
            if not aq.last_progress:
                aq.last_progress = aq.last_kick = now
            stall = supervisor.stalled(aq, s, head, now, nic.SQ_DEPTH)
            if stall is not None:  # LOC_QP_OP_ERR: the queue itself is wrong
                self._fail(aq, stall, nic.QpError.BAD_WQE)
                continue
            reason = supervisor.step(self.maps, aq, s, now, head[0] != s.wqe_sent)
            if reason is not None:
                self._fail(aq, reason, nic.QpError.RETRY_EXCEEDED)

    def _fail(self, aq: AppQp, reason: str, error: nic.QpError) -> None:
        """ERR with a reason; the application hears it from its CQ (the NIC's
        QP_ERR record: its oldest WR gets the error, the rest flush)."""
        aq.qp.to_err(reason)
        self.maps.fail_qp(aq.qp.qpn, error)
        self._stop_receiving(aq)
        self._report_error(aq)

    def _stop_receiving(self, aq: AppQp) -> None:
        """A QP in ERR takes no more data (verbs: the whole QP is in error)."""
        if aq.rq_set:
            with contextlib.suppress(KeyError):
                self.maps.set_rq_state(aq.qp.qpn, nic.QpState.ERR)

    def _report_error(self, aq: AppQp) -> None:
        event = {"type": "qp_error", "host": self.host, "qpns": [aq.qp.qpn]}
        event["message"] = f"QP {aq.qp.qpn:#x} of pid {aq.session.pid}: {aq.qp.err_reason}"
        ctl.post_event(self.topo.lab, event, source=self.host)
