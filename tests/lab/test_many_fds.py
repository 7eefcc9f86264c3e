"""A process holding more than 1,024 descriptors works (issue 26 item 7):
the event loops that need a lab (a WRITE's, the capture's, a scenario's)
run with their descriptors numbered above select()'s FD_SETSIZE, and a
permutation on a lab large enough that one process holding every flow's
connection (the design before one process per host) would have needed more
than 1,024 of them completes every flow. The loops that need no lab are
tests/unit/test_fdwait.py's."""

from __future__ import annotations

import io
import os
import threading

import pytest

from mrc_nic.observe import capture
from mrc_nic.workloads import rdma_write, scenario, traffic
from tests.helpers.env import unique_lab
from tests.helpers.fds import many_fds

pytestmark = [pytest.mark.root, pytest.mark.netns]
MIB = 2**20

# 20 hosts, 2 planes: a permutation of 20 flows. At 20 Mbit/s the links, not
# this machine, bind.
WIDE_TOML = """
[lab]
name = "wide20"

[fabric]
hosts = 20
planes = 2
tiers = 2
t0_per_plane = 5
t1_per_plane = 2
hosts_per_t0 = 4

[links]
rate = "20mbit"
mtu = 3200
buffer = "256KiB"
"""


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_write_and_a_capture_wait_above_1024_descriptors(default_lab):
    lab = default_lab.lab
    with many_fds():
        r = rdma_write.write(lab, "h0", "h1", 4 * MIB, verify=True)
        assert r["completed"] and r["verified"], r

        spot = capture.resolve(default_lab, "h0:eth0")
        pinger = threading.Timer(0.5, traffic.ping, (default_lab, "h0", "h1", 0, 3))
        pinger.start()
        try:
            got = capture.capture(spot, io.BytesIO(), count=2, duration=20)
        finally:
            pinger.join()
        assert got["stopped_by"] == "count" and got["packets"] == 2, got


@pytest.mark.slow
def test_a_permutation_that_needed_over_1024_descriptors_in_one_process(tmp_path):
    path = tmp_path / "wide20.toml"
    path.write_text(WIDE_TOML)
    topo = scenario.scenario_topology(str(path), unique_lab("fd"))
    with scenario.with_lab(topo):
        # What one flow's connection holds in one process (both ends: two NIC
        # contexts and what their sessions were handed: doorbells, queues, CQ
        # rings, MR memory; no pins). The old design opened the lab's pins per
        # context and held all 20 flows at once, over 1,024 descriptors.
        before = _open_fds()
        with rdma_write.Connection(topo.lab, "h0", "h1", size_hint=MIB):
            per_flow = _open_fds() - before
        assert 0 < per_flow < 40, per_flow

        with many_fds():  # and this process's own loops wait above 1,024 as well
            r = scenario.permutation(topo.lab, duration=1.0)
    assert r["host_processes"] == topo.hosts
    assert r["qps_in_err"] == 0, r["flows"]
    assert not [f for f in r["flows"] if f["error"]], r["flows"]
    assert all(f["bytes"] == f["size"] and f["qp_states"] == ["RTS"] for f in r["flows"])
    assert all(f["whole_goodput_bps"] for f in r["flows"]), r["flows"]
