"""`mrc-nic events` without a lab: where --since starts, the lines it prints
(the plane on every EV line), and --summary's rows per plane and second."""

from __future__ import annotations

import datetime

import pytest

from mrc_nic.cli.common import parse_since
from mrc_nic.cli.events_cmds import describe
from mrc_nic.observe import eventsummary

NOW = datetime.datetime(2026, 11, 27, 22, 30, 0).timestamp()


@pytest.mark.parametrize(
    "text, seq, ago",
    [
        ("403", 403, None),
        ("0", 0, None),
        ("30s", None, 30),
        ("5m", None, 300),
        ("5m ago", None, 300),
        ("1.5h", None, 5400),
        ("22:11:40", None, 18 * 60 + 20),
        ("22:11", None, 19 * 60),
        ("2026-11-27T22:11:40", None, 18 * 60 + 20),
        ("2026-11-27 22:29:59.5", None, 0.5),
        ("23:00:00", None, 86400 - 30 * 60),  # still to come today: yesterday's
    ],
)
def test_since_takes_a_sequence_number_a_time_or_an_age(text, seq, ago):
    since = parse_since(text, now=NOW)
    assert since.seq == seq
    if ago is None:
        assert since.time is None
    else:
        assert NOW - since.time == pytest.approx(ago)


@pytest.mark.parametrize("bad", ["yesterday", "5x", "-3", "25:00", "1.5"])
def test_since_refuses_what_it_cannot_read_and_says_what_it_takes(bad):
    with pytest.raises(ValueError, match=r"sequence number \(403\).*22:11:40.*30s"):
        parse_since(bad, now=NOW)


def ev(t: float, plane: int, new: str, ev_id: int = 0xC001, qpn: int = 0x10001) -> dict:
    old = "GOOD" if new != "GOOD" else "ASSUMED_BAD"
    return {
        "type": "ev_state",
        "time": t,
        "seq": 1,
        "host": "h0",
        "qpn": qpn,
        "ev": ev_id,
        "plane": plane,
        "old_state": old,
        "new_state": new,
        "cause": "TIMEOUT",
        "psn": 7,
    }


def test_every_ev_line_names_its_plane():
    assert "(plane 2)" in describe(ev(NOW, 2, "ASSUMED_BAD"))
    replaced = {"type": "ev_replaced", "qpn": 1, "old_ev": 5, "new_ev": 9, "plane": 2}
    assert "(plane 2)" in describe(replaced)
    reverse = {
        "type": "reverse_ev_state",
        "qpn": 1,
        "ev": 5,
        "plane": 3,
        "peer_qpn": 2,
        "old": "GOOD",
        "new": "ASSUMED_BAD",
        "cause": "probes unanswered",
    }
    assert "plane 3" in describe(reverse)
    assert "(plane ?)" in describe(ev(NOW, None, "GOOD"))  # its EV gone before it was read


def blackhole_story() -> list[dict]:
    """Plane 2 blackholed at NOW + 0.2: 5 EVs bad in that second, 3 of them
    replaced in the next; healed at NOW + 2.1, the 2 others back."""
    fault = {
        "type": "fault",
        "time": NOW + 0.2,
        "id": 4,
        "target": "plane 2",
        "mode": "blackhole",
        "links": ["p2.t0a-h0", "p2.t0b-h1", "p2.t1a-t0a"],
    }
    events = [fault]
    events += [ev(NOW + 0.25 + i / 100, 2, "ASSUMED_BAD", ev_id=0xC000 + i) for i in range(5)]
    events += [
        {"type": "ev_replaced", "time": NOW + 1.3, "plane": 2, "qpn": 1, "old_ev": i, "new_ev": 9}
        for i in range(3)
    ]
    events.append(ev(NOW + 1.4, 0, "ASSUMED_BAD"))  # one loss on a working plane
    events.append(ev(NOW + 1.45, 0, "GOOD"))
    events.append(dict(fault, type="heal", time=NOW + 2.1))
    events += [ev(NOW + 2.2, 2, "GOOD", ev_id=0xC003 + i) for i in range(2)]
    events.append(
        {
            "type": "reverse_ev_state",
            "time": NOW + 2.3,
            "plane": 2,
            "new": "GOOD",
            "old": "ASSUMED_BAD",
        }
    )
    # a new QP's reverse EV answered for the first time: not a recovery
    events.append(
        {"type": "reverse_ev_state", "time": NOW + 2.4, "plane": 2, "new": "GOOD", "old": "UNTRIED"}
    )
    return events


def test_summary_counts_per_plane_and_second():
    summary = eventsummary.Summary()
    assert summary.add(blackhole_story()) == []  # no `now`: held until flush
    rows = summary.flush()
    table = {(r["time"] - int(NOW), r["plane"]): r for r in rows}
    assert list(table) == [(0, 2), (1, 0), (1, 2), (2, 2)]
    assert table[0, 2]["bad"] == 5 and table[0, 2]["faults"] == ["fault 4 blackhole on plane 2"]
    assert table[1, 2]["replaced"] == 3 and table[1, 2]["bad"] == 0
    assert (table[1, 0]["bad"], table[1, 0]["back"]) == (1, 1)
    assert table[2, 2]["back"] == 2 and table[2, 2]["rev_back"] == 1
    assert table[2, 2]["faults"] == ["heal 4 (blackhole on plane 2)"]
    assert summary.flush() == []


