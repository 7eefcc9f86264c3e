"""The fabric in the kernel: namespaces, veth links, addresses, routes, queues.

`Fabric` turns a `Topology` into netlink calls (pyroute2, one RTNL socket per
namespace, opened on first use) and offers the few live operations the rest
of the tool needs: carrier down/up of a link, restoring the routes of a node
after its links come back, and reading kernel link state and counters.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from mrc_nic.errors import MrcNicError
from mrc_nic.kernel import netns
from mrc_nic.lab.topology import Link, Node, Port, Route, Topology, tbf_burst_bytes

SCOPE_LINK = 253
TC_ROOT_HANDLE = 0x10000
# A size table (TCA_STAB) holding only TCA_STAB_BASE: struct tc_sizespec with
# no table (tsize 0) and no overhead, linklayer ethernet. With it the qdisc
# takes a packet's length from skb->len when the packet is enqueued; without
# it, from a length the kernel noted before the clsact egress hook ran. So a
# packet the switch port program trimmed there costs the TBF its new length,
# as it costs the program's twin of that queue (mrc_nic.fabric.queues).
_SIZESPEC = struct.pack("=BBhiIIII", 0, 0, 0, 0, 1, 0, 0, 0)
TCA_STAB_BASE = 1
SKB_LEN_STAB = struct.pack("=HH", 4 + len(_SIZESPEC), TCA_STAB_BASE) + _SIZESPEC

SWITCH_SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    # ECMP hashes the L4 ports: the UDP source port (the packet's entropy
    # value) picks the spine, as in an MRC fabric.
    "net.ipv4.fib_multipath_hash_policy": 1,
    # A next hop whose link lost carrier is skipped, as a switch with link
    # monitoring would do; otherwise ECMP keeps hashing into a dead link.
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
    "net.ipv4.conf.default.ignore_routes_with_linkdown": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    # T0 ports answer ARP for the other hosts of the plane: hosts see the
    # plane's /24 as on-link and need no routes of their own.
    "net.ipv4.conf.default.proxy_arp": 1,
    # IPv6 is not used yet: no router solicitations or MLD in the counters.
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
}
# Kernels >= 6.11 seed the ECMP hash randomly per namespace unless told; a
# fixed seed makes a given entropy value take the same spine in every run.
ECMP_HASH_SEED = {"net.ipv4.fib_multipath_hash_seed": 0x4D5243}  # "MRC"
HOST_SYSCTLS = {
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    # Several ports, one per plane: answer ARP only on the port that owns the
    # address, and source ARP from it, so each plane stays separate.
    "net.ipv4.conf.all.arp_ignore": 1,
    "net.ipv4.conf.all.arp_announce": 2,
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
}


class FabricError(MrcNicError, RuntimeError):
    """A netlink operation failed; the message names the object and the cause."""


def _explain(err: NetlinkError, what: str) -> FabricError:
    code = err.code
    hint = {
        errno.EOPNOTSUPP: "the kernel lacks this feature",
        errno.ENOENT: "the kernel lacks this feature, or the object is gone",
        errno.EEXIST: "it already exists",
        errno.EPERM: "permission denied (run as root)",
    }.get(code, os.strerror(code))
    return FabricError(f"{what}: {hint} ({errno.errorcode.get(code, code)})")


def _failpoint(step: str) -> None:
    """Test hook at the end of each build step. MRC_NIC_FAILPOINT=<step> fails
    there; <step>:hang stops there (for a test to kill -9). Lets the tests
    prove that a half-built lab is removed, whichever step it stopped in."""
    wanted = os.environ.get("MRC_NIC_FAILPOINT", "")
    if wanted == step:
        raise FabricError(f"failpoint {step!r} reached (MRC_NIC_FAILPOINT is set)")
    if wanted == f"{step}:hang":
        while True:
            time.sleep(1)


class Fabric:
    def __init__(self, topo: Topology):
        self.topo = topo
        self._sockets: dict[str, IPRoute] = {}
        self._ifindex: dict[tuple[str, str], int] = {}

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def ipr(self, node: str) -> IPRoute:
        if node not in self._sockets:
            self._sockets[node] = netns.iproute(self.topo.netns(node))
        return self._sockets[node]

    def ifindex(self, node: str, ifname: str) -> int:
        key = (node, ifname)
        if key not in self._ifindex:
            found = self.ipr(node).link_lookup(ifname=ifname)
            if not found:
                raise FabricError(f"{node}: no interface {ifname}")
            self._ifindex[key] = found[0]
        return self._ifindex[key]

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NetlinkError as e:
            raise _explain(e, what) from None

    # ---- build -----------------------------------------------------------
    def build(self, program: Any, nic: Any = None) -> None:
        """Create every namespace and object of the topology, in order.

        program: the switch port program (tc on every switch port, plus its
        pass-only XDP on host-facing ports); None builds a plain kernel
        fabric, with no BPF on any port (the benchmarks' kernel peers). nic:
        the NIC's XDP program, attached to every host port; None builds a
        fabric without NICs."""
        here = self.topo.is_here  # a machine of a cluster lab builds its shard only
        for node in self.topo.nodes.values():
            if not here(node.name):
                continue
            netns.create(self.topo.netns(node.name))
            netns.write_sysctls(self.topo.netns(node.name), self._sysctls(node))
            lo = self.ifindex(node.name, "lo")
            self._call(f"{node.name}: lo up", self.ipr(node.name).link, "set", index=lo, state="up")
        _failpoint("namespaces")
        for link in self.topo.links.values():
            if here(link.upper.node) and here(link.lower.node):
                self._make_link(link)
            elif here(link.upper.node) or here(link.lower.node):
                self._make_tunnel_end(link)
        _failpoint("links")
        for node in filter(here, self.topo.switch_names()):
            # Proxy ARP replies are delayed up to 0.8 s by default; answer at
            # once. Per interface: a non-initial namespace has no neigh.default.
            ports = [p.ifname for p in self.topo.ports_of(node)]
            netns.write_sysctls(
                self.topo.netns(node),
                {f"net.ipv4.neigh.{ifname}.proxy_delay": 0 for ifname in ports},
            )
        for route in self.topo.routes():
            if here(route.node):
                self._set_route(route)
        for link in self.topo.links.values():
            for port in link.ends():
                if not here(port.node):
                    continue
                self._set_queue(link, port)
                if port.port_id is not None and program is not None:
                    idx = self.ifindex(port.node, port.ifname)
                    try:
                        program.attach(self.ipr(port.node), idx, port.port_id)
                    except NetlinkError as e:
                        raise _explain(
                            e, f"{port.node}:{port.ifname}: attach BPF port program"
                        ) from None
        if nic is not None:
            self._attach_nic(program, nic)
        _failpoint("attach")

    def _attach_nic(self, program: Any, nic: Any) -> None:
        """The NIC's XDP program on every host port, and what its send engine
        needs to know of each port: its device, its MAC and the T0's MAC (the
        next hop of every data packet), and that every port is up."""
        from mrc_nic.nic import NicMaps

        with NicMaps.open(self.topo.lab) as maps:
            for link in self.topo.links.values():
                if link.kind != "host" or not self.topo.is_here(link.lower.node):
                    continue
                up, host = link.upper, link.lower
                # The switch end first: the host end's XDP_TX needs a program there.
                program.attach_xdp_pass(self.ipr(up.node), self.ifindex(up.node, up.ifname))
                host_idx = self.ifindex(host.node, host.ifname)
                self._call(
                    f"{link.name}: attach NIC XDP on {host.node}:{host.ifname}",
                    nic.attach,
                    self.ipr(host.node),
                    host_idx,
                )
                maps.set_port(
                    self.topo.nodes[host.node].index,
                    link.plane,
                    ifindex=host_idx,
                    mac=self._mac(host.node, host.ifname),
                    nh_mac=self._mac(up.node, up.ifname),
                    netns=self.topo.netns(host.node),
                )
            from mrc_nic.nic import DOORBELL_IFNAME

            for name in filter(self.topo.is_here, self.topo.host_names()):
                self._make_doorbell(name, nic)
                self._call(
                    f"{name}: ACK fan-out through the doorbell",
                    maps.set_fanout,
                    self.topo.nodes[name].index,
                    self.ifindex(name, DOORBELL_IFNAME),
                    netns=self.topo.netns(name),
                )
                maps.set_port_bitmap(self.topo.nodes[name].index, (1 << self.topo.planes) - 1)

    def _make_doorbell(self, host: str, nic: Any) -> None:
        """The host's doorbell port: a veth whose NIC end, at the ifindex the
        NIC program knows, takes every frame sent into the other end as a kick
        (docs/nic-program.md, "Kicks"): cheaper than a BPF_PROG_RUN per post."""
        from mrc_nic.nic import DOORBELL_IFINDEX, DOORBELL_IFNAME, DOORBELL_NIC_IFNAME

        ipr = self.ipr(host)
        self._call(
            f"{host}: create the doorbell port",
            ipr.link,
            "add",
            ifname=DOORBELL_NIC_IFNAME,
            index=DOORBELL_IFINDEX,
            kind="veth",
            peer={"ifname": DOORBELL_IFNAME},
        )
        for ifname in (DOORBELL_NIC_IFNAME, DOORBELL_IFNAME):
            idx = self.ifindex(host, ifname)
            self._call(f"{host}: {ifname} mtu", ipr.link, "set", index=idx, mtu=self.topo.mtu)
            self._call(f"{host}: {ifname} up", ipr.link, "set", index=idx, state="up")
        self._call(f"{host}: attach NIC XDP on the doorbell", nic.attach, ipr, DOORBELL_IFINDEX)

    def _mac(self, node: str, ifname: str) -> str:
        (msg,) = self.ipr(node).get_links(self.ifindex(node, ifname))
        return msg.get_attr("IFLA_ADDRESS")

    def _sysctls(self, node: Node) -> dict[str, int]:
        if not node.is_switch:
            return HOST_SYSCTLS
        if os.path.exists("/proc/sys/net/ipv4/fib_multipath_hash_seed"):
            return {**SWITCH_SYSCTLS, **ECMP_HASH_SEED}
        return SWITCH_SYSCTLS

    def _make_link(self, link: Link) -> None:
        up, low = link.upper, link.lower
        self._call(
            f"{link.name}: create veth",
            self.ipr(up.node).link,
            "add",
            ifname=up.ifname,
            kind="veth",
            peer={"ifname": low.ifname, "net_ns_fd": self.topo.netns(low.node)},
        )
        for port in (up, low):
            self._port_up(link, port)

    def _port_up(self, link: Link, port: Port) -> None:
        idx = self.ifindex(port.node, port.ifname)
        ipr = self.ipr(port.node)
        self._call(f"{link.name}: mtu", ipr.link, "set", index=idx, mtu=self.topo.mtu)
        if port.address is not None:
            self._call(
                f"{link.name}: address {port.address} on {port.node}:{port.ifname}",
                ipr.addr,
                "add",
                index=idx,
                address=str(port.address.ip),
                prefixlen=port.address.network.prefixlen,
            )
        self._call(f"{link.name}: up", ipr.link, "set", index=idx, state="up")

    def _make_tunnel_end(self, link: Link) -> None:
        """This machine's end of a link to another machine: a VXLAN device made
        from this process's namespace, the machine's underlay (where its UDP
        socket stays), straight into the switch's namespace under the port's
        name; then as a veth end: MTU, address, up. The queue and the port
        program follow as on every port (build). VXLAN over IPv4 adds 50
        bytes: the underlay carries lab MTU + 50 (docs/cluster.md)."""
        from mrc_nic.lab.topology import VXLAN_PORT

        tunnel = self.topo.shard.tunnels[link.name]
        port = link.upper if self.topo.is_here(link.upper.node) else link.lower
        with netns.iproute_here() as ipr:
            self._call(
                f"{link.name}: create VXLAN {tunnel.vni} to {tunnel.remote}",
                ipr.link,
                "add",
                ifname=port.ifname,
                kind="vxlan",
                vxlan_id=tunnel.vni,
                vxlan_local=tunnel.local,
                vxlan_group=tunnel.remote,
                vxlan_port=VXLAN_PORT,
                vxlan_learning=0,
                net_ns_fd=self.topo.netns(port.node),
            )
        self._port_up(link, port)

    def _set_route(self, route: Route) -> None:
        ipr = self.ipr(route.node)
        spec: dict[str, Any] = {"dst": str(route.dst)}
        if route.dev is not None:
            spec.update(oif=self.ifindex(route.node, route.dev), scope=SCOPE_LINK)
        elif len(route.via) == 1:
            spec["gateway"] = str(route.via[0])
        else:
            spec["multipath"] = [{"gateway": str(g)} for g in route.via]
        self._call(f"{route.node}: route {route.dst}", ipr.route, "replace", **spec)

    def _set_queue(self, link: Link, port: Port) -> None:
        """Egress queue at the link rate: a real TBF, so queueing delay is real."""
        self._tbf(link, port, "add", self.topo.buffer_bytes)

    def set_queue_buffer(self, link: Link, port: Port, buffer: int) -> None:
        """Resize the real queue of a port (its TBF limit) to a new buffer, live."""
        self._tbf(link, port, "change", buffer)

    def _tbf(self, link: Link, port: Port, command: str, buffer: int) -> None:
        if link.rate_bps is None:
            return
        frame = self.topo.mtu + 14
        burst = tbf_burst_bytes(link.rate_bps, self.topo.mtu)
        # Switch ports trim packets in BPF before this queue: see SKB_LEN_STAB.
        extra = {"stab": SKB_LEN_STAB} if port.port_id is not None else {}
        self._call(
            f"{link.name}: tbf queue on {port.node}:{port.ifname}",
            self.ipr(port.node).tc,
            command,
            "tbf",
            self.ifindex(port.node, port.ifname),
            TC_ROOT_HANDLE,
            rate=f"{link.rate_bps}bit",
            burst=burst,
            limit=max(buffer, burst + frame),
            **extra,
        )

    # ---- live operations ---------------------------------------------------
    def set_link_state(self, link: Link, up: bool) -> None:
        """Admin state of both ends: down takes the carrier away on both."""
        for port in link.ends():
            if not self.topo.is_here(port.node):
                continue  # the other machine's agent sets its end (mrc_nic.cluster)
            idx = self.ifindex(port.node, port.ifname)
            state = "up" if up else "down"
            self._call(
                f"{link.name}: set {state}", self.ipr(port.node).link, "set", index=idx, state=state
            )

    def restore_routes(self, nodes: set[str]) -> None:
        """Re-install the planned routes of these nodes (the kernel flushes
        routes through a device that goes down); 'replace' makes it idempotent.

        Next hops over a link whose local end is still admin down (another
        fault) are left out: the kernel refuses them (ENETUNREACH). They come
        back when that link is healed, through this same function."""
        nodes = {node for node in nodes if self.topo.is_here(node)}
        dead = {node: self._admin_down_links(node) for node in nodes}
        for planned in self.topo.routes():
            if planned.node in nodes:
                route = planned.avoiding(dead[planned.node])
                if route is not None:
                    self._set_route(route)

    def _admin_down_links(self, node: str) -> set[str]:
        info = self.link_info(node)
        return {
            lk.name
            for lk in self.topo.links_of(node)
            for port in lk.ends()
            if port.node == node and not info.get(port.ifname, {}).get("admin_up", False)
        }

    def link_info(self, node: str) -> dict[str, dict]:
        """Kernel view of a node's interfaces: state, carrier and counters,
        and the drops of each root queue (TBF drops packets over its limit)."""
        queue_drops: dict[int, int] = {}
        for qdisc in self.ipr(node).get_qdiscs():
            if qdisc["parent"] == 0xFFFFFFFF:  # TC_H_ROOT
                stats = qdisc.get_attr("TCA_STATS") or {}
                queue_drops[qdisc["index"]] = stats.get("drop", 0)
        info = {}
        for msg in self.ipr(node).get_links():
            name = msg.get_attr("IFLA_IFNAME")
            if name == "lo":
                continue
            stats = msg.get_attr("IFLA_STATS64") or {}
            info[name] = {
                "admin_up": bool(msg["flags"] & 1),
                "carrier": bool(msg.get_attr("IFLA_CARRIER")),
                "operstate": msg.get_attr("IFLA_OPERSTATE"),
                "rx_packets": stats.get("rx_packets", 0),
                "rx_bytes": stats.get("rx_bytes", 0),
                "tx_packets": stats.get("tx_packets", 0),
                "tx_bytes": stats.get("tx_bytes", 0),
                "rx_dropped": stats.get("rx_dropped", 0),
                "tx_dropped": stats.get("tx_dropped", 0),
                "queue_drops": queue_drops.get(msg["index"], 0),
            }
        return info
