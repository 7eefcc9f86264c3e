"""The transport daemon of one emulated host (python -m mrc_nic.transport.daemon LAB HOST).

`mrc-nic up` starts one per host, inside the host's network namespace, and
`mrc-nic down` ends them. It turns the fast path into reliable connections
and never touches a data packet:
- queue pairs (mrc_nic.transport.qp: states, attributes, errno-style refusals), their
  NIC state in the lab's maps, and this host's share of the NIC resources
  (mrc_nic.transport.hostmem);
- applications' sessions (mrc_nic.transport.sessions, for mrc_nic.verbs
  and so for `mrc-nic write`): NIC memory, CQ slots (transport.appresources),
  QP numbers and QP state in the maps (transport.qplife); then, per send QP
  in RTS (transport.appsupervise, transport.supervisor), NSCC,
  the retransmission timeout (a timeout kick: BPF queues the oldest unacked
  PSNs, then a send kick resends them on other EVs), restarting a stalled ACK
  clock, and putting a QP in ERR with a reason when its retry budget is
  spent. Applications post and poll without the daemon;
- probes (mrc_nic.transport.prober): every EV in ASSUMED_BAD is probed on its own path
  until a PROBE_REPLY (handled in BPF) brings it back to GOOD;
- the host's port bitmap: a port whose carrier goes down is taken out of
  nic_port_up at once, which the NIC copies into every SACK, so the peer
  stops sending on that plane too (transport.ports);
- the OCP controller's objects: profiles (transport.profileops), EV events
  (transport.evevents), ports' admin state, EV probe batches
  (transport.epprobe);
- the control socket (mrc_nic.lab.client, docs/daemon.md) the CLI talks to.

The daemon is parts that share one HostContext (transport.host); each part
registers the operations it answers; this module wires them and keeps the
loop, and answers the few operations of the host as a whole (ping, qp_list,
ev_set, ep_batch_send_wait).

Single-threaded: one selector loop with a 1 ms tick while there is work
(mrc_nic.lab.service), 50 ms when idle.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from collections.abc import Callable

from mrc_nic import nic
from mrc_nic.contract import ctlops
from mrc_nic.contract import daemonops as ops
from mrc_nic.kernel import netns
from mrc_nic.lab import client, state, topology
from mrc_nic.lab.service import Conn, LineService
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import epprobe, evreplace, prober, reverse, tenancy
from mrc_nic.transport.appresources import AppResources
from mrc_nic.transport.appsupervise import Supervision
from mrc_nic.transport.evevents import EvEvents
from mrc_nic.transport.host import HostContext
from mrc_nic.transport.ports import Ports
from mrc_nic.transport.profileops import ProfileOps
from mrc_nic.transport.qp import QpError
from mrc_nic.transport.qplife import QpLifecycle

IDLE_TICK_S = 0.05  # the loop's tick with nothing to do (no QP sending, no probes)


class Daemon(LineService):
    operations = ops.OPS

    def __init__(self, topo: Topology, host: str) -> None:
        super().__init__(client.socket_path(topo.lab, host))
        self.tick_s = topology.sending_tick_s(topo.queues.base_rtt_ns)
        self.ctx = ctx = HostContext.open(topo, host, nic.NicMaps.open(topo.lab))
        self.prober = prober.Prober(topo, ctx.index, ctx.maps)
        self.replacer = evreplace.Replacer(
            topo.lab, host, ctx.index, ctx.maps, evreplace.Timing.for_probes(self.prober.timing)
        )
        # the paths of our receive QPs' answers (issue 19)
        self.reverse = reverse.ReverseEvs(topo, host, ctx.index, ctx.maps)
        self.ep = epprobe.EpProber(topo, ctx.index, ctx.maps)  # EV probe batches
        ctx.qp_destroyed.extend(self._qp_hooks())
        self.resources = AppResources(ctx)  # applications' sessions (mrc_nic.verbs)
        self.qps = QpLifecycle(ctx, self.reverse)
        self.supervision = Supervision(ctx)
        self.events = EvEvents(ctx)  # the OCP mrc_ctl.h objects: these three
        self.events.on_bad = lambda: self.prober.wake_at(0.0)  # probe it at the next step
        self.profiles = ProfileOps(ctx, self.events, self.replacer)
        self.ports = Ports(ctx, self.events)
        for part in (self.resources, self.qps, self.events, self.profiles, self.ports):
            part.register(self)
        self.check_handlers()

    def _qp_hooks(self) -> list[Callable]:
        """Who keeps state per QP, told when one is destroyed."""
        return [
            self.replacer.forget,  # its EVs replaced lately
            lambda aq: self.reverse.forget(aq.qp.qpn),  # its answers' paths
            lambda aq: self.ctx.table.detach(aq.qp.qpn),  # a user of its profiles no more
        ]

    # ---- the loop ----------------------------------------------------------------
    def serve(self) -> None:
        self.ports.start(self)
        # the NIC's EV state records of our send QPs: drained when they come
        self.watch(self.events.queue, self.events.drain)
        super().serve()

    def close(self) -> None:
        self.prober.close()
        self.ep.close()
        self.events.close()
        self.reverse.close()
        self.ports.close()

    def on_drop(self, conn: Conn) -> None:
        """An application's connection: everything it created goes, QPs first."""
        session = self.ctx.sessions.pop(conn)
        if session is not None:
            self.qps.release(session)
            self.resources.release(session)

    def tick_interval(self) -> float:
        """tick_s (topology.sending_tick_s) while QPs send or probe batches wait; until
        the next reverse EV step (every 4 ms) while receive QPs only keep their
        reverse EVs: a receiver's daemon waking 1000 times a second took the CPU
        its transfer's softirq needed (docs/benchmarks.md, "The receiver's probes"). Otherwise
        IDLE_TICK_S: whatever starts work is a request, which wakes the loop."""
        if self.ctx.sessions.sending() or self.ep.batches:
            return self.tick_s
        until = self.reverse.next_due() - time.monotonic()
        return min(IDLE_TICK_S, max(self.tick_s, until))

    def tick(self, now: float) -> None:
        try:
            self.supervision.tick(now)
        except Exception:  # noqa: BLE001 (one application QP's bug must not end the daemon)
            traceback.print_exc(file=sys.stderr)
        if self.reverse.active:
            try:
                self.reverse.step(now)
            except Exception:  # noqa: BLE001 (a policy's bug must not end the transfers)
                traceback.print_exc(file=sys.stderr)
        if self.ep.batches:  # EV probe batches waiting for answers
            try:
                for conn, rsps, unsent in self.ep.step():
                    self.reply(conn, ctlops.EpBatchReply(rsps=rsps, unsent=unsent))
            except Exception:  # noqa: BLE001 (a probe batch's bug must not end the daemon)
                traceback.print_exc(file=sys.stderr)
        sending = self.ctx.sessions.sending()
        if sending:
            states = self.prober.step(now, sending)
            if states is not None:
                try:
                    self.replacer.step(now, sending, states)
                    self.prober.wake_at(self.replacer.next_due(now))
                except Exception:  # noqa: BLE001 (a policy's bug must not end the transfers)
                    traceback.print_exc(file=sys.stderr)

    # ---- the host's own operations (the parts register theirs) ------------------------
    def op_ping(self, req: ops.Ping, conn: Conn) -> ops.PingReply:
        return ops.PingReply(host=self.ctx.host, index=self.ctx.index, pid=os.getpid())

    def op_qp_list(self, req: ops.QpList, conn: Conn) -> ops.QpListReply:
        qps = [aq.describe() for aq in self.ctx.sessions.qps()]
        return ops.QpListReply(
            host=self.ctx.host,
            qps=sorted(qps, key=lambda q: q["qpn"]),
            sessions=self.ctx.sessions.describe(),
        )

    def op_ev_set(self, req: ops.EvSet, conn: Conn) -> ops.EvSetReply:
        """The operator's word on an EV: deny (DENIED) or allow (GOOD)."""
        qpn, ev, state = req.qpn, req.ev, req.state.upper()
        sq = self.ctx.sessions.sending().get(qpn)
        if sq is None:
            raise QpError(errno.ENOENT, f"no send QP {qpn:#x} in RTS on {self.ctx.host}")
        states = {"DENIED": nic.EvState.DENIED, "GOOD": nic.EvState.GOOD}
        if state not in states:
            raise QpError(errno.EINVAL, f"state must be DENIED or GOOD, not {state!r}")
        try:
            self.events.set_ev_state(sq, ev, states[state], "OPERATOR")
        except KeyError:
            raise QpError(errno.ENOENT, f"QP {qpn:#x} has no EV {ev}") from None
        return ops.EvSetReply(qpn=qpn, ev=ev, state=state)

    def op_ep_batch_send_wait(self, req: ctlops.EpBatchSendWait, conn: Conn) -> None:
        """Send the batch; tick answers when it is done (epprobe.EpProber.step)."""
        self.ep.start(req, conn)


def main(argv: list[str]) -> int:
    lab, host = argv[0], argv[1]
    _, topo = state.open_lab(lab)
    if host not in topo.host_names():
        print(f"mrc-nic daemon: no host {host!r} in lab {lab!r}", file=sys.stderr)
        return 2
    tenancy.remember_home()  # the machine's namespace: root there may name any host
    netns.enter_for_good(topo.netns(host))
    daemon = Daemon(topo, host)
    tenancy.open_to_tenants(daemon, topo)  # root and the lab's [tenants] group (lab.access)
    daemon.serve_until_signalled()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