def test_summary_hands_out_a_second_once_it_is_over():
    summary = eventsummary.Summary()
    story = blackhole_story()
    # at NOW + 1.2 the first second is over (with its grace), the second is not
    early = summary.add([e for e in story if e["time"] < NOW + 1.2], now=NOW + 1.6)
    assert [(r["time"] - int(NOW), r["plane"]) for r in early] == [(0, 2)]
    later = summary.add([e for e in story if e["time"] >= NOW + 1.2], now=NOW + 2.6)
    assert [(r["time"] - int(NOW), r["plane"]) for r in later] == [(1, 0), (1, 2)]
    assert [r["time"] - int(NOW) for r in summary.flush()] == [2]


def test_summary_line_is_readable_under_its_header():
    summary = eventsummary.Summary()
    summary.add(blackhole_story())
    first = eventsummary.line(summary.flush()[0])
    header = eventsummary.HEADER
    assert first.split()[1:3] == ["2", "5"]  # plane 2, 5 bad
    assert first.endswith("fault 4 blackhole on plane 2")
    # the numbers sit under their column names
    assert first.index("5") + 1 == header.index("bad") + len("bad")


# ---- the log itself: a post after the NIC's records, the plane on each -----------------
class _Ring:
    """The NIC's ring buffer as the log reads it: what is in it, taken once."""

    def __init__(self) -> None:
        self.records: list = []

    def read(self) -> list:
        out, self.records = self.records, []
        return out


class _Maps:
    """An EV's plane, from nic_evs (mrc_nic.nic.ev_maps.ev_raw); EV 0xD000 is gone."""

    def ev_raw(self, qpn: int, ev: int):
        import types

        if ev == 0xD000:
            raise KeyError(ev)
        return types.SimpleNamespace(plane=ev % 4)


def _log():
    import collections

    from mrc_nic.observe.eventlog import EventLog

    log = EventLog.__new__(EventLog)  # its state without a lab's maps and socket
    log.log, log.seq, log.planes = collections.deque(maxlen=100), 0, {}
    log.hosts, log.wall_minus_mono = {0: "h0"}, 0.0
    log.reader, log.maps = _Ring(), _Maps()
    return log


def _ev_record(ev: int, ts_s: float):
    from mrc_nic import nic
    from mrc_nic.nic.events import EvEvent

    return EvEvent(
        type=nic.EventType.EV_STATE,
        qpn=0x100,
        ev=ev,
        old_state=nic.EvState.GOOD,
        new_state=nic.EvState.ASSUMED_BAD,
        cause=nic.EvCause.TIMEOUT,
        psn=1,
        ts=int(ts_s * 1e9),
    )


def test_a_post_comes_after_the_nic_records_already_in_the_ring_and_is_timed_then():
    import time

    from mrc_nic.contract import eventops

    log = _log()
    now = time.time()
    # what the NIC wrote before the fault was posted, not read by the log yet
    log.reader.records = [_ev_record(0xC001, now - 0.002), _ev_record(0xD000, now - 0.001)]
    reply = log.op_post(eventops.Post(event={"type": "fault", "id": 1, "mode": "down"}), None)
    assert reply.seq == 3
    events = list(log.log)
    assert [e["type"] for e in events] == ["ev_state", "ev_state", "fault"]
    assert events[2]["time"] >= max(e["time"] for e in events[:2])
    # the plane on every EV record: looked up in the EV map; None for an EV gone
    assert [e["plane"] for e in events[:2]] == [0xC001 % 4, None]
    # and kept: the EV's entry may be deleted (a replaced EV) before its next record
    assert log.plane_of(0x100, 0xC001) == 0xC001 % 4 and (0x100, 0xC001) in log.planes


def test_a_long_log_is_read_in_replies_that_fit_a_line_and_loses_nothing():
    """A lab that logged thousands of events (a reverse-EV storm) made the
    reply of `mrc-nic events` longer than a line may be, and the CLI said the
    event log was not running. Replies now stop at READ_BYTES_MAX; the
    reader asks again from `next`."""
    import collections
    import json

    from mrc_nic.contract import eventops, framing

    log = _log()
    log.maps.counter, log.lost_at_start = lambda which: 0, 0
    log.log = collections.deque(maxlen=20_000)
    for seq in range(1, 8_001):
        log.log.append({"type": "reverse_ev_state", "seq": seq, "cause": "x" * 200})
    log.seq = 8_000
    got, since, replies = [], 0, 0
    while True:
        reply = log.read(since, None, eventops.READ_MAX)
        if not reply.events:
            break
        replies += 1
        assert len(json.dumps(reply.events)) < framing.MAX_LINE
        got += [e["seq"] for e in reply.events]
        since = reply.next
    assert got == list(range(1, 8_001)) and replies > 1
