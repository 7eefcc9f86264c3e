"""mrc-nic: the command line. One module per command group; no packet logic here."""

from __future__ import annotations

import difflib
import importlib
import os
import sys

import click

from mrc_nic import __version__
from mrc_nic.cli.app import GROUP_FORMATS, format_param, lab_param
from mrc_nic.cli.common import suggest_choices

EPILOG = """\b
Examples:
  mrc-nic up                                  # default lab: 2 hosts, 4 planes, 2 tiers
  mrc-nic status                              # hosts, planes, switches, links, faults
  mrc-nic fail p1.t0a-h0 --mode blackhole --duration 2s
  mrc-nic fail plane 2 --mode down
  mrc-nic heal --all
  mrc-nic chaos --duration 60s --every 500ms  # random faults, verified traffic, all healed
  mrc-nic port set p0.t1a:t0a --kmin 20k --kmax 80k --trim 120k   # a switch queue
  mrc-nic nic-port admin h0 2 disabled        # a NIC's port (OCP mrc_ctl_modify_port)
  mrc-nic -l lab2 --format json status        # -l and --format: before or after the command
  mrc-nic stats --watch                       # live rates per plane, path, QP, link
  mrc-nic events --follow                     # EV states, faults, QP errors as they happen
  mrc-nic capture p0.t0a-h0 -w h0.pcap --count 100
  mrc-nic down
"""


# Which module holds each command. A command's module is imported only when
# that command runs (or --help lists them all): `mrc-nic fail` should not pay
# for what `capture` or `scenario` import. tests/unit/test_cli.py checks this
# map against every module's COMMANDS.
COMMAND_MODULES = {
    "up": "lab_cmds",
    "down": "lab_cmds",
    "status": "lab_cmds",
    "fail": "fault_cmds",
    "heal": "fault_cmds",
    "chaos": "chaos_cmds",
    "port": "port_cmds",
    "stats": "stats_cmds",
    "events": "events_cmds",
    "traffic": "traffic_cmds",
    "ping": "traffic_cmds",
    "capture": "capture_cmds",
    "nic-port": "nicport_cmds",
    "write": "write_cmds",
    "qp": "qp_cmds",
    "ev": "ev_cmds",
    "cc": "cc_cmds",
    "scenario": "scenario_cmds",
    "exec": "exec_cmds",
    "doctor": "doctor_cmds",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from COMMAND_MODULES on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from mrc_nic.cli.common import suggest_choices

        module_name = COMMAND_MODULES.get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(f"mrc_nic.cli.{module_name}")
        return suggest_choices(next(c for c in module.COMMANDS if c.name == cmd_name))

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMAND_MODULES:
            close = difflib.get_close_matches(name, list(COMMAND_MODULES), n=1)
            hint = f"; did you mean {close[0]}?" if close else "; `mrc-nic --help` lists them"
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)


@click.group(
    cls=LazyGroup,
    epilog=EPILOG,
    params=[lab_param(group=True), format_param(GROUP_FORMATS, None, group=True)],
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="mrc-nic")
def cli() -> None:
    """Emulated MRC NICs and a multi-plane fabric in network namespaces."""


suggest_choices(cli)  # `--format jsn` before the command too: did you mean json?


def needs_root(e: PermissionError) -> str:
    """The line for a user who is not root. Every command reaches the lab
    through root-only things (its lock, BPF pins, daemons' sockets,
    namespaces); each command validates its arguments first, so a typo is
    reported before this."""
    what = e.strerror or str(e)
    if e.filename:
        what = f"{what}: {e.filename}"
    return f"mrc-nic needs root: {what}; run it with sudo"


# Exit codes (README, "Errors and exit codes"): every mistake is one line on
# stderr starting with "error: ".
EXIT_FAILED = 1  # the command ran and failed (the lab, the fabric, a daemon said no)
EXIT_USAGE = 2  # the command line is wrong: an option, a value, an argument, which lab
EXIT_INTERRUPTED = 130  # Ctrl-C


def usage_line(e: click.UsageError) -> str:
    """click's usage error as one line: its message, then where the help is
    (click's own show() prints a Usage:/Try:/Error: block of three)."""
    message = " ".join(e.format_message().split()).rstrip(".")
    if not getattr(e, "help_hint", True) or "--help" in message:
        return message  # no hint, or the message gives it already
    where = e.ctx.command_path if e.ctx is not None else "mrc-nic"
    return f"{message} (`{where} --help` shows the usage)"


def _message(e: Exception) -> str:
    """An error's line: an OSError's own words and file, not "[Errno 2] ..."."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return str(e)


def _run() -> None:
    """A command on a cluster lab goes to the agents that own its target
    (mrc_nic.cluster); any other runs here."""
    from mrc_nic.cluster.route import cluster_command

    routed = cluster_command(sys.argv[1:])
    if routed is None:
        cli.main(prog_name="mrc-nic", standalone_mode=False)
        return
    from mrc_nic.cli import cluster_lab

    code = cluster_lab.run(*routed)
    if code:
        sys.exit(code)


def main() -> None:
    """Entry point: every known error becomes one line on stderr; the exit
    code says which kind (EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED)."""
    from mrc_nic.cli.output import error
    from mrc_nic.errors import MrcNicError

    try:
        _run()
    except click.exceptions.Abort:
        error("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as e:
        error(usage_line(e))
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        error(" ".join(e.format_message().split()))
        sys.exit(EXIT_FAILED)
    except MrcNicError as e:
        error(_message(e))
        sys.exit(EXIT_FAILED)
    except PermissionError as e:
        if os.geteuid() == 0:
            raise  # root refused: not the user's doing, keep the traceback
        error(needs_root(e))
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        error("interrupted")
        sys.exit(EXIT_INTERRUPTED)
