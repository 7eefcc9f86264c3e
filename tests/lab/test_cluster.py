"""Tier 3: one lab over two machines of a local Ray cluster (docs/cluster.md).

Each machine is a network namespace with its own underlay address on a
bridge and its own Ray node (mrc_nic.cluster.local), so cross-machine links
really are VXLAN over an underlay. The cluster, the lab and everything they
made are removed at the end, whatever the tests did.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers.env import NETNS_DIR, unique_lab

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'mrc-nic[cluster]' (scripts/setup)")

pytestmark = pytest.mark.slow


def _prefix() -> str:
    return f"c{os.getpid() % 1000}"


@pytest.fixture(scope="module")
def cluster():
    from mrc_nic.cluster.local import LocalCluster

    c = LocalCluster(prefix=_prefix())
    c.start()
    try:
        yield c
    finally:
        c.stop()
        left = _leftovers(c, None)
        assert not left, f"the local cluster left {left}"


def _leftovers(c, lab: str | None) -> list[str]:
    """Namespaces, links and processes the cluster (and the lab) may leave."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found = [n.split()[0] for n in names.splitlines() if n.startswith(c.prefix + "m")]
    if lab is not None:
        found += [n.split()[0] for n in names.splitlines() if n.startswith(f"mrc-{lab}-")]
    found += [w for w in links.split() if w.rstrip(":@").startswith(c.bridge)]
    found += [f"pid {p}" for i in range(c.count) for p in c.pids(i)]
    return found


@pytest.fixture(scope="module")
def lab(cluster):
    name = unique_lab("cl")
    up = cluster.cli_run(
        ["up", "-t", str(NETNS_DIR / "default.toml"), "--name", name, "--cluster", cluster.address]
    )
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        yield name
    finally:
        cluster.cli_run(["down", "-l", name])


def cli(cluster, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = cluster.cli_run(list(argv))
    if check:
        assert done.returncode == 0, f"mrc-nic {' '.join(argv)}: {done.stderr}{done.stdout}"
    return done


def status(cluster, name: str) -> dict:
    return json.loads(cli(cluster, "status", "-l", name, "--format", "json").stdout)


def test_placement_and_vxlan(cluster, lab):
    snap = status(cluster, lab)
    rows = snap["cluster"]["machines"]
    assert [r["agent"] for r in rows] == ["alive", "alive"]
    assert [r["hosts"] for r in rows] == [["h0"], ["h1"]]  # a host with its T0s
    # The cut is at T0-T1 links only, each a VXLAN device with its own VNI.
    vnis = snap["cluster"]["vxlan_links"]
    assert vnis and all("-h" not in name for name in vnis)
    assert len(set(vnis.values())) == len(vnis)
    link, vni = next(iter(vnis.items()))  # e.g. p0.t1b-t0a
    t1, t0 = link.split("-")
    plane, t1_local = t1.split(".")
    for node, ifname in ((t1, t0), (f"{plane}.{t0}", t1_local)):  # both ends
        detail = subprocess.run(
            ["ip", "-n", f"mrc-{lab}-{node}", "-d", "-j", "link", "show", ifname],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dev = json.loads(detail)[0]
        assert dev["linkinfo"]["info_kind"] == "vxlan"
        assert dev["linkinfo"]["info_data"]["id"] == vni
        assert dev["mtu"] == 3200  # the lab's: a full MRC packet, unfragmented


def test_verified_write_across_machines(cluster, lab):
    done = cli(
        cluster, "write", "h0", "h1", "-l", lab, "--size", "256M", "--verify", "--format", "json"
    )
    result = json.loads(done.stdout)
    assert result["machines"] == [0, 1]
    assert result["verified_bytes"] == 256 * 2**20
    assert result["errors"] == 0
    # The data crossed the VXLAN links: their counters merged over both machines.
    snap = status(cluster, lab)
    crossed = sum(
        lk["up"]["pkts"] + lk["down"]["pkts"]
        for lk in snap["links"]
        if lk["name"] in snap["cluster"]["vxlan_links"]
    )
    assert crossed > 256 * 2**20 // 3072 // 2


def test_remote_plane_blackhole_is_bypassed(cluster, lab):
    # p1.t0b is h1's T0 on plane 1: on the second machine.
    fail = cli(cluster, "fail", "p1.t0b", "--mode", "blackhole", "-l", lab)
    assert "on m1" in fail.stdout
    try:
        done = cli(
            cluster, "write", "h0", "h1", "-l", lab, "--size", "64M", "--verify", "--format", "json"
        )
        result = json.loads(done.stdout)
        assert result["errors"] == 0 and result["verified_bytes"] == 64 * 2**20
        snap = status(cluster, lab)
        (fault,) = snap["faults"]
        assert fault["target"] == "switch p1.t0b" and 1 in fault["machines"]
        assert fault["drops"] > 0  # the write met it, and went round it
    finally:
        cli(cluster, "heal", "--all", "-l", lab)
    assert status(cluster, lab)["faults"] == []


def test_exec_runs_on_the_hosts_machine(cluster, lab):
    done = cli(cluster, "exec", "h1", "-l", lab, "--", "ip", "-br", "addr")
    assert "198.18.0.2" in done.stdout


def test_a_dead_agent_is_reported_and_replaced(cluster, lab):
    (agent,) = [p for p in cluster.pids(1) if b"ray::Agent" in _cmdline(p)]
    os.kill(agent, 9)  # the agent of the second machine dies; its shard lives on
    done = cli(cluster, "status", "-l", lab, "--format", "json", check=False)
    assert done.returncode == 1
    rows = json.loads(done.stdout)["cluster"]["machines"]
    assert [r["agent"] for r in rows] == ["alive", "dead"] and rows[1]["error"]
    assert "agent-lost m1" in cli(cluster, "events", "-l", lab, check=False).stdout
    # up --reuse starts a new agent, which takes over the machine's shard.
    topo = str(NETNS_DIR / "default.toml")
    again = cli(cluster, "up", "-t", topo, "--name", lab, "--cluster", cluster.address, "--reuse")
    assert "restarted the agent of m1" in again.stdout + again.stderr
    assert [r["agent"] for r in status(cluster, lab)["cluster"]["machines"]] == ["alive"] * 2
    cli(cluster, "exec", "h1", "-l", lab, "--", "true")


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_down_leaves_nothing(cluster, lab):
    done = cli(cluster, "down", "-l", lab)
    assert "down" in done.stdout
    assert _leftovers_of_lab(lab) == []
    for i in range(cluster.count):
        for path in cluster.env(i).values():
            assert not os.path.exists(os.path.join(path, lab)), path


def _leftovers_of_lab(lab: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [n.split()[0] for n in names.splitlines() if n.startswith(f"mrc-{lab}-")]
