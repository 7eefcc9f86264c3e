"""The kernel peers of the benchmarks in a real lab: MPTCP spreads over every
plane, TCP stays on its own, and a blackhole of every plane shows as a gap
(the pure parts are in tests/unit/test_peers.py)."""

from __future__ import annotations

import pytest

from mrc_nic.observe import stats
from mrc_nic.workloads import peers

# ---- in a lab --------------------------------------------------------------------------


@pytest.mark.usefixtures("healed")  # conftest's: faults healed after each test
class TestInALab:
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
        # the shares are uneven (0.16-40% seen; under 1% on a loaded machine):
        # each plane must carry data, not only its join: twenty full packets.
        for plane, n in offered.items():
            assert n > 20 * topo.mtu, f"plane {plane} carried {n} of {total}"
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
