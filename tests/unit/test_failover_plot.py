"""scripts/bench_failover.py's plot and table without a lab: both transports
on one grid of bins over one window, and no row whose figure is a 0 that
means "never slowed" (no `MPTCP 0 ms | ratio 0`)."""

from __future__ import annotations

import pytest

from tests.helpers.env import ROOT
from tests.unit.test_scripts import load_script

GBIT_BYTES_PER_S = 1e9 / 8


@pytest.fixture
def bf(monkeypatch):
    return load_script(ROOT / "scripts" / "bench_failover.py", monkeypatch)


def steady(bin_s: float, seconds: float, gbps: float = 1.0) -> list[int]:
    """Bytes per bin at a steady rate, to the byte (what each bin held)."""
    n = int(seconds / bin_s)
    per = gbps * GBIT_BYTES_PER_S * bin_s
    return [round((i + 1) * per) - round(i * per) for i in range(n)]


def test_a_steady_rate_is_flat_on_the_grid_whatever_it_was_measured_in(bf):
    # the NIC's 1.05 ms bins and MPTCP's 1 ms ones: both 1 Gbit/s in every 10 ms bin
    for bin_s in (bf.MRC_BIN_S, bf.PEER_BIN_S):
        ys = bf.on_grid(steady(bin_s, 2.0), bin_s, 1.0, -0.5, bf.PLOT_BIN_S, 100)
        assert ys == pytest.approx([1.0] * 100, rel=1e-3)


def test_the_grid_keeps_every_byte(bf):
    bins = [0, 7000, 0, 0, 123456, 99, 0, 5]
    width, n = 0.0025, 8
    ys = bf.on_grid(bins, bf.MRC_BIN_S, 0.0, 0.0, width, n)
    assert sum(y * 1e9 / 8 * width for y in ys) == pytest.approx(sum(bins))


def case_of(bf, mrc_seconds: float, fault_at: float = 1.0) -> dict:
    return {
        "label": "plane 1 blackhole",
        "mrc": {
            "bins": steady(bf.MRC_BIN_S, mrc_seconds),
            "bin_s": bf.MRC_BIN_S,
            "fault_s": fault_at,
        },
        "mptcp": {"bins": steady(bf.PEER_BIN_S, 3.0), "bin_s": bf.PEER_BIN_S, "fault_s": fault_at},
    }


def test_both_series_share_one_window_when_the_write_ends_first(bf):
    report = {"mptcp_seconds": 3.0, "fault_at": 1.0}
    case = case_of(bf, mrc_seconds=2.2)  # the WRITE is over 1.2 s after the fault
    series = bf.plot_series(case, "blackhole", report)
    (mxs, mys), (pxs, pys) = series["mrc"], series["mptcp"]
    assert mxs == pxs and len(mys) == len(pys)
    start, end = bf.plot_window(case, "blackhole", report)
    assert start == pytest.approx(-0.5) and end <= 1.2 and end > 1.1
    # neither line stops short or drops to zero before the window ends
    assert min(mys) > 0.99 and min(pys) > 0.99
    # a longer WRITE: the window is MPTCP's watch after the fault
    long = case_of(bf, mrc_seconds=4.0)
    assert bf.plot_window(long, "blackhole", report)[1] == pytest.approx(1.99, abs=0.011)


def test_a_fault_from_the_start_is_drawn_from_the_start(bf):
    report = {"mptcp_seconds": 3.0, "fault_at": 1.0}
    start, end = bf.plot_window(case_of(bf, mrc_seconds=2.0), "loss", report)
    assert start == 0.0 and 1.9 < end <= 2.0


def figures(recovery: float | None, gap: float) -> dict:
    return {
        "goodput_gbps": 1.0,
        "longest_gap_s": gap,
        "full_rate_gbps": 1.0,
        "gap_at_fault_s": gap,
        "fault_gap_s": gap,
        "fault_gap_kind": "exact",
        "recovery_s": recovery,
        "observed_after_s": 2.0,
        "goodput_after_gbps": 0.9,
    }


def test_no_row_compares_a_zero(bf):
    report = {
        "plane": 1,
        "cases": {
            "none": {
                "label": "no fault",
                "mrc": figures(None, 0.004),
                "mptcp": figures(None, 0.005),
            },
            "flap": {
                "label": "flap",
                "mrc": figures(0.435, 0.0001),
                "mptcp": figures(0.0, 0.0),  # never slowed, no gap: nothing to divide by
            },
        },
    }
    rows = bf.table_rows(report)
    for row in rows:
        assert row["ratio"] != 0 and (row["mrc"], row["peer"]) != (None, None), row
    back = next(r for r in rows if r["metric"] == "time back to full rate")
    assert back["mrc"] == pytest.approx(435) and back["peer"] is None and back["ratio"] is None
    assert "MPTCP: never below 0.9 of full rate" in back["target"]
    gap = next(r for r in rows if r["metric"] == "longest gap after the fault")
    assert gap["peer"] is None and "MPTCP: no gap after the fault" in gap["target"]
    # the healthy run has no recovery on either side: no row for it at all
    assert not any(r["case"] == "no fault" and "back" in r["metric"] for r in rows)
