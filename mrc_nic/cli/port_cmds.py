"""port show|set: the switch egress queues (ECN marking, trimming, buffer), live."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.lab.topology import FORWARDING_MODES

TARGETS = """\b
Targets: a switch port (p0.t1a:t0a: switch p0.t1a, its port towards t0a),
a link (p0.t1a-t0a: the switch ends), a switch (p0.t0a), 'plane N', or all.
Sizes: 20000, 20k, 20KB, 20KiB, 1m, 1.5m (at most 1GiB); or a fraction of the port's BDP
(link rate x [queues].base_rtt): 0.2bdp."""


def _threshold(ctx: click.Context, param: click.Parameter, value: str | None):
    from mrc_nic.fabric.queues import OFF
    from mrc_nic.units import parse_threshold

    if value is None:
        return None
    allow_off = param.name == "trim"
    try:
        parsed = parse_threshold(value.strip(), allow_off=allow_off)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    return OFF if parsed is None else parsed


@group(
    epilog="""\b
Examples:
  mrc-nic port show p0.t0a                  # every port of a switch
  mrc-nic port set p0.t1a:t0a --kmin 20k --kmax 80k --trim 120k --buffer 200k
  mrc-nic port set p1.t0a:h0 --ecn          # mark at a last hop too (MRC: off)
  mrc-nic port set all --defaults           # back to the topology's settings
  mrc-nic port forwarding kernel            # switches forward through the IP stack
\b
A NIC's own ports (admin state, status updates) are `mrc-nic nic-port`."""
)
def port() -> None:
    """Switch egress queues: ECN thresholds, trimming, buffer, backlog, counters."""


@port.command("show", epilog=TARGETS, view=lambda data: _print_rows(data["ports"]))
@click.argument("target", nargs=-1)
@pass_app
def port_show(app: App, target: tuple[str, ...]) -> dict:
    """Each port's queue: its settings, backlog now and what it marked, trimmed, dropped."""
    from mrc_nic.fabric import queues

    return {"ports": queues.show_ports(app.lab(), target)}


def _set_view(data: dict) -> None:
    output.success(f"{len(data['ports'])} port queue(s) set")
    _print_rows(data["ports"])


@port.command(
    "set",
    view=_set_view,
    epilog=TARGETS
    + """
\b
A change empties the queue's twin and restarts its marking draws; a new
buffer also resizes the port's real queue (its TBF).
\b
Examples:
  mrc-nic port set p0.t1a:t0a --kmin 20k --kmax 80k --trim 120k --buffer 200k
  mrc-nic port set p0.t0a-h0 --trim off
  mrc-nic port set p2.t0b --no-ecn
  mrc-nic port set all --kmin 0.1bdp --kmax 0.5bdp""",
)
@click.argument("target", nargs=-1, required=True)
@click.option(
    "--kmin",
    "--ecn-kmin",
    "kmin",
    metavar="SIZE",
    callback=_threshold,
    help="Marking starts here.",
)
@click.option(
    "--kmax",
    "--ecn-kmax",
    "kmax",
    metavar="SIZE",
    callback=_threshold,
    help="Every ECT packet marked here.",
)
@click.option(
    "--trim",
    metavar="SIZE|off",
    callback=_threshold,
    help="Trim MRC data above this backlog; 'off' stops trimming.",
)
@click.option("--buffer", metavar="SIZE", callback=_threshold, help="What does not fit is dropped.")
@click.option(
    "--ecn/--no-ecn",
    "ecn",
    default=None,
    help="Mark CE on ECT packets, or stop. On a last-hop port (T0 -> host) --ecn turns on "
    "what MRC leaves off.",
)
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=None, help="Marking draws.")
@click.option("--defaults", is_flag=True, help="Start from the topology's settings.")
@pass_app
def port_set(app: App, target, kmin, kmax, trim, buffer, ecn, seed, defaults) -> dict:
    """Change the queue of switch egress ports, live (all of them or none)."""
    from mrc_nic.fabric import queues

    change = queues.QueueChange(
        ecn=ecn, kmin=kmin, kmax=kmax, trim=trim, buffer=buffer, seed=seed, defaults=defaults
    )
    if change.is_empty():
        raise click.UsageError(queues.NOTHING_TO_CHANGE)
    return {"ports": queues.set_ports(app.lab(), target, change)}


def _forwarding_view(report: dict) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in report["counters"].items())
    output.info(f"switches forward MRC packets: {report['forwarding']} ({counts})")


@port.command(
    "forwarding",
    view=_forwarding_view,
    epilog="""\b
Examples:
  mrc-nic port forwarding            # who forwards now, and what the port programs did
  mrc-nic port forwarding kernel     # from now on, the IP stack forwards everything
  mrc-nic port forwarding bpf        # the port programs forward MRC packets""",
)
@click.argument("mode", required=False, type=click.Choice(FORWARDING_MODES))
@pass_app
def port_forwarding(app: App, mode: str | None) -> dict:
    """Who forwards MRC packets in the switches (bpf or kernel), live for the
    whole lab; and the port programs' forwarding counters, summed over ports."""
    from mrc_nic.fabric import switchport

    app.open()  # the lab must be up (and its state is root's)
    with switchport.SwitchPortMaps.open(app.lab()) as maps:
        if mode is not None:
            maps.set_forwarding(mode)
        return {"forwarding": maps.forwarding(), "counters": maps.fwd_totals()}


def _size(n: int | None) -> str:
    return "off" if n is None else output.human_bytes(n)


def _print_rows(rows: list[dict]) -> None:
    from mrc_nic.units import format_rate

    table = []
    for r in rows:
        q, c = r["queue"], r["counters"]
        if q is None:
            settings = ["none", "", "", "", "", "", "", ""]
        else:
            settings = [
                format_rate(q["rate_bps"]),
                "on" if q["ecn"] else "off",
                _size(q["kmin"]),
                _size(q["kmax"]),
                _size(q["trim"]),
                _size(q["buffer"]),
                _size(q["bdp"]),
                _size(q["backlog"]),
            ]
        table.append(
            [
                r["port"],
                r["link"] + (" (last hop)" if r["lasthop"] else ""),
                *settings,
                output.human_count(c["ecn_marked"]),
                output.human_count(c["trimmed"]),
                output.human_count(c["drop_buffer"]),
                output.human_bytes(c["backlog_hwm"]),
            ]
        )
    output.table(
        "switch egress queues",
        [
            "port",
            "link",
            "rate",
            "ecn",
            "#kmin",
            "#kmax",
            "#trim",
            "#buffer",
            "#bdp",
            "#backlog",
            "#marked",
            "#trimmed",
            "#dropped",
            "#hwm",
        ],
        table,
    )


# The NIC's ports were here once (before issue 27): say where they went.
port.moved = {name: f"nic-port {name}" for name in ("admin", "status", "update")}
COMMANDS = [port]
