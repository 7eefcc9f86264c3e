"""Tier 3: real labs in network namespaces, real traffic, real faults.

Every lab here has a name unique to this test run and is taken down at
teardown, whatever the test did.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from mrc_nic.fabric import faults, switchport, testbed
from mrc_nic.fabric.builder import Fabric
from mrc_nic.kernel import bpfsys, netns, pins
from mrc_nic.lab import state, workers
from mrc_nic.observe import stats
from mrc_nic.workloads import traffic
from tests.helpers.env import MRC, NETNS_DIR, ROOT, run_cli, unique_lab


def system_view(lab: str) -> tuple[list[str], list[str]]:
    """What `ip netns list` shows of this lab's names, and what `ip link` shows
    in the root namespace (a lab never creates anything there)."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = sorted(line.split(":")[1].strip() for line in links.splitlines())
    return testbed.leftover_namespaces(lab), names


def lab_leftovers(name: str) -> list[str]:
    found = testbed.leftover_namespaces(name)
    if switchport.pin_dir(name).exists():
        found.append(str(switchport.pin_dir(name)))
    if state.lab_dir(name).exists():
        found.append(str(state.lab_dir(name)))
    return found


def link_counters(lab: str, link: str) -> dict:
    snap = stats.snapshot(lab, kernel=False)
    return next(lk for lk in snap["links"] if lk["name"] == link)


class Stream:
    """UDP traffic in the background, bounded in time."""

    def __init__(self, topo, src, dst, **kwargs):
        self.result = None
        self.thread = threading.Thread(
            target=self._run, args=(topo, src, dst), kwargs=kwargs, daemon=True
        )

    def _run(self, topo, src, dst, **kwargs):
        self.result = traffic.udp(topo, src, dst, **kwargs)

    def __enter__(self):
        self.thread.start()
        return self

    def wait_flowing(self, lab: str, link: str, direction: str, timeout: float = 10.0) -> None:
        """Until packets cross `link` (the sender is running)."""
        first = link_counters(lab, link)[direction]["pkts"]
        deadline = time.monotonic() + timeout
        while link_counters(lab, link)[direction]["pkts"] - first < 100:
            assert time.monotonic() < deadline, f"no traffic on {link} {direction}"
            time.sleep(0.05)

    def __exit__(self, *exc):
        self.thread.join(timeout=60)


# ---- bring-up ----------------------------------------------------------------
def test_default_lab_status_shows_every_host_plane_and_link_up(default_lab):
    proc = run_cli("status", "-l", default_lab.lab, "--format", "json")
    snap = json.loads(proc.stdout)
    assert snap["topology"]["hosts"] == 2 and snap["topology"]["planes"] == 4
    assert [h["name"] for h in snap["hosts"]] == ["h0", "h1"]
    assert len(snap["links"]) == 24
    assert {lk["state"] for lk in snap["links"]} == {"up"}
    assert all(p["kernel"]["carrier"] for h in snap["hosts"] for p in h["ports"])
    assert len(snap["ports"]) == len(default_lab.switch_ports())


def test_ping_over_every_plane(default_lab):
    for plane in range(default_lab.planes):
        result = traffic.ping(default_lab, "h0", "h1", plane, count=2, interval=0.1)
        assert result["received"] == 2, result


def test_links_are_rate_limited_by_a_real_queue(make_lab, tmp_path):
    # A 20 Mbit/s lab, so that even a slow, loaded machine's Python sender
    # offers far more than the cap: what arrives is held to the link rate.
    slow = tmp_path / "slow.toml"
    text = (NETNS_DIR / "single-plane.toml").read_text()
    slow.write_text(re.sub(r'(?m)^rate = "[^"]*"', 'rate = "20mbit"', text))
    topo = make_lab("r", str(slow))
    result = traffic.udp(topo, "h0", "h1", source_ports=2, seconds=1.5, size=1400)
    offered_bps = result["sent"] * 1400 * 8 / result["seconds"]
    assert offered_bps > 4e7, "the sender could not offer twice the cap"
    # Payload goodput under 20 Mbit/s of frames; the queue's last 256 KiB
    # drain after the sender stops (+0.1 s at this rate).
    assert 1.4e7 < result["goodput_bps"] < 2.2e7, result["goodput_bps"]
    queue_drops = stats.snapshot(topo.lab)["hosts"][0]["ports"][0]["kernel"]["queue_drops"]
    assert queue_drops > 0


