"""A topology's nodes, links, addresses and switch port ids, derived from its numbers."""

from __future__ import annotations

import ipaddress

from mrc_nic.lab.topology.model import Link, Node, Port, Topology, plane_subnet, switch_letter


def derive(topo: Topology) -> None:
    """Derive nodes, links, addresses and switch port ids."""
    port_ids = iter(range(1 << 20))

    def switch_port(node: str, ifname: str, addr=None) -> Port:
        return Port(node, ifname, addr, next(port_ids))

    for h in range(topo.hosts):
        topo.nodes[f"h{h}"] = Node(f"h{h}", "host", None, h)
    for p in range(topo.planes):
        t0s = [Node(f"p{p}.t0{switch_letter(i)}", "t0", p, i) for i in range(topo.t0_per_plane)]
        t1s = [Node(f"p{p}.t1{switch_letter(j)}", "t1", p, j) for j in range(topo.t1_per_plane)]
        for n in t0s + t1s:
            topo.nodes[n.name] = n
        gateway = ipaddress.IPv4Interface(f"{topo.gateway_address(p)}/32")
        for h in range(topo.hosts):
            t0 = t0s[h // topo.hosts_per_t0]
            host_ip = ipaddress.IPv4Interface(f"{topo.host_address(h, p)}/24")
            name = f"p{p}.{t0.local_name}-h{h}"
            topo.links[name] = Link(
                name,
                p,
                "host",
                upper=switch_port(t0.name, f"h{h}", gateway),
                lower=Port(f"h{h}", f"eth{p}", host_ip, None),
                rate_bps=topo.rate_bps,
            )
        fabric = plane_subnet(topo.fabric_net, p).network_address
        for i, t0 in enumerate(t0s):
            for j, t1 in enumerate(t1s):
                k = i * topo.t1_per_plane + j
                name = f"p{p}.{t1.local_name}-{t0.local_name}"
                topo.links[name] = Link(
                    name,
                    p,
                    "fabric",
                    upper=switch_port(
                        t1.name, t0.local_name, ipaddress.IPv4Interface(f"{fabric + 2 * k}/31")
                    ),
                    lower=switch_port(
                        t0.name, t1.local_name, ipaddress.IPv4Interface(f"{fabric + 2 * k + 1}/31")
                    ),
                    rate_bps=topo.fabric_rate_bps,
                )
