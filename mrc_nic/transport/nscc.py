"""NSCC, UET's Network Signal-based Congestion Control, as a send QP's daemon runs it.

Pure arithmetic: no maps, no root. The daemon (mrc_nic.transport.supervisor) reads a send
QP's congestion signals from the NIC every tick (struct nic_sq_cc, counted
by BPF per ACK: newly acknowledged packets split by ECN and by RTT against
the target, the headroom below the target, RTT samples, trims), hands the
differences since the last tick to Nscc.update as a Signals, and writes the
window it returns with a NIC_KICK_CWND kick. docs/congestion.md describes
the algorithm and where it differs from UET's.

CC profiles: a QP names one by its cc_profile_id attribute (OCP API). 0 is a
fixed window (NSCC disabled), 1 NSCC with the defaults below, 2 NSCC without
quick adapt. Each NSCC profile carries the tunables of the OCP API's struct
mrc_ctl_cc_nscc_cfg, in its units (ns, bytes, plain factors); 0 in a time or
size field means "derive it" (from the measured base RTT and the QP's link
rate), as UET's reference implementation does, except base_rtt: 0 there is
the lab's design RTT ([queues] base_rtt, the one its switch queues mark
against), not the smallest RTT measured. Here a TBF lets a packet through at
once when it has tokens, so an idle path's RTT (11 us on the default lab's
1 Gbit/s links) is processing time only, far below what the links' rate
implies; a BDP from it would leave the links idle.
"""

from __future__ import annotations

import dataclasses
import math

# The payload of a full packet at MTU 1500 (nic.seg_size; a test keeps them
# equal); a lab with a larger MTU passes its own (Nscc(mss=...)).
MSS = 1024

# UET's reference network, against which its constants are scaled: 100 Gbit/s,
# 12 us base RTT, 4 KiB packets, so a BDP of 36.6 packets.
REF_RATE_BPS = 100e9
REF_RTT_NS = 12_000
REF_MSS = 4096
REF_BDP_PKTS = REF_RATE_BPS / 8 * REF_RTT_NS * 1e-9 / REF_MSS

QA_SCALING = 1.0  # UET's qa_scaling: the new window is the achieved bytes times this
DELAY_FAST_FRACTION = 1 / 12  # fast increase below 1 us of delay on UET's 12 us network
TARGET_FRACTION = 0.75  # target_delay = 0.75 x base RTT (UET, with trimming)
MAX_CWND_BDPS = 1.5  # max_cwnd = 1.5 x BDP (UET)
QA_THRESHOLD_TARGETS = 4  # qa_threshold = 4 x target_delay (UET)
ADJUST_BYTES_MTUS = 8  # adjust_bytes_threshold = 8 MTUs (UET)


