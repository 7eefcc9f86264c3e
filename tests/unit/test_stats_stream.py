"""Rates, the snapshot stream, filters and the per-plane/per-path aggregates;
the JSON stream in a real lab is in tests/lab/test_stats_stream.py.

The pure tests build snapshots with tests/helpers/fake_snapshot.py (real topology and
aggregation code, made-up counters).
"""

from __future__ import annotations

import pytest

from mrc_nic.observe import aggregate, rates, stats_filter, stream
from tests.helpers.fake_snapshot import default_topology, plane_fault, recv_qp, send_qp, snapshot


@pytest.fixture(scope="module")
def topo():
    return default_topology()


def per_link(values: dict):
    """pkts(link, direction) from {(link name, direction): pkts}, 0 elsewhere."""
    return lambda lk, d: values.get((lk.name, d), 0)


# ---- counters and rates -----------------------------------------------------------------


@pytest.mark.parametrize(
    "prev, cur, grew", [(10, 25, 15), (10, 10, 0), (500, 7, 7), (None, 3, None), (3, None, None)]
)
def test_increase_treats_a_counter_that_went_down_as_restarted(prev, cur, grew):
    assert rates.increase(prev, cur) == grew


def test_per_second_sums_fields_and_turns_bytes_into_bits():
    spec = {"drops_per_s": (("a", "b"), 1), "bits_per_s": (("bytes",), 8)}
    out = rates.per_second({"a": 1, "b": 2, "bytes": 0}, {"a": 4, "b": 6, "bytes": 500}, 0.5, spec)
    assert out == {"drops_per_s": 14.0, "bits_per_s": 8000.0}


def test_link_and_plane_rates_over_the_time_between_reads(topo):
    a = snapshot(topo, 10.0, pkts=per_link({("p2.t0a-h0", "up"): 1000}))
    b = snapshot(
        topo,
        10.25,
        pkts=per_link({("p2.t0a-h0", "up"): 3000, ("p2.t0b-h1", "down"): 500}),
        drops=per_link({("p2.t1a-t0a", "up"): 100}),
    )
    rates.add_rates(a, b)
    assert b["interval_s"] == pytest.approx(0.25)
    link = next(lk for lk in b["links"] if lk["name"] == "p2.t0a-h0")
    assert link["rates"]["up"]["passed_pkts_per_s"] == pytest.approx(8000)
    assert link["rates"]["up"]["passed_bits_per_s"] == pytest.approx(8000 * 8000)
    assert link["rates"]["down"]["pkts_per_s"] == 0
    plane2 = b["planes"][2]["rates"]
    assert plane2["offered"]["pkts_per_s"] == pytest.approx(8000)  # h0's host link, up
    assert plane2["delivered"]["pkts_per_s"] == pytest.approx(2000)  # h1's host link, down
    assert plane2["drops"]["blackhole_per_s"] == pytest.approx(400)
    assert b["planes"][1]["rates"]["offered"]["pkts_per_s"] == 0
    path = next(p for p in b["paths"] if p["path"] == "h0.eth2>t0a>t1a")
    assert path["rates"]["up"]["drops_per_s"] == pytest.approx(400)


def test_qp_goodput_from_acked_packets_and_placed_bytes(topo):
    a = snapshot(topo, 1.0, qps=[send_qp(1, acked=1000), recv_qp(0x10001, placed=1000)])
    b = snapshot(topo, 1.5, qps=[send_qp(1, acked=3000), recv_qp(0x10001, placed=3000)])
    rates.add_rates(a, b)
    send, recv = b["qps"][0]["rates"]["send"], b["qps"][1]["rates"]["recv"]
    assert send["acked_pkts_per_s"] == pytest.approx(4000)
    assert send["goodput_bits_per_s"] == pytest.approx(4000 * 1024 * 8)
    assert [p["tx_pkts_per_s"] for p in send["planes"]] == [pytest.approx(1000)] * 4
    assert recv["goodput_bits_per_s"] == pytest.approx(4000 * 1024 * 8)


def test_a_qp_set_up_again_counts_from_zero(topo):
    a = snapshot(topo, 1.0, qps=[send_qp(1, acked=90_000)])
    b = snapshot(topo, 2.0, qps=[send_qp(1, acked=500)])
    rates.add_rates(a, b)
    assert b["qps"][0]["rates"]["send"]["acked_pkts_per_s"] == pytest.approx(500)


def test_kernel_rates_use_the_kernel_read_times_and_carry_over_between_reads(topo):
    a = snapshot(topo, 1.0, kernel_seconds=1.0, host_port_pkts=0)
    b = snapshot(topo, 1.1, kernel_seconds=1.5, host_port_pkts=1000)
    c = snapshot(topo, 1.2, kernel_seconds=1.5, host_port_pkts=1000)  # reused reading
    rates.add_rates(a, b)
    rates.add_rates(b, c)
    # 1000 packets over the 0.5 s between kernel reads, not the 0.1 s between snapshots.
    assert b["hosts"][0]["ports"][0]["rates"]["tx_pkts_per_s"] == pytest.approx(2000)
    assert c["hosts"][0]["ports"][0]["rates"]["tx_pkts_per_s"] == pytest.approx(2000)
    assert c["planes"][0]["rates"]["drops"]["queue_per_s"] == 0


def test_nic_counter_rates(topo):
    a = snapshot(topo, 1.0, nic_counters={"tx_retx": 10, "drop_spoofed": 0})
    b = snapshot(topo, 3.0, nic_counters={"tx_retx": 50, "drop_spoofed": 4})
    rates.add_rates(a, b)
    assert b["nic"]["rates"] == {"tx_retx_per_s": 20.0, "drop_spoofed_per_s": 2.0}


