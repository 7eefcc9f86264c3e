"""The kernel peers of the benchmarks (mrc_nic/workloads/peers.py).

Without a lab: the timeline analysis on made-up bins, and the two ends over
loopback TCP. In a lab (tests/lab/test_peers.py): MPTCP really spreads over
every plane (the lab's own per-plane counters say so, not only the sockets),
TCP stays on its plane, and blackholing every plane for a moment shows as a
gap in the timeline.
No test asserts a rate or a duration the machine's speed decides.
"""

from __future__ import annotations

import json
import threading

import pytest

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
