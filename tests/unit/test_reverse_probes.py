"""When a receiver's daemon probes its reverse EVs (transport.reverse), on a
fake NIC that answers what the test says: every probe a daemon sends costs the
transfer (docs/benchmarks.md, "The receiver's probes"), so a GOOD EV whose
probes are answered is probed about every SETTLED_INTERVAL_S, an EV in doubt
every PROBE_INTERVAL_S, and a settled EV that misses one probe is probed
again at once and is ASSUMED_BAD after MISSES misses, as before."""

from __future__ import annotations

import itertools
import struct
from types import SimpleNamespace

import pytest

from mrc_nic import nic
from mrc_nic.lab import topology
from mrc_nic.transport import reverse
from tests.helpers.env import NETNS_DIR

QPN, PEER_QPN = 0x11, 0x22
PSN_AT = 42 + 9  # the probe number: BTH.psn's 3 bytes (BTH at 42; opcode, flags, pkey, QPN, A)


class FakeNic:
    """What ReverseEvs reads and writes of the NIC; replies as `answer` says."""

    def __init__(self, planes: int) -> None:
        self.ports = (1 << planes) - 1
        self.data_pkts = 0
        self.replies: dict[int, SimpleNamespace] = {}  # set index: its nic_rev_probes entry
        self.sets: list[list[nic.RevEv]] = []
        self.evs: list[int] = []  # the set's EV values, by index
        self.rtt_ns = 100_000  # the round trip BPF records with each reply

    def rq_raw(self, qpn):
        return SimpleNamespace(stats=SimpleNamespace(data_pkts=self.data_pkts))

    def rev_probes(self, qpn):
        return [
            self.replies.get(i, SimpleNamespace(ev=0, replies=0, last_psn=0, rtt_ns=0))
            for i in range(len(self.evs))
        ]

    def set_rev_evs(self, qpn, evs):
        self.sets.append(evs)
        self.evs = [e.ev for e in evs]

    def forget_rev_probe(self, qpn, index):
        self.replies.pop(index, None)

    def port_bitmap(self, host):
        return self.ports

    def ports_disabled(self, host):
        return 0

    def port(self, host, plane):
        return {"mac": "02:00:00:00:01:00", "nh_mac": "02:00:00:00:00:00", "ifindex": 1}

    def answer(self, ev: int, number: int) -> None:
        """The peer answered probe `number` of reverse EV `ev` (BPF records it)."""
        i = self.evs.index(ev)
        old = self.replies.get(i)
        self.replies[i] = SimpleNamespace(
            ev=ev, replies=(old.replies if old else 0) + 1, last_psn=number, rtt_ns=self.rtt_ns
        )


class Socket:
    def __init__(self, sent: list) -> None:
        self.sent = sent

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)


def fake_lab(monkeypatch, name: str = "default.toml"):
    """A ReverseEvs of h1 on lab file `name`, a FakeNic under it, its probes
    collected; one receive QP's set open."""
    topo = topology.load(NETNS_DIR / name)
    maps = FakeNic(topo.planes)
    monkeypatch.setattr(reverse.client, "post_event", lambda *a, **kw: None)
    rev = reverse.ReverseEvs(topo, "h1", 1, maps)
    sent: list[bytes] = []
    rev._socks = {p: Socket(sent) for p in range(topo.planes)}
    rev.open(QPN, 0, PEER_QPN)
    return rev, maps, sent


@pytest.fixture
def fake(monkeypatch):
    return fake_lab(monkeypatch)


def probes(frames: list[bytes]) -> list[tuple[int, int]]:
    """(EV, probe number) of each probe frame: UDP source port and BTH.psn."""
    return [
        (struct.unpack_from(">H", f, 34)[0], int.from_bytes(f[PSN_AT : PSN_AT + 3], "big"))
        for f in frames
    ]


def run(rev, maps, sent, start: float, end: float, *, answer=lambda ev: True) -> list[tuple]:
    """Step every millisecond from start to end with data coming in; the probes
    sent, as (time, EV); the ones `answer` allows are answered at once."""
    out = []
    t = start
    while t < end:
        maps.data_pkts += 10
        before = len(sent)
        rev.step(t)
        for ev, number in probes(sent[before:]):
            out.append((round(t, 3), ev))
            if answer(ev):
                maps.answer(ev, number)
        t += 0.001
    return out


def test_a_healthy_set_is_probed_at_the_settled_interval(fake):
    rev, maps, sent = fake
    evs = list(maps.evs)
    first = run(rev, maps, sent, 0.0, 0.02)
    # UNTRIED: probed at once and again at the next step, then GOOD and settled
    assert {ev for _, ev in first if _ == 0.0} == set(evs)
    assert all(s.state == nic.RevState.GOOD for s in maps.sets[-1]), maps.sets[-1]
    later = run(rev, maps, sent, 0.02, 0.5)
    per_ev = {ev: [t for t, e in later if e == ev] for ev in evs}
    for ev, times in per_ev.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps and all(
            reverse.SETTLED_INTERVAL_S * 0.75 - 0.005 <= g <= reverse.SETTLED_INTERVAL_S + 0.005
            for g in gaps
        ), (ev, times)
    # 8 EVs over 0.48 s: about 8 * 0.48 / 0.056, against 8 * 120 at PROBE_INTERVAL_S
    assert len(later) <= len(evs) * 0.48 / (reverse.SETTLED_INTERVAL_S * 0.75) + len(evs)


