"""Option and argument types shared by the command groups (the lab and the format: app.py)."""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import re
import time

import click

from mrc_nic import units


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return units.parse_duration(value)
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


def default_topology_path() -> str:
    """The shipped default topology, wherever the command is run from."""
    from mrc_nic import resources

    return str(resources.DEFAULT_TOPOLOGY)


def parse_int(text: str) -> int:
    """An integer as C writes it: 12, 0x1f, 0o17."""
    return int(text, 0)


def size_option(*names: str, help_text: str | None = None, **attrs):
    """A transfer size option ('64M', '1G': one letter binary), read by mrc_nic.units."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return units.parse_transfer_size(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None

    return click.option(*names, callback=parse, help=help_text, **attrs)