@dataclasses.dataclass(frozen=True)
class NsccConfig:
    """The OCP API's struct mrc_ctl_cc_nscc_cfg. Times in ns, sizes in bytes;
    0 means derived (see the module's docstring and docs/congestion.md).
    eta and fi are in packets (MSS) on UET's reference network, fi_scale a
    fraction there: the controller scales them by the QP's BDP against that
    network's, as UET's implementation scales its own."""

    base_rtt: int = 0  # ns; 0: the lab's [queues] base_rtt
    target_delay: int = 0  # ns of queueing; 0: 0.75 x base_rtt
    max_cwnd: int = 0  # bytes; 0: 1.5 x BDP (link rate x base_rtt), at most the MPR window
    qa_threshold: int = 0  # ns of delay that triggers quick adapt; 0: 4 x target_delay
    adjust_period_threshold: int = 0  # ns between window increases; 0: base_rtt
    adjust_bytes_threshold: int = 0  # bytes acknowledged between increases; 0: 8 MTUs
    eta: float = 0.15  # additive increase per adjust period, packets (scaled)
    fi: float = 5.0  # fair increase gain, packets (scaled)
    fi_scale: float = 0.25  # fast increase: window growth per byte acknowledged (scaled)
    gamma: float = 0.8  # multiplicative decrease gain
    max_md_jump: float = 0.5  # most of the window one decrease takes away
    disable_qa: bool = False  # no quick adapt
    qa_gate: int = 3  # quick adapt only if achieved < max_cwnd / 2^qa_gate
    # mrc-nic extension (not in the OCP struct): a NACK(TRIMMED_LASTHOP) counts
    # as an ECN-marked ACK for the multiplicative decrease. MRC turns ECN off at
    # the last hop, where UET would have marked the packet before trimming it,
    # so without this an incast's only signal is the trims (docs/congestion.md).
    lasthop_trim_md: bool = True

    def check(self) -> None:
        """ValueError naming the first field out of range."""
        for name in (
            "base_rtt",
            "target_delay",
            "max_cwnd",
            "qa_threshold",
            "adjust_period_threshold",
            "adjust_bytes_threshold",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**32:
                raise ValueError(f"{name} must be an integer 0..2^32-1 (0: derived), not {value!r}")
        for name in ("eta", "fi", "fi_scale", "gamma"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value <= 1000:
                raise ValueError(f"{name} must be a number 0..1000, not {value!r}")
        if not 0 < self.max_md_jump <= 1:
            raise ValueError(f"max_md_jump must be in (0, 1], not {self.max_md_jump!r}")
        if not isinstance(self.qa_gate, int) or not 0 <= self.qa_gate <= 31:
            raise ValueError(f"qa_gate must be an integer 0..31, not {self.qa_gate!r}")

    def with_overrides(self, overrides: dict | None) -> NsccConfig:
        """This config with some fields replaced (a write request's "cc" object)."""
        if not overrides:
            return self
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"no NSCC field {unknown[0]!r} (fields: {', '.join(sorted(names))})")
        cfg = dataclasses.replace(self, **overrides)
        cfg.check()
        return cfg


@dataclasses.dataclass(frozen=True)
class CcProfile:
    """A CC profile: what cc_profile_id names. nscc None: NSCC disabled, the
    window stays fixed (the write's cwnd)."""

    id: int
    name: str
    nscc: NsccConfig | None

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "algorithm": "nscc" if self.nscc else None,
            "config": dataclasses.asdict(self.nscc) if self.nscc else None,
        }


FIXED = 0
DEFAULT_NSCC = 1
PROFILES: dict[int, CcProfile] = {
    FIXED: CcProfile(FIXED, "fixed", None),
    DEFAULT_NSCC: CcProfile(DEFAULT_NSCC, "nscc", NsccConfig()),
    2: CcProfile(2, "nscc-noqa", NsccConfig(disable_qa=True)),
}


def profile(profile_id: int) -> CcProfile:
    """The CC profile of an id (ValueError if there is none)."""
    try:
        return PROFILES[profile_id]
    except (KeyError, TypeError):
        known = ", ".join(f"{p.id} ({p.name})" for p in PROFILES.values())
        raise ValueError(f"no CC profile {profile_id!r} (profiles: {known})") from None


@dataclasses.dataclass
class Signals:
    """What one send QP's ACKs said over an interval (struct nic_sq_cc differences)."""

    elapsed_ns: int
    acked_pkts: int = 0  # PSNs newly acknowledged (SACKs and NACKs)
    pkts_lo: int = 0  # ... by SACKs without ECN, RTT below the target
    pkts_hi: int = 0  # ... without ECN, RTT at or above it
    pkts_ecn_lo: int = 0  # ... ECN-marked, RTT below it
    pkts_ecn_hi: int = 0  # ... ECN-marked, RTT at or above it
    headroom: int = 0  # sum of pkts_lo x (RTT target - RTT), packets x ns
    rtt_samples: int = 0
    rtt_sum_ns: int = 0
    rtt_min_ns: int = 0  # the smallest RTT ever (not a difference; 0: none yet)
    trims: int = 0  # NACK(TRIMMED)
    trims_lasthop: int = 0  # NACK(TRIMMED_LASTHOP)
    in_flight: int = 0  # packets in the network now

    COUNTERS = (
        "pkts_lo",
        "pkts_hi",
        "pkts_ecn_lo",
        "pkts_ecn_hi",
        "headroom",
        "rtt_samples",
        "rtt_sum_ns",
        "trims",
        "trims_lasthop",
    )

    @classmethod
    def between(
        cls,
        before: dict,
        after: dict,
        *,
        elapsed_ns: int,
        acked_pkts: int,
        in_flight: int,
    ) -> Signals:
        """From two reads of struct nic_sq_cc (dicts of its fields)."""
        diff = {k: max(0, after.get(k, 0) - before.get(k, 0)) for k in cls.COUNTERS}
        return cls(
            elapsed_ns=elapsed_ns,
            acked_pkts=acked_pkts,
            rtt_min_ns=after.get("rtt_min_ns", 0),
            in_flight=in_flight,
            **diff,
        )

    @property
    def mean_rtt_ns(self) -> float | None:
        return self.rtt_sum_ns / self.rtt_samples if self.rtt_samples else None


