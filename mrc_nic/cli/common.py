"""Options and argument types shared by the command groups."""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import os
import re
import time

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


@dataclasses.dataclass(frozen=True)
class Since:
    """Where a history starts: after a sequence number, or at a wall-clock time."""

    seq: int | None = None
    time: float | None = None


AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_since(text: str, now: float | None = None) -> Since:
    """'403' (a sequence number), '30s', '5m ago', '1h' (an age), '22:11:40'
    (today, or yesterday if that is still to come), '2026-11-27T22:11:40' (ISO)."""
    now = time.time() if now is None else now
    text = text.strip()
    if text.isdigit():
        return Since(seq=int(text))
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh])(?:\s+ago)?", text)
    if m:
        return Since(time=now - float(m.group(1)) * AGE_UNITS[m.group(2)])
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
            clock = datetime.time.fromisoformat(text.zfill(len(text) + (text.index(":") == 1)))
            today = datetime.datetime.fromtimestamp(now).date()
            at = datetime.datetime.combine(today, clock).timestamp()
            return Since(time=at - 86400 if at > now else at)
        return Since(time=datetime.datetime.fromisoformat(text).timestamp())
    except ValueError:
        raise ValueError(
            f"cannot read {text!r}: give a sequence number (403), a time (22:11:40 or "
            "2026-11-27T22:11:40) or an age (30s, 5m, 1h)"
        ) from None


class SinceType(click.ParamType):
    name = "seq|time|age"

    def convert(self, value, param, ctx):
        if isinstance(value, Since):
            return value
        try:
            return parse_since(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


SINCE = SinceType()


# The lab a command names: `-l NAME` after the command, or before it
# (`mrc-nic -l NAME status`, the group's option, kept in the root context's
# meta under this key), else $MRC_NIC_LAB.
GROUP_LAB_KEY = "mrc_nic.lab"


def canonical_lab(value: str) -> str:
    """A lab name as given, in its one stored form (a shipped topology's file
    name works: `clos-8` is the lab clos8); BadParameter if it cannot be one."""
    from mrc_nic.lab import names, topology

    try:
        return names.canonical_lab_name(value)
    except topology.TopologyError as e:
        raise click.BadParameter(str(e)) from None


def _check_group_lab(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[GROUP_LAB_KEY] = canonical_lab(value)


def _check_lab(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    before = ctx.find_root().meta.get(GROUP_LAB_KEY)
    if value is not None:
        value = canonical_lab(value)
        if before is not None and before != value:
            raise click.BadParameter(
                f"two labs named: {before} before the command and {value} after it; give one"
            )
        return value
    if before is not None:
        return before
    env = os.environ.get("MRC_NIC_LAB")
    if env:
        try:
            return canonical_lab(env)
        except click.BadParameter as e:
            raise click.BadParameter(f"$MRC_NIC_LAB: {e.message}") from None
    return None


LAB_HELP = "Lab name (default: $MRC_NIC_LAB, or the only lab that is up)."

group_lab_option = click.option(
    "-l",
    "--lab",
    "lab",
    default=None,
    expose_value=False,
    callback=_check_group_lab,
    help=f"{LAB_HELP} Also taken after the command.",
)

lab_option = click.option(
    "-l",
    "--lab",
    "lab",
    default=None,
    callback=_check_lab,
    help=LAB_HELP,
)


class SuggestChoice(click.Choice):
    """click.Choice that says which choice was probably meant ("lossy": loss)."""

    def get_invalid_choice_message(self, value, ctx):
        message = super().get_invalid_choice_message(value, ctx)
        names = [str(c) for c in self.choices]
        if not self.case_sensitive:
            by_lower = {n.lower(): n for n in names}
            close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1)
            close = [by_lower[c] for c in close]
        else:
            close = difflib.get_close_matches(str(value), names, n=1)
        if not close:
            close = [n for n in names if n.startswith(str(value)) or str(value).startswith(n)]
        return f"{message.rstrip('.')}: did you mean {close[0]}?" if close else message


def suggest_choices(command: click.Command) -> click.Command:
    """Give every Choice of a command (and its subcommands) SuggestChoice's
    message: one place, so no command module has to remember it."""
    for param in command.params:
        if isinstance(param.type, click.Choice) and not isinstance(param.type, SuggestChoice):
            param.type = SuggestChoice(param.type.choices, case_sensitive=param.type.case_sensitive)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            suggest_choices(sub)
    return command


format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output for people (table) or programs (json).",
)


class NoLabChosen(click.UsageError):
    """Which lab is meant cannot be told: the line says what to do, and
    pointing at --help would add nothing (mrc_nic.cli.usage_line)."""

    help_hint = False


def pick_lab(lab: str | None) -> str:
    if lab:
        return lab
    present = state.labs_on_disk()
    if len(present) == 1:
        return present[0]
    if not present:
        raise NoLabChosen("no lab is up; start one with: mrc-nic up")
    raise NoLabChosen(f"several labs are up ({', '.join(present)}); choose one with -l NAME")


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