def test_second_up_of_same_lab_is_refused_and_changes_nothing(default_lab):
    before = system_view(default_lab.lab)
    proc = run_cli(
        "up", "-t", str(NETNS_DIR / "default.toml"), "--name", default_lab.lab, check=False
    )
    assert proc.returncode == 1
    assert "already up" in proc.stderr and "mrc-nic down" in proc.stderr
    assert "--reuse" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""  # refused before it says what it would build
    assert system_view(default_lab.lab) == before
    # the shipped file by name; --reuse of the same topology keeps it
    proc = run_cli("up", "-t", "default", "--name", default_lab.lab, "--reuse")
    assert "already up" in proc.stdout and "reusing it" in proc.stdout
    assert system_view(default_lab.lab) == before


def test_two_labs_with_different_names_coexist(default_lab, make_lab):
    other = make_lab("two", "single-plane.toml")
    assert traffic.ping(other, "h0", "h1", 0, count=1)["received"] == 1
    assert traffic.ping(default_lab, "h0", "h1", 0, count=1)["received"] == 1


def test_down_leaves_the_system_as_before_up():
    name = unique_lab("d")
    before = system_view(name)
    run_cli("up", "-t", str(NETNS_DIR / "default.toml"), "--name", name)
    assert len(testbed.leftover_namespaces(name)) == 18
    run_cli("down", "-l", name)
    assert system_view(name) == before
    assert lab_leftovers(name) == []
    run_cli("down", "-l", name)  # safe to repeat


def test_down_removes_a_pin_another_build_left_so_up_works_again():
    """A pin under a name this build does not know (a map an older or newer
    build pinned) made `up` refuse the lab and `down` leave it there."""
    name = unique_lab("p")
    directory = pins.pin_dir(name)
    directory.mkdir(parents=True)
    fd = bpfsys.map_create(bpfsys.BPF_MAP_TYPE_ARRAY, 4, 4, 1)
    try:
        bpfsys.obj_pin(fd, directory / "nic_from_another_build")
    finally:
        os.close(fd)
    try:
        refused = run_cli("up", "-t", str(NETNS_DIR / "default.toml"), "--name", name, check=False)
        assert refused.returncode == 1 and "leftover BPF pins" in refused.stderr
        run_cli("down", "-l", name)
        assert not directory.exists()
        assert lab_leftovers(name) == []
    finally:  # whatever failed above, nothing of the lab stays
        run_cli("down", "-l", name, check=False)
        pins.unpin_all(name)


@pytest.mark.parametrize("step", ["namespaces", "links", "attach"])
def test_failed_up_removes_what_it_made(step):
    name = unique_lab("f")
    before = system_view(name)
    proc = run_cli(
        "up",
        "-t",
        str(NETNS_DIR / "default.toml"),
        "--name",
        name,
        check=False,
        env={"MRC_NIC_FAILPOINT": step},
    )
    assert proc.returncode == 1
    assert f"failpoint {step!r}" in proc.stderr
    assert system_view(name) == before
    assert lab_leftovers(name) == []


def test_bad_topology_creates_nothing(tmp_path):
    before = system_view("zbad")
    bad = tmp_path / "bad.toml"
    bad.write_text('[lab]\nname = "zbad"\n[fabric]\nhosts = 2\nplanes = 99\n')
    proc = run_cli("up", "-t", str(bad), check=False)
    assert proc.returncode == 1
    assert "fabric.planes" in proc.stderr and str(bad) in proc.stderr
    assert system_view("zbad") == before


