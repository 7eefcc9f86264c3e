"""Options and argument types shared by the command groups."""

from __future__ import annotations

import re

import click

from mrc_nic.lab import state


def parse_duration(text: str) -> float:
    """'2s', '500ms', '100us', '1.5', '1m' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m)?\s*", text)
    if not m:
        raise ValueError(f"cannot read duration {text!r}: use e.g. 2s, 500ms, 1m")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


DURATION = Duration()


def _check_lab(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            state.check_lab_name(value)
        except state.BadLabName as e:
            raise click.BadParameter(str(e)) from None
    return value


lab_option = click.option(
    "-l",
    "--lab",
    "lab",
    envvar="MRC_NIC_LAB",
    default=None,
    callback=_check_lab,
    help="Lab name (default: $MRC_NIC_LAB, or the only lab that is up).",
)

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output for people (table) or programs (json).",
)


def pick_lab(lab: str | None) -> str:
    if lab:
        return lab
    present = state.labs_on_disk()
    if len(present) == 1:
        return present[0]
    if not present:
        raise click.UsageError("no lab is up; start one with: mrc-nic up")
    raise click.UsageError(f"several labs are up ({', '.join(present)}); choose one with -l NAME")


def default_topology_path() -> str:
    """The shipped default topology, wherever the command is run from."""
    from mrc_nic import resources

    return str(resources.DEFAULT_TOPOLOGY)


def snapshot_for(lab: str | None, fmt: str) -> dict | None:
    """The lab's counter snapshot; with --format json it is printed here and
    None is returned, so the caller renders tables only."""
    from mrc_nic.cli import output
    from mrc_nic.observe import stats

    # The tables show no NIC section: its maps' code stays unloaded (a short command)
    snap = stats.snapshot(pick_lab(lab), nic=fmt == "json")
    if fmt == "json":
        output.emit_json(snap)
        return None
    return snap
