"""The reverse EV sets of this host's receive QPs (run by the host daemon).

MRC sends SACKs, NACKs and PROBE_REPLYs back over a reverse EV set that the
receiver keeps healthy. Each receive QP here gets one (REV_PER_PLANE EVs per
plane, values of their own); the NIC picks one of its GOOD EVs for every
answer, of the plane the packet came in on while that plane has one, else
of any plane (bpf/nic_answers.h, route_reverse). This module decides the
states, from probes: while the QP receives, each reverse EV is probed (a
PROBE with MRC_PROBE_F_REVERSE, sent on that EV and plane to the peer's send
QP, which answers in place; BPF records the reply in nic_rev_probes) every
PROBE_INTERVAL_S while it is in doubt (not GOOD, or its last probe missed),
and every SETTLED_INTERVAL_S (with jitter, so a set's probes do not go out
together) while GOOD: at 4 ms a healthy set's probes reordered the
transfer's packets enough to cost 10-15% of its goodput in spurious resends
(docs/benchmarks.md, "The receiver's probes"). The first missed probe
brings PROBE_INTERVAL_S back at once. An EV starts UNTRIED, unused until a
probe on it is answered (so a fresh value whose path is broken never carries an ACK;
until some EV of the set is GOOD, answers go back in place). An EV whose
last MISSES probes, each older than REPLY_WAIT_S and followed by data (a
sender that closed or paused fails no path), went unanswered is
ASSUMED_BAD: no answer takes it, its probes go on, and the next answered
one makes it GOOD again. Cumulative
SACKs make the ACKs lost meanwhile harmless; what they cost is the sender's
ACK clock (docs/nic-program.md, "Reverse EVs"). These times are the default
lab's: a slower lab stretches them with its design RTT, and a set whose
replies come back late awaits them longer (Timing, _reply_wait).

Replacement, as evreplace does for data EVs: an EV ASSUMED_BAD for
REPLACE_AFTER_S is given a fresh value (a new ECMP hash) if another EV of
its plane is GOOD (the plane's reverse direction works: a fabric link is at
fault, not the host's); a plane whose reverse EVs all failed keeps them, and
its answers take the other planes until probes bring them back. So the set
keeps REV_PER_PLANE EVs on every plane.

Every change of state and every replacement goes to the lab's event log
(types reverse_ev_state, reverse_ev_replaced).
"""

from __future__ import annotations

import dataclasses
import random
import socket
import time

from mrc_nic import nic
from mrc_nic.lab import client
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import wire
from mrc_nic.transport.prober import plane_socket, probe_frame

REV_PER_PLANE = 2  # reverse EVs per plane; a set holds at most nic.REV_EVS
# The times below are the default lab's (design RTT 515 us); a slower lab
# stretches them with its round trip (Timing.for_rtt).
PROBE_INTERVAL_S = 0.004  # per reverse EV in doubt, while the QP receives; the judging step
SETTLED_INTERVAL_S = 0.064  # per GOOD reverse EV whose last probe was answered
REPLY_WAIT_S = 0.003  # a probe unanswered this long is missed
MISSES = 2  # consecutive missed probes: ASSUMED_BAD (one lost probe is not a failure)
REPLACE_AFTER_S = 0.02
# A reply crosses the data direction's queues: it is missed only after this
# many design RTTs, and this many of the set's latest measured round trips.
REPLY_WAIT_RTTS = 4
REPLY_WAIT_MEASURED = 2
# ... at most this many times the lab's wait: an EV's latest reply is kept
# after its path died, and one queue spike before then must not stretch the
# set's wait for good.
REPLY_WAIT_CAP = 8
IDLE_AFTER_S = 0.1  # no data for this long: the QP's reverse EVs are not probed
# Reverse EV values: a range of their own (data EVs start at ev_profiles.AUTO_EV_BASE, 49152).
REV_EV_BASE = 40960
REV_EV_END = 49152
STATE_NAMES = nic.RevState.NAMES


@dataclasses.dataclass(frozen=True)
class Timing:
    """A lab's reverse-probe times. The constants were measured on the
    default lab; on a slower one (clos-8 at 10 Mbit/s: design RTT 10 ms) a
    probe's reply alone takes longer than REPLY_WAIT_S, and judging it missed
    there made a healthy permutation flip its reverse EVs thousands of times.
    So: a reply is awaited REPLY_WAIT_RTTS design RTTs, an EV in doubt is
    probed at most once a round trip, a settled one 16 times less often, and
    an EV is replaced only after its misses could have been seen."""

    probe_interval_s: float = PROBE_INTERVAL_S
    settled_interval_s: float = SETTLED_INTERVAL_S
    reply_wait_s: float = REPLY_WAIT_S
    replace_after_s: float = REPLACE_AFTER_S

    @classmethod
    def for_rtt(cls, rtt_s: float) -> Timing:
        interval = max(PROBE_INTERVAL_S, rtt_s)
        wait = max(REPLY_WAIT_S, REPLY_WAIT_RTTS * rtt_s)
        return cls(
            probe_interval_s=interval,
            settled_interval_s=max(SETTLED_INTERVAL_S, 16 * interval),
            reply_wait_s=wait,
            replace_after_s=max(REPLACE_AFTER_S, wait + MISSES * interval),
        )