@pytest.mark.parametrize("step", ["namespaces", "links", "attach"])
def test_kill_9_during_up_then_down_leaves_nothing(step):
    """`up` stopped at the end of a build step, killed there, then `down`."""
    name = unique_lab("k")
    before = system_view(name)
    proc = subprocess.Popen(
        [*MRC, "up", "-t", str(NETNS_DIR / "default.toml"), "--name", name],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MRC_NIC_FAILPOINT": f"{step}:hang"},
    )
    try:
        deadline = time.monotonic() + 60
        while not _hung_at(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(testbed.leftover_namespaces(name)) == 18, "up did not reach the step"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        run_cli("down", "-l", name)
    assert system_view(name) == before
    assert lab_leftovers(name) == []


def _hung_at(pid: int) -> bool:
    """The process sleeps in the failpoint (state S, no CPU for a while)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return "sleep" in f.read()
    except OSError:
        return False


def test_ecmp_source_ports_choose_different_spines(default_lab):
    """Find two source ports whose packets take different spines of plane 1."""
    spine_links = ["p1.t1a-t0a", "p1.t1b-t0a"]
    spine_of_port = {}
    for sport in range(traffic.FIRST_SOURCE_PORT, traffic.FIRST_SOURCE_PORT + 32):
        before = [link_counters(default_lab.lab, lk)["up"]["pkts"] for lk in spine_links]
        traffic_one_port(default_lab, sport, packets=50)
        after = [link_counters(default_lab.lab, lk)["up"]["pkts"] for lk in spine_links]
        grew = [b - a for a, b in zip(before, after, strict=True)]
        assert sorted(grew)[0] < 5 and sorted(grew)[1] >= 50, grew  # one spine only
        spine_of_port[sport] = grew.index(max(grew))
        if len(set(spine_of_port.values())) == 2:
            break
    assert set(spine_of_port.values()) == {0, 1}, spine_of_port


def traffic_one_port(topo, sport: int, packets: int) -> None:
    pairs = [(1, str(topo.host_address(0, 1)), str(topo.host_address(1, 1)), sport)]
    netns.run_in(topo.netns("h0"), _send_n, pairs, packets, timeout=30)


def _send_n(pairs, packets):
    import socket

    ((_, src, dst, sport),) = pairs
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((src, sport))
        for _ in range(packets):
            s.sendto(b"x" * 100, (dst, traffic.TEST_UDP_PORT))
    return packets


# ---- faults ------------------------------------------------------------------
def poll_delivery(lab: str, link: str, direction: str, seconds: float = 0.3) -> tuple[int, int]:
    """Packets that crossed `link` and were dropped there, over one poll interval."""
    a = link_counters(lab, link)[direction]
    time.sleep(seconds)
    b = link_counters(lab, link)[direction]
    dropped = (b["drop_blackhole"] - a["drop_blackhole"]) + (b["drop_loss"] - a["drop_loss"])
    return b["passed_pkts"] - a["passed_pkts"], dropped


def test_blackhole_stops_a_path_while_the_drop_counter_rises(default_lab):
    lab = default_lab.lab
    with Stream(default_lab, "h0", "h1", planes=[1], seconds=4.0, pps=20000) as stream:
        stream.wait_flowing(lab, "p1.t0a-h0", "up")
        passed, dropped = poll_delivery(lab, "p1.t0a-h0", "up")
        assert passed > 1000 and dropped == 0
        fault = faults.apply(lab, ("p1.t0a-h0",), faults.FaultSpec("blackhole"))
        try:
            passed, dropped = poll_delivery(lab, "p1.t0a-h0", "up")
            assert passed == 0 and dropped > 1000
            # Nothing reaches h1 on plane 1 any more.
            assert poll_delivery(lab, "p1.t0b-h1", "down")[0] <= 2  # an ARP probe at most
            # The fault's own drop counter rises with them.
            drops = stats.snapshot(lab, kernel=False)["faults"][0]["drops"]
            time.sleep(0.2)
            assert stats.snapshot(lab, kernel=False)["faults"][0]["drops"] > drops > 1000
        finally:
            faults.heal(lab, [fault["id"]])
        passed, dropped = poll_delivery(lab, "p1.t0a-h0", "up")
        assert passed > 1000 and dropped == 0


def test_down_under_traffic_stops_the_path_and_heal_restores_it(default_lab):
    lab = default_lab.lab
    with Stream(default_lab, "h0", "h1", planes=[1], seconds=10.0, pps=20000) as stream:
        stream.wait_flowing(lab, "p1.t0b-h1", "down")
        assert poll_delivery(lab, "p1.t0b-h1", "down")[0] > 100
        fault = faults.apply(lab, ("p1.t0a-h0",), faults.FaultSpec("down"))
        try:
            # The stream stops; the port program also counts the odd ARP
            # probe from the T0 to h1, so allow a couple of packets.
            assert poll_delivery(lab, "p1.t0b-h1", "down")[0] <= 2
        finally:
            faults.heal(lab, [fault["id"]])
        # Delivery resumes once ARP is answered again (a loaded machine may
        # take a while; the stream lasts long enough to see it).
        stream.wait_flowing(lab, "p1.t0b-h1", "down", timeout=5.0)


def test_flap_under_traffic_alternates_delivery(default_lab):
    lab = default_lab.lab
    # 16 entropies: both spines carry some of them.
    with Stream(
        default_lab, "h0", "h1", planes=[1], seconds=10.0, pps=20000, source_ports=16
    ) as stream:
        stream.wait_flowing(lab, "p1.t0a-h0", "up")
        fault = faults.apply(lab, ("p1.t1a-t0a",), faults.FaultSpec("flap", period=1.0))
        try:
            # T0 hashes over both spines; while t1a is down its share moves to
            # t1b (ignore_routes_with_linkdown), then comes back: polls of the
            # t1a link see traffic in some intervals and none in others. A poll
            # is 0.1 s plus two counter reads (up to 0.1 s more on a loaded
            # machine), so the down half-periods are 0.5 s to hold a whole poll.
            seen: list[int] = []
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not (
                any(n == 0 for n in seen) and any(n > 100 for n in seen)
            ):
                seen.append(poll_delivery(lab, "p1.t1a-t0a", "up", seconds=0.1)[0])
        finally:
            faults.heal(lab, [fault["id"]])
        assert any(n == 0 for n in seen) and any(n > 100 for n in seen), seen
        # The plane as a whole kept delivering through the other spine.
        assert poll_delivery(lab, "p1.t0b-h1", "down")[0] > 1000


def test_blackhole_one_direction_only(default_lab):
    """Blackhole 'down' on a T1-T0 link: traffic towards h1 that hashes onto
    it is dropped, traffic from h1 going up through it passes."""
    lab = default_lab.lab
    link = "p1.t1a-t0b"
    fault = faults.apply(lab, (link,), faults.FaultSpec("blackhole", direction="down"))
    try:
        before = link_counters(lab, link)
        # 16 entropies each way: some of them hash onto spine t1a.
        for src, dst in (("h0", "h1"), ("h1", "h0")):
            traffic.udp(default_lab, src, dst, planes=[1], source_ports=16, seconds=0.5, pps=4000)
        after = link_counters(lab, link)
    finally:
        faults.heal(lab, [fault["id"]])
    down = {k: after["down"][k] - before["down"][k] for k in before["down"]}
    up = {k: after["up"][k] - before["up"][k] for k in before["up"]}
    assert down["drop_blackhole"] > 100 and down["passed_pkts"] == 0, down
    assert up["passed_pkts"] > 100 and up["drop_blackhole"] == 0, up


def test_loss_applied_live_is_measured_within_tolerance_and_heals(default_lab):
    lab = default_lab.lab
    rate = 0.2
    with Stream(default_lab, "h0", "h1", planes=[1], seconds=5.0, pps=15000, size=200) as stream:
        stream.wait_flowing(lab, "p1.t0a-h0", "up")
        fault = faults.apply(lab, ("p1.t0a-h0",), faults.FaultSpec("loss", rate=rate, seed=7))
        try:
            before = link_counters(lab, "p1.t0a-h0")["up"]
            time.sleep(1.5)
            after = link_counters(lab, "p1.t0a-h0")["up"]
        finally:
            faults.heal(lab, [fault["id"]])
        passed, dropped = poll_delivery(lab, "p1.t0a-h0", "up")
        assert passed > 1000 and dropped == 0
    n = after["pkts"] - before["pkts"]
    lost = after["drop_loss"] - before["drop_loss"]
    # Binomial(n, 0.2): sd = sqrt(n*0.2*0.8) = 0.4*sqrt(n); 5 sd is +-0.014 at
    # n = 20000 and +-0.028 at n = 5000. The pattern is a fixed function of
    # (seed, packet number), so a pass is stable, not a lucky draw.
    assert n > 5000
    assert abs(lost / n - rate) < 5 * 0.4 / n**0.5, (lost, n)


def test_down_takes_carrier_away_and_heal_restores_routes(default_lab):
    lab = default_lab.lab
    link = default_lab.links["p2.t1a-t0a"]
    with Fabric(default_lab) as fabric:
        routes_before = {n: route_table(fabric, n) for n in ("p2.t0a", "p2.t1a")}
    fault = faults.apply(lab, ("plane", "2"), faults.FaultSpec("down"))
    try:
        snap = stats.snapshot(lab)
        states = {lk["name"]: lk["state"] for lk in snap["links"]}
        assert {states[lk.name] for lk in default_lab.links_of_plane(2)} == {"down"}
        assert {states[lk.name] for lk in default_lab.links_of_plane(1)} == {"up"}
        assert traffic.ping(default_lab, "h0", "h1", 2, count=1)["received"] == 0
        assert traffic.ping(default_lab, "h0", "h1", 1, count=1)["received"] == 1
    finally:
        faults.heal(lab, [fault["id"]])
    with Fabric(default_lab) as fabric:
        assert {n: route_table(fabric, n) for n in ("p2.t0a", "p2.t1a")} == routes_before
    assert link.name in {lk["name"] for lk in stats.snapshot(lab)["links"] if lk["state"] == "up"}
    assert traffic.ping(default_lab, "h0", "h1", 2, count=2, interval=0.1)["received"] == 2


def test_heal_while_a_neighbouring_link_is_still_down(default_lab):
    """Healing a host link restores T0 routes without the spine whose link is
    still down (the kernel refuses a next hop on a down device), and healing
    that one brings the full ECMP route back.

    (No ping in between: routes are static, so t0b still sends h0's traffic
    to spine t1a, which lost its route to h0; only the link's two ends know.)"""
    lab = default_lab.lab
    with Fabric(default_lab) as fabric:
        full = route_table(fabric, "p1.t0a")
    spine = faults.apply(lab, ("p1.t1a-t0a",), faults.FaultSpec("down"))
    host = faults.apply(lab, ("p1.t0a-h0",), faults.FaultSpec("down"))
    try:
        faults.heal(lab, [host["id"]])
        with Fabric(default_lab) as fabric:
            partial = route_table(fabric, "p1.t0a")
        assert any(r.startswith("198.18.1.1/32 ") for r in partial), partial
        plane_route = next(r for r in partial if r.startswith("198.18.1.0/24 "))
        assert "198.19.1.2" in plane_route and "198.19.1.0" not in plane_route, plane_route
    finally:
        faults.heal(lab, [spine["id"]])
    with Fabric(default_lab) as fabric:
        assert route_table(fabric, "p1.t0a") == full
    assert traffic.ping(default_lab, "h0", "h1", 1, count=2, interval=0.1)["received"] == 2


def route_table(fabric: Fabric, node: str) -> list[str]:
    rows = []
    for r in fabric.ipr(node).get_routes(table=254):
        nexthops = sorted(
            str(nh.get_attr("RTA_GATEWAY")) for nh in r.get_attr("RTA_MULTIPATH") or []
        )
        rows.append(
            f"{r.get_attr('RTA_DST')}/{r['dst_len']} via {r.get_attr('RTA_GATEWAY')} "
            f"{nexthops} oif {r.get_attr('RTA_OIF')}"
        )
    return sorted(rows)


def test_timed_fault_ends_by_itself(default_lab):
    lab = default_lab.lab
    fault = faults.apply(lab, ("p3.t0b-h1",), faults.FaultSpec("down", duration=0.5))
    assert fault["worker_pid"]
    assert traffic.ping(default_lab, "h0", "h1", 3, count=1)["received"] == 0
    deadline = time.monotonic() + 10
    while state.LabState.load(lab).faults and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.LabState.load(lab).faults == {}
    assert traffic.ping(default_lab, "h0", "h1", 3, count=2, interval=0.1)["received"] == 2


def test_flap_toggles_carrier_then_heals(default_lab):
    lab = default_lab.lab
    fault = faults.apply(lab, ("p0.t0a-h0",), faults.FaultSpec("flap", period=0.2, duration=2.0))
    seen = set()
    with Fabric(default_lab) as fabric:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            seen.add(fabric.link_info("h0")["eth0"]["carrier"])
            time.sleep(0.02)
    assert seen == {True, False}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        str(fault["id"]) in state.LabState.load(lab).faults
        or workers.is_worker(fault["worker_pid"], lab)
    ):
        time.sleep(0.05)
    assert str(fault["id"]) not in state.LabState.load(lab).faults
    assert not workers.is_worker(fault["worker_pid"], lab)
    assert traffic.ping(default_lab, "h0", "h1", 0, count=2, interval=0.1)["received"] == 2


def test_overlapping_fault_is_refused(default_lab):
    lab = default_lab.lab
    fault = faults.apply(lab, ("p1.t0a",), faults.FaultSpec("blackhole"))
    try:
        with pytest.raises(faults.FaultError, match="already has fault"):
            faults.apply(lab, ("plane", "1"), faults.FaultSpec("down"))
    finally:
        faults.heal(lab, [fault["id"]])
    assert state.LabState.load(lab).faults == {}


def test_cli_fail_unknown_link_is_one_clear_line(default_lab):
    proc = run_cli("fail", "p1.t0a-h9", "--mode", "down", "-l", default_lab.lab, check=False)
    assert proc.returncode == 1
    assert "unknown target 'p1.t0a-h9'" in proc.stderr and "did you mean" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_fail_status_heal_round_trip(default_lab):
    lab = default_lab.lab
    out = run_cli(
        "fail",
        "plane",
        "3",
        "--mode",
        "loss",
        "--rate",
        "0.5",
        "--seed",
        "3",
        "-l",
        lab,
        "--format",
        "json",
    )
    fault = json.loads(out.stdout)
    assert len(fault["links"]) == 6 and fault["seed"] == 3
    status = run_cli("status", "-l", lab).stdout
    assert f"#{fault['id']}" in status and "loss 50% seed 3" in status
    run_cli("heal", "--all", "-l", lab)
    assert "no faults in force" in run_cli("status", "-l", lab).stdout


def test_status_and_stats_need_a_lab_that_is_up():
    proc = run_cli("status", "-l", "znotalab", check=False)
    assert proc.returncode == 1 and "is not up" in proc.stderr


def test_clos8_comes_up_and_reports_its_bringup_time(make_lab):
    topo = make_lab("c", "clos-8.toml")
    record = state.LabState.load(topo.lab)
    assert record.phase == "up" and record.bringup_seconds > 0
    assert len(testbed.leftover_namespaces(topo.lab)) == 8 + 8 * 6
    assert traffic.ping(topo, "h0", "h7", 5, count=1)["received"] == 1


@pytest.fixture(autouse=True)
def _no_fault_leaks(request):
    yield
    if "default_lab" in request.fixturenames:
        lab = request.getfixturevalue("default_lab").lab
        leftover = state.LabState.load(lab).faults
        if leftover:
            faults.heal(lab)
            pytest.fail(f"test left faults in force: {list(leftover)}")


@pytest.mark.parametrize(
    "args, message",
    [
        (["ping", "h0", "h9"], "'h9' is not a host"),
        (["traffic", "h0", "h1", "--plane", "9", "--duration", "0.2"], "no plane 9"),
        (["fail", "plane", "7", "--mode", "down"], "no plane 7"),
        (["heal", "99"], "no fault with id 99"),
    ],
)
def test_cli_errors_on_a_running_lab_are_one_line(default_lab, args, message):
    proc = run_cli(*args, "-l", default_lab.lab, check=False)
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_host_ports_carry_the_nic_and_t0_ports_an_xdp_peer(default_lab):
    """Every host port runs the NIC's XDP program; its T0 end runs the pass-only
    XDP program that lets the NIC's XDP_TX frames arrive (docs/design.md, section 3)."""

    def xdp_prog_id(node: str, ifname: str) -> int | None:
        with Fabric(default_lab) as fabric:
            (msg,) = fabric.ipr(node).get_links(fabric.ifindex(node, ifname))
        xdp = msg.get_attr("IFLA_XDP")
        return xdp.get_attr("IFLA_XDP_PROG_ID") if xdp else None

    nic_ids, pass_ids = set(), set()
    for link in default_lab.links.values():
        if link.kind == "host":
            nic_ids.add(xdp_prog_id(link.lower.node, link.lower.ifname))
            pass_ids.add(xdp_prog_id(link.upper.node, link.upper.ifname))
    # One compiled program each, shared by every port (compiled once per lab).
    assert len(nic_ids) == 1 and None not in nic_ids
    assert len(pass_ids) == 1 and None not in pass_ids
    assert nic_ids != pass_ids


# ---- congestion: the switch egress queues (issue 5) --------------------------------------
INCAST_TOML = """\
# Two senders into one receiver through one switch: its port towards h2 is
# the bottleneck (2 x 100 Mbit/s offered into 100 Mbit/s), a last hop.
[lab]
name = "incast"
[fabric]
hosts = 3
planes = 1
tiers = 1
[links]
rate = "100mbit"
"""


def _mrc_flood(src: str, dst: str, seconds: float) -> int:
    """MRC-looking data (UDP 4791, DSCP TRIMMABLE, ECT(0), 1000 B of payload
    after the MRC headers) as fast as the sender's own queue takes it."""
    import errno
    import socket

    from mrc_nic.nic import wire

    payload = bytes(
        wire.data_packet(ev=4097, dqpn=0x20001, psn=1, va=0, rkey=1, payload=bytes(1000))[wire.BTH]
    )
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, (wire.Dscp.TRIMMABLE << 2) | wire.Ecn.ECT0)
    s.bind((src, 0))
    s.connect((dst, wire.UDP_PORT))
    sent, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            s.send(payload)
            sent += 1
        except OSError as e:  # the host's own queue is full: go on
            if e.errno not in (errno.ENOBUFS, errno.EAGAIN, errno.ECONNREFUSED):
                raise
    s.close()
    return sent


