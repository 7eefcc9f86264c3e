"""Message sizes without a lab: how a write is cut into messages and WRITEs
(mrc_nic.workloads.writeplan), its options, and the figures of mrc_nic.workloads.msgfigures
(percentiles, peak windows, matching NIC completions to kicks, the plan of
buffers and depths, the README rows). The lab part is in test_daemon.py."""

from __future__ import annotations

import itertools

import pytest

from mrc_nic import nic
from mrc_nic.workloads import msgfigures as bm
from mrc_nic.workloads.writeplan import Pieces, WriteOptions

KIB, MIB = 1024, 2**20


def listed(start: int, end: int, msg: int, chunk: int) -> list[tuple[int, int]]:
    """The WRITEs the slow way: every message, then its chunks."""
    out = []
    for m in range(start, end, msg):
        m_end = min(end, m + msg)
        out += [(o, min(chunk, m_end - o)) for o in range(m, m_end, chunk)]
    return out or [(start, 0)]


@pytest.mark.parametrize(
    ("start", "end", "msg", "chunk"),
    [
        (s, s + n, msg, chunk)
        for s, n, msg, chunk in itertools.product(
            (0, 7000), (0, 1, 64, 1024, 5000, 70001), (1, 64, 1000, 4096, 70000), (KIB, 64 * KIB)
        )
    ],
)
def test_pieces_are_the_messages_cut_in_chunks(start, end, msg, chunk):
    pieces = Pieces(start, end, msg, chunk)
    want = listed(start, end, msg, chunk)
    assert len(pieces) == len(want)
    assert [pieces[k] for k in range(len(pieces))] == want
    with pytest.raises(IndexError):
        pieces[len(pieces)]
    # each WRITE's message, and whole messages among the first k WRITEs
    starts = [k for k in range(len(pieces)) if pieces.starts_msg(k)]
    assert starts[0] == 0 and all(pieces.msg_of(k) == i for i, k in enumerate(starts))
    assert pieces.msgs_within(len(pieces)) == len(starts)
    if len(starts) > 1:
        assert pieces.msgs_within(starts[1]) == 1 and pieces.msgs_within(starts[1] - 1) == 0


def test_write_options_of_messages_are_checked():
    base = {"size": 10_000, "chunk": 16 * KIB}
    opts = WriteOptions(**base, msg=100, depth=32, duration=1.5).check()
    assert (opts.msg, opts.depth, opts.duration, opts.write_max) == (100, 32, 1.5, 100)
    assert WriteOptions(**base).check().write_max == 16 * KIB  # one message: chunks
    assert WriteOptions(**(base | {"msg": 9000, "chunk": KIB})).check().write_max == KIB
    for bad, match in (
        ({"msg": 10_001}, "msg must be"),
        ({"msg": -1}, "msg must be"),
        ({"depth": 0}, "depth must be"),
        ({"depth": nic.SQ_DEPTH + 1}, "depth must be"),
        ({"msgs_in_flight": -1}, "msgs_in_flight"),
        ({"duration": -1}, "duration must be"),
        ({"verify": True, "fill": False}, "verify needs fill"),
    ):
        with pytest.raises(ValueError, match=match):
            WriteOptions(**(base | bad)).check()


def test_latency_figures_are_perftests():
    samples = [i * 1000 for i in range(1, 1001)]  # 1 .. 1000 us
    s = bm.lat_stats(list(reversed(samples)))
    assert (s["iterations"], s["t_min"], s["t_max"]) == (1000, 1.0, 1000.0)
    assert s["t_typical"] == 500.5 and s["t_avg"] == 500.5
    assert (s["p99"], s["p99_9"]) == (990.0, 999.0)  # nearest rank
    few = bm.lat_stats([5000, 1000, 3000])
    assert (few["t_typical"], few["p99"], few["p99_9"]) == (3.0, 5.0, 5.0)
    assert bm.lat_stats([]) is None


