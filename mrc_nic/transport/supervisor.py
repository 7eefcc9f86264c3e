"""What the daemon does for every send QP in RTS, whoever posts its work.

The NIC sends, retransmits what SACKs and NACKs report, and completes WQEs
on its own. The daemon adds what needs a clock or a policy, once per tick
(1 ms), from a snapshot of the QP's send state:
- NSCC: the window from this tick's congestion signals, set in BPF;
- the top-up kick: a starving ACK clock (packets or SACKs lost) restarted;
- RACK's reorder timer: a tick without any SACK while packets are out;
- the retransmission timeout and its retry budget (OCP `timeout`,
  `retry.linear_cnt`, `retry.exp_cnt`); a spent budget fails the QP;
- the send queue's own state (`stalled`): its head counters live in the
  application's memory, so a program can corrupt them; a queue whose counters
  cannot be right for longer than the timeout, or whose posted work makes no
  progress for the whole retry budget, fails instead of hanging silently.

Every QP an application posts to (mrc_nic.verbs, through
transport.qplife; `mrc-nic write` is one such application) gets it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mrc_nic import nic
from mrc_nic.transport import nscc

TOPUP_KICK_S = 0.001  # at most one top-up kick a tick
REORDER_KICKS = 2  # reorder timer kicks per stall of the ACK clock


@dataclasses.dataclass(kw_only=True)
class Supervised:
    """A send QP's supervision state (a dataclass base: sessions.AppQp
    extends it). `qp` is its transport.qp.Qp."""

    qp: Any
    cc: nscc.QpCc | None = None  # NSCC (None: a fixed window)
    last_una: int | None = None
    last_progress: float = 0.0
    last_kick: float = 0.0
    attempt: int = 0
    timeouts: int = 0
    # the reorder timer: SACKs and NACKs at the last tick, the RTT
    # (cc.rtt_sum_ns, cc.rtt_samples) then and over the last tick with samples
    last_acks: int = 0
    last_rtt: tuple[int, int] = (0, 0)
    rtt_ns: int = 0
    reorder_left: int = 0  # reorder kicks left in this stall
    last_reorder_kick: float = 0.0
    reorder_kicks: int = 0
    # stalled(): since when the queue's counters are wrong, and the last progress seen
    bad_head_since: float | None = None
    head_state: tuple[int, ...] = ()  # (posted, done, wqe_sent, wqe_done) at the last tick
    queue_marker: tuple[int, int, int] = (0, 0, 0)
    # the NIC's count of its PSNs declared lost (stats.lost_pkts), as of this
    # tick's snapshot: what moves it may have put an EV in ASSUMED_BAD (prober)
    lost_pkts: int = 0
    queue_moved: float = 0.0


def step(
    maps: nic.NicMaps, sq: Supervised, s: nic.SqSnapshot, now: float, work: bool
) -> str | None:
    """One tick for a send QP in RTS; `work`: something is posted and not
    sent yet. Returns why the QP must fail (its retry budget is spent), or None."""
    if sq.cc is not None:  # NSCC: the window from this tick's signals, set in BPF
        live = s.in_flight - s.acked_count
        change = sq.cc.step(s.cc, s.stats["acked_pkts"], live, now)
        if change is not None:
            cwnd, rtt_target = change
            grew = cwnd - s.cwnd if s.cwnd else 0
            maps.cwnd_kick(sq.qp.qpn, cwnd, rtt_target_ns=rtt_target, packets=max(1, grew))
            if grew > 0:
                sq.last_kick = now
    top_up(maps, sq, s, now, work)
    reorder_timer(maps, sq, s, now)
    if s.snd_una != sq.last_una:
        sq.last_una, sq.last_progress, sq.attempt = s.snd_una, now, 0
        return None
    if s.in_flight == 0:
        sq.last_progress = now  # idle is not a stall: the timeout counts from new data
        return None
    attrs = sq.qp.attrs
    wait = attrs.retry.delay(sq.attempt, attrs.timeout_s)
    if wait is None:
        return (
            f"retry budget spent: no acknowledgement for PSN {s.snd_una} after "
            f"{sq.timeouts} timeouts (timeout {attrs.timeout_s * 1e3:.3g} ms, "
            f"retry.linear_cnt {attrs.retry.linear_cnt}, retry.exp_cnt {attrs.retry.exp_cnt})"
        )
    if now - sq.last_progress > wait:
        # Only PSNs older than the timeout are lost: the others may be on their way.
        maps.timeout_kick(
            sq.qp.qpn, max(1, min(s.in_flight, 256)), age_ns=int(attrs.timeout_s * 1e9)
        )
        sq.timeouts += 1
        sq.attempt += 1
        sq.last_progress = sq.last_kick = now
    return None


def reorder_timer(maps: nic.NicMaps, sq: Supervised, s: nic.SqSnapshot, now: float) -> None:
    """RACK's reorder timer (RFC 8985, 6.2), run at the tick. The head
    scan runs on SACKs; when a path dies under a window of fewer packets
    than a reorder window's worth, its undetected losses soon are all that
    is in the network, no SACK comes to run the scan, and only the timeout
    would be left. So a tick that saw no SACK or NACK while packets are out
    applies the scan's rule itself: a timeout kick for the PSNs last sent a
    reorder window ago or more (the setup's, or the longer one the NIC
    learned from duplicates), or twice the RTT, or the largest recent RTT
    (the head scan's, docs/nic-program.md) plus the RTT, whichever is
    longest: queues, and a path slower than the others must not be
    condemned for it. Not a timeout: it spends no retry budget, and it
    blames no EV for what it resends (reorder=True). At most
    REORDER_KICKS per stall, a reorder window apart, as RACK arms its timer
    only on SACKs: when nothing at all comes back, the timeout's backoff rules."""
    acks = s.stats["sacks"] + s.stats["nacks"]
    rtt = s.cc["rtt_sum_ns"], s.cc["rtt_samples"]
    if rtt[1] > sq.last_rtt[1]:
        sq.rtt_ns = (rtt[0] - sq.last_rtt[0]) // (rtt[1] - sq.last_rtt[1])
    sq.last_rtt = rtt
    if acks != sq.last_acks:
        sq.last_acks, sq.reorder_left = acks, REORDER_KICKS
        return
    outstanding = s.in_network
    if not (s.reo_wnd_ns and sq.reorder_left and outstanding > 0):
        return
    age_ns = max(s.reo_wnd_ns, s.reo_learned_ns, 2 * sq.rtt_ns, s.rtt_recent_ns + sq.rtt_ns)
    if now - sq.last_reorder_kick < age_ns / 1e9:
        return
    maps.timeout_kick(
        sq.qp.qpn,
        outstanding,
        max_psns=min(outstanding, nic.TIMEOUT_MAX),
        age_ns=age_ns,
        reorder=True,
    )
    sq.reorder_left -= 1
    sq.last_reorder_kick = sq.last_kick = now
    sq.reorder_kicks += 1


def top_up(maps: nic.NicMaps, sq: Supervised, s: nic.SqSnapshot, now: float, work: bool) -> None:
    """Restart a starving ACK clock. Each SACK clocks out one packet (XDP
    turns one frame into one frame), so every packet or SACK lost, and
    every retransmission, takes a packet out of the window for good. When
    fewer than half a window are left in the network and there is something
    to send, a kick sends the rest."""
    live = s.in_network
    target = min(s.cwnd, s.window) if s.cwnd else s.window
    work = bool(s.retx_queue) or work
    # max(1, ...): a window of 1 (NSCC at its floor) must restart too
    if live < max(1, target // 2) and work and now - sq.last_kick >= TOPUP_KICK_S:
        maps.kick(sq.qp.qpn, target - max(0, live), batch_size=256)
        sq.last_kick = now


U32 = 0xFFFFFFFF


def head_fault(head: tuple[int, int], s: nic.SqSnapshot, depth: int, same: bool) -> str | None:
    """What is wrong with a send queue's head counters, or None. The
    application writes `posted`, the NIC `done` (a copy of its wqe_done,
    written after it); done <= wqe_done <= wqe_sent <= posted <= done + depth.
    `head` is read before the snapshot `s`, so in a working queue done never
    runs ahead of s.wqe_done; a done behind it, or a posted behind s.wqe_sent,
    is only a fault when nothing changed since the last tick (`same`): the
    NIC or the application may have moved in between the two reads."""
    posted, done = head
    ahead = (posted - done) & U32
    if ahead > depth:
        return f"posted {posted} is not within the queue's {depth} WQEs past done {done}"
    if (s.wqe_done - done) & U32 >= 1 << 31:
        return f"done {done} is past the {s.wqe_done} WQEs the NIC completed"
    if same and done != s.wqe_done:
        return f"done {done} is not the {s.wqe_done} WQEs the NIC completed (done is the NIC's)"
    if same and (posted - s.wqe_done) & U32 < (s.wqe_sent - s.wqe_done) & U32:
        return f"posted {posted} is behind the {s.wqe_sent} WQEs the NIC already sent"
    return None


def stalled(
    sq: Supervised, s: nic.SqSnapshot, head: tuple[int, int], now: float, depth: int
) -> str | None:
    """Why a send QP in RTS must fail for its queue's state, or None:
    its head counters inconsistent for longer than its timeout (waiting cannot
    mend them: the engine would send stale WQEs, or the library never frees a
    slot), or WQEs posted and not sent, with nothing in the network and
    nothing moving, for the whole retry budget (a finite one)."""
    attrs = sq.qp.attrs
    state = (*head, s.wqe_sent, s.wqe_done)
    fault = head_fault(head, s, depth, state == sq.head_state)
    sq.head_state = state
    if fault is None:
        sq.bad_head_since = None
    elif sq.bad_head_since is None:
        sq.bad_head_since = now
    elif now - sq.bad_head_since > attrs.timeout_s:
        return (
            f"send queue stalled: its head counters are inconsistent for "
            f"{(now - sq.bad_head_since) * 1e3:.3g} ms: {fault} (posted {head[0]}, done "
            f"{head[1]}; the NIC sent {s.wqe_sent}, completed {s.wqe_done})"
        )
    # Work posted and nothing in the network: the retransmission timeout treats
    # it as idle, so it is this rule's (with packets out, the timeout's).
    marker = (s.wqe_sent, s.wqe_done, s.snd_una, s.snd_nxt)
    idle = head[0] == s.wqe_sent or s.in_flight > 0
    if marker != sq.queue_marker or idle or not sq.queue_moved:
        sq.queue_marker, sq.queue_moved = marker, now
        return None
    budget = retry_budget_s(attrs.retry, attrs.timeout_s)
    if budget is not None and now - sq.queue_moved > budget:
        return (
            f"send queue stalled: {(head[0] - s.wqe_sent) & U32} WQEs posted and not sent, "
            f"no progress for {now - sq.queue_moved:.3g} s, longer than the retry budget "
            f"({budget:.3g} s) (posted {head[0]}, done {head[1]}; the NIC sent {s.wqe_sent}, "
            f"completed {s.wqe_done})"
        )
    return None


def retry_budget_s(retry: Any, timeout_s: float) -> float | None:
    """Seconds the whole retry schedule waits; None when it never ends."""
    if retry.infinite:
        return None
    total, attempt = 0.0, 0
    while (wait := retry.delay(attempt, timeout_s)) is not None:
        total += wait
        attempt += 1
    return total