@dataclasses.dataclass
class _Ev:
    ev: int
    plane: int
    state: int = nic.RevState.UNTRIED  # used once a probe on it is answered
    # (number, when sent, the QP's data packets then): a probe is judged only once
    # data came in after it, so a sender that closed or paused is not a failed path
    probes: list[tuple[int, float, int]] = dataclasses.field(default_factory=list)
    answered: int | None = None  # the latest probe number answered
    replies: int = 0  # nic_rev_probes' count at the last scan
    bad_since: float = 0.0
    doubt: bool = True  # not GOOD, or a probe missed at the last judgement
    next_probe: float = 0.0  # when it is next probed


@dataclasses.dataclass
class _Set:
    qpn: int
    peer_host: int
    peer_qpn: int
    evs: list[_Ev]
    data_pkts: int = -1
    active_until: float = 0.0
    next_step: float = 0.0  # when it is next judged (every PROBE_INTERVAL_S)
    key: bytes | None = None  # the connection's MAC key: the probes carry a MAC


def _after(a: int, b: int) -> bool:
    """Probe number a comes after b (24-bit numbers, as BTH.psn carries them)."""
    return 0 < (a - b) & wire.PSN_MASK < 1 << 23


class ReverseEvs:
    def __init__(self, topo: Topology, host: str, host_index: int, maps: nic.NicMaps) -> None:
        self.topo, self.host, self.index, self.maps = topo, host, host_index, maps
        self.timing = Timing.for_rtt(topo.queues.base_rtt_ns / 1e9)
        self._sets: dict[int, _Set] = {}
        self._socks: dict[int, socket.socket] = {}
        self._templates: dict[tuple, bytes] = {}
        self._next_value = REV_EV_BASE
        self.sent = 0
        self._rng = random.Random()  # the settled probes' jitter
        self.replaced = 0

    @property
    def active(self) -> bool:
        """Some receive QP has a set to keep."""
        return bool(self._sets)

    def next_due(self) -> float:
        """When the next set is due a step (time.monotonic); inf with no set."""
        return min((rs.next_step for rs in self._sets.values()), default=float("inf"))

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    # ---- sets ---------------------------------------------------------------------
    def open(self, qpn: int, peer_host: int, peer_qpn: int, key: bytes | None = None) -> None:
        """Give receive QP qpn (set up in the NIC) a reverse EV set, every EV
        UNTRIED: its answers go back in place until probes are answered. key:
        the connection's MAC key, if its packets are MAC'd (probes are too)."""
        per_plane = min(REV_PER_PLANE, nic.REV_EVS // self.topo.planes)
        evs = [
            _Ev(self._fresh(), plane)
            for plane in range(self.topo.planes)
            for _ in range(max(1, per_plane))
        ]
        rs = self._sets[qpn] = _Set(qpn, peer_host, peer_qpn, evs[: nic.REV_EVS], key=key)
        self._write(rs)

    def forget(self, qpn: int) -> None:
        """The receive QP closes (NicMaps.delete_rq clears its set in the NIC)."""
        self._sets.pop(qpn, None)

    def _fresh(self) -> int:
        value = self._next_value
        self._next_value = value + 1 if value + 1 < REV_EV_END else REV_EV_BASE
        return value

    def _write(self, rs: _Set) -> None:
        self.maps.set_rev_evs(rs.qpn, [nic.RevEv(e.ev, e.plane, e.state) for e in rs.evs])

    # ---- the tick -----------------------------------------------------------------
    def step(self, now: float) -> None:
        for rs in list(self._sets.values()):
            try:
                self._step_set(now, rs)
            except KeyError:
                self._sets.pop(rs.qpn, None)  # its receive state is gone

    def _step_set(self, now: float, rs: _Set) -> None:
        if now < rs.next_step:
            return
        rs.next_step = now + self.timing.probe_interval_s
        data = self.maps.rq_raw(rs.qpn).stats.data_pkts
        if data != rs.data_pkts:
            rs.data_pkts, rs.active_until = data, now + IDLE_AFTER_S
        if now >= rs.active_until:
            for e in rs.evs:
                e.probes.clear()  # idle: no verdict from probes of another time
            return
        changed = self._judge(now, rs)
        changed |= self._replace(now, rs)
        if changed:
            self._write(rs)
        ports = self.maps.port_bitmap(self.index)
        for e in rs.evs:
            if now >= e.next_probe and (ports >> e.plane) & 1:
                self._probe(rs, e, now)
                settled = self.timing.settled_interval_s * self._rng.uniform(0.75, 1.0)
                e.next_probe = now + (self.timing.probe_interval_s if e.doubt else settled)

    def _judge(self, now: float, rs: _Set) -> bool:
        """New states from the replies BPF recorded; True if any changed."""
        changed = False
        records = self.maps.rev_probes(rs.qpn)
        wait = self._reply_wait(rs, records)
        for e, rec in zip(rs.evs, records, strict=False):
            if rec.ev == e.ev and rec.replies != e.replies:
                e.replies = rec.replies
                if e.answered is None or _after(rec.last_psn, e.answered):
                    e.answered = rec.last_psn
            # the last MISSES probes old enough to have been answered
            due = [n for n, sent, data in e.probes if now - sent >= wait and rs.data_pkts > data][
                -MISSES:
            ]
            e.probes = [
                (n, sent, data)
                for n, sent, data in e.probes
                if now - sent < wait or rs.data_pkts == data or n in due
            ]
            missed = [n for n in due if e.answered is None or _after(n, e.answered)]
            if missed and not e.doubt:
                e.next_probe = now  # a settled EV missed one: probe it often again
            if e.state == nic.RevState.UNTRIED and e.answered is not None:
                changed |= self._set_state(rs, e, nic.RevState.GOOD, now, "answered")
            elif e.state != nic.RevState.ASSUMED_BAD and len(missed) >= MISSES:
                changed |= self._set_state(rs, e, nic.RevState.ASSUMED_BAD, now, "unanswered")
            elif e.state == nic.RevState.ASSUMED_BAD and due and due[-1] not in missed:
                changed |= self._set_state(rs, e, nic.RevState.GOOD, now, "answered")
            e.doubt = bool(missed) or e.state != nic.RevState.GOOD
        return changed

    def _reply_wait(self, rs: _Set, records: list) -> float:
        """How long a probe of this set may go unanswered: the lab's wait, or
        REPLY_WAIT_MEASURED of the longest latest round trip of its EVs'
        replies (a queue on the data direction delays them all)."""
        rtts = [
            r.rtt_ns for r, e in zip(records, rs.evs, strict=False) if r.ev == e.ev and r.replies
        ]
        measured = REPLY_WAIT_MEASURED * max(rtts, default=0) / 1e9
        wait = self.timing.reply_wait_s
        return min(REPLY_WAIT_CAP * wait, max(wait, measured))

    def _set_state(self, rs: _Set, e: _Ev, state: int, now: float, cause: str) -> bool:
        old, e.state = e.state, state
        if state == nic.RevState.ASSUMED_BAD:
            e.bad_since = now
        if old == nic.RevState.UNTRIED and state == nic.RevState.GOOD:
            return True  # a fresh set coming up is no change of a path's health: not logged
        self._post(
            rs,
            "reverse_ev_state",
            ev=e.ev,
            plane=e.plane,
            old=STATE_NAMES[old],
            new=STATE_NAMES[state],
            cause=f"probes {cause}",
        )
        return True

    def _replace(self, now: float, rs: _Set) -> bool:
        good = {e.plane for e in rs.evs if e.state == nic.RevState.GOOD}
        changed = False
        for i, e in enumerate(rs.evs):
            if (
                e.state == nic.RevState.ASSUMED_BAD
                and e.plane in good
                and now - e.bad_since >= self.timing.replace_after_s
            ):
                new = _Ev(self._fresh(), e.plane)
                rs.evs[i] = new
                self.maps.forget_rev_probe(rs.qpn, i)
                self.replaced += 1
                self._post(rs, "reverse_ev_replaced", plane=e.plane, old_ev=e.ev, new_ev=new.ev)
                changed = True
        return changed

    def _post(self, rs: _Set, kind: str, **fields) -> None:
        event = {"type": kind, "host": self.host, "qpn": rs.qpn, "peer_qpn": rs.peer_qpn}
        client.post_event(self.topo.lab, {**event, **fields}, source=self.host)

    # ---- probes -------------------------------------------------------------------
    def _probe(self, rs: _Set, e: _Ev, now: float) -> None:
        if self.maps.ports_disabled(self.index) >> e.plane & 1:
            return  # a DISABLED port sends no probe
        key = (rs.peer_qpn, rs.peer_host, e.plane)
        template = self._templates.get(key)
        if template is None:
            port = self.maps.port(self.index, e.plane)
            ends = wire.Endpoints(
                src_mac=port["mac"],
                dst_mac=port["nh_mac"],
                src_ip=str(self.topo.host_address(self.index, e.plane)),
                dst_ip=str(self.topo.host_address(rs.peer_host, e.plane)),
            )
            frame = wire.probe(
                ends, ev=1, dqpn=rs.peer_qpn, psn=0, tx_ts=0, flags=wire.PROBE_F_REVERSE
            )
            template = self._templates[key] = bytes(frame)
        number = self.sent & wire.PSN_MASK
        frame = probe_frame(template, e.ev, number, time.monotonic_ns(), rs.key)
        try:
            plane_socket(self._socks, e.plane).send(frame)
        except OSError:
            return  # the port is down: its EVs are not used (port bitmap)
        self.sent += 1
        e.probes.append((number, now, rs.data_pkts))
