"""The host's ports: carrier followed into the NIC, admin state (OCP), peers' reports.

nic_port_up follows the carrier of this host's ports: netlink link events
wake the daemon's loop, no polling. A port whose carrier goes down is taken
out of nic_port_up at once, which the NIC copies into every SACK, so the
peer stops sending on that plane too; its GOOD and SKIP EVs become
ASSUMED_BAD (evs_out). A DISABLED port (port_modify) is down to the NIC and
answers no probe (nic_host_ctl). Port status updates (PORT_STATUS_UPDATE)
peers sent this host are in nic_peer_ports, shown by port_query as `peers`.
"""

from __future__ import annotations

import contextlib
import errno
import time
from typing import Any, ClassVar

from mrc_nic import nic
from mrc_nic.contract import ctlops
from mrc_nic.lab.service import Conn, LineService
from mrc_nic.transport import evreplace
from mrc_nic.transport.evevents import EvEvents
from mrc_nic.transport.host import HostContext, Part
from mrc_nic.transport.profiles import ProfileError


class Ports(Part):
    handles: ClassVar = {ctlops.PortQuery: "port_query", ctlops.PortModify: "port_modify"}

    def __init__(self, ctx: HostContext, events: EvEvents) -> None:
        self.ctx = ctx
        self.events = events  # a port down: its EVs' ASSUMED_BAD posted
        self.disabled = 0  # bitmap of planes whose port is administratively DISABLED
        ctx.maps.set_ports_disabled(ctx.index, 0)
        self._bits: int | None = None  # what nic_port_up has
        self.carrier_bits: int | None = None  # ports with carrier (before admin state)
        self._links: Any = None  # netlink socket subscribed to this namespace's link changes

    def start(self, service: LineService) -> None:
        """Follow the links' carrier from now on (link events wake the loop)."""
        from pyroute2 import IPRoute
        from pyroute2.netlink.rtnl import RTMGRP_LINK

        self._links = IPRoute()
        self._links.bind(groups=RTMGRP_LINK)
        service.watch(self._links.fileno(), self._link_changed)
        self.update()

    def close(self) -> None:
        if self._links is not None:
            self._links.close()

    def _link_changed(self) -> None:
        self._links.get()  # drain; what changed is read whole below
        self.update()

    def update(self) -> None:
        """Carrier or admin state changed: the port bitmap again."""
        bits = self.carrier()
        self.carrier_bits = bits
        bits &= ~self.disabled  # DISABLED ports are down to the NIC
        if bits != self._bits:
            self.ctx.maps.set_port_bitmap(self.ctx.index, bits)
            if self._bits is not None:
                self._evs_out(self._bits & ~bits)
            self._bits = bits

    def carrier(self) -> int:
        """The planes whose port (eth<plane>) is up with carrier, as a bitmap."""
        from pyroute2 import IPRoute  # a query socket: the subscribed one carries events

        with IPRoute() as ipr:
            links = {link.get_attr("IFLA_IFNAME"): link for link in ipr.get_links()}
        bits = 0
        for p in range(self.ctx.topo.planes):
            link = links.get(f"eth{p}")
            up = (
                link is not None
                and link["flags"] & 1  # IFF_UP
                and link.get_attr("IFLA_CARRIER") == 1
            )
            bits |= int(bool(up)) << p
        return bits

    def _evs_out(self, planes: int) -> None:
        """Ports that went down (a bitmap of planes) take their EVs out: GOOD
        and SKIP EVs of those planes become ASSUMED_BAD on every send QP. The
        engine already skips the plane by the port bitmap; the state is what
        `mrc-nic ev list` shows and what the prober probes, so that the EVs
        come back GOOD once the port is up and a probe gets through."""
        if not planes:
            return
        for sq in self.ctx.sessions.sending().values():
            for ev, plane in sq.evs.items():
                if not planes >> plane & 1:
                    continue
                with contextlib.suppress(KeyError, OSError):  # the QP or EV went meanwhile
                    if self.ctx.maps.ev(sq.qp.qpn, ev).state in evreplace.ACTIVE:
                        self.events.set_ev_state(sq, ev, nic.EvState.ASSUMED_BAD, "PORT_DOWN")

    # ---- operations ----------------------------------------------------------------------
    def _check_port(self, port: int) -> None:
        planes = self.ctx.topo.planes
        if not 1 <= port <= planes:
            raise ProfileError(errno.EINVAL, f"port must be 1..{planes} (plane + 1), not {port}")

    def port_query(self, req: ctlops.PortQuery, conn: Conn | None) -> ctlops.PortsReply:
        if req.port is not None:
            self._check_port(req.port)
        ports = range(self.ctx.topo.planes) if req.port is None else [req.port - 1]
        carrier = self.carrier_bits or 0
        up = self.ctx.maps.port_bitmap(self.ctx.index)
        out = []
        for p in ports:
            disabled = self.disabled >> p & 1
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
        topo, now = self.ctx.topo, time.monotonic_ns()
        view = self.ctx.maps.peer_ports(self.ctx.index)
        out = []
        for name in topo.host_names():
            index = topo.nodes[name].index
            e = view[index] if index < len(view) else None
            if e is None or not e.rx_ns or index == self.ctx.index:
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

    def port_modify(self, req: ctlops.PortModify, conn: Conn | None) -> ctlops.PortsReply:
        self._check_port(req.port)
        state = str(req.port_admin_state).upper()
        if state not in ("ENABLED", "DISABLED"):
            raise ProfileError(
                errno.EINVAL, f"port_admin_state must be ENABLED or DISABLED, not {state!r}"
            )
        bit = 1 << (req.port - 1)
        self.disabled = self.disabled | bit if state == "DISABLED" else self.disabled & ~bit
        self.ctx.maps.set_ports_disabled(self.ctx.index, self.disabled)  # answers no probe
        self.update()
        return self.port_query(ctlops.PortQuery(port=req.port), conn)