def _incast(topo, seconds: float = 1.5) -> None:
    dst = str(topo.host_address(2, 0))
    children = [
        netns.start_in(topo.netns(h), _mrc_flood, str(topo.host_address(i, 0)), dst, seconds)
        for i, h in enumerate(("h0", "h1"))
    ]
    assert all(child.result(timeout=seconds + 30) > 0 for child in children)


def _queue_row(lab: str, port: str) -> dict:
    proc = run_cli("port", "show", port, "-l", lab, "--format", "json")
    (row,) = json.loads(proc.stdout)["ports"]
    return row


def test_incast_trims_at_the_last_hop_and_marks_once_ecn_is_on_there(make_lab, tmp_path):
    topo_file = tmp_path / "incast.toml"
    topo_file.write_text(INCAST_TOML)
    topo = make_lab("q", str(topo_file))
    port = "p0.t0a:h2"

    _incast(topo)
    row = _queue_row(topo.lab, port)
    assert row["lasthop"] and row["queue"]["ecn"] is False  # MRC: no ECN at the last hop
    c = row["counters"]
    assert c["trimmed"] > 100, row
    assert c["ecn_marked"] == 0, row
    assert c["backlog_hwm"] >= row["queue"]["trim"]
    snap = json.loads(run_cli("stats", "-l", topo.lab, "--format", "json").stdout)
    (record,) = [p for p in snap["ports"] if f"{p['node']}:{p['ifname']}" == port]
    egress = record["egress"]
    # The real queue (TBF) charges a trimmed packet its new length, as the twin
    # does (fabric.SKB_LEN_STAB): it does not overflow while the twin trims.
    # Without that it dropped about half the packets here.
    assert record["kernel"]["queue_drops"] < egress["enqueued"] // 10, record
    assert egress["trimmed"] >= c["trimmed"] and egress["enqueued"] == egress["passed_pkts"]
    assert egress["pkts"] == (
        egress["passed_pkts"]
        + egress["drop_blackhole"]
        + egress["drop_loss"]
        + egress["drop_buffer"]
    )
    assert snap["planes"][0]["queue"]["trimmed"] >= c["trimmed"]
    # The senders' own ports are not congested: nothing trimmed going up.
    up = [p["egress"]["trimmed"] for p in snap["ports"] if p["ifname"] in ("h0", "h1")]
    assert up == [0, 0]

    # Turn ECN on at that last hop, live, with thresholds in bytes.
    proc = run_cli(
        "port",
        "set",
        port,
        "--ecn",
        "--kmin",
        "2k",
        "--kmax",
        "6k",
        "-l",
        topo.lab,
        "--format",
        "json",
    )
    (changed,) = json.loads(proc.stdout)["ports"]
    assert changed["queue"]["ecn"] and (changed["queue"]["kmin"], changed["queue"]["kmax"]) == (
        2000,
        6000,
    )
    _incast(topo)
    after = _queue_row(topo.lab, port)["counters"]
    assert after["ecn_marked"] > 100, after
    assert after["trimmed"] > c["trimmed"]


def test_port_set_errors_are_one_line_and_change_nothing(default_lab):
    lab = default_lab.lab
    before = _queue_row(lab, "p0.t1a:t0a")["queue"]
    for args, message in [
        (
            ("p0.t1a:t0a", "--kmin", "90k", "--kmax", "80k"),
            "kmin (90000 bytes) must not be above kmax",
        ),
        (("p0.t1a:t0x", "--kmin", "1k"), "did you mean"),
        (("h0:eth0", "--kmin", "1k"), "host port"),
    ]:
        proc = run_cli("port", "set", *args, "-l", lab, check=False)
        assert proc.returncode == 1, proc.stderr
        assert message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    after = _queue_row(lab, "p0.t1a:t0a")["queue"]
    assert {**after, "backlog": None} == {**before, "backlog": None}
