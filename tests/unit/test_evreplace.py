"""The daemon's EV replacement policy (mrc_nic.transport.evreplace), with no root.

The swap itself is BPF's (NIC_KICK_EV_REPLACE, golden tests in
test_nic_engine.py) and the whole thing runs in a lab in test_daemon.py;
here the maps are a recorder, and the tests check which EVs the policy
replaces, when, and with what.
"""

from __future__ import annotations

import types

import pytest

from mrc_nic import nic
from mrc_nic.transport import evreplace, prober
from mrc_nic.transport.prober import EvScan
from mrc_nic.transport.sessions import AppQp

GOOD, BAD, SKIP = nic.EvState.GOOD, nic.EvState.ASSUMED_BAD, nic.EvState.SKIP
QPN = 0x107
AFTER = evreplace.REPLACE_AFTER_S


class RecordingMaps:
    """replace_ev and ev_raw of nic.NicMaps, recorded."""

    def __init__(self, sent: int = 5) -> None:
        self.replaced: list[tuple[int, int, int, int]] = []
        self.planes: list[int | None] = []  # the plane each new EV was given
        self.sent = sent
        self.refuse = False
        self.local_ports = self.peer_ports = 0b11
        self.deleted: list[tuple[int, int]] = []

    def delete_ev(self, qpn: int, ev: int) -> None:
        self.deleted.append((qpn, ev))

    def port_bitmap(self, host: int) -> int:
        return self.local_ports

    def sq_raw(self, qpn: int):
        return types.SimpleNamespace(peer_ports=self.peer_ports)

    def ev_raw(self, qpn: int, ev: int):
        return types.SimpleNamespace(stats=types.SimpleNamespace(tx_pkts=self.sent))

    def replace_ev(self, qpn: int, slot: int, old: int, new: int, *, plane=None) -> bool:
        if self.refuse:
            return False
        self.replaced.append((qpn, slot, old, new))
        self.planes.append(plane)
        return True


@pytest.fixture(autouse=True)
def no_event_log(monkeypatch):
    posted = []
    monkeypatch.setattr(evreplace.client, "post_event", lambda lab, event: posted.append(event))
    return posted


def make_sq(planes: int = 2, per_plane: int = 4, ev_min_active: int = 0) -> AppQp:
    sq = AppQp.__new__(AppQp)
    sq.qp = types.SimpleNamespace(qpn=QPN)
    sq.evs = {100 + i: i % planes for i in range(planes * per_plane)}
    sq.ev_min_active = ev_min_active
    sq.retired_tx_pkts = {}
    return sq


class Scans:
    """Successive scans of one QP's EVs: states and ack counts move as told."""

    def __init__(self, sq: AppQp) -> None:
        self.sq = sq
        self.state = dict.fromkeys(sq.evs, GOOD)
        self.acks = dict.fromkeys(sq.evs, 0)
        self.lost = dict.fromkeys(sq.evs, 0)
        self.rtt_ns = 0  # the round trip of every EV's latest acknowledged packet

    def ack(self, *planes: int) -> None:
        """A packet acknowledged on every active EV of these planes."""
        for ev, plane in self.sq.evs.items():
            if plane in planes and self.state.get(ev, GOOD) in (GOOD, SKIP):
                self.acks[ev] = self.acks.get(ev, 0) + 1

    def rows(self) -> list[EvScan]:
        return [
            EvScan(
                QPN,
                ev,
                plane,
                self.state.get(ev, GOOD),
                self.acks.get(ev, 0),
                self.lost.get(ev, 0),
                rtt_last_ns=self.rtt_ns,
            )
            for ev, plane in self.sq.evs.items()
        ]

    def fail(self, *evs: int) -> None:
        """These EVs lose a packet: ASSUMED_BAD."""
        for ev in evs:
            self.state[ev] = BAD
            self.lost[ev] = self.lost.get(ev, 0) + 1


def run(replacer, sq, scans, t0: float, t1: float, acked_planes=(0, 1), step: float = 0.002):
    t = t0
    while t <= t1 + 1e-9:
        scans.ack(*acked_planes)
        replacer.step(t, {QPN: sq}, scans.rows())
        t += step
    return t


