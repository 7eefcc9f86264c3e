"""The forwarding stage of bpf/switch_port.c (switch_port.h, "Forwarding").

Golden packets through BPF_PROG_TEST_RUN, run inside a namespace of the
module's own (``zfw-<pid>r``) whose FIB, neighbours and sysctls are a
switch's: an ECMP route over two next hops with L4 hashing, a route whose
next hop has no neighbour entry. BPF_PROG_TEST_RUN runs every packet as key
0 (port 0, ingress) and does not carry out the redirect, so the chosen next
hop is read from the destination MAC the program wrote (each next hop has
its own permanent neighbour entry). The ECMP choice is compared, EV by EV,
with the IP stack's own (`ip route get ... iif ... sport`, which hashes the
same five-tuple as ip_forward does).

The last test attaches the program to a router namespace between two hosts
and checks what a test run cannot: the redirected packet goes through the
egress port's clsact hook (its counters, its faults) and its TBF, and
arrives with its TTL decremented.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mrc_nic.fabric import switchport as sp
from mrc_nic.kernel import bpfsys, netns
from tests.helpers.switchprog import (
    TC_ACT_OK,
    TC_ACT_REDIRECT,
    TC_ACT_SHOT,
    clear_key0,
    loaded_switch_program,
)

IP_TTL, IP_RECVTTL = 2, 12  # linux/in.h (Python 3.11's socket lacks IP_RECVTTL)
LAB = f"zfw{os.getpid()}"
NS = f"zfw-{os.getpid()}r"

SRC = "10.77.0.2"  # a host behind the ingress port
ECMP_DST = "10.77.9.5"  # routed over two next hops
NO_NEIGH_DST = "10.77.8.5"  # routed via a next hop without a neighbour entry
UNROUTED_DST = "10.66.0.1"
NEXT_HOPS = {"10.77.1.1": "02:77:00:00:00:01", "10.77.2.1": "02:77:00:00:00:02"}
SWITCH_SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.fib_multipath_hash_policy": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
}


def ip_cmd(ns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "-n", ns, *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def program():
    with loaded_switch_program(LAB) as prog:
        yield prog


@pytest.fixture(scope="module")
def router():
    """The namespace: ports fin (ingress), fo1, fo2 (the ECMP next hops) and
    fo3 (a next hop without a neighbour entry), each a veth whose peer stays
    in the namespace, up. Yields {ifname: ifindex}."""
    netns.create(NS)
    try:
        netns.write_sysctls(NS, SWITCH_SYSCTLS)
        with netns.iproute(NS) as ipr:
            addrs = {
                "fin": "10.77.0.1/24",
                "fo1": "10.77.1.0/31",
                "fo2": "10.77.2.0/31",
                "fo3": "10.77.3.0/31",
            }
            for ifname, cidr in addrs.items():
                ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": ifname + "p"})
                for name in (ifname, ifname + "p"):
                    ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
                addr, plen = cidr.split("/")
                idx = ipr.link_lookup(ifname=ifname)[0]
                ipr.addr("add", index=idx, address=addr, prefixlen=int(plen))
        for gw, mac in NEXT_HOPS.items():
            dev = "fo1" if gw.startswith("10.77.1.") else "fo2"
            ip_cmd(NS, "neigh", "replace", gw, "lladdr", mac, "dev", dev, "nud", "permanent")
        ip_cmd(NS, "route", "add", "10.77.9.0/24", "nexthop", "via", "10.77.1.1",
               "nexthop", "via", "10.77.2.1")  # fmt: skip
        ip_cmd(NS, "route", "add", "10.77.8.0/24", "via", "10.77.3.1")
        with netns.iproute(NS) as ipr:
            yield {n: ipr.link_lookup(ifname=n)[0] for n in ("fin", "fo1", "fo2", "fo3")}
    finally:
        netns.remove(NS)


def frame(dst: str, *, sport: int = 49152, dport: int = 4791, ttl: int = 64, l4=None) -> bytes:
    l4 = l4 if l4 is not None else UDP(sport=sport, dport=dport)
    return bytes(
        Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")
        / IP(src=SRC, dst=dst, ttl=ttl, tos=0x68)
        / l4
        / Raw(bytes(range(64)))
    )


def skb_ctx(ifindex: int) -> bytes:
    """struct __sk_buff up to ifindex: ingress_ifindex (offset 36) and ifindex (40)."""
    return bytes(36) + ifindex.to_bytes(4, "little") + ifindex.to_bytes(4, "little")


def run_in_router(program, router, data: bytes, repeat: int = 1) -> bpfsys.TestRunResult:
    with netns.entered(NS):
        return bpfsys.prog_test_run(program.fd, data, repeat=repeat, ctx_in=skb_ctx(router["fin"]))


def fwd_delta(maps, before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in maps.fwd_counters(0).items()}


@pytest.fixture(autouse=True)
def clean_key0(request):
    # Each test that uses the maps (conftest's) starts with a clean key 0 and
    # the lab's MRC packets forwarded by the program.
    if "maps" in request.fixturenames:
        m = request.getfixturevalue("maps")
        clear_key0(m)
        m.set_forwarding("bpf")
    yield


def test_mrc_packet_is_redirected_with_ttl_and_macs_of_the_next_hop(program, maps, router):
    before = maps.fwd_counters(0)
    counters = maps.counters(0, sp.INGRESS)
    pkt = frame(ECMP_DST)
    result = run_in_router(program, router, pkt)

    assert result.retval == TC_ACT_REDIRECT
    out = Ether(result.data_out)
    assert out.dst in NEXT_HOPS.values()
    ifname = "fo1" if out.dst == NEXT_HOPS["10.77.1.1"] else "fo2"
    with netns.iproute(NS) as ipr:
        (link,) = ipr.get_links(router[ifname])
    assert out.src == link.get_attr("IFLA_ADDRESS")
    assert out[IP].ttl == 63
    checksum = out[IP].chksum
    del out[IP].chksum
    assert IP(bytes(out[IP]))[IP].chksum == checksum, "IPv4 checksum after the TTL"
    assert bytes(out[IP])[2:8] == bytes(Ether(pkt)[IP])[2:8]
    assert bytes(out[UDP]) == bytes(Ether(pkt)[UDP]), "the UDP datagram is untouched"
    assert fwd_delta(maps, before) == {
        "redirected": 1, "stack_other": 0, "stack_ttl": 0, "stack_fib": 0, "no_neigh": 0,
    }  # fmt: skip
    after = maps.counters(0, sp.INGRESS)
    assert after.passed_pkts - counters.passed_pkts == 1, "counted as passed at its ingress key"


def kernel_next_hop(sport: int) -> str:
    out = ip_cmd(NS, "-j", "route", "get", ECMP_DST, "from", SRC, "iif", "fin",
                 "ipproto", "udp", "sport", str(sport), "dport", "4791")  # fmt: skip
    return json.loads(out)[0]["gateway"]


def test_ecmp_choice_is_the_ip_stacks_for_every_ev(program, maps, router):
    """64 EVs (UDP source ports): the program picks the next hop the IP stack
    would, and both next hops get some."""
    mac_to_gw = {mac: gw for gw, mac in NEXT_HOPS.items()}
    chosen = {}
    for sport in range(49152, 49152 + 64):
        result = run_in_router(program, router, frame(ECMP_DST, sport=sport))
        assert result.retval == TC_ACT_REDIRECT
        chosen[sport] = mac_to_gw[Ether(result.data_out).dst]
    kernel = {sport: kernel_next_hop(sport) for sport in chosen}
    assert chosen == kernel
    assert set(chosen.values()) == set(NEXT_HOPS)


@pytest.mark.parametrize(
    ("name", "pkt", "counter"),
    [
        ("TTL 1", lambda: frame(ECMP_DST, ttl=1), "stack_ttl"),
        ("TTL 0", lambda: frame(ECMP_DST, ttl=0), "stack_ttl"),
        ("UDP, not MRC", lambda: frame(ECMP_DST, dport=53), "stack_other"),
        ("TCP", lambda: frame(ECMP_DST, l4=TCP(sport=1, dport=4791)), "stack_other"),
        (
            "IPv4 with options",
            lambda: bytes(
                Ether() / IP(src=SRC, dst=ECMP_DST, options=[b"\x01" * 4]) / UDP(dport=4791)
            ),
            "stack_other",
        ),  # fmt: skip
        ("no route", lambda: frame(UNROUTED_DST), "stack_fib"),
        ("no neighbour entry", lambda: frame(NO_NEIGH_DST), "no_neigh"),
    ],
)
def test_what_the_program_does_not_forward_goes_to_the_ip_stack_untouched(
    program, maps, router, name, pkt, counter
):
    data = pkt()
    before = maps.fwd_counters(0)
    result = run_in_router(program, router, data)
    assert result.retval == TC_ACT_OK
    assert result.data_out == data
    expected = dict.fromkeys(before, 0) | {counter: 1}
    if counter == "no_neigh":
        expected["stack_fib"] = 1
    assert fwd_delta(maps, before) == expected


def test_kernel_forwarding_leaves_everything_to_the_ip_stack(program, maps, router):
    maps.set_forwarding("kernel")
    assert maps.forwarding() == "kernel"
    before = maps.fwd_counters(0)
    pkt = frame(ECMP_DST)
    result = run_in_router(program, router, pkt)
    assert (result.retval, result.data_out) == (TC_ACT_OK, pkt)
    assert fwd_delta(maps, before) == dict.fromkeys(before, 0)
    maps.set_forwarding("bpf")
    assert maps.forwarding() == "bpf"


def test_a_fault_at_the_ingress_port_drops_before_forwarding(program, maps, router):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.BLACKHOLE)
    before = maps.fwd_counters(0)
    result = run_in_router(program, router, frame(ECMP_DST))
    assert result.retval == TC_ACT_SHOT
    assert fwd_delta(maps, before) == dict.fromkeys(before, 0)


def test_set_forwarding_refuses_unknown_modes(maps):
    with pytest.raises(ValueError, match="bpf, kernel"):
        maps.set_forwarding("xdp")


# ---- a router between two hosts ---------------------------------------------------------


def _send_udp(dst: str, n: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(n):
            s.sendto(i.to_bytes(4, "big") * 16, (dst, 4791))
            time.sleep(0.002)
    return n


def test_redirected_packets_meet_the_egress_hook_and_its_tbf(program, maps):
    """Host a -> router (ports 1 in, 2 out, a TBF on the out port) -> host b."""
    pid = os.getpid()
    ns_a, ns_r, ns_b = f"zfw-{pid}a", f"zfw-{pid}x", f"zfw-{pid}b"
    made = []
    try:
        for name in (ns_a, ns_r, ns_b):
            netns.create(name)
            made.append(name)
        netns.write_sysctls(ns_r, SWITCH_SYSCTLS)
        with netns.iproute(ns_r) as ipr:
            ipr.link("add", ifname="ra", kind="veth", peer={"ifname": "a0", "net_ns_fd": ns_a})
            ipr.link("add", ifname="rb", kind="veth", peer={"ifname": "b0", "net_ns_fd": ns_b})
        for ns, ifname, addr, gw in (
            (ns_r, "ra", "10.78.0.1", None),
            (ns_r, "rb", "10.78.1.1", None),
            (ns_a, "a0", "10.78.0.2", "10.78.0.1"),
            (ns_b, "b0", "10.78.1.2", "10.78.1.1"),
        ):
            with netns.iproute(ns) as ipr:
                idx = ipr.link_lookup(ifname=ifname)[0]
                ipr.addr("add", index=idx, address=addr, prefixlen=24)
                ipr.link("set", index=idx, state="up")
                if gw:
                    ipr.route("add", dst="10.78.0.0/16", gateway=gw)
        with netns.iproute(ns_r) as ipr:
            ra, rb = ipr.link_lookup(ifname="ra")[0], ipr.link_lookup(ifname="rb")[0]
            ipr.tc("add", "tbf", rb, 0x10000, rate="100mbit", burst=32000, limit=256000)
            program.attach(ipr, ra, 1)
            program.attach(ipr, rb, 2)
        with netns.entered(ns_b):
            rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("10.78.1.2", 4791))
        rx.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        rx.settimeout(2.0)

        def tbf_packets() -> int:
            out = subprocess.run(["tc", "-n", ns_r, "-s", "-j", "qdisc", "show", "dev", "rb"],
                                 check=True, capture_output=True, text=True).stdout  # fmt: skip
            return next(q["packets"] for q in json.loads(out) if q["kind"] == "tbf")

        def fwd_and_egress() -> tuple[int, int, int]:
            return (
                maps.fwd_counters(1)["redirected"],
                maps.counters(2, sp.EGRESS).passed_pkts,
                tbf_packets(),
            )

        assert netns.run_in(ns_a, _send_udp, "10.78.1.2", 3, timeout=30) == 3  # ARP warms up
        for _ in range(3):
            rx.recvmsg(256, 64)
        red0, egress0, tbf0 = fwd_and_egress()
        n = 50
        assert netns.run_in(ns_a, _send_udp, "10.78.1.2", n, timeout=30) == n
        ttls = []
        for _ in range(n):
            _, anc, _, _ = rx.recvmsg(256, 64)
            ttls += [data[0] for level, kind, data in anc if kind == IP_TTL]
        red1, egress1, tbf1 = fwd_and_egress()
        assert red1 - red0 == n, "forwarded by the program"
        assert egress1 - egress0 >= n, "through the egress port's clsact hook"
        assert tbf1 - tbf0 >= n, "through the egress port's TBF"
        assert ttls == [63] * n

        maps.set_fault(2, sp.EGRESS, sp.FaultMode.BLACKHOLE)
        try:
            drops0 = maps.counters(2, sp.EGRESS).drop_blackhole
            netns.run_in(ns_a, _send_udp, "10.78.1.2", 5, timeout=30)
            # the 5 datagrams, and perhaps an ARP refresh of the next hop, which
            # the blackhole takes too
            assert maps.counters(2, sp.EGRESS).drop_blackhole - drops0 in (5, 6)
            rx.settimeout(0.3)
            with pytest.raises(TimeoutError):
                rx.recvmsg(256, 64)
        finally:
            maps.clear_fault(2, sp.EGRESS)
        rx.close()
    finally:
        for name in made:
            netns.remove(name)
