"""Replacing failed EVs by fresh ones of the same plane (run by the host daemon).

An EV goes ASSUMED_BAD in BPF the moment a packet sent on it is lost, and
comes back only when a probe on it is answered (mrc_nic.transport.prober). When its
path stays broken, e.g. a T0-T1 link that blackholes while the kernel's ECMP
keeps hashing into it, the QP sprays over fewer of that plane's EVs for as
long as the fault lasts, and the plane carries less than its share. MRC
replaces such an EV by a fresh one from the same plane (OCP API:
MRC_CTL_EV_OP_REPLACE_EV): a new UDP source port is a new ECMP hash, most
likely a path around the fault.

The policy (mrc-nic's; the OCP API leaves it to the implementation):
- An EV ASSUMED_BAD for REPLACE_AFTER_S (a few of its probes
  unanswered) is replaced if its plane still works for this QP: some EV of
  the plane had a packet acknowledged that was *sent* after this one went
  bad. The send time, not the time the ACK came, is the evidence: on a
  link-bound lab a plane's queues hold tens of ms of packets, and those sent
  before the plane died go on being acknowledged long after it did. A scan
  bounds the send time of the newest packet acknowledged since the last scan
  from below by (last scan - that EV's latest round trip). When the plane
  itself comes back (a heal), its EVs still bad get the time their probes
  need to bring them all back (the longest backoff, then the plane's probe
  budget for as many EVs, twice over) before any is replaced: a healed
  plane keeps its EVs. A plane
  that failed as a whole (down, blackholed) gets no replacements: fresh EVs
  would fail the same way, each costing a lost packet (and a fresh EV, GOOD
  but untried, is no evidence that a plane works). Its probes bring its EVs
  back when it heals. Nor does a plane whose port is down at either end
  (the engine does not use it; a fresh EV there would sit untried).
- The floor, ev_min_active (OCP EV profile attribute): while fewer of a QP's
  EVs are active, its longest-bad EVs are replaced whatever their plane,
  until the floor is met (each still after REPLACE_AFTER_S, so a dead fabric
  costs at most one packet per EV per REPLACE_AFTER_S).
- A fresh EV takes the old one's slot in the profile (the round robin's
  order stays) and starts GOOD with zero counters. Values are drawn from a
  per-QP counter above the profile's, so a value just retired (whose hash
  led into the fault) does not come back soon.

The swap is a NIC_KICK_EV_REPLACE kick (nic.NicMaps.replace_ev): under the
QP's lock in BPF, safe while packets flow. The old EV's state is deleted
RETIRE_AFTER_S later, when no program run can still hold it (nic_evs reuses
freed elements at once), and its packets are then counted for its plane.
Each replacement is posted to the lab's event log (type ev_replaced). The
daemon calls forget() when it closes a QP.
"""

from __future__ import annotations

import dataclasses
import math
import sys

from mrc_nic import nic
from mrc_nic.lab import client
from mrc_nic.nic import wire
from mrc_nic.transport import prober
from mrc_nic.transport.ev_profiles import AUTO_EV_BASE as EV_BASE
from mrc_nic.transport.prober import PLANE_PROBES_PER_S, EvScan

# The times are the default lab's (design RTT 515 us); a slower lab stretches
# them with its probes' (Timing.for_probes).
REPLACE_AFTER_S = 0.02  # ASSUMED_BAD this long: 4 probes unanswered (prober's backoff)
RETIRE_AFTER_S = 0.005  # a replaced EV's state is deleted this much later
# A plane with no packet acknowledged for this long was down: when acks come
# again, its bad EVs first get plane_back_grace() to be answered (a heal
# brings every EV back by its probes, no fresh values).
PLANE_SILENT_S = 0.05