# ---- the stream -------------------------------------------------------------------------


class FakeClock:
    """A clock that advances by `cost` for each snapshot taken and by each sleep."""

    def __init__(self, cost: float = 0.0):
        self.now, self.cost, self.sleeps = 100.0, cost, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def take(self, topo):
        def take():
            snap = snapshot(topo, self.now)
            self.now += self.cost
            return snap

        return take


def test_stream_stops_at_count_and_adds_rates_from_the_second(topo):
    clock = FakeClock()
    snaps = list(stream.snapshots(clock.take(topo), 0.1, count=3, clock=clock, sleep=clock.sleep))
    assert len(snaps) == 3
    assert snaps[0]["interval_s"] is None
    assert [s["interval_s"] for s in snaps[1:]] == [pytest.approx(0.1)] * 2


def test_stream_keeps_its_grid_when_reading_takes_time(topo):
    clock = FakeClock(cost=0.03)
    times = [
        s["monotonic_ns"] / 1e9
        for s in stream.snapshots(
            clock.take(topo), 0.1, duration=1.0, clock=clock, sleep=clock.sleep
        )
    ]
    assert len(times) == 11  # 0, 0.1, ..., 1.0
    assert times[-1] - times[0] == pytest.approx(1.0)
    assert all(s == pytest.approx(0.07) for s in clock.sleeps)


def test_stream_that_falls_behind_does_not_burst(topo):
    clock = FakeClock(cost=0.25)
    snaps = list(stream.snapshots(clock.take(topo), 0.1, count=4, clock=clock, sleep=clock.sleep))
    assert clock.sleeps == []
    assert [s["interval_s"] for s in snaps[1:]] == [pytest.approx(0.25)] * 3


@pytest.mark.parametrize(
    "interval, count, duration, fragment",
    [(0.001, None, None, "--interval"), (0.1, 0, None, "--count"), (0.1, None, -1, "--duration")],
)
def test_stream_bounds_are_checked(interval, count, duration, fragment):
    with pytest.raises(ValueError, match=fragment):
        stream.check_bounds(interval, count, duration)


# ---- aggregates and filters -----------------------------------------------------------


def test_paths_are_host_port_t0_t1_and_carry_their_t0_t1_link(topo):
    defs = aggregate.path_defs(topo)
    assert len(defs) == 2 * 4 * 2  # hosts x planes x spines
    d = next(d for d in defs if d.name == "h1.eth3>t0b>t1a")
    assert (d.plane, d.t0, d.t1, d.links) == (3, "p3.t0b", "p3.t1a", ("p3.t0b-h1", "p3.t1a-t0b"))
    snap = snapshot(topo, 1.0, pkts=per_link({("p3.t1a-t0b", "down"): 77}))
    path = next(p for p in snap["paths"] if p["path"] == "h1.eth3>t0b>t1a")
    assert path["down"]["passed_pkts"] == 77


def test_single_plane_single_switch_paths_end_at_the_t0():
    from mrc_nic.lab import topology
    from tests.helpers.env import NETNS_DIR

    topo = topology.load(NETNS_DIR / "single-plane.toml", lab="fake")
    assert [d.name for d in aggregate.path_defs(topo)] == ["h0.eth0>t0a", "h1.eth0>t0a"]


def test_filter_by_host_and_plane(topo):
    fault = plane_fault(topo, 2)
    snap = snapshot(topo, 1.0, faults=[fault], qps=[send_qp(1, 100), recv_qp(0x10001, 100)])
    only = stats_filter.select(snap, host="h0", plane=2)
    assert only["filter"] == {"host": "h0", "plane": 2}
    assert [p["plane"] for p in only["planes"]] == [2]
    assert [p["path"] for p in only["paths"]] == ["h0.eth2>t0a>t1a", "h0.eth2>t0a>t1b"]
    assert sorted(lk["name"] for lk in only["links"]) == ["p2.t0a-h0", "p2.t1a-t0a", "p2.t1b-t0a"]
    assert [h["name"] for h in only["hosts"]] == ["h0"]
    assert [p["plane"] for p in only["hosts"][0]["ports"]] == [2]
    assert [f["id"] for f in only["faults"]] == [1]
    # Both QPs touch h0 (one sends from it, one receives from it); planes narrowed.
    assert len(only["qps"]) == 2
    assert [p["plane"] for p in only["qps"][0]["send"]["planes"]] == [2]
    assert snap["qps"][0]["send"]["planes"][0]["plane"] == 0  # the original is untouched
    assert stats_filter.select(snap, plane=1)["faults"] == []


def test_filter_checks_names_against_the_lab(topo):
    with pytest.raises(stats_filter.FilterError, match="no host 'h7'.*hosts: h0, h1"):
        stats_filter.check(topo, "h7", None)
    with pytest.raises(stats_filter.FilterError, match="no plane 4.*0..3"):
        stats_filter.check(topo, None, 4)


def test_qp_goodput_counts_the_payload_the_engine_puts_in_a_packet(topo):
    """A lab with an MTU of 3200 sends 3 KiB per packet: goodput is acked packets
    times the mean payload of the packets sent (struct nic_sq_tx_stats)."""
    qps = []
    for t, acked in ((1.0, 1000), (1.5, 3000)):
        qp = send_qp(1, acked=acked)
        qp["send"]["tx_counters"]["data_bytes"] = qp["send"]["tx_counters"]["data_pkts"] * 3072
        qps.append(snapshot(topo, t, qps=[qp]))
    rates.add_rates(*qps)
    send = qps[1]["qps"][0]["rates"]["send"]
    assert send["goodput_bits_per_s"] == pytest.approx(4000 * 3072 * 8)
