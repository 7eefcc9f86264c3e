"""Queue pairs as the daemon keeps them: states, attributes, checks, retry schedule.

Names follow the OCP MRC API (mrc.h / mrc_ctl.h): a QP goes RESET -> INIT ->
RTR -> RTS and to ERR from anywhere; its attributes are the EV profile and
CC profile ids, `mpr` (max PSN range in flight, in units of 128 packets),
`max_wimm` (WRITE_WITH_IMM messages outstanding), `timeout` (the
retransmission timeout is 1.024 us * 2^timeout) and the retry budget
`retry.linear_cnt` (<= 7 timeouts at the base value) then `retry.exp_cnt`
(<= 25 timeouts, each twice the one before; 25 means retry forever).

Errors are errno-style (QpError.errno: EINVAL, EBUSY, ENOENT, ...) with a
message that says what is wrong and what is allowed. Pure Python: no maps,
no root; the daemon applies a QP to the NIC maps once a transition is
accepted.
"""

from __future__ import annotations

import dataclasses
import errno

from mrc_nic import nic
from mrc_nic.contract.framing import RequestError

TIMEOUT_UNIT_S = 1.024e-6
TIMEOUT_MAX = 24  # 1.024 us * 2^24 = 17.2 s: mrc.h, "Max val = 24 (17.17s)"
LINEAR_CNT_MAX = 7
EXP_CNT_MAX = 25
EXP_CNT_INFINITE = 25
MAX_WIMM_MAX = nic.SQ_DEPTH  # messages the receiver can hold incomplete

# A send QP's defaults when its application names none (mrc-nic's choices).
DEFAULT_TIMEOUT = 12  # 1.024 us * 2^12 = 4.2 ms: above this lab's worst queueing delay
DEFAULT_MPR = 8
# The head scan's reorder window (mrc-nic extension; docs/nic-program.md, "Loss detection"):
# a packet still unacknowledged when one sent this much later has been
# acknowledged is lost (or, at the head scan, when the QP's largest recent
# round trip is longer: queues). Short enough that a path which dies is
# found before its losses hold the whole window (a few round trips of the
# default lab, whose RTT is 0.1-0.25 ms), long enough for the scheduling
# hiccups of a 2-core machine: scripts/bench_failover.py --reorder-window
# found a blackholed plane with a gap under 0.5 ms in 3 of 3 runs with 250 us,
# 2.3-3.3 ms (a stall) with 1 ms; healthy runs resent 27-91 packets per
# 768 MiB, 26-80 with 1 ms.
DEFAULT_REORDER_NS = 250_000
# Most packets in the network (struct nic_sq.cwnd; mrc-nic extension): a fixed
# window until congestion control (NSCC) sets it. The MPR range stays larger
# (DEFAULT_MPR), so a hole at snd_una does not stop the sender while the loss
# is found and repaired; and a small window keeps this CPU-bound lab's
# standing queues, hence its RTT and loss detection time, short. Measured with
# scripts/bench_failover.py: 128 keeps goodput within noise of the MPR window.
DEFAULT_CWND = 128
REORDER_NS_MAX = 2**32 - 1
EV_COUNT = 128  # EVs per send QP (the OCP API's ev_count default), equal per plane


# One enum for a QP's state: enum nic_qp_state, with ibv_qp_state's values (the
# verbs API's QpState is the same). The daemon's QPs never go to SQD or SQE.
QpState = nic.QpState


# Allowed transitions; RESET and ERR are reachable from every state.
NEXT = {
    QpState.RESET: {QpState.INIT},
    QpState.INIT: {QpState.INIT, QpState.RTR},
    QpState.RTR: {QpState.RTS},
    QpState.RTS: {QpState.RTS},
    QpState.ERR: set(),
}


class QpError(RequestError):
    """A refused QP operation: errno (errno.EINVAL, ...) and a message."""


@dataclasses.dataclass
class Retry:
    linear_cnt: int = 7
    exp_cnt: int = 7

    def check(self) -> None:
        _int_range("retry.linear_cnt", self.linear_cnt, 0, LINEAR_CNT_MAX)
        _int_range("retry.exp_cnt", self.exp_cnt, 0, EXP_CNT_MAX)

    @property
    def infinite(self) -> bool:
        return self.exp_cnt == EXP_CNT_INFINITE

    def delay(self, attempt: int, base: float) -> float | None:
        """Seconds to wait before timeout number `attempt` (0-based) fires;
        None when the budget is spent (the QP goes to ERR)."""
        if attempt < self.linear_cnt:
            return base
        k = attempt - self.linear_cnt
        if self.infinite or k < self.exp_cnt:
            return base * 2 ** min(k + 1, 20)  # capped: "forever" must not overflow
        return None


