"""The transport daemon of one emulated host (python -m mrc_nic.transport.daemon LAB HOST).

`mrc-nic up` starts one per host, inside the host's network namespace, and
`mrc-nic down` ends them. It turns the fast path into reliable connections
and never touches a data packet:
- queue pairs (mrc_nic.transport.qp: states, attributes, errno-style refusals), their
  NIC state in the lab's maps, and this host's share of the NIC resources
  (mrc_nic.transport.hostmem);
- applications' sessions (mrc_nic.transport.appsession, for mrc_nic.verbs
  and so for `mrc-nic write`): QP numbers, NIC memory, CQ slots, QP state in
  the maps; then, per send QP in RTS (mrc_nic.transport.supervisor), NSCC,
  the retransmission timeout (a timeout kick: BPF queues the oldest unacked
  PSNs, then a send kick resends them on other EVs), restarting a stalled ACK
  clock, and putting a QP in ERR with a reason when its retry budget is
  spent. Applications post and poll without the daemon;
- probes (mrc_nic.transport.prober): every EV in ASSUMED_BAD is probed on its own path
  until a PROBE_REPLY (handled in BPF) brings it back to GOOD;
- the host's port bitmap: a port whose carrier goes down is taken out of
  nic_port_up at once, which the NIC copies into every SACK, so the peer
  stops sending on that plane too;
- the control socket (mrc_nic.lab.client, docs/daemon.md) the CLI talks to.

Single-threaded: one selector loop with a 1 ms tick while there is work
(mrc_nic.lab.service), 50 ms when idle.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
import traceback

from mrc_nic import nic
from mrc_nic.contract import appops, ctlops
from mrc_nic.contract import daemonops as ops
from mrc_nic.kernel import netns
from mrc_nic.lab import client, state
from mrc_nic.lab.service import Conn, LineService
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import (
    appsession,
    controller,
    evreplace,
    hostmem,
    prober,
    reverse,
    tenancy,
)
from mrc_nic.transport.qp import QpError

IDLE_TICK_S = 0.05  # the loop's tick with nothing to do (no QP sending, no probes)


class Daemon(LineService):
    operations = ops.OPS

    def __init__(self, topo: Topology, host: str) -> None:
        super().__init__(client.socket_path(topo.lab, host))
        self.topo, self.host = topo, host
        self.index = topo.nodes[host].index
        self.maps = nic.NicMaps.open(self.topo.lab)
        self.res = hostmem.HostResources(
            self.index, self.topo.hosts, self.maps.mr_elems, self.maps.max_qps
        )
        self.prober = prober.Prober(self.topo, self.index, self.maps)
        self.replacer = evreplace.Replacer(topo.lab, host, self.index, self.maps)
        # the paths of our receive QPs' answers (issue 19)
        self.reverse = reverse.ReverseEvs(self.topo, host, self.index, self.maps)
        self.apps = appsession.AppSessions(self)  # applications' sessions (mrc_nic.verbs)
        self.controller = controller.Controller(self)  # the OCP mrc_ctl.h objects
        self._port_bits: int | None = None
        self.carrier_bits: int | None = None  # ports with carrier (before admin state)
        self._links = None  # netlink socket subscribed to this namespace's link changes

    # ---- the loop ----------------------------------------------------------------
    def serve(self) -> None:
        self._watch_ports()
        # the NIC's EV state records of our send QPs: drained when they come
        self.watch(self.controller.ev_queue, self.controller.drain_ev_queue)
        super().serve()

    def close(self) -> None:
        self.prober.close()
        self.controller.close()
        self.reverse.close()
        if self._links is not None:
            self._links.close()

    def on_drop(self, conn: Conn) -> None:
        self.apps.drop(conn)  # an application's connection: everything it created goes

    def tick_interval(self) -> float:
        """1 ms while QPs send or probe batches wait; until the next reverse EV
        step (every 4 ms) while receive QPs only keep their reverse EVs: a
        receiver's daemon waking 1000 times a second took the CPU its transfer's
        softirq needed (docs/benchmarks.md, "The receiver's probes"). Otherwise
        IDLE_TICK_S: whatever starts work is a request, which wakes the loop."""
        if self.apps.sending() or self.controller.ep.batches:
            return self.tick_s
        until = self.reverse.next_due() - time.monotonic()
        return min(IDLE_TICK_S, max(self.tick_s, until))

    def tick(self, now: float) -> None:
        try:
            self.apps.tick(now)
        except Exception:  # noqa: BLE001 (one application QP's bug must not end the daemon)
            traceback.print_exc(file=sys.stderr)
        if self.reverse.active:
            try:
                self.reverse.step(now)
            except Exception:  # noqa: BLE001 (a policy's bug must not end the transfers)
                traceback.print_exc(file=sys.stderr)
        if self.controller.ep.batches:  # EV probe batches waiting for answers
            try:
                for conn, reply in self.controller.ep_step():
                    self.reply(conn, reply)
            except Exception:  # noqa: BLE001 (a probe batch's bug must not end the daemon)
                traceback.print_exc(file=sys.stderr)
        sending = self.apps.sending()
        if sending:
            states = self.prober.step(now, sending)
            if states is not None:
                try:
                    self.replacer.step(now, sending, states)
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
        self.carrier_bits = bits
        bits &= ~self.controller.ports_disabled  # DISABLED ports are down to the NIC
        if bits != self._port_bits:
            self.maps.set_port_bitmap(self.index, bits)
            if self._port_bits is not None:
                self._evs_out(self._port_bits & ~bits)
            self._port_bits = bits

    def update_ports(self) -> None:
        """Carrier or admin state changed: the port bitmap again."""
        self._update_ports()

    def _evs_out(self, planes: int) -> None:
        """Ports that went down (a bitmap of planes) take their EVs out: GOOD
        and SKIP EVs of those planes become ASSUMED_BAD on every send QP. The
        engine already skips the plane by the port bitmap; the state is what
        `mrc-nic ev list` shows and what the prober probes, so that the EVs
        come back GOOD once the port is up and a probe gets through."""
        if not planes:
            return
        for sq in self.apps.sending().values():
            for ev, plane in sq.evs.items():
                if not planes >> plane & 1:
                    continue
                with contextlib.suppress(KeyError, OSError):  # the QP or EV went meanwhile
                    if self.maps.ev(sq.qp.qpn, ev).state in evreplace.ACTIVE:
                        self.controller.set_ev_state(sq, ev, nic.EvState.ASSUMED_BAD, "PORT_DOWN")

    # ---- requests ----------------------------------------------------------------
    def op_ping(self, req: ops.Ping, conn: Conn) -> ops.PingReply:
        return ops.PingReply(host=self.host, index=self.index, pid=os.getpid())

    def op_qp_list(self, req: ops.QpList, conn: Conn) -> ops.QpListReply:
        qps = [self.apps.describe(aq) for aq in self.apps.qps()]
        return ops.QpListReply(
            host=self.host,
            qps=sorted(qps, key=lambda q: q["qpn"]),
            sessions=self.apps.describe_sessions(),
        )

    def op_ev_set(self, req: ops.EvSet, conn: Conn) -> ops.EvSetReply:
        """The operator's word on an EV: deny (DENIED) or allow (GOOD)."""
        qpn, ev, state = req.qpn, req.ev, req.state.upper()
        sq = self.apps.sending().get(qpn)
        if sq is None:
            raise QpError(errno.ENOENT, f"no send QP {qpn:#x} in RTS on {self.host}")
        states = {"DENIED": nic.EvState.DENIED, "GOOD": nic.EvState.GOOD}
        if state not in states:
            raise QpError(errno.EINVAL, f"state must be DENIED or GOOD, not {state!r}")
        try:
            self.controller.set_ev_state(sq, ev, states[state], "OPERATOR")
        except KeyError:
            raise QpError(errno.ENOENT, f"QP {qpn:#x} has no EV {ev}") from None
        return ops.EvSetReply(qpn=qpn, ev=ev, state=state)

    # ---- applications (mrc_nic.verbs): setup only, see transport.appsession ----------
    def op_app_hello(self, req: appops.Hello, conn: Conn) -> appops.HelloReply:
        return self.apps.hello(req, conn)

    def op_alloc_pd(self, req: appops.AllocPd, conn: Conn) -> appops.AllocPdReply:
        return self.apps.alloc_pd(req, conn)

    def op_dealloc_pd(self, req: appops.DeallocPd, conn: Conn) -> appops.Done:
        return self.apps.dealloc_pd(req, conn)

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

    # ---- the controller (OCP mrc_ctl.h), see transport.controller ----------------------
    def op_ctl_query_device(self, req: ctlops.CtlQueryDevice, conn: Conn) -> ctlops.CtlDeviceReply:
        return self.controller.query_device(req)

    def op_ev_fmt_profile_modify(
        self, req: ctlops.EvFmtProfileModify, conn: Conn
    ) -> ctlops.ProfileReply:
        return self.controller.ev_fmt_modify(req)

    def op_ev_fmt_profile_query(
        self, req: ctlops.EvFmtProfileQuery, conn: Conn
    ) -> ctlops.ProfilesReply:
        return self.controller.ev_fmt_query(req)

    def op_ev_profile_modify(self, req: ctlops.EvProfileModify, conn: Conn) -> ctlops.ProfileReply:
        return self.controller.ev_modify(req)

    def op_ev_profile_query(self, req: ctlops.EvProfileQuery, conn: Conn) -> ctlops.ProfilesReply:
        return self.controller.ev_query(req)

    def op_cc_profile_modify(self, req: ctlops.CcProfileModify, conn: Conn) -> ctlops.ProfileReply:
        return self.controller.cc_modify(req)

    def op_cc_profile_query(self, req: ctlops.CcProfileQuery, conn: Conn) -> ctlops.ProfilesReply:
        return self.controller.cc_query(req)

    def op_ev_event_poll(self, req: ctlops.EvEventPoll, conn: Conn) -> ctlops.EvEventsReply:
        return self.controller.poll_events(req)

    def op_port_query(self, req: ctlops.PortQuery, conn: Conn) -> ctlops.PortsReply:
        return self.controller.port_query(req)

    def op_port_modify(self, req: ctlops.PortModify, conn: Conn) -> ctlops.PortsReply:
        return self.controller.port_modify(req)

    def op_ep_batch_send_wait(self, req: ctlops.EpBatchSendWait, conn: Conn) -> None:
        self.controller.ep_batch_start(req, conn)  # answered by tick, when the batch is done


def main(argv: list[str]) -> int:
    lab, host = argv[0], argv[1]
    _, topo = state.open_lab(lab)
    if host not in topo.host_names():
        print(f"mrc-nic daemon: no host {host!r} in lab {lab!r}", file=sys.stderr)
        return 2
    tenancy.remember_home()  # the machine's namespace: root there may name any host
    netns.enter_for_good(topo.netns(host))
    daemon = Daemon(topo, host)
    daemon.serve_until_signalled()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