def test_an_ev_bad_long_enough_on_a_working_plane_is_replaced_in_its_slot(no_event_log):
    sq, maps = make_sq(), RecordingMaps(sent=7)
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(102)  # plane 0, slot 2
    run(replacer, sq, scans, 0.012, 0.012 + AFTER - 0.004)
    assert maps.replaced == [], "not before REPLACE_AFTER_S"
    t = run(replacer, sq, scans, 0.012 + AFTER, 0.012 + AFTER + 0.001)
    ((qpn, slot, old, new),) = maps.replaced
    assert (qpn, slot, old) == (QPN, 2, 102)
    assert new not in (100 + i for i in range(8)) and new > max(range(100, 108))
    assert list(sq.evs) == [100, 101, new, 103, 104, 105, 106, 107], "same slot, same order"
    assert sq.evs[new] == 0, "the same plane"
    # The old EV's state stays a while (a program run may still hold it) ...
    assert maps.deleted == [] and sq.retired_tx_pkts == {}
    run(replacer, sq, scans, t, t + evreplace.RETIRE_AFTER_S + 0.002)
    # ... then goes, and its packets still count for its plane.
    assert maps.deleted == [(QPN, 102)]
    assert sq.retired_tx_pkts == {0: 7}
    assert replacer.replaced == 1
    assert no_event_log == [
        {"type": "ev_replaced", "host": "h0", "qpn": QPN, "plane": 0, "old_ev": 102}
        | {"new_ev": new, "slot": 2, "cause": "retired"}
    ]
    assert maps.planes == [0]


def test_a_plane_with_nothing_acknowledged_gets_no_replacements():
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    for ev, plane in sq.evs.items():  # plane 1 blackholed: its EVs go bad one by one
        if plane == 1 and ev != 107:
            scans.fail(ev)
    # 107 stays GOOD but untried (no acks): no evidence that plane 1 works.
    run(replacer, sq, scans, 0.012, 0.012 + 5 * AFTER, acked_planes=(0,))
    assert maps.replaced == []


def test_below_the_floor_bad_evs_are_replaced_whatever_their_plane():
    sq, maps = make_sq(ev_min_active=5), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    for ev, plane in sq.evs.items():  # plane 1 dead, and one EV of plane 0 too
        if plane == 1 or ev == 100:
            scans.fail(ev)
    # 3 active (100's plane-0 siblings: 102, 104, 106) < 5: two replacements,
    # the longest-bad first: 100 (plane 0 works), and one EV of plane 1 for the floor.
    run(replacer, sq, scans, 0.012, 0.012 + AFTER + 0.001, acked_planes=(0,))
    old = [r[2] for r in maps.replaced]
    assert 100 in old
    assert sum(sq.evs.get(e) is None for e in (101, 103, 105, 107)) == 1, old
    assert len(maps.replaced) == 2


def test_fresh_values_skip_the_profile_and_wrap_below_the_ev_limit():
    sq = make_sq()
    sq.evs = {65534: 0, 65535: 1, 49152: 0, 49153: 1}
    track = evreplace._Track(next_value=65535)
    replacer = evreplace.Replacer("lab", "h0", 0, RecordingMaps())
    values = [replacer._fresh_value(sq, track) for _ in range(3)]
    assert values == [49154, 49155, 49156]


def test_a_slot_that_moved_on_is_left_alone():
    sq, maps = make_sq(), RecordingMaps()
    maps.refuse = True
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(103)
    run(replacer, sq, scans, 0.012, 0.012 + 2 * AFTER)
    assert 103 in sq.evs and sq.retired_tx_pkts == {} and replacer.replaced == 0


def test_a_plane_whose_port_is_down_at_either_end_gets_no_fresh_evs():
    """Even while its other EVs were acknowledged a moment ago (a plane going
    down link by link) and below the floor: the engine would not use them."""
    for local, peer in ((0b01, 0b11), (0b11, 0b01)):
        sq, maps = make_sq(ev_min_active=8), RecordingMaps()
        maps.local_ports, maps.peer_ports = local, peer
        replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
        run(replacer, sq, scans, 0.0, 0.01)
        scans.fail(100, 101)
        run(replacer, sq, scans, 0.012, 0.012 + 2 * AFTER)
        assert [r[2] for r in maps.replaced] == [100], "plane 1 is down at one end"


