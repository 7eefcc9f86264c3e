"""fail, heal."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, command, pass_app
from mrc_nic.cli.common import DURATION


def _fail_view(fault: dict) -> None:
    from mrc_nic.fabric import faults

    output.success(
        f"fault #{fault['id']}: {faults.describe(fault)} on {fault['target']} "
        f"({len(fault['links'])} link(s)); heal with: mrc-nic heal {fault['id']}"
    )


@command(
    view=_fail_view,
    epilog="""\b
Targets: a link (p1.t0a-h0), a switch (p1.t0a), a host port (h0.eth1),
a host (h0), a whole plane (plane 2), or one EV of a send QP (qp QPN ev EV:
its packets only, where they enter the fabric).
\b
Examples:
  mrc-nic fail p1.t0a-h0 --mode blackhole --duration 2s
  mrc-nic fail p1.t1a-t0a --mode blackhole --direction up
  mrc-nic fail plane 2 --mode down
  mrc-nic fail h0.eth3 --mode loss --rate 0.2 --seed 7
  mrc-nic fail p0.t1b --mode flap --period 200ms --duration 5s
  mrc-nic fail qp 0x10001 ev 49153 --mode loss --rate 0.2   # one EV of one QP""",
)
@click.argument("target", nargs=-1, required=True)
@click.option(
    "--mode",
    required=True,
    type=click.Choice(["down", "blackhole", "loss", "flap"]),
    help="down: carrier off; blackhole: silent drop; loss: random drop; flap: down/up.",
)
@click.option(
    "--direction",
    default="both",
    type=click.Choice(["both", "up", "down"]),
    show_default=True,
    help="blackhole/loss: traffic going up (towards the spine), down, or both.",
)
@click.option("--rate", type=float, default=None, help="loss: drop probability, 0 < R <= 1.")
@click.option("--seed", type=int, default=None, help="loss: seed for a reproducible pattern.")
@click.option("--period", type=DURATION, default=None, help="flap: one down+up cycle, e.g. 200ms.")
@click.option(
    "--duration",
    type=DURATION,
    default=None,
    help="End the fault by itself after this long (default: until heal).",
)
@pass_app
def fail(
    app: App,
    target: tuple[str, ...],
    mode: str,
    direction: str,
    rate: float | None,
    seed: int | None,
    period: float | None,
    duration: float | None,
) -> dict:
    """Inject a fault, live, on a link, switch, host port or plane."""
    from mrc_nic.fabric import faults

    spec = faults.FaultSpec(mode, direction, rate, seed, period, duration)
    return faults.apply(app.lab(), target, spec)


def _heal_view(healed: list[dict]) -> None:
    if not healed:
        output.plain("no faults in force")
    for f in healed:
        output.success(f"healed fault #{f['id']} ({f['mode']} on {f['target']})")


@command(
    view=_heal_view,
    epilog="""\b
Examples:
  mrc-nic heal 3            # fault #3
  mrc-nic heal p1.t0a-h0    # every fault on that link
  mrc-nic heal plane 2
  mrc-nic heal --all""",
)
@click.argument("what", nargs=-1)
@click.option("--all", "heal_all", is_flag=True, help="Heal every fault in force.")
@pass_app
def heal(app: App, what: tuple[str, ...], heal_all: bool) -> list[dict]:
    """End faults: restore carrier, addresses and routes, clear BPF drops."""
    from mrc_nic.fabric import faults

    if heal_all == bool(what):
        raise click.UsageError("give fault ids or a target, or --all")
    if heal_all:
        return faults.heal(app.lab())
    if all(w.isdigit() for w in what):
        return faults.heal(app.lab(), ids=[int(w) for w in what])
    return faults.heal(app.lab(), target=what)


COMMANDS = [fail, heal]