# A lossy path (one that drops a share of its packets, not all): its EV comes
# back with each answered probe and fails again soon, so it is never bad for
# REPLACE_AFTER_S at a stretch. LOSSY_FAILURES failures within LOSSY_WINDOW_S
# retire it at once (the papers: "a path losing 20% is retired at once").
LOSSY_FAILURES = 3
LOSSY_WINDOW_S = 0.2
ACTIVE = (nic.EvState.GOOD, nic.EvState.SKIP)
# The same times in the default lab's first probe intervals (2 ms): an EV is
# replaced after 4 unanswered probes (0, 2, 6 and 14 ms), a plane is silent
# for 25 of them, a lossy EV's failures are counted over 100.
REPLACE_AFTER_PROBES = REPLACE_AFTER_S / prober.PROBE_INTERVAL_S
PLANE_SILENT_PROBES = PLANE_SILENT_S / prober.PROBE_INTERVAL_S
LOSSY_WINDOW_PROBES = LOSSY_WINDOW_S / prober.PROBE_INTERVAL_S


@dataclasses.dataclass(frozen=True)
class Timing:
    """A lab's replacement times, as many probe intervals as on the default
    lab: on a slower one an EV was replaced before a probe of it could be
    answered (20 ms against the 32x8 lab's 51 ms round trip), and a plane's
    queue could hold its acks longer than PLANE_SILENT_S."""

    probes: prober.Timing = prober.Timing()
    replace_after_s: float = REPLACE_AFTER_S
    plane_silent_s: float = PLANE_SILENT_S
    lossy_window_s: float = LOSSY_WINDOW_S

    @classmethod
    def for_probes(cls, probes: prober.Timing) -> Timing:
        interval = probes.probe_interval_s
        return cls(
            probes=probes,
            replace_after_s=max(REPLACE_AFTER_S, REPLACE_AFTER_PROBES * interval),
            plane_silent_s=max(PLANE_SILENT_S, PLANE_SILENT_PROBES * interval),
            lossy_window_s=max(LOSSY_WINDOW_S, LOSSY_WINDOW_PROBES * interval),
        )

    def plane_back_grace(self, bad_evs: int) -> float:
        """How long a plane that came back keeps its bad EVs from replacement:
        the longest probe backoff, then one probe each at the plane's budget,
        twice over (a scan's batching, a reply's round trip)."""
        return self.probes.backoff_max_s + 2 * bad_evs / PLANE_PROBES_PER_S


def _next(value: int) -> int:
    """The EV value after `value`, within EV_BASE .. wire.EV_MAX."""
    return value + 1 if EV_BASE <= value < wire.EV_MAX else EV_BASE


@dataclasses.dataclass
class _Track:
    """What the replacer remembers of one send QP."""

    next_value: int  # the next EV value to try
    # EV -> when a scan first saw its current failure
    bad_since: dict[int, float] = dataclasses.field(default_factory=dict)
    # EV -> its acks and losses at the last scan
    acks: dict[int, int] = dataclasses.field(default_factory=dict)
    lost: dict[int, int] = dataclasses.field(default_factory=dict)
    # plane -> the latest send time (lower bound) of a packet of it acknowledged
    plane_acked: dict[int, float] = dataclasses.field(default_factory=dict)
    last_scan: float | None = None  # when the previous scan ran
    # plane -> the last scan that saw a packet of it acknowledged; and (the
    # scan at which acks came again after plane_silent_s without any, grace)
    plane_seen: dict[int, float] = dataclasses.field(default_factory=dict)
    # plane -> the first scan since plane_seen that saw none of its acks
    plane_quiet: dict[int, float] = dataclasses.field(default_factory=dict)
    plane_back: dict[int, tuple[float, float]] = dataclasses.field(default_factory=dict)
    # replaced EVs whose state is still to be deleted: (when replaced, EV, plane)
    retired: list[tuple[float, int, int]] = dataclasses.field(default_factory=list)
    # EV -> when scans saw it fail lately (new losses), within lossy_window_s
    failures: dict[int, list[float]] = dataclasses.field(default_factory=dict)


