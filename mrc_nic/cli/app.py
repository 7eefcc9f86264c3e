"""The CLI's one context and its command class.

One `App` per run (click's ctx.obj, as hatch's Application): the lab the
command names and the output format, each given before the command
(`mrc-nic -l LAB --format json status`) or after it (`status -l LAB`),
resolved once. Every command made with `command()` or `group()` takes
`-l/--lab` and `--format` without declaring them, gets the App with
`@pass_app`, and returns its data: the command class prints it, as JSON or
through the command's `view` (tables for people). A command that streams
(stats, events, capture) prints as it goes and returns nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import click

from mrc_nic.cli import output

LAB_HELP = "Lab name (default: $MRC_NIC_LAB, or the only lab that is up)."
FORMAT_HELP = "Output for people (table, the default) or programs (json)."
GROUP_FORMATS = ("table", "json", "jsonl", "prom")
GROUP_FORMAT_HELP = (
    "Output: table (people) or json (programs); stats and events also jsonl, stats prom. "
    "Also taken after the command."
)


class NoLabChosen(click.UsageError):
    """Which lab is meant cannot be told: the line says what to do, and
    pointing at --help would add nothing (mrc_nic.cli.usage_line)."""

    help_hint = False


def canonical_lab(value: str) -> str:
    """A lab name as given, in its one stored form (a shipped topology's file
    name works: `clos-8` is the lab clos8); BadParameter if it cannot be one."""
    from mrc_nic.lab import names, topology

    try:
        return names.canonical_lab_name(value)
    except topology.TopologyError as e:
        raise click.BadParameter(str(e)) from None


class Outcome(NamedTuple):
    """What a command returns when its exit code is not 0 (the data is shown first)."""

    data: Any
    code: int = 0


class App:
    """The run's lab and format, with the lab's record opened once."""

    def __init__(self) -> None:
        self.before_lab: str | None = None  # -l before the command
        self.after_lab: str | None = None  # -l after it
        self.before_fmt: str | None = None
        self.after_fmt: str | None = None
        self._lab: str | None = None
        self._opened: tuple | None = None

    # ---- what was given ----------------------------------------------------------------
    def given_lab(self) -> str | None:
        """The lab named by -l (either place) or $MRC_NIC_LAB; None if none was."""
        if self.after_lab is not None:
            return self.after_lab
        if self.before_lab is not None:
            return self.before_lab
        env = os.environ.get("MRC_NIC_LAB")
        if not env:
            return None
        try:
            return canonical_lab(env)
        except click.BadParameter as e:
            raise click.BadParameter(f"$MRC_NIC_LAB: {e.message}") from None

    def set_lab(self, value: str) -> None:
        """-l after the command: it must agree with -l before it."""
        value = canonical_lab(value)
        if self.before_lab is not None and self.before_lab != value:
            raise click.BadParameter(
                f"two labs named: {self.before_lab} before the command and {value} after it; "
                "give one"
            )
        self.after_lab = value

    def set_format(self, value: str) -> None:
        if self.before_fmt is not None and self.before_fmt != value:
            raise click.BadParameter(
                f"two formats named: {self.before_fmt} before the command and {value} after "
                "it; give one"
            )
        self.after_fmt = value

    @property
    def format(self) -> str:
        return self.after_fmt or self.before_fmt or "table"

    @property
    def json(self) -> bool:
        return self.format == "json"

    # ---- the lab -----------------------------------------------------------------------
    def lab(self) -> str:
        """The lab the command is for: as named, or the only one up (else a usage error)."""
        if self._lab is None:
            self._lab = self.given_lab() or _only_lab()
        return self._lab

    def open(self) -> tuple:
        """(lab state, topology) of the lab, read once."""
        if self._opened is None:
            from mrc_nic.lab.state import open_lab

            self._opened = open_lab(self.lab())
        return self._opened

    def topology(self):
        return self.open()[1]

    def check_host(self, host: str) -> None:
        names = self.topology().host_names()
        if host not in names:
            raise click.UsageError(
                f"no host {host!r} in lab {self.lab()!r} (hosts: {', '.join(names)})"
            )

    def host_of_qp(self, qpn: int) -> str:
        """The host a QP number belongs to (its host index above NIC_QPN_HOST_SHIFT)."""
        host = self.topology().host_of_qpn(qpn)
        if host is None:
            raise click.UsageError(f"QP {qpn:#x} belongs to no host of lab {self.lab()!r}")
        return host

    # ---- output ------------------------------------------------------------------------
    def show(self, data: Any, view: Callable[..., None] | None, args: dict | None = None) -> None:
        """The one renderer: JSON for programs, the command's view for people.
        A view takes the data, and by keyword any of the command's arguments
        (args) it names, or `app`: `def view(data, *, src, dst)`."""
        if self.json or view is None:
            output.emit_json(data)
            return
        import inspect

        known = {**(args or {}), "app": self}
        wanted = [
            p.name
            for p in inspect.signature(view).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        view(data, **{name: known[name] for name in wanted})


def _only_lab() -> str:
    from mrc_nic.lab import state

    present = state.labs_on_disk()
    if len(present) == 1:
        return present[0]
    if not present:
        raise NoLabChosen("no lab is up; start one with: mrc-nic up")
    raise NoLabChosen(f"several labs are up ({', '.join(present)}); choose one with -l NAME")


def app_of(ctx: click.Context) -> App:
    return ctx.ensure_object(App)


pass_app = click.make_pass_decorator(App, ensure=True)


# ---- the options every command takes --------------------------------------------------------
def _group_lab(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        app_of(ctx).before_lab = canonical_lab(value)


def _group_format(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        app_of(ctx).before_fmt = value


def _command_lab(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        app_of(ctx).set_lab(value)


def _command_format(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        app_of(ctx).set_format(value)


def lab_param(group: bool = False) -> click.Option:
    return click.Option(
        ["-l", "--lab", "lab"],
        default=None,
        expose_value=False,
        callback=_group_lab if group else _command_lab,
        help=f"{LAB_HELP} Also taken after the command." if group else LAB_HELP,
    )


def format_param(
    formats: Sequence[str], help_text: str | None, group: bool = False
) -> click.Option:
    return click.Option(
        ["--format", "fmt"],
        type=click.Choice(list(formats)),
        default=None,
        expose_value=False,
        callback=_group_format if group else _command_format,
        help=GROUP_FORMAT_HELP if group else help_text or FORMAT_HELP,
    )


class AppCommand(click.Command):
    """A command with -l/--lab and --format (unless lab=False, formats=()), whose
    return value is shown by App.show through `view`."""

    def __init__(
        self,
        *args: Any,
        lab: bool = True,
        formats: Sequence[str] = ("table", "json"),
        format_help: str | None = None,
        view: Callable[..., None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.formats = tuple(formats)
        self.view = view
        if lab:
            self.params.append(lab_param())
        if formats:
            self.params.append(format_param(formats, format_help))

    def invoke(self, ctx: click.Context) -> Any:
        app = app_of(ctx)
        if app.before_fmt is not None and app.before_fmt not in self.formats:
            given = ", ".join(self.formats) or "no --format"
            raise click.UsageError(
                f"--format {app.before_fmt}: {ctx.command_path} gives {given}", ctx
            )
        rv = super().invoke(ctx)
        data, code = rv if isinstance(rv, Outcome) else (rv, 0)
        if data is not None:
            app.show(data, self.view, ctx.params)
        if code:
            raise SystemExit(code)
        return None


class AppGroup(click.Group):
    """A group whose commands and subgroups are AppCommands and AppGroups."""

    command_class = AppCommand
    group_class = type  # click: subgroups of the same class
    moved: dict[str, str] = {}  # a command that left this group: where it is now

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name in self.moved and name not in self.commands:
            raise click.UsageError(
                f"{ctx.command_path} {name} is now: mrc-nic {self.moved[name]}", ctx
            )
        return super().resolve_command(ctx, args)


def command(name: str | None = None, **attrs: Any) -> Callable[[Callable], AppCommand]:
    return click.command(name, cls=AppCommand, **attrs)


def group(name: str | None = None, **attrs: Any) -> Callable[[Callable], AppGroup]:
    return click.group(name, cls=AppGroup, **attrs)