class Nscc:
    """The window of one send QP (bytes inside, packets out)."""

    def __init__(
        self,
        cfg: NsccConfig,
        *,
        link_bps: float | None,
        window_pkts: int,
        lab_rtt_ns: int = 100_000,
        mss: int = MSS,
    ) -> None:
        cfg.check()
        self.cfg, self.mss = cfg, mss
        self.link_bps = link_bps  # the QP's line rate (every plane); None: uncapped
        self.window_bytes = window_pkts * mss  # the MPR range: the NIC's limit
        self.base_rtt = cfg.base_rtt or max(1, lab_rtt_ns)
        self._derive()
        self.cwnd = float(self.max_cwnd)  # UET starts at the top and lets signals bring it down
        self.now = 0  # ns since the start (sum of the intervals)
        self.inc = 0.0  # pending increase, bytes^2 (applied as inc / cwnd)
        self.received = 0  # bytes acknowledged since the last adjustment
        self.last_adjust = 0
        self.last_dec: float = -math.inf
        self.fi_count = 0  # bytes acknowledged at a near-zero delay, in a row
        self.fast = False
        self.qa_bytes = self.qa_ns = 0
        self.qa_started = False
        self.qa_trigger = False
        self.ignore_left = 0  # bytes of feedback to ignore after a quick adapt
        self.delay: float | None = None  # the last interval's mean queueing delay, ns
        # what it did, for reports and tests (bytes unless named otherwise)
        self.counts = dict(md=0, qa=0, fair=0.0, prop=0.0, fast=0.0, eta=0.0, nack=0, md_bytes=0.0)

    # ---- derived parameters ---------------------------------------------------------
    def _derive(self) -> None:
        cfg, base = self.cfg, self.base_rtt
        self.target = cfg.target_delay or TARGET_FRACTION * base
        if self.link_bps:
            self.bdp = self.link_bps / 8 * base * 1e-9
        else:
            self.bdp = self.window_bytes / MAX_CWND_BDPS
        self.max_cwnd = min(cfg.max_cwnd or MAX_CWND_BDPS * self.bdp, self.window_bytes)
        self.max_cwnd = max(self.max_cwnd, self.mss)
        self.min_cwnd = self.mss
        # UET scales its constants by this network's BDP against its reference's
        # (scaling_a) and its target against the reference RTT (scaling_b); here
        # time is measured in this network's own base RTTs (docs/congestion.md).
        a = self.bdp / (REF_BDP_PKTS * self.mss)
        b = self.target / base
        self.alpha = 4.0 * self.mss * a * b / self.target  # per ns of headroom
        self.fi = cfg.fi * self.mss * a
        self.eta = cfg.eta * self.mss * a
        self.fi_scale = cfg.fi_scale * a
        self.qa_threshold = cfg.qa_threshold or QA_THRESHOLD_TARGETS * self.target
        self.adjust_period = cfg.adjust_period_threshold or base
        self.adjust_bytes = cfg.adjust_bytes_threshold or ADJUST_BYTES_MTUS * self.mss
        self.fast_delay = DELAY_FAST_FRACTION * base

    @property
    def rtt_target_ns(self) -> int:
        """The RTT at which a SACK's delay reaches the target: BPF's split (nic_sq_cc)."""
        return int(self.base_rtt + self.target)

    @property
    def cwnd_pkts(self) -> int:
        """The window for the NIC: packets in flight, at least 1."""
        return max(1, int(self.cwnd / self.mss + 0.5))

    # ---- one interval ---------------------------------------------------------------
    def update(self, sig: Signals) -> int:
        """Take an interval's signals; return the window in packets."""
        self.now += max(0, sig.elapsed_ns)
        mean = sig.mean_rtt_ns
        self.delay = None if mean is None else max(0.0, mean - self.base_rtt)
        acked = sig.acked_pkts * self.mss
        nacked = (sig.trims + sig.trims_lasthop) * self.mss
        if not self._quick_adapt(sig, acked, nacked):
            self._react(sig, acked, nacked)
        self.cwnd = min(max(self.cwnd, self.min_cwnd), self.max_cwnd)
        return self.cwnd_pkts

    def _quick_adapt(self, sig: Signals, acked: int, nacked: int) -> bool:
        """UET's quick adapt: once per window of base RTT + target, if a trim
        came or the delay passed qa_threshold, and the bytes acknowledged in
        that window are below max_cwnd / 2^qa_gate, the window becomes them."""
        if self.cfg.disable_qa:
            return False
        if nacked:
            self.qa_trigger = True
        self.qa_bytes += acked
        self.qa_ns += max(0, sig.elapsed_ns)
        span = self.base_rtt + self.target
        if self.qa_ns < span:
            return False
        achieved = self.qa_bytes * span / self.qa_ns
        late = self.delay is not None and self.delay > self.qa_threshold
        done = False
        if (
            self.qa_started
            and (self.qa_trigger or late)
            and achieved < self.max_cwnd / 2**self.cfg.qa_gate
        ):
            self.cwnd = max(achieved * QA_SCALING, self.min_cwnd)
            self.ignore_left = sig.in_flight * self.mss  # their feedback predates this window
            self.qa_trigger = False
            self.inc, self.received = 0.0, 0
            self.counts["qa"] += 1
            done = True
        self.qa_started = True
        self.qa_bytes = self.qa_ns = 0
        return done

    def _react(self, sig: Signals, acked: int, nacked: int) -> None:
        mss = self.mss
        start = self.cwnd  # the window these ACKs' packets were sent under
        marked = (sig.pkts_ecn_lo + sig.pkts_ecn_hi) * mss
        ecn_hi = sig.pkts_ecn_hi + (sig.trims_lasthop if self.cfg.lasthop_trim_md else 0)
        if self.ignore_left > 0:  # what was in flight at a quick adapt says nothing new
            self.ignore_left -= marked + nacked
            ecn_hi, nacked = 0, 0
        # A trimmed packet: the window loses its bytes (UET, on every NACK).
        if nacked:
            self.cwnd -= nacked
            self.counts["nack"] += nacked
        # ECN and a delay above the target: multiplicative decrease, at most once a base RTT.
        if ecn_hi and self.delay is not None and self.delay > self.target:
            self.fi_count, self.fast = 0, False
            if self.now - self.last_dec >= self.base_rtt:
                factor = max(
                    1 - self.cfg.gamma * (self.delay - self.target) / self.delay,
                    1 - self.cfg.max_md_jump,
                )
                self.counts["md_bytes"] += self.cwnd * (1 - factor)
                self.cwnd *= factor
                self.last_dec = self.now
                self.counts["md"] += 1
        # No ECN, delay above the target: fair increase.
        if sig.pkts_hi:
            self.inc += self.fi * sig.pkts_hi * mss
            self.counts["fair"] += self.fi * sig.pkts_hi * mss
        # No ECN, delay below it: fast increase near zero delay, else proportional.
        if sig.pkts_lo:
            self._increase_low(sig, sig.pkts_lo * mss)
        # ECN below the target: nothing (a hot path; the NIC skips its EV).
        self.cwnd = min(max(self.cwnd, self.min_cwnd), self.max_cwnd)
        self.received += acked
        since = self.now - self.last_adjust
        if self.received > self.adjust_bytes or since >= self.adjust_period:
            # UET divides by the window at each adjustment, a few packets apart;
            # an interval's ACKs came for packets sent under the window it
            # started with, so that is the divisor (never the smaller one a
            # trim or a decrease in the same interval left).
            self.cwnd += self.inc / max(self.cwnd, start)
            if since >= self.adjust_period:
                self.cwnd += self.eta
                self.counts["eta"] += self.eta
                self.last_adjust = self.now
            self.inc, self.received = 0.0, 0

    def _increase_low(self, sig: Signals, lo: int) -> None:
        calm = (
            self.delay is not None
            and self.delay < self.fast_delay
            and not (sig.pkts_hi or sig.pkts_ecn_lo or sig.pkts_ecn_hi)
        )
        if calm:
            self.fi_count += lo
            if self.fi_count > self.cwnd or self.fast:
                self.cwnd += lo * self.fi_scale
                self.counts["fast"] += lo * self.fi_scale
                self.fast = True
                return
        else:
            self.fi_count, self.fast = 0, False
        gain = self.alpha * sig.headroom * self.mss
        self.inc += gain
        self.counts["prop"] += gain

    def as_dict(self) -> dict:
        """The controller's state, for reports."""
        return {
            "cwnd_pkts": self.cwnd_pkts,
            "cwnd_bytes": int(self.cwnd),
            "max_cwnd_bytes": int(self.max_cwnd),
            "base_rtt_ns": int(self.base_rtt),
            "target_delay_ns": int(self.target),
            "delay_ns": None if self.delay is None else int(self.delay),
            "bdp_bytes": int(self.bdp),
            "md": self.counts["md"],
            "qa": self.counts["qa"],
        }