def test_late_acks_of_a_plane_that_just_died_are_no_evidence():
    """A link-bound plane's queues hold tens of ms of packets: the SACKs of
    those sent before it died go on arriving long after its EVs went bad.
    They were sent before the failure, so they say nothing of the plane now."""
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(101, 103, 105)
    scans.rtt_ns = 60_000_000  # 60 ms of queue: sent before the failure at 12 ms
    t = run(replacer, sq, scans, 0.012, 0.012 + 2 * AFTER)  # plane 1's last SACKs, on 107
    run(replacer, sq, scans, t, 0.012 + 5 * AFTER, acked_planes=(0,))
    assert maps.replaced == []


def test_acks_of_packets_sent_after_the_failure_are_evidence():
    """The same round trip, but the SACKs go on for longer than it: packets
    sent after the EVs went bad came through plane 1, which still works."""
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(101, 103, 105)
    scans.rtt_ns = 30_000_000
    run(replacer, sq, scans, 0.012, 0.012 + 0.03 + 2 * AFTER)
    assert sorted(r[2] for r in maps.replaced) == [101, 103, 105]


def test_a_healed_plane_keeps_its_evs_for_one_probe_round():
    """Plane 1 dead for a while, then healed: its first acks after the
    silence are not a reason to replace its EVs still bad; their probes
    (PROBE_BACKOFF_MAX_S apart at most) bring them back."""
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(101, 103, 105, 107)
    t = run(replacer, sq, scans, 0.012, 0.5, acked_planes=(0,))
    scans.state[107] = GOOD  # the heal: one EV's probe answered first
    grace = evreplace.Timing().plane_back_grace(4)
    t = run(replacer, sq, scans, t, t + grace - 0.006)
    assert maps.replaced == [], "a probe round for the others first"
    run(replacer, sq, scans, t, t + 0.02)
    assert sorted(r[2] for r in maps.replaced) == [101, 103, 105], "then they go"


def test_an_ev_that_failed_again_between_two_scans_starts_a_new_clock():
    """Bad, back (a probe answered) and bad again with no scan in between
    (a daemon busy for a while): the clock starts at the new failure."""
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(102)
    run(replacer, sq, scans, 0.012, 0.012 + AFTER - 0.004)
    scans.fail(102)  # came back and failed again, unseen
    t = run(replacer, sq, scans, 0.012 + AFTER, 0.012 + 2 * AFTER - 0.006)
    assert maps.replaced == []
    run(replacer, sq, scans, t, t + 0.01)
    assert [r[2] for r in maps.replaced] == [102]


def test_forget_deletes_the_replaced_evs_still_kept_and_starts_afresh():
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(103)
    run(replacer, sq, scans, 0.012, 0.012 + AFTER + 0.001)
    assert [r[2] for r in maps.replaced] == [103] and maps.deleted == []
    replacer.forget(sq)
    assert maps.deleted == [(QPN, 103)]
    assert replacer._tracks == {}


def test_a_controllers_swap_moves_the_ev_to_the_new_port(no_event_log):
    """REPLACE_EV (transport.profileops): the new EV takes the old one's slot on its
    own plane; the old one's packets still count for the old plane."""
    maps = RecordingMaps(sent=9)
    replacer = evreplace.Replacer("lab", "h0", 0, maps)
    sq = make_sq()
    assert replacer.swap(1.0, sq, 101, 0x4242, 0, cause="REPLACE_EV")  # plane 1 -> plane 0
    assert maps.replaced == [(QPN, 1, 101, 0x4242)] and maps.planes == [0]
    assert list(sq.evs)[1] == 0x4242 and sq.evs[0x4242] == 0
    assert no_event_log[-1]["cause"] == "REPLACE_EV" and no_event_log[-1]["plane"] == 0
    replacer._delete_retired(1.0 + evreplace.RETIRE_AFTER_S + 0.001, sq, replacer._tracks[QPN])
    assert maps.deleted == [(QPN, 101)] and sq.retired_tx_pkts == {1: 9}
    maps.refuse = True  # the slot moved on meanwhile: nothing changes
    assert not replacer.swap(1.1, sq, 0x4242, 0x4343, 1)
    assert 0x4242 in sq.evs and 0x4343 not in sq.evs


