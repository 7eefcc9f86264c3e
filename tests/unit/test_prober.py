"""The prober's cheap paths (no root): probe frames patched from a template are
byte for byte what mrc_nic.nic.wire builds, and the scan of nic_evs finds exactly
our EVs: in a batch read's raw buffers, or looked up one by one when they are few."""

from __future__ import annotations

import ctypes
import types

from mrc_nic import nic
from mrc_nic.nic import wire
from mrc_nic.transport import prober


def test_probe_from_a_template_is_what_wire_builds():
    ends = wire.Endpoints(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:01:00:01",
        src_ip="198.18.1.1",
        dst_ip="198.18.1.2",
    )
    template = bytes(wire.probe(ends, ev=1, dqpn=0x010203, psn=0, tx_ts=0, port_bitmap=0b101))
    for ev, psn, ts in ((0xC001, 1, 2), (0xFFFF, 0xFFFFFF, 2**64 - 1), (7, 0x1000001, 12345)):
        want = wire.probe(
            ends, ev=ev, dqpn=0x010203, psn=psn & wire.PSN_MASK, tx_ts=ts, port_bitmap=0b101
        )
        assert prober.probe_frame(template, ev, psn, ts) == bytes(want)


class FakeReader:
    def __init__(self, entries: list[tuple[int, int, int, int]]) -> None:
        self.entries = entries  # (qpn, ev, plane, state)

    def read(self):
        keys = b"".join(bytes(nic.EvKey(q, e)) for q, e, _, _ in self.entries)
        values = b""
        for _, ev, plane, state in self.entries:
            v = nic.EvStateLayout(plane=plane, state=state)
            v.stats.acks, v.stats.lost_pkts = ev + 1, ev + 2  # told apart per EV
            values += bytes(v)
        # the kernel's buffers are larger than what it filled
        pad = 3 * ctypes.sizeof(nic.EvKey)
        return keys + bytes(pad), values, len(self.entries)


def test_scan_reads_our_evs_only():
    bad, good = nic.EvState.ASSUMED_BAD, nic.EvState.GOOD
    ours, other = 0x000100, 0x010100
    entries = [
        (ours, 0xC001, 0, bad),
        (other, 0xC001, 0, bad),  # another host's QP
        (ours, 0xC002, 1, good),
        (ours, 0x0100, 3, bad),  # an EV whose bytes look like a QPN
        (other, ours, 2, bad),  # a key whose EV half holds our QPN's bytes
    ]
    p = prober.Prober.__new__(prober.Prober)
    p.maps = types.SimpleNamespace()
    p._reader = FakeReader(entries)
    got = p._scan_all({ours: object()})
    assert sorted(got) == [
        prober.EvScan(ours, 0x0100, 3, bad, 0x0101, 0x0102),
        prober.EvScan(ours, 0xC001, 0, bad, 0xC002, 0xC003),
        prober.EvScan(ours, 0xC002, 1, good, 0xC003, 0xC004),
    ]


def _value(plane: int, state: int, ev: int) -> bytes:
    v = nic.EvStateLayout(plane=plane, state=state)
    v.stats.acks, v.stats.lost_pkts = ev + 1, ev + 2
    return bytes(v)


def test_a_scan_of_few_evs_looks_up_our_profiles_evs_only(monkeypatch):
    """Up to LOOKUP_MAX EVs: one lookup each, of the profiles' EVs (a replaced
    EV still in the map is not read; one deleted meanwhile is skipped);
    more: the batch read of the whole map."""
    bad, good = nic.EvState.ASSUMED_BAD, nic.EvState.GOOD
    ours = 0x000100
    stored = {
        bytes(nic.EvKey(ours, 0xC001)): _value(0, bad, 0xC001),
        bytes(nic.EvKey(ours, 0xC002)): _value(1, good, 0xC002),
        bytes(nic.EvKey(ours, 0xC0FF)): _value(2, bad, 0xC0FF),  # replaced, not in the profile
    }
    asked = []

    def lookup(fd, key, size):
        asked.append(key)
        if key not in stored:
            raise FileNotFoundError
        return stored[key]

    monkeypatch.setattr(prober.bpfsys, "map_lookup", lookup)
    p = prober.Prober.__new__(prober.Prober)
    p.maps = types.SimpleNamespace(fd=lambda name: 7)
    p._reader = FakeReader([(ours, 0xC0FF, 2, bad)])
    sq = types.SimpleNamespace(evs=[0xC001, 0xC002, 0xC003])  # 0xC003: deleted meanwhile
    got = p._scan({ours: sq})
    assert sorted(got) == [
        prober.EvScan(ours, 0xC001, 0, bad, 0xC002, 0xC003),
        prober.EvScan(ours, 0xC002, 1, good, 0xC003, 0xC004),
    ]
    assert len(asked) == 3
    many = types.SimpleNamespace(evs=list(range(prober.LOOKUP_MAX + 1)))
    assert p._scan({ours: many}) == [prober.EvScan(ours, 0xC0FF, 2, bad, 0xC100, 0xC101)]
    assert len(asked) == 3  # the batch read, no lookups