GROWTH_STEP = 8  # QpCc kicks a grown window once it is up by 1/GROWTH_STEP


class QpCc:
    """NSCC for one send QP between two reads of its NIC counters: keeps the
    last read, turns the next one into Signals, and says when the NIC's
    window (or RTT target) must change. Pure: the caller reads and kicks."""

    def __init__(self, nscc: Nscc) -> None:
        self.nscc = nscc
        self.last: dict | None = None
        self.last_acked = 0
        self.last_t = 0.0
        self.sent: tuple[int, int] | None = None  # (cwnd, rtt target) the NIC has

    def initial(self) -> tuple[int, int]:
        """The window and RTT target to set the QP up with."""
        self.sent = (self.nscc.cwnd_pkts, self.nscc.rtt_target_ns)
        return self.sent

    def _small_growth(self, cwnd: int) -> bool:
        """Growth too small to be worth a kick now (a kick is a BPF_PROG_RUN,
        and NSCC's increases come a fraction of a packet at a time): less than
        an eighth of the window, or 1 packet. Decreases always go at once."""
        have = self.sent[0] if self.sent else 0
        return have <= cwnd < have + max(1, have // GROWTH_STEP)

    def step(self, cc: dict, acked_pkts: int, in_flight: int, now: float) -> tuple[int, int] | None:
        """cc: struct nic_sq_cc as read now; acked_pkts: the QP's stats.acked_pkts;
        now: seconds (monotonic). Returns (cwnd, rtt_target_ns) when the NIC's must
        change, else None."""
        if self.last is None:
            self.last, self.last_acked, self.last_t = dict(cc), acked_pkts, now
            return None
        sig = Signals.between(
            self.last,
            cc,
            elapsed_ns=int((now - self.last_t) * 1e9),
            acked_pkts=max(0, acked_pkts - self.last_acked),
            in_flight=in_flight,
        )
        self.last, self.last_acked, self.last_t = dict(cc), acked_pkts, now
        if not (sig.acked_pkts or sig.trims or sig.trims_lasthop or sig.rtt_samples):
            return None  # no feedback: nothing to learn (an idle or stalled QP)
        want = (self.nscc.update(sig), self.nscc.rtt_target_ns)
        if self.sent is not None and want[1] == self.sent[1] and self._small_growth(want[0]):
            return None
        if want == self.sent:
            return None
        self.sent = want
        return want
