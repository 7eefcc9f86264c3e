"""Applications' resources on one host: sessions opened, PDs, memory registrations, CQs.

The daemon hands out PD numbers, NIC memory and region ids (an MR) and CQ
slots; each within the session's shares of the host (contract.shares) and
released when the session ends (release). What the session reaches of the
NIC it gets as file descriptors in the replies (contract.appops): the
doorbell at hello, an MR's memory (a map of its own) at reg_mr, a CQ's ring
at create_cq. QPs are transport.qplife's.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import secrets
from typing import Any, ClassVar

from mrc_nic import nic
from mrc_nic.contract import appops, shares
from mrc_nic.lab.service import Conn, is_operator
from mrc_nic.transport import tenancy
from mrc_nic.transport.host import HostContext, Part
from mrc_nic.transport.qp import (
    DEFAULT_REORDER_NS,
    DEFAULT_TIMEOUT,
    REORDER_NS_MAX,
    TIMEOUT_MAX,
    QpError,
)
from mrc_nic.transport.qpattrs import ACCESS_KNOWN, ACCESS_REMOTE_WRITE, MAX_WR
from mrc_nic.transport.sessions import AppMr, AppSession, einval

# A region's address space: region r's bytes start at r << 40, so an address
# names its region and a stale one misses (RETH.va).
REGION_VA_SHIFT = 40
PD_MAX = 0xFFFFFFFF  # PD numbers are 1..PD_MAX (nic_region.pd; 0 is the daemon's own)
MAX_PDS = 4096  # PDs allocated at once on one host
# A completion in a CQ ring at worst: one record behind the ring's 8-byte header.
CQ_RECORD_BYTES = ctypes.sizeof(nic.Event) + 8
PAGE = 4096  # a program maps NIC memory over its buffer by whole pages


@dataclasses.dataclass
class MrWindow:
    """Where an MR lies in NIC memory: n_elems elements starting at a multiple
    of align, its first byte head bytes into them."""

    n_elems: int
    head: int
    align: int


def mr_window(req: appops.RegMr) -> MrWindow:
    """The NIC memory an MR takes: whole elements; with page_off, whole
    pages with the MR at that offset in the first (the caller maps them
    over its buffer), and its bytes exactly [head, head + length)."""
    if req.page_off is None:
        if req.iova is not None:
            raise einval("iova needs page_off (the buffer's offset in its page)")
        return MrWindow(n_elems=-(-req.length // nic.MR_ELEM_SIZE), head=0, align=1)
    if not isinstance(req.page_off, int) or not 0 <= req.page_off < PAGE:
        raise einval(f"page_off must be 0..{PAGE - 1} (in a page), not {req.page_off!r}")
    iova = req.iova if req.iova is not None else req.page_off
    if not isinstance(iova, int) or not req.page_off <= iova <= (1 << 64) - req.length:
        raise einval(f"iova must be a 64-bit address of at least page_off, not {iova!r}")
    pages = -(-(req.page_off + req.length) // PAGE)
    per_page = PAGE // nic.MR_ELEM_SIZE
    return MrWindow(n_elems=pages * per_page, head=req.page_off, align=per_page)


def pd_of(session: AppSession, pd: Any) -> int:
    if pd not in session.pds:
        raise QpError(
            errno.ENOENT,
            f"pd {pd!r} is no protection domain of this session: allocate one with alloc_pd "
            "(verbs.PD(ctx))",
        )
    return pd


class AppResources(Part):
    """Sessions opened, and their PDs, MRs and CQs."""

    handles: ClassVar = {
        appops.Hello: "hello",
        appops.AllocPd: "alloc_pd",
        appops.DeallocPd: "dealloc_pd",
        appops.RegMr: "reg_mr",
        appops.DeregMr: "dereg_mr",
        appops.CreateCq: "create_cq",
        appops.DestroyCq: "destroy_cq",
    }

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self.pds: set[int] = set()  # PD numbers allocated on this host, every session's
        self._next_pd = 1
        res = ctx.res
        self.capacity = {  # what one host has of each shared resource (contract.shares)
            "memory": (res.send_mem.count + res.recv_mem.count) * nic.MR_ELEM_SIZE,
            "qps": min(res.qp_index.size, res.rings.size),
            "cqs": ctx.cq_slots.size,
            "pds": MAX_PDS,
        }
        self.lab_shares = shares.parse_all(ctx.topo.tenant_shares(), "[tenants]")

    # ---- sessions ------------------------------------------------------------------
    def hello(self, req: appops.Hello, conn: Conn) -> appops.HelloReply:
        ctx, topo = self.ctx, self.ctx.topo
        peer = tenancy.peer_of(conn.sock)
        tenancy.check(peer, topo.lab, ctx.host)  # a host's NIC from that host only
        try:
            asked = shares.parse_all(req.shares or {}, "shares")
        except ValueError as e:
            raise einval(str(e)) from None
        limits = shares.limits(self.capacity, self.lab_shares, asked)
        if not is_operator(peer.uid):  # a tenant asks for no more than the lab gives
            self._within_lab_share(limits, peer.uid)
        session = ctx.sessions.session(conn, create=True)
        session.pid, session.uid, session.command = peer.pid, peer.uid, peer.command
        session.limits = limits
        fds = self._device_fds()
        return appops.HelloReply(
            **fds,
            host=ctx.host,
            index=ctx.index,
            planes=topo.planes,
            seg_size=nic.seg_size(topo.mtu),
            mr_align=1,  # byte-granular placement (bpf/nic_rx.h, rx_region)
            max_mr_bytes=max(ctx.res.recv_mem.free_elems, ctx.res.send_mem.free_elems)
            * nic.MR_ELEM_SIZE,
            sq_depth=nic.SQ_DEPTH,
            max_qp_wr=MAX_WR,
            max_mpr=nic.MPR_MAX,
            max_wimm=nic.SQ_DEPTH,
            cq_ring_bytes=ctx.maps.cq_ring_bytes,
            max_mr_size=ctx.res.send_mem.count * nic.MR_ELEM_SIZE,
            default_timeout=DEFAULT_TIMEOUT,
            max_timeout=TIMEOUT_MAX,
            default_reorder_ns=DEFAULT_REORDER_NS,
            max_reorder_ns=REORDER_NS_MAX,
            host_addrs=[str(topo.host_address(ctx.index, p)) for p in range(topo.planes)],
            shares=dict(session.limits.limits),
        )

    def _within_lab_share(self, limits: shares.Limits, uid: int) -> None:
        """EPERM when a tenant asks for more of a resource than the lab's share
        (only root may: the rest of the host is for the others, mrc-nic's
        tools included)."""
        lab = shares.limits(self.capacity, self.lab_shares, {})
        over = [n for n in shares.RESOURCES if limits.limits[n] > lab.limits[n]]
        if over:
            name = over[0]
            raise QpError(
                errno.EPERM,
                f"uid {uid} asks for {limits.shares[name]} of {self.ctx.host}'s {name}, more "
                f"than the lab's share ({lab.shares[name]}), which only root may: ask for "
                f"less, or have the lab's [tenants] {name} raised",
            )

    def _device_fds(self) -> dict:
        """What every session reaches of the NIC: the doorbell program and the
        CQs' lost counts (a frozen map). Fresh descriptors: the reply hands them
        over. Not the doorbell port: a packet socket there could be bound or
        sent to the host's other ports (docs/api.md, "Isolation and cleanup")."""
        maps = self.ctx.maps
        out: dict = {"kick_fd": maps.doorbell_program_fd()}
        try:
            out["cq_lost_fd"] = maps.cq_lost_fd()
        except BaseException:
            os.close(out["kick_fd"])
            raise
        return out

    def release(self, session: AppSession) -> None:
        """The session ended (its QPs went first): its CQs, MRs and PDs go."""
        for cq in list(session.cqs):
            self._destroy_cq(session, cq)
        for region in list(session.mrs):
            self._dereg(session, region)
        self.pds -= session.pds
        session.pds.clear()

    # ---- protection domains ----------------------------------------------------------
    def alloc_pd(self, req: appops.AllocPd, conn: Conn) -> appops.AllocPdReply:
        """A PD number unique on this host while allocated (the NIC compares it
        with the region's, nic_region.pd); numbers come round-robin, so a
        released one is not given again at once."""
        session = self.ctx.sessions.session(conn)
        self.ctx.sessions.within_share(session, "pds", 1)
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
        session = self.ctx.sessions.session(conn)
        pd_of(session, req.pd)
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

    # ---- memory ----------------------------------------------------------------------
    def reg_mr(self, req: appops.RegMr, conn: Conn) -> appops.RegMrReply:
        ctx = self.ctx
        session = ctx.sessions.session(conn)
        pd = pd_of(session, req.pd)
        if not isinstance(req.length, int) or req.length < 1:
            raise einval(f"length must be at least 1 byte, not {req.length}")
        if req.access & ~ACCESS_KNOWN:
            raise einval(
                f"access {req.access:#x} has flags this NIC does not know: use "
                "LOCAL_WRITE (1) and REMOTE_WRITE (2)"
            )
        window = mr_window(req)
        ctx.sessions.within_share(session, "memory", window.n_elems * nic.MR_ELEM_SIZE)
        # The host's NIC memory, counted: the MR's bytes are a map of its own
        # (only this session gets its fd), not the span's elements of nic_mr.
        pool = max((ctx.res.recv_mem, ctx.res.send_mem), key=lambda p: p.free_elems)
        span = pool.alloc(
            window.n_elems, f"a memory registration of {req.length} bytes", window.align
        )
        memory_fd = -1
        try:
            region = ctx.res.regions.take()
        except BaseException:
            pool.release(span)
            raise
        bits = max(1, (ctx.maps.max_regions - 1).bit_length())
        rkey = (secrets.randbits(32 - bits) << bits | region) & 0xFFFFFFFF
        addr = region << REGION_VA_SHIFT if req.iova is None else req.iova
        try:
            memory_fd = ctx.maps.new_region_memory(span.n_elems)  # zeroed by the kernel
            self._write_region(req, region, span.n_elems, window, rkey, addr, pd, memory_fd)
        except BaseException:
            if memory_fd >= 0:
                os.close(memory_fd)
            ctx.res.regions.give(region)
            pool.release(span)
            raise
        mr = AppMr(pd, region, rkey, addr, span.n_elems * nic.MR_ELEM_SIZE, req.access, span, pool)
        session.mrs[region] = mr
        return appops.RegMrReply(
            region=region, rkey=rkey, addr=addr, length=mr.length, memory_fd=memory_fd
        )

    def _write_region(
        self, req, region, n_elems: int, window: MrWindow, rkey, addr, pd, memory_fd: int
    ) -> None:
        self.ctx.maps.set_region(
            region,
            memory_fd=memory_fd,
            first_elem=0,
            n_elems=n_elems,
            rkey=rkey,
            base_va=addr - window.head,
            owner=self.ctx.index + 1,
            pd=pd,
            # without REMOTE_WRITE no WRITE is placed in it, whatever its rkey
            remote_write=bool(req.access & ACCESS_REMOTE_WRITE),
            head=window.head,
            tail=n_elems * nic.MR_ELEM_SIZE - window.head - req.length,
        )

    def dereg_mr(self, req: appops.DeregMr, conn: Conn) -> appops.Done:
        session = self.ctx.sessions.session(conn)
        if req.region not in session.mrs:
            raise QpError(errno.ENOENT, f"no MR with region {req.region} in this session")
        self._dereg(session, req.region)
        return appops.Done()

    def _dereg(self, session: AppSession, region: int) -> None:
        mr = session.mrs.pop(region)
        self.ctx.maps.clear_region(region)  # a WRITE to it from now on: remote access error
        self.ctx.res.regions.give(region)
        mr.pool.release(mr.span)

    # ---- completion queues -------------------------------------------------------------
    def create_cq(self, req: appops.CreateCq, conn: Conn) -> appops.CreateCqReply:
        ctx = self.ctx
        session = ctx.sessions.session(conn)
        most = ctx.maps.cq_ring_bytes // CQ_RECORD_BYTES
        if not isinstance(req.cqe, int) or not 1 <= req.cqe <= most:
            raise einval(f"cqe must be 1..{most} (a CQ ring holds {most} completions)")
        ctx.sessions.within_share(session, "cqs", 1)
        cq = ctx.cq_slots.take()
        ring_fd = -1
        try:
            lost_base = ctx.maps.cq_lost(cq)  # an earlier CQ's overrun is not this one's
            ring_fd = ctx.maps.create_cq_ring()
            ctx.maps.set_cq_ring(cq, ring_fd)
        except BaseException:
            if ring_fd >= 0:
                os.close(ring_fd)
            ctx.cq_slots.give(cq)
            raise
        session.cqs.add(cq)
        return appops.CreateCqReply(cq=cq, ring_fd=ring_fd, lost_base=lost_base)

    def destroy_cq(self, req: appops.DestroyCq, conn: Conn) -> appops.Done:
        session = self.ctx.sessions.session(conn)
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
            self.ctx.maps.clear_cq_ring(cq)
        self.ctx.cq_slots.give(cq)