def test_on_a_slow_lab_a_bad_ev_is_probed_once_a_round_trip_then_backs_off():
    """The 32x8 lab's 51 ms design RTT: an unanswered EV's probes are 51, 102,
    204 ms ... apart (not the default lab's 2 ms, each missed before its reply
    could come), up to BACKOFF_STEPS round trips; scans run every half RTT."""
    rtt, qpn, ev = 0.051, 0x100, 0xC001
    topo = types.SimpleNamespace(queues=types.SimpleNamespace(base_rtt_ns=int(rtt * 1e9)))
    p = prober.Prober(topo, 0, types.SimpleNamespace())
    bad = prober.EvScan(qpn, ev, 0, nic.EvState.ASSUMED_BAD, 0, 1)
    scans, sent = [], []
    p._scan = lambda mine: scans.append(now) or [bad]
    p._send = lambda sq, ev, plane: sent.append(now)
    mine = {qpn: types.SimpleNamespace(lost_pkts=1, evs={ev: 0})}
    now = 0.0
    while now < 6.0:
        p.step(now, mine)
        now += 0.005
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert gaps[0] >= rtt and gaps[1] >= 2 * rtt and gaps[2] >= 4 * rtt, gaps
    late = rtt / 2 + 0.005  # a probe goes at the first scan when due
    assert max(gaps) <= prober.BACKOFF_STEPS * rtt + late, gaps
    assert max(gaps) >= prober.BACKOFF_STEPS * rtt, "it reached the longest backoff"
    assert min(b - a for a, b in zip(scans, scans[1:], strict=False)) >= rtt / 2 - 1e-9


def test_a_bad_ev_backed_off_is_scanned_for_when_its_probe_is_due_not_every_scan_interval():
    """Default lab: an EV that stays bad is probed 2, 4, ... 64 ms apart; the
    scans follow its probes (each, and one a probe interval after it, for
    the reply), not every SCAN_INTERVAL_S nor on an idle cadence; a loss of our
    QPs brings a scan at once, and wake_at() one when the replacer asks."""
    qpn, ev = 0x100, 0xC001
    topo = types.SimpleNamespace(queues=types.SimpleNamespace(base_rtt_ns=515_000))
    p = prober.Prober(topo, 0, types.SimpleNamespace())
    bad = prober.EvScan(qpn, ev, 0, nic.EvState.ASSUMED_BAD, 0, 1)
    scans, sent = [], []
    p._scan = lambda mine: scans.append(now) or [bad]
    p._send = lambda sq, ev, plane: sent.append(now)
    sq = types.SimpleNamespace(lost_pkts=1, evs={ev: 0})
    now = 0.0
    while now < 1.0:
        p.step(now, {qpn: sq})
        now += 0.001
    assert len(sent) >= 15, sent  # 64 ms apart once backed off
    assert len(scans) <= 2 * len(sent) + 1, (len(scans), len(sent))
    n = len(scans)
    sq.lost_pkts += 1  # a new loss: scanned at the next step
    p.step(now, {qpn: sq})
    assert len(scans) == n + 1
    now += 0.003
    assert p.step(now, {qpn: sq}) is None, "nothing due 3 ms on"
    p.wake_at(now)
    now += 0.003
    assert p.step(now, {qpn: sq}) is not None, "the replacer asked"


def test_with_nothing_bad_and_no_new_loss_nothing_is_scanned_until_asked():
    """Every EV GOOD and our losses still: one scan, then none (it was 20 a
    second: 128 lookups each on an 8-plane QP); an EV made bad (EvEvents
    calls wake_at(0)) or a new loss brings the next."""
    qpn, ev = 0x100, 0xC001
    topo = types.SimpleNamespace(queues=types.SimpleNamespace(base_rtt_ns=515_000))
    p = prober.Prober(topo, 0, types.SimpleNamespace())
    good = prober.EvScan(qpn, ev, 0, nic.EvState.GOOD, 5, 0)
    scans = []
    p._scan = lambda mine: scans.append(now) or [good]
    sq = types.SimpleNamespace(lost_pkts=0, evs={ev: 0})
    now = 0.0
    while now < 2.0:
        p.step(now, {qpn: sq})
        now += 0.001
    assert scans == [0.0]
    p.wake_at(0.0)
    assert p.step(now, {qpn: sq}) is not None
    now += 0.003
    sq.lost_pkts = 1
    assert p.step(now, {qpn: sq}) is not None and len(scans) == 3