class Replacer:
    def __init__(
        self, lab: str, host: str, host_index: int, maps: nic.NicMaps, timing: Timing = Timing()
    ) -> None:
        self.lab, self.host, self.host_index, self.maps = lab, host, host_index, maps
        self.timing = timing
        self._tracks: dict[int, _Track] = {}
        self.replaced = 0

    def step(self, now: float, mine: dict, states: list[EvScan]) -> None:
        """mine: {qpn: SendQp} of the QPs sending; states: every EV of
        theirs, from one scan of nic_evs (the prober's)."""
        by_qp: dict[int, list[EvScan]] = {}
        for e in states:
            if e.ev in mine[e.qpn].evs:  # not a replaced EV still to be deleted
                by_qp.setdefault(e.qpn, []).append(e)
        for qpn, evs in by_qp.items():
            self._step_qp(now, mine[qpn], evs)

    def next_due(self, now: float) -> float:
        """When a scan is next needed here (after now): an EV bad for
        replace_after_s, a retired EV's state to delete. inf: none."""
        after = self.timing.replace_after_s
        times = [
            t
            for track in self._tracks.values()
            for t in (
                *(since + after for since in track.bad_since.values()),
                *(when + RETIRE_AFTER_S for when, _, _ in track.retired[:1]),
            )
            if t > now
        ]
        return min(times, default=math.inf)

    def forget(self, sq) -> None:
        """A send QP closes: delete the state of its EVs replaced lately (its
        profile's go with the QP, NicMaps.delete_sq) and what was kept of it."""
        track = self._tracks.pop(sq.qp.qpn, None)
        for _, ev, _ in track.retired if track else ():
            self.maps.delete_ev(sq.qp.qpn, ev)

    def _step_qp(self, now: float, sq, evs: list[EvScan]) -> None:
        track = self._tracks.get(sq.qp.qpn)
        if track is None:
            track = self._tracks[sq.qp.qpn] = _Track(next_value=_next(max(sq.evs)))
        self._delete_retired(now, sq, track)
        timing, bad = self.timing, {}
        since_scan = now if track.last_scan is None else track.last_scan
        track.last_scan = now
        acked_planes = set()
        for e in evs:
            if e.acks > track.acks.get(e.ev, e.acks):
                # acknowledged after the last scan, so sent after (it - the round trip)
                sent = since_scan - e.rtt_last_ns / 1e9
                track.plane_acked[e.plane] = max(track.plane_acked.get(e.plane, sent), sent)
                # Silent: some scan between saw none of its acks. Scans run when
                # something is due, so a long gap between two is no silence.
                quiet = track.plane_quiet.pop(e.plane, None) is not None
                if quiet and now - track.plane_seen.get(e.plane, now) > timing.plane_silent_s:
                    n_bad = sum(o.plane == e.plane and o.state not in ACTIVE for o in evs)
                    track.plane_back[e.plane] = (now, timing.plane_back_grace(n_bad))
                track.plane_seen[e.plane] = now
                acked_planes.add(e.plane)
            # A loss since the last scan starts a new failure: the EV may
            # have come back and failed again between two scans.
            new_loss = e.lost > track.lost.get(e.ev, e.lost)
            track.acks[e.ev], track.lost[e.ev] = e.acks, e.lost
            seen = [t for t in track.failures.get(e.ev, ()) if now - t < timing.lossy_window_s]
            track.failures[e.ev] = [*seen, now] if new_loss else seen
            if len(track.failures.get(e.ev, ())) >= LOSSY_FAILURES:
                bad[e.ev] = e.plane  # lossy: retired now, whatever its state
                track.bad_since.setdefault(e.ev, track.failures[e.ev][0] - timing.replace_after_s)
            elif e.state == nic.EvState.ASSUMED_BAD:
                bad[e.ev] = e.plane
                if new_loss:
                    track.bad_since.pop(e.ev, None)
        for plane in {e.plane for e in evs} - acked_planes:
            track.plane_quiet.setdefault(plane, now)
        track.bad_since = {ev: track.bad_since.get(ev, now) for ev in bad}
        active = sum(e.state in ACTIVE for e in evs)
        due = sorted(
            (since, ev)
            for ev, since in track.bad_since.items()
            if now - since >= timing.replace_after_s
        )
        up = self._planes_up(sq.qp.qpn) if due else 0  # only these planes get fresh EVs
        for since, ev in due:
            plane = bad[ev]
            if not (up >> plane) & 1:
                continue
            lossy = len(track.failures.get(ev, ())) >= LOSSY_FAILURES
            first = track.failures[ev][0] if lossy else since
            back, grace = track.plane_back.get(plane, (-1.0, 0.0))
            works = track.plane_acked.get(plane, -1.0) >= first and (
                back <= first or now - back >= grace
            )
            if (works or active < sq.ev_min_active) and self._replace(now, sq, track, ev, plane):
                active += 1

    def _planes_up(self, qpn: int) -> int:
        """Bitmap of the planes whose port is up here and at the peer (as its
        last ACK said)."""
        try:
            return self.maps.port_bitmap(self.host_index) & self.maps.sq_raw(qpn).peer_ports
        except KeyError:
            return 0

    def _fresh_value(self, sq, track: _Track, plane: int = 0) -> int:
        """An EV value in no slot of the profile and not retired lately: from
        the profile's backup set (sq.backup, transport.profiles), else from
        the QP's counter."""
        retired = {ev for _, ev, _ in track.retired}
        pick = getattr(sq, "backup", None)
        value = pick(plane, set(sq.evs) | retired) if pick is not None else None
        if value is not None:
            return value
        while True:
            value, track.next_value = track.next_value, _next(track.next_value)
            if value not in sq.evs and value not in retired:
                return value

    def _delete_retired(self, now: float, sq, track: _Track) -> None:
        """Delete replaced EVs' state once no program run can hold it; their
        packets go on counting for their plane (sq.retired_tx_pkts)."""
        while track.retired and now - track.retired[0][0] >= RETIRE_AFTER_S:
            _, ev, plane = track.retired.pop(0)
            try:
                sent = self.maps.ev_raw(sq.qp.qpn, ev).stats.tx_pkts
            except KeyError:
                continue
            self.maps.delete_ev(sq.qp.qpn, ev)
            sq.retired_tx_pkts[plane] = sq.retired_tx_pkts.get(plane, 0) + sent

    def _replace(self, now: float, sq, track: _Track, old: int, plane: int) -> bool:
        return self.swap(now, sq, old, self._fresh_value(sq, track, plane), plane)

    def swap(self, now: float, sq, old: int, new: int, plane: int, cause: str = "retired") -> bool:
        """Put wire EV `new` (on `plane`) where `old` is in a sending QP's
        profile, in the NIC (NicMaps.replace_ev) and in sq.evs; the old EV's
        state is deleted RETIRE_AFTER_S later. Posted to the lab's event log
        (ev_replaced, with its cause: the replacer's "retired", or the
        controller's "REPLACE_EV"). False when nothing changed (the QP closed,
        the slot moved on, nic_evs is full)."""
        qpn = sq.qp.qpn
        track = self._tracks.get(qpn)
        if track is None:
            track = self._tracks[qpn] = _Track(next_value=_next(max(sq.evs)))
        slot = list(sq.evs).index(old)
        old_plane = sq.evs[old]
        try:
            if not self.maps.replace_ev(qpn, slot, old, new, plane=plane):
                return False
        except KeyError:
            return False  # the QP closed meanwhile
        except (OSError, ValueError) as e:  # nic_evs full (E2BIG), new in the profile already
            print(f"evreplace: QP {qpn:#x}: EV {old} not replaced: {e}", file=sys.stderr)
            return False
        sq.evs = {new if ev == old else ev: (plane if ev == old else p) for ev, p in sq.evs.items()}
        track.retired.append((now, old, old_plane))
        track.acks.pop(old, None)
        track.lost.pop(old, None)
        track.failures.pop(old, None)
        track.bad_since.pop(old, None)
        self.replaced += 1
        event = {"type": "ev_replaced", "host": self.host, "qpn": qpn, "plane": plane}
        client.post_event(
            self.lab, {**event, "old_ev": old, "new_ev": new, "slot": slot, "cause": cause}
        )
        return True
