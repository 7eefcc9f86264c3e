"""The CLI's one context (mrc_nic.cli.app): -l and --format before or after the
command, resolved once; commands return data and one renderer prints it; the
NIC's ports under `nic-port`, not the switches' `port`."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from mrc_nic.cli import app as cli_app
from mrc_nic.cli import cli
from mrc_nic.lab import topology
from tests.helpers.env import NETNS_DIR


@pytest.fixture
def snapshots(monkeypatch):
    """status's snapshot, faked: which lab it was asked for, and with the NIC or not."""
    from mrc_nic.observe import stats

    asked = []

    def snapshot(lab, nic=False):
        asked.append((lab, nic))
        return {"lab": lab, "nic": nic}

    monkeypatch.setattr(stats, "snapshot", snapshot)
    monkeypatch.delenv("MRC_NIC_LAB", raising=False)
    return asked


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "json", "-l", "zz", "status"],
        ["-l", "zz", "status", "--format", "json"],
        ["--format", "json", "status", "-l", "zz"],
        ["--format=json", "--lab=zz", "status"],
    ],
)
def test_lab_and_format_before_or_after_the_command(snapshots, args):
    result = CliRunner().invoke(cli, args, prog_name="mrc-nic")
    assert result.exit_code == 0, result.output
    # the renderer printed the command's data as JSON, the lab resolved once
    assert json.loads(result.output) == {"lab": "zz", "nic": True}
    assert snapshots == [("zz", True)]


def test_a_format_the_command_does_not_give_is_a_usage_error(snapshots):
    result = CliRunner().invoke(
        cli, ["--format", "jsonl", "status", "-l", "zz"], prog_name="mrc-nic"
    )
    assert result.exit_code == 2
    assert "--format jsonl: mrc-nic status gives table, json" in result.output
    assert snapshots == []  # refused before the command ran
    result = CliRunner().invoke(
        cli, ["--format", "json", "status", "--format", "table"], prog_name="mrc-nic"
    )
    assert result.exit_code == 2 and "two formats named" in result.output


def test_a_command_without_output_takes_no_format():
    result = CliRunner().invoke(
        cli, ["--format", "json", "ev", "deny", "1", "5", "-l", "zz"], prog_name="mrc-nic"
    )
    assert result.exit_code == 2 and "gives no --format" in result.output


@pytest.mark.parametrize("sub", ["admin", "status", "update"])
def test_nic_ports_left_the_switch_port_group_and_it_says_where(sub):
    result = CliRunner().invoke(cli, ["port", sub, "h0"], prog_name="mrc-nic")
    assert result.exit_code == 2
    assert f"mrc-nic port {sub} is now: mrc-nic nic-port {sub}" in result.output
    help_result = CliRunner().invoke(cli, ["nic-port", sub, "--help"], prog_name="mrc-nic")
    assert help_result.exit_code == 0 and help_result.output.startswith("Usage: mrc-nic nic-port")


def test_the_renderer_gives_a_view_the_arguments_it_names(capsys):
    app = cli_app.App()
    seen = {}

    def view(data, *, src, app):
        seen.update(data=data, src=src, app=app)

    app.show({"x": 1}, view, {"src": "h0", "dst": "h1"})
    assert seen == {"data": {"x": 1}, "src": "h0", "app": app}
    app.after_fmt = "json"
    app.show({"x": 1}, view, {"src": "h0"})
    assert json.loads(capsys.readouterr().out) == {"x": 1}


def test_an_outcome_is_shown_then_sets_the_exit_code():
    @cli_app.command(view=lambda data: click.echo(f"shown {data['n']}"))
    def probe() -> cli_app.Outcome:
        return cli_app.Outcome({"n": 3}, 1)

    result = CliRunner().invoke(probe, [])
    assert result.exit_code == 1 and result.output == "shown 3\n"
    result = CliRunner().invoke(probe, ["--format", "json"])
    assert result.exit_code == 1 and json.loads(result.output) == {"n": 3}


def test_no_lab_named_and_none_up_is_one_usage_line(monkeypatch):
    from mrc_nic.lab import state

    monkeypatch.delenv("MRC_NIC_LAB", raising=False)
    monkeypatch.setattr(state, "labs_on_disk", lambda: [])
    with pytest.raises(cli_app.NoLabChosen, match="no lab is up"):
        cli_app.App().lab()
    monkeypatch.setattr(state, "labs_on_disk", lambda: ["a1", "b2"])
    with pytest.raises(cli_app.NoLabChosen, match=r"several labs are up \(a1, b2\)"):
        cli_app.App().lab()
    monkeypatch.setattr(state, "labs_on_disk", lambda: ["a1"])
    assert cli_app.App().lab() == "a1"


def test_a_qp_number_names_its_host_by_the_abi_shift():
    from mrc_nic.abi.nic_const_defs import NIC_QPN_HOST_SHIFT

    topo = topology.load(NETNS_DIR / "default.toml")
    assert topo.host_of_qpn(1 << NIC_QPN_HOST_SHIFT | 5) == "h1"
    assert topo.host_of_qpn(0x7) == "h0"
    assert topo.host_of_qpn(99 << NIC_QPN_HOST_SHIFT) is None
