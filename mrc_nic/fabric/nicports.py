"""The NIC on a fabric's host ports: its XDP program on each, the port records its
send engine reads (device, MACs, up), and each host's doorbell port."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # builder calls this module: no import back at run time
    from mrc_nic.fabric.builder import Fabric


def attach_nic(fabric: Fabric, program: Any, nic: Any) -> None:
    """The NIC's XDP program on every host port, and what its send engine
    needs to know of each port: its device, its MAC and the T0's MAC (the
    next hop of every data packet), and that every port is up."""
    from mrc_nic.nic import NicMaps

    with NicMaps.open(fabric.topo.lab) as maps:
        for link in fabric.topo.links.values():
            if link.kind != "host" or not fabric.topo.is_here(link.lower.node):
                continue
            up, host = link.upper, link.lower
            # The switch end first: the host end's XDP_TX needs a program there.
            program.attach_xdp_pass(fabric.ipr(up.node), fabric.ifindex(up.node, up.ifname))
            host_idx = fabric.ifindex(host.node, host.ifname)
            fabric.call(
                f"{link.name}: attach NIC XDP on {host.node}:{host.ifname}",
                nic.attach,
                fabric.ipr(host.node),
                host_idx,
            )
            maps.set_port(
                fabric.topo.nodes[host.node].index,
                link.plane,
                ifindex=host_idx,
                mac=mac(fabric, host.node, host.ifname),
                nh_mac=mac(fabric, up.node, up.ifname),
                netns=fabric.topo.netns(host.node),
            )
        from mrc_nic.nic import DOORBELL_IFNAME

        for name in filter(fabric.topo.is_here, fabric.topo.host_names()):
            make_doorbell(fabric, name, nic)
            fabric.call(
                f"{name}: ACK fan-out through the doorbell",
                maps.set_fanout,
                fabric.topo.nodes[name].index,
                fabric.ifindex(name, DOORBELL_IFNAME),
                netns=fabric.topo.netns(name),
            )
            maps.set_port_bitmap(fabric.topo.nodes[name].index, (1 << fabric.topo.planes) - 1)


def make_doorbell(fabric: Fabric, host: str, nic: Any) -> None:
    """The host's doorbell port: a veth whose NIC end, at the ifindex the
    NIC program knows, takes every frame sent into the other end as a kick
    (docs/nic-program.md, "Kicks"): cheaper than a BPF_PROG_RUN per post."""
    from mrc_nic.nic import DOORBELL_IFINDEX, DOORBELL_IFNAME, DOORBELL_NIC_IFNAME

    ipr = fabric.ipr(host)
    fabric.call(
        f"{host}: create the doorbell port",
        ipr.link,
        "add",
        ifname=DOORBELL_NIC_IFNAME,
        index=DOORBELL_IFINDEX,
        kind="veth",
        peer={"ifname": DOORBELL_IFNAME},
    )
    for ifname in (DOORBELL_NIC_IFNAME, DOORBELL_IFNAME):
        idx = fabric.ifindex(host, ifname)
        fabric.call(f"{host}: {ifname} mtu", ipr.link, "set", index=idx, mtu=fabric.topo.mtu)
        fabric.call(f"{host}: {ifname} up", ipr.link, "set", index=idx, state="up")
    fabric.call(f"{host}: attach NIC XDP on the doorbell", nic.attach, ipr, DOORBELL_IFINDEX)
    # The applications' doorbell program on the other end, which takes no
    # frame of its own: attached, it stays in the kernel's XDP dispatcher, so
    # that a session's BPF_PROG_RUN of it is as cheap as of nic_xdp.
    fabric.call(
        f"{host}: attach the applications' doorbell program on {DOORBELL_IFNAME}",
        nic.attach_doorbell,
        ipr,
        fabric.ifindex(host, DOORBELL_IFNAME),
    )


def mac(fabric: Fabric, node: str, ifname: str) -> str:
    (msg,) = fabric.ipr(node).get_links(fabric.ifindex(node, ifname))
    return msg.get_attr("IFLA_ADDRESS")
