"""What people and Prometheus see: the watch frames (size, content, sparklines),
the plain-text fallback, the Prometheus exposition parsed back, and the CLI's
option checks. Pure Python: snapshots come from tests/helpers/fake_snapshot.py."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from mrc_nic.cli import cli
from mrc_nic.observe import live, prom, rates, sparkline, watch
from tests.helpers.fake_snapshot import default_topology, plane_fault, recv_qp, send_qp, snapshot

PLANES = 4


@pytest.fixture(scope="module")
def topo():
    return default_topology()


def traffic(per_plane: list[int]):
    """h0 -> h1 on every plane: per_plane[p] packets up h0's host link and down
    h1's, half of them over each spine."""

    def pkts(link, direction):
        n = per_plane[link.plane]
        if link.kind == "host":
            return n if (link.lower.node, direction) in (("h0", "up"), ("h1", "down")) else 0
        return n // 2 if (link.lower.node[-1], direction) in (("a", "up"), ("b", "down")) else 0

    return pkts


def story(topo, seconds: int = 30, dead_after: int = 20):
    """A history of `seconds` one-second snapshots: 5000 pkt/s on each plane,
    plane 2 blackholed after `dead_after` seconds. Returns (History, last snapshot)."""
    history = sparkline.History()
    totals = [0] * PLANES
    prev = None
    for t in range(seconds + 1):
        faults = [plane_fault(topo, 2)] if t > dead_after else []
        snap = snapshot(
            topo,
            float(t),
            pkts=traffic(totals),
            faults=faults,
            qps=[
                send_qp(1, acked=1000 * t, bad_plane=2 if faults else None),
                recv_qp(0x10001, 1000 * t),
            ],
            nic_counters={"tx_retx": 3 * t, "drop_spoofed": 0},
        )
        if prev is not None:
            rates.add_rates(prev, snap)
        history.add(snap)
        prev = snap
        totals = [n + (0 if p == 2 and t >= dead_after else 5000) for p, n in enumerate(totals)]
    return history, prev


def frame_text(renderable, width: int, height: int) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text().rstrip("\n").split("\n")


# ---- the frames -----------------------------------------------------------------------------


@pytest.mark.parametrize("view", watch.VIEWS)
def test_every_view_fits_80x24(topo, view):
    history, snap = story(topo)
    snap["qps"][0]["send"]["ev_list"] = [
        {
            "ev": 49152 + i,
            "plane": i % PLANES,
            "state": "GOOD",
            "rtt_last_ns": 1,
            "rtt_min_ns": 1,
            "srtt_ns": 30_000,
            "counters": {"tx_pkts": 10, "lost_pkts": 0, "retx_pkts": 0, "acks": 10},
            "rates": None,
        }
        for i in range(128)
    ]
    lines = frame_text(watch.render(snap, history, view, 80, 24), 80, 24)
    assert len(lines) <= 24, "\n".join(lines)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("mrc-nic lab fake") and f"by {view}" in lines[0]
    assert lines[-1].startswith("faults #1 blackhole on plane 2")


def test_a_bigger_terminal_shows_every_path_and_longer_sparklines(topo):
    history, snap = story(topo)
    small = "\n".join(frame_text(watch.render(snap, history, "path", 80, 16), 80, 16))
    big = "\n".join(frame_text(watch.render(snap, history, "path", 120, 40), 120, 40))
    assert "more paths" in small and "more paths" not in big
    assert all(p["path"] in big for p in snap["paths"])
    spark_small = _spark_of_plane(
        frame_text(watch.render(snap, history, "plane", 80, 24), 80, 24), 0
    )
    spark_big = _spark_of_plane(
        frame_text(watch.render(snap, history, "plane", 140, 40), 140, 40), 0
    )
    assert len(spark_big) > len(spark_small) >= 8


def _spark_of_plane(lines: list[str], plane: int) -> str:
    """The sparkline cell of a plane's row: from the "delivered" header to the
    end of the table (its rule's length), blanks included."""
    at = next(i for i, line in enumerate(lines) if line.startswith("plane "))
    start = lines[at].index("delivered")
    end = len(lines[at + 1].rstrip())
    row = next(line for line in lines if re.match(rf"{plane}\s", line))
    return row.ljust(end)[start:end]


def test_plane_view_tells_the_blackhole_story(topo):
    history, snap = story(topo)
    lines = frame_text(watch.render(snap, history, "plane", 100, 30), 100, 30)
    rows = {int(line.split()[0]): line for line in lines if re.match(r"[0-3]\s", line)}
    assert set(rows) == {0, 1, 2, 3}
    for p in (0, 1, 3):
        assert "5k" in rows[p] and "#1" not in rows[p]
        assert rows[p].rstrip().endswith("█")  # full rate up to now
    assert "#1" in rows[2]
    cells = rows[2].split()
    assert cells[cells.index("#1") + 3] == "0"  # delivered pkt/s: nothing
    spark = _spark_of_plane(lines, 2)
    # Full from the first rate (t = 1 s) to the blackhole (t = 20 s), then a
    # zero bar: the dead plane's line drops to the floor, it does not vanish.
    assert spark.lstrip().startswith("█") and spark.endswith("▁")
    assert spark.count("█") == pytest.approx(len(spark) * 19 / 30, abs=2)
    assert spark.count("▁") == pytest.approx(len(spark) * 10 / 30, abs=2)
    assert spark.rstrip("▁").endswith("█")  # no blank between the rate and the floor
    text = "\n".join(lines)
    assert "G96 B32" in text  # the QP's EVs: plane 2's 32 are ASSUMED_BAD
    assert "retx/s 3" in text