def test_peak_is_the_best_whole_window_inside_the_run():
    bin_ns = 10_000_000  # 10 bins make a 100 ms window
    bins = {i: 1000 for i in range(100)} | {i: 3000 for i in range(30, 40)}
    # 0.1 s windows from bin 0: the one over bins 30..39 is the best
    assert bm.peak_bps(bins, bin_ns, 0, 100 * bin_ns) == pytest.approx(3000 * 10 * 8 / 0.1)
    # a run shorter than a window has no peak; a partial first bin is skipped
    assert bm.peak_bps(bins, bin_ns, 0, 9 * bin_ns) is None
    assert bm.peak_bps(bins, bin_ns, bin_ns // 2, 11 * bin_ns) == pytest.approx(1000 * 80 / 0.1)


def test_match_latencies_pairs_each_message_with_its_completions():
    """Message m: the post of its first WRITE -> the send and receive
    completions of its last; a completion not seen is counted, not guessed."""
    kicks = [10**9 + i * 10**6 for i in range(6)]  # 3 messages of 2 WRITEs
    done = [k + 1_050_000 for k in kicks]
    done[3] = None  # WRITE 3 (message 1's last): its completion not seen
    recv = [k + 1_020_000 for k in kicks]
    timing = {"qpn": 7, "per_msg": 2, "kick_ns": kicks, "done_ns": done, "recv_ns": recv}
    m = bm.match_latencies({"timing": [timing]})
    # message m: post of WRITE 2m -> completion of WRITE 2m + 1 (1 ms later + 1.05 ms)
    assert m["rtt_ns"] == [2_050_000, 2_050_000]
    assert m["one_way_ns"] == [2_020_000] * 3
    assert (m["messages_missing"], m["send_done_matched"], m["not_positive"]) == (1, 5, 0)


def test_plan_fills_the_send_queue_when_memory_allows():
    room = 16 * MIB
    p = bm.plan(64, room)
    assert (p["chunk"], p["bw_depth"], p["lat_depth"], p["wqes_per_msg"]) == (16 * KIB, 32, 1, 1)
    assert bm.plan(64 * KIB, room)["chunk"] == MIB
    assert bm.plan(MIB, room)["bw_depth"] == 32
    big = bm.plan(64 * MIB, room)
    assert (big["chunk"], big["wqe_bytes"], big["wqes_per_msg"], big["bw_depth"]) == (
        room,
        room,
        4,
        2,
    )
    assert big["lat_depth"] == 2
    odd = bm.plan(1500, room)  # slots are whole KiB: 2 KiB
    assert odd["chunk"] == 32 * KIB and odd["bw_depth"] == 32


def test_readme_rows_follow_the_convention():
    def entry(size, lat_mrc, lat_tcp, gb_mrc, gb_mptcp):
        lat = lambda v: {"t_typical": v, "p99": 2 * v}  # noqa: E731
        return {
            "size": size,
            "mrc": {"lat": lat(lat_mrc), "bw": {"bw_average_gbps": gb_mrc, "msg_rate_mpps": 0.1}},
            "tcp": {"lat": lat(lat_tcp), "bw": {"bw_average_gbps": 1.0, "msg_rate_mpps": 0.2}},
            "mptcp": {"lat": None, "bw": {"bw_average_gbps": gb_mptcp, "msg_rate_mpps": 0.3}},
        }

    rows = bm.table([entry(64, 50.0, 25.0, 0.01, 0.05), entry(16 * MIB, 1e4, 2e4, 3.0, 2.0)])
    by = {r["case"]: r for r in rows}
    assert set(by) == {
        "64 B latency p50",
        "64 B latency p99",
        "64 B message rate",
        "16 MiB goodput",
    }
    assert by["64 B latency p50"]["ratio"] == 2.0 and by["64 B latency p50"]["unit"] == "us"
    assert by["16 MiB goodput"]["ratio"] == 1.5 and "MPTCP" in by["16 MiB goodput"]["peer_name"]
    assert by["64 B message rate"]["peer"] == 0.2
    keys = {"benchmark", "case", "metric", "unit", "mrc", "peer_name", "peer", "ratio"}
    assert all(r["benchmark"] == "msgsize" and keys <= set(r) for r in rows)
    assert {r["ratio_is"] for r in rows} == {"mrc/peer"}
