"""cc profile list|show|set: congestion control, the OCP controller's CC profiles (mrc_ctl.h)."""

from __future__ import annotations

import click

from mrc_nic.cli import nicctl, output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.cli.common import parse_int
from mrc_nic.cli.nicctl import STATES, host_option


@group()
def cc() -> None:
    """Congestion control (OCP CC profiles)."""


@cc.group("profile")
def cc_profile() -> None:
    """CC profiles (mrc_ctl_cc_profile): what a QP's cc_profile_id names."""


def _row(p: dict) -> list:
    return [p["id"], p["name"] or "", p["algorithm"] or "none", p["state"], len(p["qps"])]


@cc_profile.command(
    "list",
    view=nicctl.profile_table(
        "CC profiles", ["host", "#id", "name", "algorithm", "state", "#qps"], _row
    ),
)
@host_option
@pass_app
def cc_profile_list(app: App, hosts) -> dict:
    """Every CC profile of each NIC: algorithm (uet-1.0-nscc, or none) and state."""
    from mrc_nic.contract import ctlops

    return nicctl.profiles(app, hosts, ctlops.CcProfileQuery())


def _config(cfgs: tuple[str, ...]) -> dict:
    """--cfg NAME=VALUE as mrc_ctl_cc_nscc_cfg: integers, floats, else a flag."""
    config = {}
    for c in cfgs:
        key, sep, value = c.partition("=")
        if not sep:
            raise click.BadParameter(f"--cfg is NAME=VALUE (e.g. max_cwnd=65536), not {c!r}")
        try:
            config[key] = int(value, 0)
        except ValueError:
            try:
                config[key] = float(value)
            except ValueError:
                config[key] = value.lower() in ("1", "true", "yes")
    return config


def _set_view(data: dict) -> None:
    for h, p in data["hosts"].items():
        output.success(f"{h}: CC profile {p['id']}: {p['algorithm'] or 'none'} {p['state']}")


@cc_profile.command(
    "set",
    view=_set_view,
    epilog="""\b
Examples:
  mrc-nic cc profile set 7 --state OFFLINE --algorithm uet-1.0-nscc
  mrc-nic cc profile set 7 --state ONLINE --cfg max_cwnd=65536 --cfg gamma=0.5
  mrc-nic write h0 h1 --size 64M --cc-profile 7""",
)
@click.argument("profile_id", type=parse_int)
@click.option("--state", type=STATES, default=None)
@click.option("--algorithm", default=None, help="uet-1.0-nscc, or 'none' (no CC: fixed window).")
@click.option("--cfg", "cfgs", multiple=True, help="NAME=VALUE of mrc_ctl_cc_nscc_cfg.")
@host_option
@pass_app
def cc_profile_set(app: App, profile_id, state, algorithm, cfgs, hosts) -> dict:
    """Create or change a CC profile (mrc_ctl_modify_cc_profile)."""
    from mrc_nic.contract import ctlops

    attrs: dict = {}
    if algorithm is not None:
        attrs["algorithm"] = None if algorithm.lower() == "none" else algorithm
    if cfgs or (state and state.upper() == "ONLINE"):
        attrs["cc_config"] = _config(cfgs)
    if state:
        attrs["profile_state"] = state.upper()
    if not attrs:
        raise click.UsageError("nothing to change: give --state, --algorithm or --cfg")
    replies = nicctl.call_hosts(app, hosts, ctlops.CcProfileModify(id=profile_id, attrs=attrs))
    return {"hosts": {h: r.profile for h, r in replies.items()}}


def _show_view(data: dict) -> None:
    for h, p in data["hosts"].items():
        output.info(f"{h}: CC profile {p['id']} {p['algorithm'] or 'none'} {p['state']}")
        for k, v in (p["cc_config"] or {}).items():
            output.info(f"  {k} = {v}")


@cc_profile.command("show", view=_show_view)
@click.argument("profile_id", type=parse_int)
@host_option
@pass_app
def cc_profile_show(app: App, profile_id, hosts) -> dict:
    """One CC profile with its NSCC configuration."""
    from mrc_nic.contract import ctlops

    return nicctl.profiles(app, hosts, ctlops.CcProfileQuery(id=profile_id), one=True)


COMMANDS = [cc]