@dataclasses.dataclass
class QpAttrs:
    """What modify_qp sets; each transition needs its part (REQUIRED)."""

    ev_profile_id: int | None = None
    cc_profile_id: int | None = None
    mpr: int | None = None
    max_wimm: int = MAX_WIMM_MAX
    mpr_dest: int | None = None  # the responder's MPR (RTR), what its ACKs advertise
    max_wimm_dest: int = MAX_WIMM_MAX
    dynamic_mpr: bool = False  # MRC_QP_CAP_DYNAMIC_MPR: effective when both ends set it
    timeout: int | None = None
    retry: Retry = dataclasses.field(default_factory=Retry)
    dest_host: int | None = None
    dest_qpn: int | None = None

    @property
    def timeout_s(self) -> float:
        return TIMEOUT_UNIT_S * 2 ** (self.timeout or 0)


REQUIRED = {
    QpState.INIT: ("ev_profile_id", "cc_profile_id"),
    QpState.RTR: ("mpr", "dest_host", "dest_qpn"),
    QpState.RTS: ("timeout",),
}


@dataclasses.dataclass
class Qp:
    qpn: int
    host: int
    state: QpState = QpState.RESET
    attrs: QpAttrs = dataclasses.field(default_factory=QpAttrs)
    err_reason: str | None = None

    def modify(self, target: QpState, **changes) -> None:
        """One transition with the attributes it sets (checked first: a
        refused call changes nothing)."""
        if target == QpState.ERR:
            self.to_err(changes.get("reason") or "moved to ERR by request")
            return
        if target == QpState.RESET:
            self.state, self.attrs, self.err_reason = QpState.RESET, QpAttrs(), None
            return
        if target not in NEXT[self.state]:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qpn:#x}: {self.state.name} -> {target.name} is not a transition "
                f"(allowed: {', '.join(s.name for s in sorted(NEXT[self.state])) or 'RESET'}"
                f"{', ERR' if self.state != QpState.ERR else ''})",
            )
        new = dataclasses.replace(self.attrs)
        for name, value in changes.items():
            if name == "retry":
                value = Retry(**value) if isinstance(value, dict) else value
            if not hasattr(new, name):
                raise QpError(errno.EINVAL, f"QP attribute {name!r} does not exist")
            setattr(new, name, value)
        check_attrs(new)
        missing = [n for n in REQUIRED.get(target, ()) if getattr(new, n) is None]
        if missing:
            raise QpError(
                errno.EINVAL,
                f"QP {self.qpn:#x}: {self.state.name} -> {target.name} needs {', '.join(missing)}",
            )
        self.state, self.attrs = target, new

    def to_err(self, reason: str) -> None:
        self.state, self.err_reason = QpState.ERR, reason

    def as_dict(self) -> dict:
        a = self.attrs
        return {
            "qpn": self.qpn,
            "host": self.host,
            "state": self.state.name,
            "err_reason": self.err_reason,
            "ev_profile_id": a.ev_profile_id,
            "cc_profile_id": a.cc_profile_id,
            "mpr": a.mpr,
            "max_wimm": a.max_wimm,
            "mpr_dest": a.mpr_dest,
            "max_wimm_dest": a.max_wimm_dest,
            "dynamic_mpr": a.dynamic_mpr,
            "timeout": a.timeout,
            "timeout_us": round(a.timeout_s * 1e6, 3) if a.timeout is not None else None,
            "retry": dataclasses.asdict(a.retry),
            "dest_host": a.dest_host,
            "dest_qpn": a.dest_qpn,
        }


def check_attrs(a: QpAttrs) -> None:
    if a.mpr is not None:
        _int_range("mpr", a.mpr, 1, nic.MPR_MAX)
    if a.timeout is not None:
        _int_range("timeout", a.timeout, 0, TIMEOUT_MAX)
    _int_range("max_wimm", a.max_wimm, 1, MAX_WIMM_MAX)
    _int_range("max_wimm_dest", a.max_wimm_dest, 1, MAX_WIMM_MAX)
    if a.mpr_dest is not None:
        _int_range("mpr_dest", a.mpr_dest, 1, nic.MPR_MAX)
    for name in ("ev_profile_id", "cc_profile_id", "dest_host", "dest_qpn"):
        value = getattr(a, name)
        if value is not None:
            _int_range(name, value, 0, 0xFFFFFF)
    a.retry.check()


def _int_range(name: str, value, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise QpError(errno.EINVAL, f"{name} must be an integer in {lo}..{hi}, not {value!r}")