def test_the_first_frame_has_no_rates_yet(topo):
    snap = snapshot(topo, 0.0, qps=[send_qp(1, acked=0)])
    lines = frame_text(watch.render(snap, sparkline.History(), "plane", 80, 24), 80, 24)
    plane0 = next(line for line in lines if line.startswith("0 "))
    assert plane0.split()[1:6] == ["-"] * 5


def test_sparkline_heights_blanks_and_the_zero_bar():
    # no sample: blank; zero: the floor; a rate: at least the block above it
    assert sparkline.sparkline([None, 0, 1, 4, 8], top=8) == " ▁▂▅█"
    assert sparkline.sparkline([0.01, 100], top=100) == "▂█"  # a trickle is not zero
    assert sparkline.sparkline([5, 5], top=0) == "▁▁"


def qp_lines(snap: dict, view: str = "qp", width: int = 120) -> list[str]:
    return frame_text(watch.render(snap, sparkline.History(), view, width, None), width, 200)


def test_qp_rows_are_labelled_by_the_direction_data_flows(topo):
    sender = send_qp(1, acked=100)
    sender["recv"] = {  # the sending QP's receive side: RTR, nothing placed
        **recv_qp(1, 0)["recv"],
        "counters": {"placed_pkts": 0, "placed_bytes": 0, "dup_pkts": 0},
    }
    receiver = recv_qp(0x10001, 100)  # on h1, its peer h0: data flows h0 -> h1
    lines = qp_lines(snapshot(topo, 1.0, qps=[sender, receiver]))
    rows = [line.split() for line in lines if re.match(r"0x0", line)]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("0x000001", "h0>h1", "send"),
        ("0x010001", "h0>h1", "recv"),
    ]  # and no `recv RTR 0.00` row for the sending QP


def test_a_qp_that_only_receives_keeps_its_row_before_any_data(topo):
    idle = recv_qp(0x10001, 0)
    rows = [
        line.split() for line in qp_lines(snapshot(topo, 1.0, qps=[idle])) if "0x010001" in line
    ]
    assert [r[2] for r in rows] == ["recv"]


def test_in_flight_above_the_window_is_marked_and_explained(topo):
    cut = send_qp(1, acked=100)
    cut["send"]["in_flight"], cut["send"]["cwnd"] = 29, 24
    lines = qp_lines(snapshot(topo, 1.0, qps=[cut]))
    text = "\n".join(lines)
    assert "29/24↓" in text
    assert "↓: more in flight than the window (NSCC cut it)" in " ".join(text.split())
    calm = qp_lines(snapshot(topo, 1.0, qps=[send_qp(1, acked=100)]))
    assert "12/256" in "\n".join(calm) and "↓" not in "\n".join(calm)


@pytest.mark.parametrize("view", ["plane", "qp", "ev"])
def test_the_ev_letters_are_explained_on_screen(topo, view):
    history, snap = story(topo)
    text = " ".join(
        " ".join(frame_text(watch.render(snap, history, view, 120, 40), 120, 40)).split()
    )
    assert "G good" in text and "B assumed bad" in text and "S skip" in text and "D denied" in text


def test_history_buckets_the_last_30_seconds(topo):
    history, snap = story(topo, seconds=40, dead_after=100)
    now = snap["monotonic_ns"] / 1e9
    series = history.series(0, now, 30)
    assert len(series) == 30 and all(v == pytest.approx(5000 * 1000 * 8) for v in series)
    assert history.series(0, now + 60, 30) == [None] * 30  # all older than the window


def test_plain_output_prints_one_frame_per_snapshot(topo):
    _, last = story(topo, seconds=2)
    console = Console(width=100, file=io.StringIO(), force_terminal=False)
    live.run(lambda sleep: iter([last, last, last]), "link", console)
    text = console.file.getvalue()
    assert text.count("mrc-nic lab fake") == 3
    assert text.count("p2.t1b-t0b") == 3  # plain output has no height limit: every link
    assert "\x1b[" not in text  # no colour or cursor codes


