"""Tier 3: one lab over two machines of a local Ray cluster (docs/cluster.md).

Each machine is a network namespace with its own underlay address on a
bridge and its own Ray node (mrc_nic.cluster.local), so cross-machine links
really are VXLAN over an underlay. The cluster, the lab and everything they
made are removed at the end, whatever the tests did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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
    try:
        topo = str(NETNS_DIR / "default.toml")
        up = cluster.cli_run(["up", "-t", topo, "--name", name, "--cluster", cluster.address])
        assert up.returncode == 0, up.stderr + up.stdout
        yield name
    finally:  # also after a failed up: what it left on the machines it reached
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


def test_stats_merges_planes_paths_and_ports_over_machines(cluster, lab):
    from mrc_nic.lab import topology
    from mrc_nic.observe import aggregate

    cli(cluster, "write", "h0", "h1", "-l", lab, "--size", "16M")
    snap = json.loads(cli(cluster, "stats", "-l", lab, "--format", "json").stdout)
    topo = topology.load(NETNS_DIR / "default.toml")
    assert {
        "schema",
        "topology",
        "hosts",
        "links",
        "ports",
        "planes",
        "paths",
        "qps",
        "nic",
    } <= set(snap)
    placed = snap["cluster"]["placement"]
    # Every switch port once, from the machine that holds it.
    ports = [(p["node"], p["ifname"]) for p in snap["ports"]]
    assert sorted(ports) == sorted((p.node, p.ifname) for p in topo.switch_ports())
    assert [h["name"] for h in snap["hosts"]] == ["h0", "h1"]
    assert [h["machine"] for h in snap["hosts"]] == [placed["h0"], placed["h1"]]
    # Planes and paths are worked out over the merged links, as on a local lab.
    assert [p["plane"] for p in snap["planes"]] == list(range(topo.planes))
    links = {lk["name"]: lk for lk in snap["links"]}
    assert all(lk["state"] == "up" for lk in links.values())
    for plane in snap["planes"]:
        host_links = [lk for lk in links.values() if lk["kind"] == "host"]
        mine = [lk for lk in host_links if lk["plane"] == plane["plane"]]
        assert plane["offered"]["pkts"] == sum(lk["up"]["pkts"] for lk in mine)
        assert plane["links"] == sum(lk["plane"] == plane["plane"] for lk in links.values())
    assert sum(p["offered"]["bytes"] for p in snap["planes"]) >= 16 * 2**20
    assert sum(p["delivered"]["bytes"] for p in snap["planes"]) >= 16 * 2**20
    assert [p["path"] for p in snap["paths"]] == [d.name for d in aggregate.path_defs(topo)]
    for path in snap["paths"]:
        leg = links[path["links"][-1]]
        assert (path["up"], path["down"], path["state"]) == (leg["up"], leg["down"], "up")
    # The write's packets crossed T0-T1 links cut between the machines, counted
    # up on one machine and down on the other: both directions are in the merge.
    cut = [links[name] for name in snap["cluster"]["vxlan_links"]]
    assert sum(lk["up"]["pkts"] for lk in cut) > 0 and sum(lk["down"]["pkts"] for lk in cut) > 0
    assert snap["nic"]["counters"]["placed_bytes"] >= 16 * 2**20


def test_stats_stream_watch_and_prom(cluster, lab):
    lines = cli(
        cluster, "stats", "-l", lab, "--format", "jsonl", "--count", "2", "--interval", "1"
    ).stdout.splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["planes"][0]["rates"] is None
    assert second["interval_s"] > 0 and second["planes"][0]["rates"] is not None
    assert all(lk["rates"] is not None for lk in second["links"])
    # The verdict since the snapshot before, each machine judged on its own CPU and links.
    assert "fidelity" not in first
    assert set(second["fidelity"]["parts"]) == {"m0", "m1"}
    assert second["fidelity"]["verdict"] in ("links", "cpu", "application")
    assert all(p["cpu"]["cores"] for p in second["fidelity"]["parts"].values())
    watch = cli(cluster, "stats", "-l", lab, "--watch", "--count", "2", "--interval", "1").stdout
    assert watch.count("planes: offered by hosts") == 2
    assert "fidelity: " in watch and "m0: " in watch and "m1: " in watch
    prom = cli(cluster, "stats", "-l", lab, "--format", "prom").stdout
    snap = json.loads(cli(cluster, "stats", "-l", lab, "--format", "json").stdout)
    name = next(iter(snap["cluster"]["vxlan_links"]))
    line = next(
        ln
        for ln in prom.splitlines()
        if ln.startswith("mrc_link_packets_total{") and f'link="{name}"' in ln
    )
    assert float(line.split()[-1]) > 0  # counters of both machines, after the writes
    assert "mrc_plane_" in prom and "mrc_path_" in prom
    narrowed = json.loads(
        cli(cluster, "stats", "-l", lab, "--host", "h1", "--plane", "1", "--format", "json").stdout
    )
    assert {(p["host"], p["plane"]) for p in narrowed["paths"]} == {("h1", 1)}
    table = cli(cluster, "stats", "-l", lab, "--by", "path").stdout
    assert "h1.eth1>t0b>t1a" in table
    shown = cli(cluster, "status", "-l", lab).stdout
    assert "198.51.100.2" in shown and "plane" in shown


def test_stats_listen_serves_merged_metrics(cluster, lab):
    port = 19000 + os.getpid() % 1000
    tool = os.path.join(os.path.dirname(sys.executable), "mrc-nic")
    net = f"--net=/run/netns/{cluster.netns(0)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MRC_NIC_", "RAY_"))}
    argv = ["stats", "-l", lab, "--format", "prom", "--listen", f"127.0.0.1:{port}"]
    server = subprocess.Popen(
        ["nsenter", net, tool, *argv, "--duration", "120s"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert "serving" in server.stderr.readline()
        fetch = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
        got = subprocess.run(
            ["nsenter", net, sys.executable, "-c", fetch],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert got.returncode == 0, got.stderr
        assert 'mrc_link_packets_total{direction="up",link="p0.t0b-h1"' in got.stdout  # m1's host
    finally:
        server.terminate()
        server.wait(10)


def test_chaos_across_machines(cluster, lab):
    from mrc_nic.fabric import faults
    from mrc_nic.lab import topology

    done = cli(
        cluster,
        *("chaos", "-l", lab, "--duration", "12s", "--every", "1s", "--hold", "1500ms"),
        *("--seed", "3", "--write-size", "8M", "--format", "json"),
    )
    report = json.loads(done.stdout)
    assert report["faults_applied"] >= 2 and report["faults_left"] == []
    assert set(report["fidelity"]["parts"]) == {"m0", "m1"}  # each machine judged on its own
    assert report["qps_in_err"] == []
    traffic = report["traffic"]
    assert traffic["writes"] >= 1 and traffic["writes_failed"] == 0
    assert traffic["bytes_verified"] == traffic["writes"] * 8 * 2**20
    # The schedule draws over the whole lab: its faults landed on both machines.
    topo = topology.load(NETNS_DIR / "default.toml")
    snap = status(cluster, lab)
    placed = snap["cluster"]["placement"]
    touched = set()
    for f in report["faults"]:
        _, links = faults.resolve_target(topo, tuple(f["target"].split()))
        touched |= {placed[end.node] for lk in links for end in lk.ends()}
    assert touched == {0, 1}
    assert snap["faults"] == [] and snap["cluster"]["faults"] == {}


def test_scenario_plane_failure_across_machines(cluster, lab):
    done = cli(
        cluster,
        *("scenario", "plane-failure", "-l", lab, "--size", "256M", "--plane", "1"),
        *("--after", "0.1", "--format", "json"),
    )
    r = json.loads(done.stdout)
    # Each WRITE ran as one process per end on its host's machine, and completed.
    assert r["completed"] and r["machines"] == [0, 1]
    assert r["bytes"] == {"healthy": 256 * 2**20, "failed": 256 * 2**20}
    assert r["healthy_goodput_bps"] > 0 and r["failed_goodput_bps"] > 0
    # The fault reached the agents of both machines (plane 1 has links on each),
    # met the WRITE's packets there, and was healed everywhere.
    fault = r["fault"]
    assert fault["target"] == "plane 1" and fault["machines"] == [0, 1]
    assert fault["drops"] > 0 and fault["healed"]
    assert r["per_plane_share"]["1"] < 0.25  # the WRITE went round the dead plane
    snap = status(cluster, lab)
    assert snap["faults"] == [] and snap["cluster"]["faults"] == {}
    # Each WRITE judged on every machine's own CPU and links, sampled while it ran.
    healthy = r["fidelity"]["parts"]["healthy"]
    assert set(healthy["parts"]) == {"m0", "m1"}
    assert healthy["busiest_link"] > 0.1
    assert {p["verdict"] for p in healthy["parts"].values()} <= {"links", "cpu", "application"}


def test_scenario_flows_across_machines(cluster, lab):
    done = cli(
        cluster,
        *("scenario", "permutation", "-l", lab, "--duration", "2s", "--format", "json"),
    )
    r = json.loads(done.stdout)
    # Each flow ran from its source's machine to its destination's, each host's
    # process on its own machine.
    flows = {(f["src"], f["dst"]): f for f in r["flows"]}
    assert set(flows) == {("h0", "h1"), ("h1", "h0")}
    for f in flows.values():
        assert f["error"] is None and f["qp_states"] == ["RTS"]
        assert f["bytes"] == f["size"] > 0
        assert f["goodput_bps"] > 0  # from the receiver's QP samples, on its machine
    assert r["qps_in_err"] == 0 and r["host_processes"] == 2
    assert {m: p["hosts"] for m, p in r["machines"].items()} == {"m0": ["h0"], "m1": ["h1"]}
    start, end = r["window_s"]
    assert end > start
    # Every data packet went through each tier of switch queues, on both machines.
    packets = sum(f["bytes"] for f in flows.values()) // 3072
    assert all(r["switch"][tier]["enqueued"] >= packets for tier in ("up", "down", "lasthop"))
    assert r["fidelity"]["over"] == "window" and set(r["fidelity"]["parts"]) == {"m0", "m1"}


def test_scenario_single_ev_loss_across_machines(cluster, lab):
    from mrc_nic.lab import topology

    done = cli(
        cluster,
        *("scenario", "single-ev-loss", "-l", lab, "--size", "64M", "--evs", "16"),
        *("--rate", "0.2", "--plane", "1", "--format", "json"),
    )
    r = json.loads(done.stdout)
    # One QP, its ends one process on each machine, kept open over both WRITEs.
    assert r["machines"] == [0, 1] and r["completed"] and r["errors"] == 0
    topo = topology.load(NETNS_DIR / "default.toml")
    assert topo.host_of_qpn(r["qpn"]) == "h0" and r["plane"] == 1
    # The fault, on h0's machine, met only that EV's packets and dropped some;
    # the daemon retired the EV for a fresh one, as on a local lab.
    assert r["fault_dropped"] > 0 and r["fault_pkts"] > r["fault_dropped"]
    assert r["lossy_ev_final_state"] == "RETIRED" and r["replaced_by"] != r["lossy_ev"]
    assert r["retransmits"]["lossy"] >= r["fault_dropped"]  # each drop resent, or no end
    snap = status(cluster, lab)
    assert snap["faults"] == [] and snap["cluster"]["faults"] == {}  # healed everywhere
    assert set(r["fidelity"]["parts"]["healthy"]["parts"]) == {"m0", "m1"}


def test_scenario_allreduce_failure_across_machines(cluster, lab):
    done = cli(
        cluster,
        *("scenario", "allreduce-failure", "-l", lab, "--size", "256M", "--at", "0"),
        *("--fault", "plane 1", "--format", "json"),
    )
    r = json.loads(done.stdout)
    # A rank on each machine; both jobs ended with every step's bytes verified.
    assert r["hosts"] == ["h0", "h1"] and r["steps"] == 2
    assert r["completed"] and r["verified"], r["errors"]
    # The plane failed on both machines while the job ran, and was healed.
    fault = r["fault"]
    assert fault["error"] is None and fault["step"] == 0
    assert 0 < fault["in_force_at_s"] < r["failed_job_s"]
    assert r["retransmits"]["failed"] > 0  # what was in flight on plane 1, resent
    snap = status(cluster, lab)
    assert snap["faults"] == [] and snap["cluster"]["faults"] == {}
    assert set(r["fidelity"]["parts"]["healthy"]["parts"]) == {"m0", "m1"}


def test_an_unknown_scenario_is_refused_with_those_that_run(cluster, lab):
    done = cli(cluster, "scenario", "nosuch", "-l", lab, check=False)
    assert done.returncode != 0
    assert "no scenario 'nosuch'" in done.stderr and "allreduce-failure" in done.stderr


def test_ctrl_c_ends_a_write_between_machines_and_both_its_processes(cluster, lab):
    cmd, env = cluster.cli_command(["write", "h0", "h1", "-l", lab, "--size", "16G"])
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _ends_of(lab):  # both ends started, on their machines
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # into the transfer
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the foreground group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in err
    deadline = time.monotonic() + 30  # the agents end the parts, the parts their hosts'
    while _ends_of(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ends_of(lab) == []
    cli(cluster, "write", "h0", "h1", "-l", lab, "--size", "8M", "--verify")  # the lab goes on


def test_a_write_whose_cli_is_killed_ends_on_every_machine(cluster, lab):
    """kill -9 of the CLI: no Ctrl-C handler runs, no part is ended by its
    parent; each agent ends its part once the parent falls silent."""
    from mrc_nic.cluster.agent import PART_ORPHAN_S

    cmd, env = cluster.cli_command(["write", "h0", "h1", "-l", lab, "--size", "16G"])
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _ends_of(lab):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and what it started on this machine
        proc.wait()
    deadline = time.monotonic() + PART_ORPHAN_S + 30
    while _ends_of(lab) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ends_of(lab) == []
    cli(cluster, "write", "h0", "h1", "-l", lab, "--size", "8M", "--verify")  # the lab goes on


def _ends_of(lab: str) -> list[str]:
    """The processes of a WRITE between machines of this lab (its parts and ends)."""
    found = subprocess.run(["pgrep", "-af", "mrc_nic.workloads"], capture_output=True, text=True)
    marks = (f'"lab": "{lab}"', f" mrc-{lab}-h")  # a part's spec; a host process's netns
    return [ln for ln in found.stdout.splitlines() if any(m in ln for m in marks)]


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
