"""Switch egress queues without a lab: settings from the topology, targets, changes.

Tier 1 (no root): mrc_nic.fabric.queues derives each port's BPF queue twin from the
topology and resolves `mrc-nic port` targets; mrc_nic.fabric.switchport checks and
packs the settings. The BPF side is tests/bpf/test_switchport.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from mrc_nic import units
from mrc_nic.cli import cli
from mrc_nic.fabric import queues
from mrc_nic.fabric import switchport as sp
from mrc_nic.lab import topology
from mrc_nic.units import Threshold
from tests.helpers.env import NETNS_DIR

NETNS = NETNS_DIR


@pytest.fixture(scope="module")
def default():
    # the default shape at 1 Gbit/s: round numbers for the BDP arithmetic below
    return topology.load(NETNS / "default-1g.toml", lab="zq")


def ref(topo, name: str) -> queues.PortRef:
    (found,) = queues.resolve_ports(topo, (name,))
    return found


def from_text(tmp_path, queues_section: str, links: str = 'rate = "1gbit"\n'):
    path = tmp_path / "q.toml"
    path.write_text(
        '[lab]\nname = "zq"\n[fabric]\nhosts = 2\nplanes = 1\n'
        f"[links]\n{links}[queues]\n{queues_section}"
    )
    return topology.load(path)


# ---- settings from the topology ---------------------------------------------------


def test_default_thresholds_are_fractions_of_the_port_bdp(default):
    # The design RTT: a 3214-byte frame on each of 4 links at 1 Gbit/s, 103 us
    # (topology.design_rtt_ns). 1 Gbit/s x 103 us = 12875 bytes of BDP: kmin
    # 0.2, kmax 0.8, trim 2.0 of it.
    assert default.queues.base_rtt_ns == 103_000
    s = queues.port_settings(default, ref(default, "p0.t0a:t1a"))
    assert (s.rate_bps, s.kmin, s.kmax, s.trim) == (10**9, 2575, 10300, 25750)
    assert s.buffer == 256 * 1024
    assert s.burst == topology.tbf_burst_bytes(10**9, 1500) == 31250
    assert s.ecn and not s.lasthop


def test_last_hop_does_not_mark_by_default_but_trims_as_last_hop(default):
    last = queues.port_settings(default, ref(default, "p0.t0a:h0"))
    assert last.lasthop and not last.ecn
    assert last.trim == 25750
    for name in ("p0.t0a:t1a", "p0.t1a:t0a", "p0.t1b:t0b"):
        s = queues.port_settings(default, ref(default, name))
        assert s.ecn and not s.lasthop, name


def test_ecn_last_hop_turns_marking_on_there(tmp_path):
    topo = from_text(tmp_path, "ecn_last_hop = true\n")
    assert queues.port_settings(topo, ref(topo, "p0.t0a:h0")).ecn


def test_thresholds_in_bytes_rtt_and_trim_off(tmp_path):
    topo = from_text(
        tmp_path,
        'base_rtt = "40us"\nkmin = "20KB"\nkmax = 0.5\ntrim = "off"\nseed = 9\n',
        links='rate = "10gbit"\nbuffer = "1MiB"\n',
    )
    s = queues.port_settings(topo, ref(topo, "p0.t0a:t1a"))
    # 10 Gbit/s x 40 us = 50000 bytes of BDP.
    assert (s.kmin, s.kmax, s.trim, s.buffer) == (20000, 25000, None, 2**20)
    assert s.seed == 9 + ref(topo, "p0.t0a:t1a").port.port_id


def test_ports_of_one_link_rate_share_thresholds_and_not_seeds(default):
    settings = [queues.port_settings(default, r) for r in queues.switch_ports(default)]
    assert len({s.seed for s in settings}) == len(settings)


def test_uncapped_links_have_no_queue():
    topo = topology.load(NETNS / "uncapped.toml", lab="zq")
    assert all(queues.port_settings(topo, r) is None for r in queues.switch_ports(topo))


def test_summary_names_the_queue_parameters(default):
    assert default.summary()["queues"] == {
        "base_rtt_ns": 103_000,
        "ecn": True,
        "ecn_last_hop": False,
        "kmin": "0.2bdp",
        "kmax": "0.8bdp",
        "trim": "2bdp",
    }


# ---- thresholds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0.2, Threshold(bdp=0.2)),
        (1, Threshold(bdp=1.0)),
        ("0.5bdp", Threshold(bdp=0.5)),
        ("20k", Threshold(nbytes=20000)),
        ("20KB", Threshold(nbytes=20000)),
        ("20KiB", Threshold(nbytes=20480)),
        ("1m", Threshold(nbytes=10**6)),
        ("1500", Threshold(nbytes=1500)),
    ],
)
def test_parse_threshold(text, expected):
    assert units.parse_threshold(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("lots", "fraction of the BDP"),
        ("-0.2", "fraction of the BDP"),
        (20000, "a size needs a unit"),
        ("nanbdp", "0..1000"),
        (True, "fraction of the BDP"),
        ("off", "fraction of the BDP"),  # only trim may be off
    ],
)
def test_parse_threshold_errors(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        units.parse_threshold(text)


def test_trim_may_be_off():
    assert units.parse_threshold("off", allow_off=True) is None


# ---- settings checks and layout ---------------------------------------------------------

GOOD = sp.QueueSettings(rate_bps=10**9, buffer=200_000, kmin=20_000, kmax=80_000, trim=120_000)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"kmin": 90_000}, "kmin .90000 bytes. must not be above kmax .80000 bytes."),
        ({"buffer": 0}, "buffer must be at least 1 byte"),
        ({"buffer": (1 << 30) + 1}, "buffer must be 0..1073741824 bytes"),
        ({"trim": -1}, "trim must be"),
        ({"rate_bps": 10}, "rate must be"),
        ({"seed": -1}, "seed"),
    ],
)
def test_settings_checks(change, fragment):
    with pytest.raises(ValueError, match=fragment):
        dataclasses.replace(GOOD, **change).layout()


def test_layout_round_trip_and_fixed_point():
    for s in (GOOD, dataclasses.replace(GOOD, trim=None, ecn=False, lasthop=True, burst=9)):
        assert sp.QueueSettings.from_layout(s.layout()) == s
    q = GOOD.layout()
    assert q.flags == sp.QueueFlag.ENABLED | sp.QueueFlag.ECN | sp.QueueFlag.TRIM
    assert q.drain_q == 1 << 29  # 0.125 bytes per ns, << 32
    assert q.cost_q == 8 << 16  # 8 ns per byte, << 16
    assert (q.tail_ns, q.seq) == (0, 0)  # written empty


def test_twin_backlog_subtracts_the_burst():
    q = dataclasses.replace(GOOD, burst=1000).layout()
    q.tail_ns = 10_000 + 3000 * 8  # 3000 bytes at 8 ns a byte, from t = 10 us
    assert sp.twin_backlog(q, 10_000) == 2000
    assert sp.twin_backlog(q, 10_000 + 2500 * 8) == 0
    assert sp.twin_backlog(q, 10**9) == 0


def test_high_water_mark_takes_the_largest_cpu():
    per_cpu = [sp.CountersLayout(pkts=1, backlog_hwm=v) for v in (5, 900, 7)]
    got = sp.PortCounters.from_cpus(per_cpu)
    assert (got.pkts, got.backlog_hwm) == (3, 900)


def test_drops_add_buffer_drops_to_fault_drops():
    c = sp.PortCounters(drop_blackhole=1, drop_loss=2, drop_buffer=4)
    assert (c.fault_drops, c.drops) == (3, 7)


# ---- targets and changes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "names"),
    [
        (("p0.t1a:t0a",), ["p0.t1a:t0a"]),
        (("p0.t1a-t0a",), ["p0.t1a:t0a", "p0.t0a:t1a"]),
        (("p0.t0a-t1a",), ["p0.t1a:t0a", "p0.t0a:t1a"]),  # either order
        (("p1.t0a-h0",), ["p1.t0a:h0"]),  # a host link: its switch end
        (("p2.t0b",), ["p2.t0b:h1", "p2.t0b:t1a", "p2.t0b:t1b"]),
    ],
)
def test_resolve_ports(default, words, names):
    assert sorted(r.name for r in queues.resolve_ports(default, words)) == sorted(names)


def test_resolve_plane_and_all(default):
    assert len(queues.resolve_ports(default, ("all",))) == len(default.switch_ports()) == 40
    plane = queues.resolve_ports(default, ("plane", "3"))
    assert len(plane) == 10 and {r.link.plane for r in plane} == {3}


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        (("p0.t1a:t0x",), "did you mean .*p0.t1a:t0a"),
        (("h0:eth0",), "host port"),
        (("plane", "9"), "no plane 9"),
        (("plane", "x"), "plane must be a number"),
        (("a", "b", "c"), "cannot read target"),
    ],
)
def test_resolve_errors(default, words, fragment):
    with pytest.raises(queues.QueueError, match=fragment):
        queues.resolve_ports(default, words)


def test_change_applies_fractions_bytes_and_off():
    change = queues.QueueChange(
        kmin=Threshold(nbytes=5000), kmax=Threshold(bdp=0.5), trim=queues.OFF, ecn=False
    )
    out = change.applied(GOOD, bdp=40_000)
    assert (out.kmin, out.kmax, out.trim, out.ecn, out.buffer) == (
        5000,
        20000,
        None,
        False,
        200_000,
    )
    assert queues.QueueChange().is_empty() and not change.is_empty()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["port", "set", "all", "--kmin", "lots"], "fraction of the BDP"),
        (["port", "set", "all", "--buffer", "off"], "fraction of the BDP"),
        (["port", "set", "all"], "nothing to change"),
        (["port", "set", "--kmin", "20k"], "Missing argument"),
    ],
)
def test_port_set_usage_errors_touch_nothing(args, fragment):
    result = CliRunner().invoke(cli, [*args, "-l", "zqnolab"])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
