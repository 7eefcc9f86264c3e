"""NSCC's window arithmetic (mrc_nic/transport/nscc.py): no root, no maps.

Each test feeds one controller the signals of a few intervals, as the
daemon does every tick from a QP's BPF counters (struct nic_sq_cc), and
checks the window: multiplicative decrease on ECN with a delay above the
target (at most max_md_jump, at most once a base RTT), nothing on ECN below
it, fair and proportional increase, quick adapt, trims, bounds. The last
tests run a fluid model of flows sharing one bottleneck.
"""

from __future__ import annotations

import dataclasses

import pytest

from mrc_nic import nic
from mrc_nic.transport import nscc
from mrc_nic.transport.nscc import MSS, Nscc, NsccConfig, QpCc, Signals

MS = 1_000_000
BASE = 1 * MS  # base RTT: 1 ms
LINK = 200e6  # 200 Mbit/s: BDP 25000 bytes at 1 ms
BDP = 25_000
WINDOW = 1024  # the MPR range, packets


def controller(**cfg) -> Nscc:
    return Nscc(NsccConfig(base_rtt=BASE, **cfg), link_bps=LINK, window_pkts=WINDOW)


def interval(
    n: Nscc,
    *,
    lo: int = 0,
    hi: int = 0,
    ecn_lo: int = 0,
    ecn_hi: int = 0,
    delay: float | None = None,
    elapsed: int = BASE,
    trims: int = 0,
    lasthop: int = 0,
    in_flight: int = 0,
) -> int:
    """One interval: packets acknowledged by case, every SACK's RTT = base + delay."""
    acks = lo + hi + ecn_lo + ecn_hi
    rtt = n.base_rtt + (delay if delay is not None else 0)
    headroom = int(lo * max(0, n.rtt_target_ns - rtt))
    sig = Signals(
        elapsed_ns=elapsed,
        acked_pkts=acks,
        pkts_lo=lo,
        pkts_hi=hi,
        pkts_ecn_lo=ecn_lo,
        pkts_ecn_hi=ecn_hi,
        headroom=headroom,
        rtt_samples=acks if delay is not None else 0,
        rtt_sum_ns=int(acks * rtt) if delay is not None else 0,
        trims=trims,
        trims_lasthop=lasthop,
        in_flight=in_flight,
    )
    return n.update(sig)


# ---- profiles and parameters ----------------------------------------------------------------


def test_profiles_fixed_default_and_unknown():
    assert nscc.profile(nscc.FIXED).nscc is None
    default = nscc.profile(nscc.DEFAULT_NSCC)
    assert default.nscc == NsccConfig() and default.as_dict()["algorithm"] == "nscc"
    assert nscc.profile(2).nscc.disable_qa
    with pytest.raises(ValueError, match="no CC profile 9 .profiles: 0 .fixed"):
        nscc.profile(9)


def test_config_overrides_are_checked():
    cfg = NsccConfig().with_overrides({"target_delay": 50_000, "gamma": 0.5})
    assert (cfg.target_delay, cfg.gamma) == (50_000, 0.5)
    with pytest.raises(ValueError, match="no NSCC field 'alpha'"):
        NsccConfig().with_overrides({"alpha": 1})
    with pytest.raises(ValueError, match="max_md_jump must be in"):
        NsccConfig().with_overrides({"max_md_jump": 0})
    with pytest.raises(ValueError, match="base_rtt must be an integer"):
        NsccConfig().with_overrides({"base_rtt": -1})


def test_mss_is_the_nics_payload():
    assert MSS == nic.MR_ELEM_SIZE


def test_derived_parameters_follow_ucs_defaults():
    n = controller()
    assert n.bdp == pytest.approx(BDP)
    assert n.max_cwnd == pytest.approx(1.5 * BDP)  # 1.5 BDP
    assert n.min_cwnd == MSS  # one packet
    assert n.target == pytest.approx(0.75 * BASE)
    assert n.rtt_target_ns == int(1.75 * BASE)
    assert n.qa_threshold == pytest.approx(4 * 0.75 * BASE)
    assert (n.adjust_period, n.adjust_bytes) == (BASE, 8 * MSS)
    assert n.cwnd == n.max_cwnd  # it starts at the top
    # Given values win; max_cwnd never exceeds the MPR range.
    n = Nscc(
        NsccConfig(base_rtt=BASE, target_delay=200_000, max_cwnd=10**8, qa_threshold=7),
        link_bps=LINK,
        window_pkts=16,
    )
    assert (n.target, n.max_cwnd, n.qa_threshold) == (200_000, 16 * MSS, 7)


