"""Shares of a host's NIC per application session (contract.shares): how they
are written (topology [tenants], MRC_NIC_SHARE_*, exec --share), the limits they
give, and the one-line refusal that says how to raise one."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mrc_nic.cli.exec_cmds import _share_env
from mrc_nic.contract import shares
from mrc_nic.lab import topology
from tests.helpers.env import NETNS_DIR

CAPACITY = {"memory": 32 << 20, "qps": 127, "cqs": 511, "pds": 4096}


@pytest.mark.parametrize(
    ("name", "value", "limit"),
    [
        ("memory", 0.25, 8 << 20),
        ("memory", "50%", 16 << 20),
        ("memory", "8MiB", 8 << 20),
        ("memory", "1g", 32 << 20),  # more than the host has: the whole host
        ("qps", 8, 8),
        ("qps", "8", 8),
        ("qps", "10%", 12),
        ("cqs", 1.0, 511),
        ("pds", "0.5", 2048),
        ("pds", 0.0001, 1),  # at least one
    ],
)
def test_a_share_is_a_fraction_or_an_amount(name, value, limit):
    assert shares.parse(name, value).limit(CAPACITY[name]) == limit


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("memory", 0.0, "fraction must be in"),
        ("qps", 1.5, "fraction must be in"),
        ("qps", 0, "at least 1"),
        ("qps", "8MiB", "a count"),
        ("cqs", True, "a count"),
        ("memory", "lots", "a size"),
        ("rings", 1, "unknown share 'rings'; shares: memory, qps, cqs, pds"),
    ],
)
def test_bad_shares_are_one_line_errors_saying_what_is_allowed(name, value, why):
    with pytest.raises(ValueError, match=why) as e:
        shares.parse(name, value)
    assert "\n" not in str(e.value)


def test_a_session_takes_what_it_asked_for_else_the_labs_else_half():
    lab = shares.parse_all({"qps": 16, "memory": "25%"}, "[tenants]")
    asked = shares.parse_all({"qps": "75%"}, "shares")
    got = shares.limits(CAPACITY, lab, asked)
    assert got.limits == {"memory": 8 << 20, "qps": 95, "cqs": 255, "pds": 2048}
    assert shares.limits(CAPACITY, {}, {}).limits["qps"] == 63


def test_a_refusal_names_the_share_and_how_to_raise_it():
    got = shares.limits(CAPACITY, {}, {})
    assert got.check("qps", 62, 1, "h0") is None
    why = got.check("qps", 63, 1, "h0")
    assert why is not None and "\n" not in why
    assert "share of h0's NIC is 63 QPs (50% of 127)" in why and "holds 63" in why
    assert "mrc-nic exec --share qps=" in why and "MRC_NIC_SHARE_QPS" in why
    assert "[tenants] qps" in why


def test_a_refusal_past_the_whole_nic_names_the_nics_own_setting():
    got = shares.limits(CAPACITY, {}, {})
    why = got.check("memory", 0, CAPACITY["memory"] + 1, "h3")
    assert why is not None and "\n" not in why
    assert f"h3's NIC has {CAPACITY['memory']} bytes of NIC memory in all" in why
    assert "[nic] memory" in why and "--share" not in why


def test_shares_from_the_environment():
    env = {"MRC_NIC_SHARE_MEMORY": "25%", "MRC_NIC_SHARE_PDS": "4", "OTHER": "x"}
    assert shares.from_env(env) == {"memory": "25%", "pds": "4"}


def test_the_topology_takes_a_tenants_section_and_refuses_a_bad_share(tmp_path):
    text = (NETNS_DIR / "default.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text + '\n[tenants]\nmemory = "25%"\nqps = 16\n')
    topo = topology.load(good, lab="t")
    assert shares.parse_all(topo.raw["tenants"], "[tenants]")["qps"].limit(127) == 16
    bad = tmp_path / "bad.toml"
    bad.write_text(text + "\n[tenants]\nqps = 2.5\n")
    with pytest.raises(topology.TopologyError, match=r"tenants\.qps: share qps as a fraction"):
        topology.load(bad, lab="t")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(text + "\n[tenants]\nrings = 3\n")
    with pytest.raises(topology.TopologyError, match="unknown key; allowed in .tenants."):
        topology.load(unknown, lab="t")


def test_exec_share_becomes_the_environment_the_library_reads():
    assert _share_env(("memory=25%", "qps=8")) == {
        "MRC_NIC_SHARE_MEMORY": "25%",
        "MRC_NIC_SHARE_QPS": "8",
    }
    from mrc_nic.cli import cli

    result = CliRunner().invoke(cli, ["exec", "--share", "qps=lots", "h0", "--", "true"])
    assert result.exit_code == 2
    assert "share qps must be" in result.output
