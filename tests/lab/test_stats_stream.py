"""The JSON stream of `mrc-nic stats` in a real lab: every plane through
traffic, a blackholed plane falling to zero, every QP of a write, link state
following a link down and back (the pure parts are in tests/unit/test_stats_stream.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from mrc_nic import nic
from mrc_nic.observe import stats
from mrc_nic.testkit import transfer
from mrc_nic.workloads import traffic
from tests.helpers.env import MRC, ROOT, run_cli

# ---- a real lab ----------------------------------------------------------------------------


def start_stream(lab: str, out, *args: str) -> subprocess.Popen:
    """The stream into a file: a pipe nobody reads yet would fill (a line is ~40 kB)
    and block the writer."""
    return subprocess.Popen(
        [*MRC, "stats", "-l", lab, "--format", "jsonl", *args],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def read_stream(proc: subprocess.Popen, out_path, timeout: float) -> list[dict]:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out_path.read_text().splitlines()]


def delivered(snap: dict) -> list[float]:
    return [p["rates"]["delivered"]["pkts_per_s"] for p in snap["planes"]]


def test_jsonl_shows_every_plane_then_a_blackholed_plane_falls_to_zero(default_lab, tmp_path):
    lab, topo = default_lab.lab, default_lab
    out_path = tmp_path / "stream.jsonl"
    out = out_path.open("w")
    proc = start_stream(lab, out, "--interval", "0.1", "--duration", "5")
    flow = threading.Thread(
        target=traffic.udp,
        args=(topo, "h0", "h1"),
        kwargs={"seconds": 5.0, "pps": 8000, "source_ports": 2},
        daemon=True,
    )
    fault_at = None
    try:
        time.sleep(0.8)  # the stream is reading before the traffic starts
        flow.start()
        time.sleep(1.7)
        fault = json.loads(
            run_cli(
                "fail", "plane", "2", "--mode", "blackhole", "-l", lab, "--format", "json"
            ).stdout
        )
        fault_at = time.time()
        snaps = read_stream(proc, out_path, timeout=30)
    finally:
        out.close()
        if fault_at is not None:
            run_cli("heal", "--all", "-l", lab)
        flow.join(timeout=30)
        if proc.poll() is None:
            proc.kill()
    assert len(snaps) >= 40  # 10 a second for 5 s, minus start-up
    assert all(s["schema"] == 1 and s["lab"] == lab for s in snaps)
    before = [s for s in snaps[1:] if s["time"] < fault_at - 0.3 and min(delivered(s)) > 0]
    assert len(before) >= 5, [delivered(s) for s in snaps]  # every plane carried traffic
    # From one stream interval after the fault until well before the traffic ends.
    after = [s for s in snaps if fault_at + 0.3 < s["time"] < fault_at + 1.8]
    assert len(after) >= 10
    for s in after:
        rate = delivered(s)
        assert rate[2] < 5, rate  # plane 2 delivers nothing (at most a stray ARP)
        assert min(rate[0], rate[1], rate[3]) > 500, rate  # the others keep going
        assert s["planes"][2]["faults"] == [fault["id"]]
        assert s["planes"][2]["rates"]["drops"]["blackhole_per_s"] > 500


def test_json_holds_every_qp_of_a_write_with_its_evs(default_lab):
    lab, topo = default_lab.lab, default_lab
    length = 4 * 2**20
    packets = -(-length // nic.seg_size(topo.mtu))
    result = transfer.write(topo, "h0", "h1", length)
    assert result.complete
    snap = json.loads(run_cli("stats", "-l", lab, "--format", "json", "--by", "ev").stdout)
    qps = {q["qpn"]: q for q in snap["qps"]}
    send = qps[transfer.qpn(0)]["send"]
    recv = qps[transfer.qpn(1)]["recv"]
    assert qps[transfer.qpn(0)]["host"] == "h0" and qps[transfer.qpn(0)]["peer"] == "h1"
    assert send["counters"]["acked_pkts"] == packets
    assert send["evs"]["total"] == 128 == len(send["ev_list"])
    assert sum(send["evs"]["by_state"].values()) == 128
    assert [p["plane"] for p in send["planes"]] == [0, 1, 2, 3]
    assert all(p["tx_pkts"] > 0 for p in send["planes"])
    assert sum(e["counters"]["tx_pkts"] for e in send["ev_list"]) >= packets
    assert send["rtt_ns"]["min"] > 0
    assert recv["counters"]["placed_bytes"] == length
    assert snap["nic"]["counters"]["placed"] >= packets


def test_link_state_follows_a_link_down_and_back_while_the_sockets_stay_open(default_lab):
    """After its first read the Sampler asks the kernel for counters only; link
    state comes from the link notifications its sockets receive."""
    lab = default_lab.lab

    def state(sampler) -> tuple:
        snap = sampler.snapshot()
        link = next(lk for lk in snap["links"] if lk["name"] == "p1.t0a-h0")
        h0 = next(h for h in snap["hosts"] if h["name"] == "h0")
        port = next(p for p in h0["ports"] if p["ifname"] == "eth1")
        t0 = next(p for p in snap["ports"] if (p["node"], p["ifname"]) == ("p1.t0a", "h0"))
        return link["state"], port["kernel"]["carrier"], t0["kernel"]["admin_up"]

    def settles(sampler, want: tuple) -> tuple:
        deadline = time.monotonic() + 3
        while (got := state(sampler)) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        return got

    with stats.Sampler(lab) as sampler:
        assert state(sampler) == ("up", True, True)
        run_cli("fail", "p1.t0a-h0", "--mode", "down", "-l", lab)
        try:
            assert settles(sampler, ("down", False, False)) == ("down", False, False)
        finally:
            run_cli("heal", "--all", "-l", lab)
        assert settles(sampler, ("up", True, True)) == ("up", True, True)
