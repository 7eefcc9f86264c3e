"""mrc-nic: the command line. One module per command group; no packet logic here."""

from __future__ import annotations

import sys

import click

from mrc_nic import __version__

EPILOG = """\b
Examples:
  mrc-nic up                                  # default lab: 2 hosts, 4 planes, 2 tiers
  mrc-nic status                              # hosts, planes, switches, links, faults
  mrc-nic fail p1.t0a-h0 --mode blackhole --duration 2s
  mrc-nic fail plane 2 --mode down
  mrc-nic heal --all
  mrc-nic port set p0.t1a:t0a --kmin 20k --kmax 80k --trim 120k   # a switch queue
  mrc-nic stats --watch                       # live rates per plane, path, QP, link
  mrc-nic events --follow                     # EV states, faults, QP errors as they happen
  mrc-nic capture p0.t0a-h0 -w h0.pcap --count 100
  mrc-nic down
"""


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mrc-nic")
def cli() -> None:
    """Emulated MRC NICs and a multi-plane fabric in network namespaces."""


def _register() -> None:
    from mrc_nic.cli import (
        capture_cmds,
        ctl_cmds,
        events_cmds,
        exec_cmds,
        fault_cmds,
        lab_cmds,
        port_cmds,
        qp_cmds,
        scenario_cmds,
        stats_cmds,
        traffic_cmds,
    )

    modules = (
        lab_cmds,
        fault_cmds,
        port_cmds,
        stats_cmds,
        events_cmds,
        traffic_cmds,
        capture_cmds,
        qp_cmds,
        ctl_cmds,
        scenario_cmds,
        exec_cmds,
    )
    for module in modules:
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    """Entry point: known errors become one line on stderr and exit code 1."""
    from mrc_nic.cli.output import error
    from mrc_nic.errors import MrcNicError

    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        error("aborted")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except MrcNicError as e:
        error(str(e))
        sys.exit(1)
    except KeyboardInterrupt:
        error("interrupted")
        sys.exit(130)