def test_the_default_labs_times_are_the_constants_and_a_slow_lab_stretches_them():
    """Timing.for_rtt / for_probes: unchanged at the default lab's 515 us; on
    the 32x8 lab's 51 ms, as many probe intervals of that lab as the constants
    are of the default's."""
    default = evreplace.Timing.for_probes(prober.Timing.for_rtt(515e-6))
    assert default == evreplace.Timing()
    assert default.probes == prober.Timing()
    slow = evreplace.Timing.for_probes(prober.Timing.for_rtt(0.051))
    assert slow.probes.probe_interval_s == pytest.approx(0.051)
    assert slow.probes.backoff_max_s == pytest.approx(prober.BACKOFF_STEPS * 0.051)
    assert slow.probes.scan_interval_s == pytest.approx(0.0255)
    ratio = 0.051 / prober.PROBE_INTERVAL_S
    assert slow.replace_after_s == pytest.approx(evreplace.REPLACE_AFTER_S * ratio)
    assert slow.plane_silent_s == pytest.approx(evreplace.PLANE_SILENT_S * ratio)
    assert slow.lossy_window_s == pytest.approx(evreplace.LOSSY_WINDOW_S * ratio)
    assert slow.plane_back_grace(4) > evreplace.Timing().plane_back_grace(4)


def test_on_a_slow_lab_an_ev_waits_for_its_probes_before_it_is_replaced():
    """51 ms round trips: an EV bad for the default lab's REPLACE_AFTER_S (its
    probes could not have been answered yet) stays; it goes after the lab's own."""
    timing = evreplace.Timing.for_probes(prober.Timing.for_rtt(0.051))
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps, timing), Scans(sq)
    run(replacer, sq, scans, 0.0, 0.05, step=0.01)
    scans.fail(103)
    t = run(replacer, sq, scans, 0.06, 0.06 + 5 * AFTER, step=0.01)
    assert maps.replaced == [], "four default waits are not one slow probe round"
    run(replacer, sq, scans, t, 0.06 + timing.replace_after_s + 0.02, step=0.01)
    assert [r[2] for r in maps.replaced] == [103]


def test_next_due_is_when_the_replacer_decides_next():
    """The prober scans by then (Prober.wake_at): a bad EV's replacement
    time, then the retired EV's deletion, then nothing."""
    sq, maps = make_sq(), RecordingMaps()
    replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
    assert replacer.next_due(0.0) == float("inf")
    run(replacer, sq, scans, 0.0, 0.01)
    scans.fail(103)
    replacer.step(0.012, {QPN: sq}, scans.rows())
    assert replacer.next_due(0.012) == pytest.approx(0.012 + AFTER)
    run(replacer, sq, scans, 0.014, 0.012 + AFTER)
    assert [r[2] for r in maps.replaced] == [103]
    due = replacer.next_due(0.012 + AFTER)
    assert due == pytest.approx(0.012 + AFTER + evreplace.RETIRE_AFTER_S)
    replacer.step(due + 1e-9, {QPN: sq}, scans.rows())
    assert maps.deleted == [(QPN, 103)] and replacer.next_due(due) == float("inf")


def test_a_long_gap_between_scans_is_no_silence_of_a_plane():
    """Scans run when something is due: one after a quiet second finds acks on
    every plane, which is no heal (no grace: EV 103 of plane 1, bad since
    before the gap, is replaced at once). A scan between that saw none of
    plane 1's acks makes it one: its bad EVs get their grace first."""
    for quiet_scan in (False, True):
        sq, maps = make_sq(), RecordingMaps()
        replacer, scans = evreplace.Replacer("lab", "h0", 0, maps), Scans(sq)
        run(replacer, sq, scans, 0.0, 0.004)
        scans.fail(103)  # plane 1
        run(replacer, sq, scans, 0.006, 0.006)
        if quiet_scan:
            run(replacer, sq, scans, 0.5, 0.5, acked_planes=(0,))
        run(replacer, sq, scans, 1.0, 1.0)  # acks on both planes again
        if quiet_scan:
            assert maps.replaced == [], "plane 1 came back after a silence: its grace first"
        else:
            assert [r[2] for r in maps.replaced] == [103], "no grace: plane 1 was not silent"
