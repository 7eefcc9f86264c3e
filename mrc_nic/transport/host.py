"""What every part of a host daemon is given: the host context, and how a part serves.

The daemon (mrc_nic.transport.daemon) is a set of parts: applications'
resources (appresources), QP lifecycle (qplife), supervision (appsupervise),
the controller's profiles (profileops), EV events (evevents) and ports
(ports). None of them holds the daemon or another part it does not need:
each gets the HostContext, the host's shared state, and the few parts it
calls named in its constructor. Each part lists the operations it answers
(`handles`) and registers them with the service itself (Part.register).

A QP destroyed is one event for everyone who keeps state per QP: they add a
callable to `qp_destroyed` (the EV replacer, the reverse EVs, the profile
table's users), and the QP's lifecycle calls them all.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from mrc_nic import nic
from mrc_nic.contract.framing import Request
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import hostmem, profiles
from mrc_nic.transport.sessions import AppQp, Sessions

if TYPE_CHECKING:
    from mrc_nic.lab.service import LineService


@dataclasses.dataclass(frozen=True)
class HostContext:
    """One host's daemon state that its parts share (none of it reassigned)."""

    topo: Topology
    host: str
    index: int  # the host's index in the lab: the host part of its QPNs
    maps: nic.NicMaps
    res: hostmem.HostResources  # this host's share of the NIC's memory, rings, QPNs
    table: profiles.ProfileTable  # the host's EV Format, EV and CC profiles (mrc_ctl.h)
    cq_slots: hostmem.IdPool  # the host's CQ slots (applications' and the EV event queue)
    sessions: Sessions  # applications' sessions and what they own
    qp_destroyed: list[Callable[[AppQp], None]] = dataclasses.field(default_factory=list)

    @classmethod
    def open(cls, topo: Topology, host: str, maps: nic.NicMaps) -> HostContext:
        index = topo.nodes[host].index
        per_host = max(1, maps.max_cqs // topo.hosts)
        return cls(
            topo=topo,
            host=host,
            index=index,
            maps=maps,
            res=hostmem.HostResources(index, topo.hosts, maps.mr_elems, maps.max_qps),
            table=profiles.ProfileTable(topo.planes),
            cq_slots=hostmem.IdPool(index * per_host, per_host, "completion queue"),
            sessions=Sessions(host),
        )

    def destroyed(self, aq: AppQp) -> None:
        """Everyone who keeps state of the QP lets it go."""
        for hook in self.qp_destroyed:
            hook(aq)


class Part:
    """A part of the daemon that answers operations: {request class: the name of
    its method `(request, conn) -> reply`}."""

    handles: ClassVar[dict[type[Request], str]] = {}

    def register(self, service: LineService) -> None:
        for request, name in self.handles.items():
            service.handle(request, getattr(self, name))


def host_with_address(
    topo: Topology, addr: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> int | None:
    """The index of the lab's host that has address addr on one of its planes."""
    for name in topo.host_names():
        index = topo.nodes[name].index
        if any(topo.host_address(index, p) == addr for p in range(topo.planes)):
            return index
    return None
