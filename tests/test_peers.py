"""The kernel peers of the benchmarks (mrc_nic/peers.py).

Without a lab: the timeline analysis on made-up bins, and the two ends over
loopback TCP. In a lab: MPTCP really spreads over every plane (the lab's own
per-plane counters say so, not only the sockets), TCP stays on its plane,
and blackholing every plane for a moment shows as a gap in the timeline.
No test asserts a rate or a duration the machine's speed decides.
"""

from __future__ import annotations

import json
import threading

import pytest
from conftest import needs_lab

from mrc_nic.fabric import faults
from mrc_nic.observe import stats
from mrc_nic.workloads import peers

# ---- the analysis ----------------------------------------------------------------------


def test_longest_zero_run_starts_after_the_first_byte():
    bins = [0, 0, 5, 5, 0, 0, 0, 5, 0, 5]
    assert peers.longest_zero_run(bins, 0.01) == pytest.approx((0.03, 0.04))
    assert peers.longest_zero_run([0, 0, 0], 0.01) == (0.0, None)


def test_recovery_needs_the_rate_held_not_one_burst():
    bin_s, full = 0.01, 1e9
    per_bin = int(full * bin_s / 8)
    # full rate, a stall from 1.0 s, one burst at 1.3 s (held-back bytes), full again at 1.6 s
    bins = [per_bin] * 100 + [0] * 30 + [per_bin * 20] + [0] * 29 + [per_bin] * 100
    assert peers.baseline_rate(bins, bin_s, 1.0) == pytest.approx(full)
    got = peers.recovery_time(bins, bin_s, 1.0, full, window_s=0.05, hold=3)
    assert got == pytest.approx(0.6)
    assert peers.recovery_time([per_bin] * 100 + [0] * 100, bin_s, 1.0, full) is None


def test_window_rate_and_the_result_helpers():
    res = peers.StreamResult(
        proto="tcp",
        src="h0",
        dst="h1",
        plane=0,
        seconds=1.0,
        bin_s=0.1,
        bins=[125_000] * 10,
        bytes_window=1_250_000,
        bytes_total=1_250_000,
        goodput_bps=1e7,
        first_byte_s=0.0,
        longest_gap_s=0.0,
        gap_start_s=None,
        eof=True,
        sent_bytes=1_250_000,
        plane_bytes={0: 1, 1: 0},
    )
    assert res.rate_between(0.2, 0.5) == pytest.approx(1e7)
    assert res.timeline()[3] == pytest.approx((0.3, 0.01))
    res.analyse(0.5, full_fraction=0.5, window_s=0.1, hold=2)
    assert res.full_rate_bps == pytest.approx(0.5e7)
    assert res.recovery_s == 0.0
    assert json.loads(json.dumps(res.to_dict()))["plane_bytes"] == {"0": 1, "1": 0}


def test_the_two_ends_over_loopback(capsys):
    """receiver() and sender() as the children run them, over 127.0.0.1: every
    byte the sender wrote is counted, in bins from t = 0, and the stream ends."""
    import time

    port = peers._next_port()
    got: dict = {}
    args = {"proto": "tcp", "addr": "127.0.0.1", "port": port, "seconds": 0.3, "bin_s": 0.01}
    args |= {"accept_s": 5.0, "drain_s": 2.0}
    recv = threading.Thread(target=lambda: got.update(peers.receiver(args)))
    recv.start()
    for _ in range(100):  # until it listens
        if "ready" in capsys.readouterr().out:
            break
        time.sleep(0.02)
    start = time.monotonic_ns() + int(0.1e9)
    sent = peers.sender(
        {"proto": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "port": port}
        | {"start_ns": start, "seconds": 0.3, "drain_s": 2.0}
    )
    recv.join(10)
    assert got["eof"] and got["errors"] == []
    assert got["bytes_total"] == sent["bytes"] > 0
    assert sum(got["bins"]) == got["bytes_total"]
    assert 0 < got["bytes_window"] <= got["bytes_total"]
    assert len(got["bins"]) >= 30  # 0.3 s of 10 ms bins, and the drain after


# ---- in a lab --------------------------------------------------------------------------


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.bpf
@needs_lab
class TestInALab:
    @pytest.fixture(autouse=True)
    def healed(self, default_lab):
        yield
        faults.heal(default_lab.lab, None)

    def test_mptcp_uses_every_plane(self, default_lab):
        topo = default_lab
        before = stats.snapshot(topo.lab, kernel=False)
        res = peers.run_stream(topo, "h0", "h1", "mptcp", seconds=1.5, bin_s=0.01)
        after = stats.snapshot(topo.lab, kernel=False)
        assert res.eof and res.bytes_window > 0, res.errors
        # The sockets: one subflow per plane, each from h0's address on that plane.
        local = sorted(s["local"].split(":")[0] for s in res.subflows)
        assert local == [str(topo.host_address(0, p)) for p in range(topo.planes)]
        assert all(s["bytes_acked"] > 0 for s in res.subflows)
        # The lab's counters: bytes offered into each plane (host links, up).
        offered = {
            p["plane"]: p["offered"]["bytes"] - b["offered"]["bytes"]
            for p, b in zip(after["planes"], before["planes"], strict=True)
        }
        total = sum(offered.values())
        assert total >= res.bytes_window
        # The kernel's scheduler favours the subflows with the lowest RTT, so
        # the shares are uneven (2-40% seen): each plane must carry a real part.
        for plane, n in offered.items():
            assert n > 0.01 * total, f"plane {plane} carried {n} of {total} bytes"
        assert res.plane_bytes is not None and all(v > 0 for v in res.plane_bytes.values())

    def test_tcp_stays_on_its_plane(self, default_lab):
        res = peers.run_stream(default_lab, "h0", "h1", "tcp", seconds=1.0, bin_s=0.01, plane=2)
        assert res.eof and res.bytes_window > 0, res.errors
        total = sum(res.plane_bytes.values())
        assert res.plane_bytes[2] > 0.99 * total
        assert res.subflows == []

    def test_blackholing_every_plane_shows_as_a_gap(self, default_lab):
        """h0's four host links blackholed for 0.4 s from t = 0.5 s: nothing is
        delivered meanwhile, and the timeline shows it; then the stream comes
        back (TCP's retransmission timer, which may take a few tries)."""
        lab = default_lab.lab
        hole = 0.4
        cut = peers.fault_event(lab, "h0", "blackhole", duration=hole)
        res = peers.run_stream(
            default_lab, "h0", "h1", "mptcp", seconds=3.5, bin_s=0.01, events=[(0.5, cut)]
        )
        (event,) = res.events
        assert "error" not in event and event["result"]["mode"] == "blackhole"
        assert res.fault_s == event["done_s"] and res.baseline_bps > 0
        start, end = event["done_s"], event["called_s"] + hole
        # Bytes before the hole; none while every path drops (what was in
        # flight when it began lands within a few ms: 0.1 s of slack).
        first, last = round((start + 0.1) / res.bin_s), int(end / res.bin_s)
        assert sum(res.bins[:first]) > 0
        assert sum(res.bins[first:last]) == 0
        # The longest gap, from the receiver's timestamps, is at least that long.
        assert res.longest_gap_s >= end - start - 0.1
        gap_bins, _ = peers.longest_zero_run(res.bins, res.bin_s)
        assert gap_bins >= end - start - 0.1 - res.bin_s
        # And the stream comes back.
        assert sum(res.bins[last:]) > 0
