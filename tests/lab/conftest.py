"""Tier 3: real labs in network namespaces, real traffic, real faults (root,
bcc, iproute2, ping). Every lab a test brings up is taken down after it,
whatever the test did."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.env import NETNS_DIR, mark_tier, unique_lab, why_no_lab


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, Path(__file__).parent, ("root", "bpf", "netns"), why_no_lab())


@pytest.fixture
def make_lab():
    """make_lab(tag, topology_file) brings a lab up; every lab is taken down
    at teardown, whatever the test did."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    made: list[str] = []

    def _make(tag: str, topo_file: str = "default.toml"):
        name = unique_lab(tag)
        made.append(name)
        topo = topology.load(NETNS_DIR / topo_file, lab=name)  # absolute paths pass through
        testbed.up(topo)
        return topo

    yield _make
    for name in made:
        testbed.down(name)


@pytest.fixture(scope="module")
def default_lab(request):
    """One default-topology lab shared by a module's read-mostly tests (a
    module may name another shipped file in LAB_TOPOLOGY)."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    name = unique_lab("m")
    topo_file = getattr(request.module, "LAB_TOPOLOGY", "default.toml")
    topo = topology.load(NETNS_DIR / topo_file, lab=name)
    testbed.up(topo)
    try:
        yield topo
    finally:
        testbed.down(name)


@pytest.fixture
def healed(default_lab):
    """Every fault of the module's lab healed after the test, whatever it did
    (modules that break things use it for every test: usefixtures("healed"))."""
    from mrc_nic.fabric import faults

    yield
    faults.heal(default_lab.lab, None)