def test_a_settled_ev_that_misses_a_probe_is_probed_often_again_and_goes_bad(fake):
    rev, maps, sent = fake
    run(rev, maps, sent, 0.0, 0.2)
    dead = maps.evs[2]
    missed = run(rev, maps, sent, 0.2, 0.4, answer=lambda ev: ev != dead)
    times = [t for t, ev in missed if ev == dead]
    # the first unanswered probe is judged within a step, then probed every 4 ms
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) <= reverse.PROBE_INTERVAL_S + 0.0015, times
    went_bad = [
        i
        for i, evs in enumerate(maps.sets)
        if (dead, nic.RevState.ASSUMED_BAD) in {(e.ev, e.state) for e in evs}
    ]
    assert went_bad, "the EV whose probes go unanswered is ASSUMED_BAD"
    # ... and, its plane's other EV being GOOD, replaced by a fresh value that works
    final = {e.ev: e.state for e in maps.sets[-1]}
    assert dead not in final and all(s == nic.RevState.GOOD for s in final.values()), final
    # detected within a settled interval, a reply wait and MISSES probes
    bad_at = times[0] + reverse.REPLY_WAIT_S + reverse.MISSES * reverse.PROBE_INTERVAL_S + 0.002
    assert times[0] <= 0.2 + reverse.SETTLED_INTERVAL_S + 0.002
    assert bad_at < 0.4


# ---- a lab slower than the default one: its round trip sets the times ----------------------


def run_late(rev, maps, sent, start, end, delay_s, *, answer=lambda ev: True) -> list[tuple]:
    """As run(), but each allowed probe is answered delay_s after it went out
    (BPF then records that round trip)."""
    out, pending = [], []
    maps.rtt_ns = round(delay_s * 1e9)
    t = start
    while t < end:
        maps.data_pkts += 10
        for due, ev, number in [p for p in pending if p[0] <= t]:
            pending.remove((due, ev, number))
            if ev in maps.evs:
                maps.answer(ev, number)
        before = len(sent)
        rev.step(t)
        for ev, number in probes(sent[before:]):
            out.append((round(t, 3), ev))
            if answer(ev):
                pending.append((t + delay_s, ev, number))
        t += 0.001
    return out


def bad_writes(maps, since: int = 0) -> int:
    """Set writes (from write index `since`) that hold an ASSUMED_BAD EV."""
    return sum(any(e.state == nic.RevState.ASSUMED_BAD for e in evs) for evs in maps.sets[since:])


def test_the_times_are_the_default_labs_there_and_stretch_with_a_slower_labs_rtt():
    default = reverse.Timing.for_rtt(
        topology.load(NETNS_DIR / "default.toml").queues.base_rtt_ns / 1e9
    )
    assert default == reverse.Timing()  # the constants, measured there
    rtt = topology.load(NETNS_DIR / "clos-8.toml").queues.base_rtt_ns / 1e9
    assert rtt > 3 * reverse.REPLY_WAIT_S
    slow = reverse.Timing.for_rtt(rtt)
    assert slow.reply_wait_s == pytest.approx(reverse.REPLY_WAIT_RTTS * rtt)
    assert slow.probe_interval_s == pytest.approx(rtt)
    assert slow.replace_after_s >= slow.reply_wait_s + reverse.MISSES * slow.probe_interval_s


def test_replies_a_slow_lab_takes_its_round_trip_for_fail_no_reverse_ev(monkeypatch):
    """clos-8 at 10 Mbit/s: every reply takes 2 design RTTs. With the default
    lab's 3 ms wait, every EV flipped to ASSUMED_BAD and back (3,516-3,913 state
    changes and 266-270 replacements in one healthy permutation)."""
    rev, maps, sent = fake_lab(monkeypatch, "clos-8.toml")
    delay = 2 * rev.topo.queues.base_rtt_ns / 1e9
    run_late(rev, maps, sent, 0.0, 1.0, delay)
    assert bad_writes(maps) == 0
    assert rev.replaced == 0
    assert all(e.state == nic.RevState.GOOD for e in maps.sets[-1])


def test_replies_slowed_by_a_queue_are_awaited_longer(monkeypatch):
    """The default lab, its data direction queued 10 ms deep: once replies
    come back, their measured round trip sets the wait, and no EV flips."""
    rev, maps, sent = fake_lab(monkeypatch)
    run_late(rev, maps, sent, 0.0, 0.1, 0.010)
    settled = len(maps.sets)
    run_late(rev, maps, sent, 0.1, 0.6, 0.010)
    assert bad_writes(maps, settled) == 0 and rev.replaced == 0
    assert all(e.state == nic.RevState.GOOD for e in maps.sets[-1])


def test_a_dead_reverse_ev_on_a_slow_lab_is_still_found_and_replaced(monkeypatch):
    rev, maps, sent = fake_lab(monkeypatch, "clos-8.toml")
    delay = 2 * rev.topo.queues.base_rtt_ns / 1e9
    run_late(rev, maps, sent, 0.0, 0.5, delay)
    dead = maps.evs[2]
    t = rev.timing
    end = 0.5 + t.settled_interval_s + t.reply_wait_s + t.replace_after_s + 4 * t.probe_interval_s
    run_late(rev, maps, sent, 0.5, end, delay, answer=lambda ev: ev != dead)
    final = {e.ev: e.state for e in maps.sets[-1]}
    assert dead not in final and rev.replaced == 1, final


def test_one_slow_reply_stretches_the_wait_only_so_far(monkeypatch):
    """An EV's latest reply stays in the NIC's record after its path died: a
    queue spike just before must not stretch the set's wait without end."""
    rev, maps, sent = fake_lab(monkeypatch)
    run_late(rev, maps, sent, 0.0, 0.1, 0.050)  # replies 50 ms late: 2 x 50 ms measured
    records = maps.rev_probes(QPN)
    wait = rev._reply_wait(rev._sets[QPN], records)
    assert wait == pytest.approx(reverse.REPLY_WAIT_CAP * rev.timing.reply_wait_s)
    assert wait < 2 * 0.050
