"""doctor: what this machine carries, and the link rates at which labs are faithful."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, command, pass_app


def _rate(bps: float | None) -> str:
    if not bps:
        return "-"
    return f"{bps / 1e9:.3g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:.3g} Mbit/s"


@command(
    lab=False,
    view=lambda figures: _view(figures),
    epilog="""\b
Examples:
  mrc-nic doctor                 # measure (about 20-30 s) and store the figures
  mrc-nic doctor --show          # the stored figures, no measurement
  mrc-nic doctor --format json

It brings up a small lab of its own (2 hosts, 1 plane, two tiers; named
dr<pid>) and takes it down by that name. Figures are kept in
/var/lib/mrc-nic/doctor.json (MRC_NIC_DOCTOR_FILE overrides); `up` warns
when a topology asks for more than they call faithful.""",
)
@click.option("--show", is_flag=True, help="Print the stored figures; measure nothing.")
@click.option("--no-save", is_flag=True, help="Measure, print, do not store.")
@pass_app
def doctor(app: App, show: bool, no_save: bool) -> dict:
    """Measure the packet-hops a second this machine carries and the link rates
    at which a single QP, and each shipped topology, stays link-bound."""
    from mrc_nic.fabric import preflight
    from mrc_nic.lab import doctor_store

    if show:
        figures = doctor_store.load()
        if figures is None:
            raise click.UsageError(
                f"no figures for this machine in {doctor_store.store_path()}; run: mrc-nic doctor"
            )
    else:
        preflight.require_root()
        from mrc_nic.workloads import doctor as doctor_run

        log = (lambda m: None) if app.json else (lambda m: click.echo(m, err=True))
        figures = doctor_run.run(log)
        if not no_save:
            figures["stored_in"] = str(doctor_store.save(figures))
    return figures


def _view(figures: dict) -> None:
    free = figures["uncapped"]
    output.plain(
        f"this machine (load {figures['load_avg'][0]} at the end; {figures['seconds']} s, "
        f"lab up in {figures['bringup_seconds']} s):"
    )
    output.plain(
        f"  one QP, links out of the way: {_rate(free['goodput_bps'])} goodput, "
        f"{free['pps']:,} data packets/s = {figures['hop_pps']:,} packet-hops/s "
        f"({figures['hops_per_packet']} per packet with its SACK), "
        f"{free['cpu_us_per_hop']} us of CPU per packet-hop"
    )
    output.plain(
        f"  one QP stays link-bound (verdict links, >= 90% of the links' payload) up to "
        f"{_rate(figures['faithful_aggregate_bps'])} of links in all "
        f"(= {figures['faithful_hop_pps']:,} packet-hops/s); a lab of N senders x P planes "
        "is faithful at that / (N x P) per link"
    )
    daemons = figures.get("daemons")
    if daemons:
        fast, slow = daemons["fast"], daemons["slow"]
        output.plain(
            f"  a host's daemon, sending and receiving: {fast['cores']:.3f} cores at a "
            f"{fast['tick_s'] * 1e3:g} ms tick, "
            f"{slow['cores']:.3f} at {slow['tick_s'] * 1e3:g} ms; "
            f"a lab of more than two hosts must also fit its daemons and packet-hops in "
            f"{figures['cpu_budget_cores']:g} cores"
        )
    rows = [
        [
            t["topology"],
            t["hosts"],
            t["planes"],
            t["senders"],
            _rate(t["rate_bps"]) if t["rate_bps"] else "none",
            _rate(t["faithful_rate_bps"]) if t["faithful_rate_bps"] else "no rate",
            output.styled("yes", "green") if t["faithful"] else output.styled("no", "red"),
        ]
        for t in figures["topologies"]
    ]
    output.table(
        "shipped topologies",
        ["topology", "#hosts", "#planes", "#senders", "link rate", "faithful up to", "faithful"],
        rows,
    )
    if figures.get("stored_in"):
        output.plain(f"stored in {figures['stored_in']}")


COMMANDS = [doctor]