def test_base_rtt_is_the_labs_unless_configured():
    n = Nscc(NsccConfig(), link_bps=LINK, window_pkts=WINDOW, lab_rtt_ns=BASE)
    assert n.base_rtt == BASE and n.bdp == pytest.approx(BDP)
    # Not the smallest sample: a TBF with tokens passes packets at once (see nscc).
    n.update(Signals(elapsed_ns=MS, acked_pkts=1, pkts_hi=1, rtt_min_ns=BASE // 50))
    assert n.base_rtt == BASE
    n = Nscc(NsccConfig(base_rtt=2 * BASE), link_bps=LINK, window_pkts=WINDOW, lab_rtt_ns=BASE)
    assert n.base_rtt == 2 * BASE and n.bdp == pytest.approx(2 * BDP)


# ---- decrease ---------------------------------------------------------------------------------


def test_multiplicative_decrease_on_ecn_and_delay():
    n = controller(disable_qa=True, eta=0)
    before = n.cwnd
    # Delay twice the target: 1 - gamma x (2t - t) / 2t = 1 - 0.8 / 2 = 0.6.
    interval(n, ecn_hi=10, delay=2 * n.target)
    assert n.cwnd == pytest.approx(0.6 * before)
    assert n.counts["md"] == 1


def test_decrease_is_at_most_max_md_jump():
    n = controller(disable_qa=True, eta=0)
    before = n.cwnd
    interval(n, ecn_hi=10, delay=100 * n.target)  # factor would be 0.2
    assert n.cwnd == pytest.approx(0.5 * before)  # max_md_jump 0.5
    n = controller(disable_qa=True, eta=0, max_md_jump=0.25)
    interval(n, ecn_hi=10, delay=100 * n.target)
    assert n.cwnd == pytest.approx(0.75 * before)


def test_decrease_at_most_once_a_base_rtt():
    n = controller(disable_qa=True)
    before = n.cwnd
    for _ in range(4):  # four intervals of a quarter base RTT each
        interval(n, ecn_hi=2, delay=2 * n.target, elapsed=BASE // 4)
    assert n.counts["md"] == 1
    interval(n, ecn_hi=2, delay=2 * n.target, elapsed=BASE)
    assert n.counts["md"] == 2
    assert n.cwnd < 0.6 * before


def test_ecn_below_the_target_changes_nothing():
    n = controller(disable_qa=True)
    n.cwnd = 10_000.0
    interval(n, ecn_lo=10, delay=0.1 * n.target, elapsed=BASE // 2)
    assert n.cwnd == 10_000.0 and n.counts["md"] == 0


def test_delay_without_ecn_is_no_decrease():
    n = controller(disable_qa=True)
    n.cwnd = 10_000.0
    interval(n, hi=10, delay=3 * n.target)
    assert n.cwnd > 10_000.0 and n.counts["md"] == 0


def test_a_last_hop_trim_counts_as_a_mark_for_the_decrease():
    """MRC: no ECN at the last hop, so its trims stand for the marks UET would
    have seen there (mrc-nic extension lasthop_trim_md, on by default)."""
    n = controller(disable_qa=True, eta=0)
    n.cwnd = 30 * MSS
    interval(n, hi=10, lasthop=2, delay=2 * n.target)
    assert n.counts["md"] == 1
    assert n.cwnd < 0.6 * 30 * MSS
    off = controller(disable_qa=True, eta=0, fi=0, lasthop_trim_md=False)
    off.cwnd = 30 * MSS
    interval(off, hi=10, lasthop=2, delay=2 * off.target)
    assert off.counts["md"] == 0 and off.cwnd == 28 * MSS  # only the trimmed bytes
    fabric = controller(disable_qa=True, eta=0, fi=0)
    fabric.cwnd = 30 * MSS
    interval(fabric, hi=10, trims=2, delay=2 * fabric.target)  # fabric trims: ECN does it
    assert fabric.counts["md"] == 0 and fabric.cwnd == 28 * MSS


def test_trims_take_their_bytes_off_the_window():
    n = controller(disable_qa=True)
    n.cwnd = 20 * MSS
    interval(n, trims=3, lasthop=2, elapsed=BASE // 2)
    assert n.cwnd == 15 * MSS


# ---- increase ---------------------------------------------------------------------------------


def test_fair_increase_when_delayed_but_unmarked():
    n = controller(disable_qa=True, eta=0)
    n.cwnd = w = 10_000.0
    interval(n, hi=10, delay=2 * n.target)
    # fi x bytes acknowledged / cwnd, fi = 5 MSS x (BDP / UET's reference BDP).
    fi = 5 * MSS * BDP / (nscc.REF_BDP_PKTS * MSS)
    assert n.fi == pytest.approx(fi)
    assert n.cwnd == pytest.approx(w + fi * 10 * MSS / w)


def test_proportional_increase_grows_with_the_headroom():
    gains = []
    for delay in (0.5, 0.25):
        n = controller(disable_qa=True, eta=0)
        n.cwnd = 10_000.0
        interval(n, lo=10, delay=delay * n.target)
        gains.append(n.cwnd - 10_000.0)
        # alpha x (target - delay) x bytes / cwnd
        want = n.alpha * 10 * (1 - delay) * n.target * MSS / 10_000.0
        assert gains[-1] == pytest.approx(want, rel=1e-3)
    assert 0 < gains[0] < gains[1]


def test_fast_increase_after_a_window_at_zero_delay():
    n = controller(disable_qa=True, eta=0)
    n.cwnd = w = 4 * MSS
    interval(n, lo=2, delay=0)  # 2 KiB: not yet a window's worth
    assert n.counts["fast"] == 0
    interval(n, lo=4, delay=0)  # 6 KiB > cwnd: fast increase from now on
    assert n.counts["fast"] > 0 and n.cwnd > w
    grown = n.cwnd
    interval(n, lo=4, delay=0)
    assert n.cwnd == pytest.approx(grown + 4 * MSS * n.fi_scale)
    interval(n, lo=4, delay=n.target / 2)  # delay again: back to proportional
    assert not n.fast


def test_eta_once_an_adjust_period():
    n = controller(disable_qa=True, fi=0)
    n.cwnd = w = 10_000.0
    interval(n, hi=1, delay=2 * n.target, elapsed=BASE)
    assert n.cwnd == pytest.approx(w + n.eta)


def test_increase_waits_for_the_adjust_thresholds():
    n = controller(disable_qa=True, eta=0)
    n.cwnd = w = 10_000.0
    # 2 packets (< 8 MTUs) in a tenth of a base RTT: accumulated, not applied yet.
    interval(n, hi=2, delay=2 * n.target, elapsed=BASE // 10)
    assert n.cwnd == w
    for _ in range(10):
        interval(n, hi=2, delay=2 * n.target, elapsed=BASE // 10)
    assert n.cwnd > w


# ---- quick adapt ------------------------------------------------------------------------------


def test_quick_adapt_after_a_trim_when_little_was_achieved():
    n = controller()
    assert n.cwnd == pytest.approx(1.5 * BDP)
    span = n.base_rtt + n.target
    interval(n, hi=1, delay=n.target, elapsed=int(span))  # the first window only starts QA
    assert n.counts["qa"] == 0
    # 2 packets acknowledged over a window, trims: achieved 2 KiB < max_cwnd / 8.
    interval(n, hi=2, delay=n.target, elapsed=int(span), lasthop=3, in_flight=20)
    assert n.counts["qa"] == 1
    assert n.cwnd == pytest.approx(2 * MSS)
    assert n.ignore_left == 20 * MSS
    # ECN-marked feedback of what was in flight then is ignored: no decrease.
    interval(n, ecn_hi=5, delay=3 * n.target, elapsed=BASE // 2)
    assert n.counts["md"] == 0


def test_quick_adapt_on_a_delay_above_qa_threshold():
    n = controller()
    span = int(n.base_rtt + n.target)
    interval(n, hi=1, delay=0, elapsed=span)
    interval(n, hi=2, delay=5 * n.target, elapsed=span)  # 5 targets > 4
    assert n.counts["qa"] == 1


def test_no_quick_adapt_when_enough_was_achieved_or_disabled():
    n = controller()
    span = int(n.base_rtt + n.target)
    interval(n, hi=1, delay=0, elapsed=span)
    # 10 packets a window: above max_cwnd / 8 (4.6 packets); the trims count as bytes.
    interval(n, hi=10, delay=0, elapsed=span, trims=2)
    assert n.counts["qa"] == 0
    n = controller(disable_qa=True)
    interval(n, hi=1, delay=0, elapsed=span)
    interval(n, hi=1, delay=0, elapsed=span, trims=2)
    assert n.counts["qa"] == 0
    n = controller(qa_gate=0)  # achieved below max_cwnd itself
    interval(n, hi=1, delay=0, elapsed=span)
    interval(n, hi=10, delay=0, elapsed=span, trims=2)
    assert n.counts["qa"] == 1


# ---- bounds -----------------------------------------------------------------------------------


def test_window_stays_between_one_packet_and_max_cwnd():
    n = controller(disable_qa=True, eta=0)
    for _ in range(50):
        interval(n, lo=200, delay=0)
    assert n.cwnd == pytest.approx(n.max_cwnd)
    assert n.cwnd_pkts == round(1.5 * BDP / MSS)
    interval(n, trims=1000, elapsed=BASE)
    assert n.cwnd == MSS and n.cwnd_pkts == 1
    for _ in range(10):
        interval(n, ecn_hi=1, delay=50 * n.target)
    assert n.cwnd == MSS and n.cwnd_pkts == 1


# ---- the daemon's side: counters in, kicks out ------------------------------------------------


def test_signals_from_two_reads_of_the_counters():
    before = {f: 0 for f, _ in nic.SqCc._fields_} | {"pkts_hi": 5, "rtt_min_ns": 900}
    after = dict(before, pkts_hi=8, pkts_lo=2, rtt_samples=5, rtt_sum_ns=5000, rtt_min_ns=800)
    sig = Signals.between(before, after, elapsed_ns=MS, acked_pkts=5, in_flight=3)
    assert (sig.pkts_hi, sig.pkts_lo, sig.rtt_min_ns, sig.mean_rtt_ns) == (3, 2, 800, 1000)
    assert (sig.acked_pkts, sig.in_flight, sig.elapsed_ns) == (5, 3, MS)


def test_qp_cc_kicks_only_when_the_window_changes():
    cc = QpCc(controller(disable_qa=True))
    cwnd, target = cc.initial()
    assert (cwnd, target) == (round(1.5 * BDP / MSS), int(1.75 * BASE))
    zero = {f: 0 for f, _ in nic.SqCc._fields_}
    assert cc.step(zero, 0, 0, 1.0) is None  # the first read is the reference
    assert cc.step(zero, 0, 0, 1.001) is None  # nothing came back: nothing learnt
    marked = dict(zero, pkts_ecn_hi=10, rtt_samples=10, rtt_sum_ns=10 * 3 * BASE)
    change = cc.step(marked, 10, 20, 1.002)
    assert change is not None and change[0] < cwnd and change[1] == target
    # Unmarked and delayed, but the increase rounds to the same window: no kick.
    more = dict(marked, pkts_hi=1, rtt_samples=11, rtt_sum_ns=marked["rtt_sum_ns"] + 2 * BASE)
    assert cc.step(more, 11, 20, 1.0021) is None


def test_qp_cc_kicks_a_small_growth_only_once_it_adds_up():
    cc = QpCc(controller(disable_qa=True))
    cc.initial()
    cc.sent = (32, cc.sent[1])  # the NIC has 32 packets; NSCC wants 33, 35, 36
    assert cc._small_growth(33) and cc._small_growth(35) and not cc._small_growth(36)
    assert not cc._small_growth(31), "a decrease goes at once"
    cc.sent = (4, cc.sent[1])
    assert not cc._small_growth(5), "one packet on a small window goes at once"


# ---- fluid model: flows sharing one bottleneck ------------------------------------------------


@dataclasses.dataclass
class Bottleneck:
    """A link of `rate` packets per ns with a FIFO queue that marks ECN
    between kmin and kmax packets (linear probability, applied as a fraction)."""

    rate: float
    kmin: float
    kmax: float
    queue: float = 0.0


def fluid(flows: list[Nscc], link: Bottleneck, ticks: int, dt: int) -> list[list[float]]:
    """Windows per tick. Each tick every flow acknowledges its share of what the
    link carried (its share of the window), at the RTT the queue gives."""
    history = []
    for _ in range(ticks):
        total = sum(f.cwnd for f in flows) / MSS
        pipe = link.rate * flows[0].base_rtt
        link.queue = max(0.0, total - pipe)
        rtt = flows[0].base_rtt + link.queue / link.rate
        mark = min(1.0, max(0.0, (link.queue - link.kmin) / (link.kmax - link.kmin)))
        for f in flows:
            share = f.cwnd / MSS / max(total, 1e-9)
            acked = min(total, pipe + link.queue) / rtt * dt * share  # packets this tick
            marked, clear = acked * mark, acked * (1 - mark)
            high = rtt >= f.rtt_target_ns
            f.update(
                Signals(
                    elapsed_ns=dt,
                    acked_pkts=round(acked),
                    pkts_lo=0 if high else round(clear),
                    pkts_hi=round(clear) if high else 0,
                    pkts_ecn_lo=0 if high else round(marked),
                    pkts_ecn_hi=round(marked) if high else 0,
                    headroom=0 if high else int(round(clear) * (f.rtt_target_ns - rtt)),
                    rtt_samples=max(1, round(acked)),
                    rtt_sum_ns=int(max(1, round(acked)) * rtt),
                    in_flight=round(f.cwnd / MSS),
                )
            )
        history.append([f.cwnd for f in flows])
    return history


def test_two_flows_converge_to_a_fair_share_and_keep_the_link_busy():
    # 100 packets per base RTT (BDP 100 KiB); ECN from 20 to 80 packets of queue.
    link = Bottleneck(rate=100 / BASE, kmin=20, kmax=80)
    flows = [
        Nscc(NsccConfig(base_rtt=BASE), link_bps=100 * MSS * 8 / BASE * 1e9, window_pkts=WINDOW)
        for _ in range(2)
    ]
    flows[1].cwnd = flows[1].min_cwnd  # one starts at the top, one at the bottom
    history = fluid(flows, link, ticks=3000, dt=BASE // 4)
    late = history[-400:]
    share = [sum(h[i] for h in late) / len(late) for i in range(2)]
    assert abs(share[0] - share[1]) / sum(share) < 0.15, share
    total = sum(share) / MSS
    assert total >= 95, f"the link idles: {total:.0f} packets in flight for a pipe of 100"
    assert total <= 100 + 80, "the queue stays within the marking band"


def test_seven_flows_share_a_bottleneck_without_collapsing():
    link = Bottleneck(rate=100 / BASE, kmin=20, kmax=80)
    flows = [
        Nscc(NsccConfig(base_rtt=BASE), link_bps=100 * MSS * 8 / BASE * 1e9, window_pkts=WINDOW)
        for _ in range(7)
    ]
    history = fluid(flows, link, ticks=3000, dt=BASE // 4)
    late = history[-400:]
    shares = [sum(h[i] for h in late) / len(late) / MSS for i in range(7)]
    assert min(shares) > 0.5 * max(shares), shares
    assert sum(shares) >= 95, shares


def test_a_send_qp_names_a_profile_and_may_tune_it():
    """The RTS extension attributes (transport.qpattrs): a CC profile by id, NSCC
    fields tuned by name, refusals that say what is wrong."""
    from mrc_nic.transport.profiles import ProfileTable
    from mrc_nic.transport.qp import QpError
    from mrc_nic.transport.qpattrs import send_extensions

    table = ProfileTable(planes=4)  # the host's profiles: the built-in ones

    def setup(cc_profile=nscc.DEFAULT_NSCC, **attrs):
        left = dict(attrs)
        got = send_extensions(left, 4, table, cc_profile)
        assert not left  # every attribute it knows is taken
        return got

    assert setup().nscc == NsccConfig()  # NSCC by default
    assert setup(cc_profile=0).nscc is None
    tuned = setup(cc={"gamma": 0.5, "target_delay": 50_000}).nscc
    assert (tuned.gamma, tuned.target_delay) == (0.5, 50_000)
    # the floor: the EV profile's unless given (None here: the daemon takes the profile's)
    assert setup(ev_count=8).ev_min_active is None
    assert setup(ev_count=8, ev_min_active=0).ev_min_active == 0
    for bad, message in (
        ({"cc_profile": 9}, "no CC profile 9"),
        ({"cc": ["gamma"]}, "cc must be an object"),
        ({"cc": {"alpha": 1}}, "no NSCC field 'alpha'"),
        ({"cc_profile": 0, "cc": {"gamma": 0.5}}, "has no NSCC to tune"),
        ({"ev_count": 6}, "multiple of the lab's 4 planes"),
        ({"ev_count": 8, "ev_min_active": 9}, "ev_min_active must be"),
        ({"cwnd": 5000}, "cwnd must be"),
        ({"reorder_ns": -1}, "reorder_ns must be"),
    ):
        with pytest.raises(QpError, match=message) as e:
            setup(**bad)
        assert e.value.errno == 22
