"""Tier 2: the BPF programs without a lab. Golden packets through
BPF_PROG_TEST_RUN (needs root and bcc); a few tests attach a program to a
veth pair in a namespace of their own and carry the netns marker too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import engine
from tests.helpers.env import mark_tier, why_no_bpf
from tests.helpers.nicprog import loaded_nic_program


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, Path(__file__).parent, ("root", "bpf"), why_no_bpf())


@pytest.fixture(scope="module")
def program(request):
    """The NIC program compiled for the module (pins removed after): for the lab
    name LAB, with the sizes PROGRAM_SIZES (NicProgram.load's keywords), two
    globals of the module. The switch port modules have their own."""
    with loaded_nic_program(request.module.LAB, **request.module.PROGRAM_SIZES) as prog:
        yield prog


@pytest.fixture(scope="module")
def maps(program):
    """The map client of the module's `program` fixture: NicMaps for a NicProgram,
    SwitchPortMaps for a SwitchPortProgram."""
    from mrc_nic import nic
    from mrc_nic.fabric import switchport as sp

    client = sp.SwitchPortMaps if isinstance(program, sp.SwitchPortProgram) else nic.NicMaps
    with client.open(program.lab) as m:
        yield m


@pytest.fixture(scope="module")
def one_cpu():
    """Every run of a module on one CPU (send engine modules use it). The engine keeps
    an EV with the CPU that last sent on it for ENGINE_EV_HOLD_NS (200 us; see
    nic_consts.h): golden runs from a process that moved to another CPU in between
    would see held EVs skipped."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


@pytest.fixture(scope="module")
def event_reader(maps):
    with maps.events() as reader:
        yield reader


@pytest.fixture
def sq(maps, event_reader):
    """The send engine's QP (test_nic_engine, test_nic_mtu; test_nic_tx has its own):
    a fresh engine QP (nothing posted, nothing in flight), its ports and source."""
    maps.set_region(engine.SRC_REGION, first_elem=0, n_elems=engine.SRC_ELEMS, rkey=0x5555)
    maps.write_region(engine.SRC_REGION, 0, engine.src_bytes(0, engine.SRC_ELEMS * engine.CE))
    for plane in (0, 1):
        maps.set_port(
            engine.TX_HOST,
            plane,
            ifindex=1,
            mac=engine.mac(engine.TX_HOST, plane),
            nh_mac=engine.nh_mac(0, plane),
        )
    maps.set_port_bitmap(engine.TX_HOST, engine.PLANES)
    engine.setup_sq(maps)
    event_reader.read()
    return engine.QP_TX


@pytest.fixture(scope="module")
def live_pair(program):
    """Namespaces zeng-<pid>a (host 0) and zeng-<pid>b (host 1), veth pairs
    zeng-a0/zeng-b0 (plane 0) and zeng-a1/zeng-b1 (plane 1), the NIC program
    on all four ends. Yields {name: (namespace, ifindex, MAC)}."""
    from pyroute2 import IPRoute

    from mrc_nic.fabric.builder import HOST_SYSCTLS
    from mrc_nic.kernel import netns

    ns_a, ns_b = f"zeng-{os.getpid()}a", f"zeng-{os.getpid()}b"
    made = []
    try:
        for ns in (ns_a, ns_b):
            netns.create(ns)
            made.append(ns)
            # No router solicitations or MLD: the program's counters are the tests' (a
            # stray IPv6 packet on these ends was a pass_not_mrc in another test's delta)
            netns.write_sysctls(ns, {k: v for k, v in HOST_SYSCTLS.items() if "ipv6" in k})
        ends = {}
        with IPRoute(netns=ns_a, flags=0) as ipa, IPRoute(netns=ns_b, flags=0) as ipb:
            fd_b = os.open(netns.path(ns_b), os.O_RDONLY)
            try:
                for p in (0, 1):
                    ipa.link(
                        "add",
                        ifname=f"zeng-a{p}",
                        kind="veth",
                        peer={"ifname": f"zeng-b{p}", "net_ns_fd": fd_b},
                    )
            finally:
                os.close(fd_b)
            for ns, ipr, side in ((ns_a, ipa, "a"), (ns_b, ipb, "b")):
                for p in (0, 1):
                    name = f"zeng-{side}{p}"
                    index = ipr.link_lookup(ifname=name)[0]
                    ipr.link("set", index=index, state="up", mtu=program.config.mtu)
                    program.attach(ipr, index)
                    address = ipr.get_links(index)[0].get_attr("IFLA_ADDRESS")
                    ends[name] = (ns, index, address)
        yield ends
    finally:
        for ns in made:
            netns.remove(ns)