# ---- Prometheus ---------------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_exposition(text: str) -> dict:
    """A strict reader of the 0.0.4 text format: {family: {"type", "help", "samples"}}.

    Checks on the way: HELP then TYPE before a family's samples, each family in
    one block, counters named *_total, every value a float."""
    assert text.endswith("\n")
    families: dict = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_text = line[7:].split(" ", 1)
            assert name not in families, f"{name} declared twice"
            families[name] = {"help": help_text, "type": None, "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert name == current and families[name]["type"] is None
            assert kind in ("counter", "gauge")
            families[name]["type"] = kind
            if kind == "counter":
                assert name.endswith("_total"), name
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.groups()
            assert name == current, f"{name} outside its family block"
            parsed = {}
            rest = labels or ""
            while rest:
                lm = LABEL.match(rest)
                assert lm, f"bad labels in {line!r}"
                parsed[lm.group(1)] = re.sub(
                    r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2)
                )
                rest = rest[lm.end() :]
            families[name]["samples"].append((parsed, float(value)))
    return families


def test_prometheus_exposition_parses_back_with_the_snapshot_numbers(topo):
    _, snap = story(topo)
    families = parse_exposition(prom.render(snap))
    delivered = {
        s[0]["plane"]: s[1] for s in families["mrc_plane_delivered_packets_total"]["samples"]
    }
    assert delivered == {str(p["plane"]): p["delivered"]["pkts"] for p in snap["planes"]}
    assert families["mrc_plane_delivered_packets_total"]["type"] == "counter"
    paths = families["mrc_path_packets_total"]["samples"]
    assert {s[0]["path"] for s in paths} == {p["path"] for p in snap["paths"]}
    assert set(paths[0][0]) == {"path", "plane", "host", "direction"}
    evs = {s[0]["state"]: s[1] for s in families["mrc_qp_evs"]["samples"]}
    assert evs["ASSUMED_BAD"] == 32 and evs["GOOD"] == 96
    assert families["mrc_qp_evs"]["type"] == "gauge"
    faulted = families["mrc_link_fault"]["samples"]
    assert {s[0]["link"] for s in faulted} == {lk.name for lk in topo.links_of_plane(2)}
    assert all(name.startswith("mrc_") for name in families)


def test_prometheus_escapes_label_values_and_help():
    out = prom.Exposition()
    out.add("mrc_nic_outcomes_total", {"outcome": 'a"b\\c\nd'}, 3)
    out.add("mrc_qp_srtt_seconds", {"qp": "x"}, 1.5e-05)
    out.add("mrc_qp_srtt_seconds", {"qp": "y"}, None)  # unknown: no sample
    text = out.text()
    assert 'outcome="a\\"b\\\\c\\nd"' in text
    families = parse_exposition(text)
    assert families["mrc_nic_outcomes_total"]["samples"] == [({"outcome": 'a"b\\c\nd'}, 3.0)]
    assert families["mrc_qp_srtt_seconds"]["samples"] == [({"qp": "x"}, 1.5e-05)]
    special = prom.Exposition()
    special.add("mrc_qp_srtt_seconds", {"qp": "inf"}, float("inf"))
    special.add("mrc_qp_srtt_seconds", {"qp": "nan"}, float("nan"))
    assert 'qp="inf"} +Inf' in special.text() and 'qp="nan"} NaN' in special.text()
    with pytest.raises(KeyError):
        out.add("mrc_not_declared_total", {}, 1)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("localhost:0", ("127.0.0.1", 0)),
        ("[::1]:80", ("::1", 80)),
    ],
)
def test_listen_address_is_loopback_only(text, expected):
    assert prom.parse_listen(text) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:9464", "10.1.2.3:80", "9464", "127.0.0.1:http"])
def test_listen_address_refused(text):
    with pytest.raises(ValueError, match="--listen"):
        prom.parse_listen(text)


# ---- the command's options ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--watch", "--format", "json"], "--watch draws tables"),
        (["--listen", "127.0.0.1:1"], "--listen goes with --format prom"),
        (["--format", "json", "--count", "3"], "--count bounds --watch and jsonl"),
        (["--format", "prom", "--duration", "3"], "--duration bounds"),
        (["--format", "prom", "--interval", "1"], "--interval paces"),
        (["--by", "port", "--watch"], "--by port"),
        (["--by", "sideways"], "'sideways' is not one of"),
    ],
)
def test_stats_option_mistakes_are_usage_errors(args, fragment):
    result = CliRunner().invoke(cli, ["stats", "-l", "nolab", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_watch_shows_the_live_fidelity_verdict_last(topo):
    from mrc_nic.observe import fidelity
    from mrc_nic.observe.fidelity import CpuSample, LinkSample

    history, snap = story(topo)
    before = CpuSample([(0, 0, 100), (0, 0, 100)], [])
    after = CpuSample([(99, 60, 200), (98, 10, 200)], [])
    rates = {("p0.t0a-h0", "up"): 10**9}
    links = fidelity.link_figures(
        rates,
        LinkSample({k: (0, 0, 0, 0.0) for k in rates}, 0, 0.0),
        LinkSample({k: (10**8, 1000, 0, 1.0) for k in rates}, 0, 1.0),
    )
    snap["fidelity"] = fidelity.judge(fidelity.cpu_figures(before, after), links)
    lines = frame_text(watch.render(snap, history, "plane", 80, 24), 80, 24)
    assert len(lines) <= 24
    assert lines[-1].startswith("fidelity: cpu-bound: a core busy 99%")
