"""The transport daemon of one emulated host (python -m mrc_nic.transport.daemon LAB HOST).

`mrc-nic up` starts one per host, inside the host's network namespace, and
`mrc-nic down` ends them. It turns the fast path into reliable connections
and never touches a data packet:
- queue pairs (mrc_nic.transport.qp: states, attributes, errno-style refusals), their
  NIC state in the lab's maps, and this host's share of the NIC resources
  (mrc_nic.transport.hostmem);
- WRITE transfers (mrc_nic.transport.sendjob): posting work requests, the
  retransmission timeout (a timeout kick: BPF queues the oldest unacked PSNs,
  then a send kick resends them on other EVs), restarting a stalled ACK
  clock, verifying what arrived, and putting a QP in ERR with a reason when
  its retry budget is spent;
- probes (mrc_nic.transport.prober): every EV in ASSUMED_BAD is probed on its own path
  until a PROBE_REPLY (handled in BPF) brings it back to GOOD;
- the host's port bitmap: a port whose carrier goes down is taken out of
  nic_port_up at once, which the NIC copies into every SACK, so the peer
  stops sending on that plane too;
- the control socket (mrc_nic.lab.ctl, docs/daemon.md) the CLI talks to.

Single-threaded: one selector loop with a 1 ms tick (mrc_nic.lab.service).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
import traceback
from dataclasses import dataclass

from mrc_nic import nic
from mrc_nic.kernel import netns
from mrc_nic.lab import ctl, state
from mrc_nic.lab.service import Conn, LineService
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import appops, appsession, evreplace, hostmem, prober, reverse, sendjob
from mrc_nic.transport import protocol as ops
from mrc_nic.transport.qp import Qp, QpError, QpState


@dataclass
class RecvQp:
    """A receive QP: its QP record and its memory region."""

    qp: Qp
    region: int
    rkey: int
    span: hostmem.Span


class Daemon(LineService):
    operations = ops.OPS

    def __init__(self, topo: Topology, host: str) -> None:
        super().__init__(ctl.socket_path(topo.lab, host))
        self.topo, self.host = topo, host
        self.index = topo.nodes[host].index
        self.maps = nic.NicMaps.open(self.topo.lab)
        self.res = hostmem.HostResources(
            self.index, self.topo.hosts, self.maps.mr_elems, self.maps.max_qps
        )
        self.send_qps: dict[int, sendjob.SendQp] = {}
        self.recv_qps: dict[int, RecvQp] = {}
        self.jobs: list[sendjob.Job] = []
        self.prober = prober.Prober(self.topo, self.index, self.maps)
        self.replacer = evreplace.Replacer(topo.lab, host, self.index, self.maps)
        # the paths of our receive QPs' answers (issue 19)
        self.reverse = reverse.ReverseEvs(self.topo, host, self.index, self.maps)
        self.apps = appsession.AppSessions(self)  # applications' sessions (mrc_nic.verbs)
        self._port_bits: int | None = None
        self._links = None  # netlink socket subscribed to this namespace's link changes

    # ---- the loop ----------------------------------------------------------------
    def serve(self) -> None:
        self._watch_ports()
        super().serve()

    def close(self) -> None:
        self.prober.close()
        self.reverse.close()
        if self._links is not None:
            self._links.close()

    def on_drop(self, conn: Conn) -> None:
        self.apps.drop(conn)  # an application's connection: everything it created goes
        for job in self.jobs:
            if job.conn is conn:
                job.conn = None  # the job goes on; nobody waits for its reply

    def tick(self, now: float) -> None:
        for job in list(self.jobs):
            job.step(now)
            if job.finished:
                result = ops.WriteReply(**job.result())  # before the QPs' counters go
                if result.error:
                    event = {"type": "qp_error", "host": self.host, "message": result.error}
                    event["qpns"] = [q["qpn"] for q in result.qps if q["state"] == "ERR"]
                    ctl.post_event(self.topo.lab, event, source=self.host)
                self.jobs.remove(job)
                # Kept open only for a caller still there to use them (or close).
                if not job.opts.keep_open or job.conn is None:
                    for sq in job.qps:
                        self._close_send_qp(sq.qp.qpn)
                self.reply(job.conn, result)
        try:
            self.apps.tick(now)
        except Exception:  # noqa: BLE001 (one application QP's bug must not end the daemon)
            traceback.print_exc(file=sys.stderr)
        if self.recv_qps:
            try:
                self.reverse.step(now)
            except Exception:  # noqa: BLE001 (a policy's bug must not end the transfers)
                traceback.print_exc(file=sys.stderr)
        apps = self.apps.sending()
        if self.jobs or apps:
            mine = {sq.qp.qpn: sq for job in self.jobs for sq in job.qps if sq.remote}
            mine.update(apps)
            states = self.prober.step(now, mine)
            if states is not None:
                try:
                    self.replacer.step(now, mine, states)
                except Exception:  # noqa: BLE001 (a policy's bug must not end the transfers)
                    traceback.print_exc(file=sys.stderr)

    # ---- ports -------------------------------------------------------------------
    def _watch_ports(self) -> None:
        """nic_port_up follows the carrier of this host's ports: netlink link
        events wake the loop, no polling."""
        from pyroute2 import IPRoute
        from pyroute2.netlink.rtnl import RTMGRP_LINK

        self._links = IPRoute()
        self._links.bind(groups=RTMGRP_LINK)
        self.watch(self._links.fileno(), self._link_changed)
        self._update_ports()

    def _link_changed(self) -> None:
        self._links.get()  # drain; what changed is read whole below
        self._update_ports()

    def _update_ports(self) -> None:
        from pyroute2 import IPRoute  # a query socket: the subscribed one carries events

        with IPRoute() as ipr:
            links = {link.get_attr("IFLA_IFNAME"): link for link in ipr.get_links()}
        bits = 0
        for p in range(self.topo.planes):
            link = links.get(f"eth{p}")
            up = (
                link is not None
                and link["flags"] & 1  # IFF_UP
                and link.get_attr("IFLA_CARRIER") == 1
            )
            bits |= int(bool(up)) << p
        if bits != self._port_bits:
            self.maps.set_port_bitmap(self.index, bits)
            if self._port_bits is not None:
                self._evs_out(self._port_bits & ~bits)
            self._port_bits = bits

    def _evs_out(self, planes: int) -> None:
        """Ports that went down (a bitmap of planes) take their EVs out: GOOD
        and SKIP EVs of those planes become ASSUMED_BAD on every send QP. The
        engine already skips the plane by the port bitmap; the state is what
        `mrc-nic ev list` shows and what the prober probes, so that the EVs
        come back GOOD once the port is up and a probe gets through."""
        if not planes:
            return
        for sq in self.send_qps.values():
            for ev, plane in sq.evs.items():
                if not planes >> plane & 1:
                    continue
                with contextlib.suppress(KeyError, OSError):  # the QP or EV went meanwhile
                    if self.maps.ev(sq.qp.qpn, ev).state in evreplace.ACTIVE:
                        self.maps.set_ev_state(sq.qp.qpn, ev, nic.EvState.ASSUMED_BAD)

    # ---- requests ----------------------------------------------------------------
    def op_ping(self, req: ops.Ping, conn: Conn) -> ops.PingReply:
        return ops.PingReply(host=self.host, index=self.index, pid=os.getpid())

    def op_qp_list(self, req: ops.QpList, conn: Conn) -> ops.QpListReply:
        qps = [dict(sq.qp.as_dict(), role="send") for sq in self.send_qps.values()]
        qps += [dict(rq.qp.as_dict(), role="recv") for rq in self.recv_qps.values()]
        qps += [self.apps.describe(aq) for aq in self.apps.qps()]
        return ops.QpListReply(host=self.host, qps=sorted(qps, key=lambda q: q["qpn"]))

    def op_rq_open(self, req: ops.RqOpen, conn: Conn) -> ops.RqOpenReply:
        """Receive QPs for a transfer: one per peer QP, each with a region of
        2 chunks, in RTR (created, INIT, RTR: the receive side needs no RTS)."""
        peer_host = _host_index(self.topo, req.peer)
        opened: list[RecvQp] = []
        try:
            for peer_qpn in req.peer_qpns:
                opened.append(self._open_recv_qp(peer_host, peer_qpn, req.chunk, req.mpr))
        except BaseException:
            for rq in opened:
                self._close_recv_qp(rq.qp.qpn)
            raise
        return ops.RqOpenReply(
            qps=[{"qpn": rq.qp.qpn, "rkey": rq.rkey, "region": rq.region} for rq in opened]
        )

    def _open_recv_qp(self, peer_host: int, peer_qpn: int, chunk: int, mpr: int) -> RecvQp:
        qp = Qp(self.res.new_qpn(), self.index)
        span = None
        try:
            qp.modify(QpState.INIT, ev_profile_id=0, cc_profile_id=0)
            qp.modify(QpState.RTR, mpr=mpr, dest_host=peer_host, dest_qpn=peer_qpn)
            span = self.res.recv_mem.alloc(2 * chunk // hostmem.KIB, "a receive region")
            region = self.res.regions.take()
        except BaseException:
            if span is not None:
                self.res.recv_mem.release(span)
            self.res.free_qpn(qp.qpn)
            raise
        rkey = (qp.qpn * 2654435761) & 0xFFFFFFFF or 1  # unguessable enough for a lab
        rq = RecvQp(qp, region, rkey, span)
        self.recv_qps[qp.qpn] = rq
        try:
            self.maps.set_region(
                region, first_elem=span.first_elem, n_elems=span.n_elems, rkey=rkey
            )
            # Refused if a QP outside the daemons (mrc_nic.transport.transfer) holds the slot.
            self.maps.setup_rq(
                qp.qpn,
                local_host=self.index,
                peer_host=peer_host,
                peer_qpn=peer_qpn,
                region=region,
                mpr=mpr,
            )
            self.reverse.open(qp.qpn, peer_host, peer_qpn)
        except BaseException:
            self._close_recv_qp(qp.qpn)  # gives back the QPN, region and memory
            raise
        return rq

    def op_rq_close(self, req: ops.RqClose, conn: Conn) -> ops.RqCloseReply:
        closed = [q for q in req.qpns if q in self.recv_qps]
        stats = {}
        for qpn in closed:
            rq = self.maps.rq(qpn)
            stats[str(qpn)] = {**rq.stats, "long_gaps": rq.long_gaps}
            self._close_recv_qp(qpn)
        return ops.RqCloseReply(closed=closed, stats=stats)

    def _close_recv_qp(self, qpn: int) -> None:
        rq = self.recv_qps.pop(qpn)
        self.reverse.forget(qpn)
        with contextlib.suppress(KeyError):
            self.maps.delete_rq(qpn)  # clears its reverse EV set too
        self.maps.clear_region(rq.region)
        self.res.regions.give(rq.region)
        self.res.recv_mem.release(rq.span)
        self.res.free_qpn(qpn)

    def op_sq_open(self, req: ops.SqOpen, conn: Conn) -> ops.SqOpenReply:
        """Send QPs in INIT, with their source buffers (2 chunks each)."""
        if not 1 <= req.count <= ops.QPS_MAX:
            raise QpError(errno.EINVAL, f"qps must be 1..{ops.QPS_MAX}, not {req.count}")
        opened: list[sendjob.SendQp] = []
        try:
            for _ in range(req.count):
                opened.append(self._open_send_qp(req.chunk))
        except BaseException:
            for sq in opened:
                self._close_send_qp(sq.qp.qpn)
            raise
        return ops.SqOpenReply(qpns=[sq.qp.qpn for sq in opened])

    def _open_send_qp(self, chunk: int) -> sendjob.SendQp:
        qp = Qp(self.res.new_qpn(), self.index)
        qp.modify(QpState.INIT, ev_profile_id=0, cc_profile_id=0)
        span = ring = region = None
        try:
            span = self.res.send_mem.alloc(2 * chunk // hostmem.KIB, "a send buffer")
            ring = self.res.rings.take()
            region = self.res.regions.take()
        except BaseException:
            if span is not None:
                self.res.send_mem.release(span)
            if ring is not None:
                self.res.rings.give(ring)
            self.res.free_qpn(qp.qpn)
            raise
        self.maps.set_region(region, first_elem=span.first_elem, n_elems=span.n_elems, rkey=0)
        sq = sendjob.SendQp(qp=qp, ring=ring, region=region, span=span, chunk=chunk)
        self.send_qps[qp.qpn] = sq
        return sq

    def op_sq_close(self, req: ops.SqClose, conn: Conn) -> ops.SqCloseReply:
        """Close send QPs that a write left open (keep_open), or that sq_open
        opened and no write used."""
        for qpn in req.qpns:
            if qpn not in self.send_qps:
                raise QpError(errno.ENOENT, f"no send QP {qpn:#x} on {self.host}")
            if self._job_of(qpn) is not None:
                raise QpError(errno.EBUSY, f"QP {qpn:#x} is writing: wait for the write to end")
        for qpn in req.qpns:
            self._close_send_qp(qpn)
        return ops.SqCloseReply(closed=req.qpns)

    def op_cancel(self, req: ops.Cancel, conn: Conn) -> ops.CancelReply:
        """End the writes running on these send QPs: their QPs go to ERR
        (reason: cancelled), and each write's caller gets its result."""
        jobs = []
        for qpn in req.qpns:
            if qpn not in self.send_qps:
                raise QpError(errno.ENOENT, f"no send QP {qpn:#x} on {self.host}")
            job = self._job_of(qpn)
            if job is not None and job not in jobs:
                jobs.append(job)
        for job in jobs:
            job.cancel(req.reason or ops.CANCEL_REASON)
        return ops.CancelReply(cancelled=[sq.qp.qpn for job in jobs for sq in job.qps])

    def _job_of(self, qpn: int) -> sendjob.Job | None:
        return next((job for job in self.jobs if any(sq.qp.qpn == qpn for sq in job.qps)), None)

    def _close_send_qp(self, qpn: int) -> None:
        sq = self.send_qps.pop(qpn, None)
        if sq is None:
            return
        self.replacer.forget(sq)
        with contextlib.suppress(KeyError):
            self.maps.delete_sq(qpn)
        self.maps.clear_region(sq.region)
        self.res.regions.give(sq.region)
        self.res.rings.give(sq.ring)
        self.res.send_mem.release(sq.span)
        self.res.free_qpn(qpn)

    def op_write(self, req: ops.Write, conn: Conn) -> None:
        """Run a transfer on send QPs from sq_open to the receive QPs of
        rq_open; replies when it ends."""
        dst = _host_index(self.topo, req.dst)
        remote = req.remote  # [{qpn, rkey, region}] in the order of qpns
        if len(remote) != len(req.qpns):
            raise QpError(errno.EINVAL, "one remote QP per send QP")
        sqs = []
        for qpn in req.qpns:
            sq = self.send_qps.get(qpn)
            if sq is None:
                raise QpError(errno.ENOENT, f"no send QP {qpn:#x} on {self.host} (sq_open first)")
            if self._job_of(qpn) is not None:
                raise QpError(errno.EBUSY, f"QP {qpn:#x} is already writing")
            sqs.append(sq)
        opts = sendjob.JobOptions.from_request(req)
        for sq, r in zip(sqs, remote, strict=True):
            sq.begin(self.maps, self.topo, dst, r, opts)
        job = sendjob.Job(self.maps, sqs, opts, conn)
        self.jobs.append(job)
        job.start(time.monotonic())
        return None

    def op_ev_set(self, req: ops.EvSet, conn: Conn) -> ops.EvSetReply:
        """The operator's word on an EV: deny (DENIED) or allow (GOOD)."""
        qpn, ev, state = req.qpn, req.ev, req.state.upper()
        if qpn not in self.send_qps:
            raise QpError(errno.ENOENT, f"no send QP {qpn:#x} on {self.host}")
        states = {"DENIED": nic.EvState.DENIED, "GOOD": nic.EvState.GOOD}
        if state not in states:
            raise QpError(errno.EINVAL, f"state must be DENIED or GOOD, not {state!r}")
        try:
            self.maps.set_ev_state(qpn, ev, states[state])
        except KeyError:
            raise QpError(errno.ENOENT, f"QP {qpn:#x} has no EV {ev}") from None
        return ops.EvSetReply(qpn=qpn, ev=ev, state=state)

    # ---- applications (mrc_nic.verbs): setup only, see transport.appsession ----------
    def op_app_hello(self, req: appops.Hello, conn: Conn) -> appops.HelloReply:
        return self.apps.hello(req, conn)

    def op_reg_mr(self, req: appops.RegMr, conn: Conn) -> appops.RegMrReply:
        return self.apps.reg_mr(req, conn)

    def op_dereg_mr(self, req: appops.DeregMr, conn: Conn) -> appops.Done:
        return self.apps.dereg_mr(req, conn)

    def op_create_cq(self, req: appops.CreateCq, conn: Conn) -> appops.CreateCqReply:
        return self.apps.create_cq(req, conn)

    def op_destroy_cq(self, req: appops.DestroyCq, conn: Conn) -> appops.Done:
        return self.apps.destroy_cq(req, conn)

    def op_create_qp(self, req: appops.CreateQp, conn: Conn) -> appops.CreateQpReply:
        return self.apps.create_qp(req, conn)

    def op_modify_qp(self, req: appops.ModifyQp, conn: Conn) -> appops.ModifyQpReply:
        return self.apps.modify_qp(req, conn)

    def op_query_qp(self, req: appops.QueryQp, conn: Conn) -> appops.ModifyQpReply:
        return self.apps.query_qp(req, conn)

    def op_destroy_qp(self, req: appops.DestroyQp, conn: Conn) -> appops.Done:
        return self.apps.destroy_qp(req, conn)


def _host_index(topo: Topology, name: str) -> int:
    node = topo.nodes.get(str(name))
    if node is None or node.kind != "host":
        raise QpError(
            errno.EINVAL,
            f"no host {name!r} in lab {topo.lab!r} (hosts: {', '.join(topo.host_names())})",
        )
    return node.index


def main(argv: list[str]) -> int:
    lab, host = argv[0], argv[1]
    _, topo = state.open_lab(lab)
    if host not in topo.host_names():
        print(f"mrc-nic daemon: no host {host!r} in lab {lab!r}", file=sys.stderr)
        return 2
    netns.enter_for_good(topo.netns(host))
    daemon = Daemon(topo, host)
    daemon.serve_until_signalled()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
