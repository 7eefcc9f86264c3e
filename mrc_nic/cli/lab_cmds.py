"""up, down, status."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, canonical_lab, command, pass_app
from mrc_nic.cli.common import default_topology_path
from mrc_nic.cli.status_view import render_status
from mrc_nic.lab.topology import FORWARDING_MODES


def topology_option(help_text: str):
    return click.option(
        "-t", "--topology", "topology_file", default=None, metavar="FILE|NAME", help=help_text
    )


def _canonical_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else canonical_lab(value)


@command(
    lab=False,
    view=lambda report: _up_view(report),
    epilog="""\b
Examples:
  mrc-nic up
  mrc-nic up -t clos-8                           # a shipped topology by name: lab clos8
  mrc-nic up -t netns/clos-8.toml
  mrc-nic up -t netns/default.toml --name lab2   # a second lab beside the first
  mrc-nic up --switch-forwarding kernel          # switches forward through the IP stack

Topology sections: [lab], [fabric], [links], [addressing] (README, "Topology
files") and [queues]: switch egress queues, base_rtt, ecn, ecn_last_hop,
kmin, kmax, trim, seed (docs/queues.md).""",
)
@topology_option(
    "Topology TOML, or a shipped one by name: default, clos-8, single-plane, uncapped "
    "(default: default)."
)
@click.option(
    "--name",
    default=None,
    callback=_canonical_name,
    help="Lab name, overriding [lab].name of the file (dashes are dropped; "
    "`mrc-nic -l NAME up` names it too).",
)
@click.option(
    "--reuse",
    is_flag=True,
    help="If the lab is already up from the same topology, keep it (restarting any "
    "host daemon that died) and exit 0.",
)
@click.option(
    "--switch-forwarding",
    type=click.Choice(FORWARDING_MODES),
    default=None,
    help="Who forwards MRC packets in the switches, overriding [fabric].forwarding: "
    "the port program (bpf_fib_lookup, bpf_redirect) or the IP stack.",
)
@click.option(
    "--cluster",
    "cluster_address",
    envvar="RAY_ADDRESS",
    default=None,
    metavar="ADDRESS",
    help="Spread the lab over the machines of this Ray cluster (host:6379 on a node "
    "of it, or ray://host:10001), one agent per machine (docs/cluster.md); or $RAY_ADDRESS.",
)
@pass_app
def up(
    app: App,
    topology_file: str | None,
    name: str | None,
    reuse: bool,
    switch_forwarding: str | None,
    cluster_address: str | None,
) -> dict | None:
    """Build a lab: namespaces, veth links, routes, queues and BPF port programs."""
    from mrc_nic.fabric import preflight, testbed
    from mrc_nic.lab import names, state, topology

    name = name or app.before_lab  # `mrc-nic -l NAME up` names the lab to build too
    path = names.topology_file(topology_file) if topology_file else default_topology_path()
    topo = topology.load(path, lab=name)
    if switch_forwarding is not None:
        topo = topology.with_forwarding(topo, switch_forwarding, lab=name)
    preflight.require_root()  # before saying what it would build
    if cluster_address:
        from mrc_nic.cli import cluster_lab

        cluster_lab.up(topo, cluster_address, app.format, reuse=reuse)
        return None
    existing = state.LabState.load(topo.lab)
    if reuse and existing and existing.phase == "up" and existing.topology == topo.raw:
        output.info(f"lab {topo.lab} is already up (from {existing.topology_file}); reusing it")
        restarted = testbed.start_daemons(topo)  # the supervisor's part: dead daemons come back
        if restarted:
            output.info(f"restarted the daemon of {', '.join(restarted)}")
        return None
    if reuse and existing and existing.phase == "up":
        raise testbed.LabError(
            f"lab {topo.lab} is up from another topology ({existing.topology_file}): "
            f"--reuse keeps only the same one; take it down first: mrc-nic down -l {topo.lab}"
        )
    testbed.refuse_if_present(topo.lab)  # before it says what it would build
    unfaithful = doctor_warning(topo)
    if unfaithful:
        output.warn(unfaithful)
    if not app.json:
        output.info(
            f"bringing up lab [bold]{topo.lab}[/]: {topo.hosts} hosts, {topo.planes} "
            f"planes, {topo.tiers} tier(s), {len(topo.nodes)} namespaces, "
            f"{len(topo.links)} links"
        )
    return testbed.up(topo).__dict__


def _up_view(report: dict) -> None:
    output.success(
        f"lab {report['lab']} is up in {report['seconds']:.2f}s "
        f"({report['namespaces']} namespaces, {report['links']} links)"
    )


def doctor_warning(topo) -> str | None:
    """One line when the topology's links are faster than `mrc-nic doctor`
    found faithful for its shape on this machine (None without its figures),
    or have no cap at all."""
    from mrc_nic.lab import doctor_store

    if not topo.rate_bps:
        return f"{topo.lab}: uncapped links: what runs here is bound by the CPU, not by links"
    figures = doctor_store.load()
    if figures is None:
        return None
    faithful = doctor_store.faithful_rate(figures, topo.hosts, topo.planes, topo=topo)
    if faithful is None or topo.rate_bps <= faithful:
        return None
    if not faithful:
        return (
            f"{topo.lab}: mrc-nic doctor found no link rate faithful for {topo.hosts} hosts "
            "here (their daemons alone take the CPU): results may measure the CPU"
        )
    return (
        f"{topo.lab}: links at {topo.rate_bps / 1e6:g} Mbit/s, above the "
        f"{faithful / 1e6:.3g} Mbit/s mrc-nic doctor found faithful for "
        f"{topo.hosts} hosts x {topo.planes} planes here: results may measure the CPU"
    )


@command(formats=())
@topology_option("Take down the lab this topology file names.")
@click.option("--all", "all_labs", is_flag=True, help="Take down every lab on this machine.")
@pass_app
def down(app: App, topology_file: str | None, all_labs: bool) -> None:
    """Remove exactly what `up` made (also after a crash). Safe to repeat."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import names, topology

    lab = app.given_lab()
    if topology_file:
        lab = lab or topology.load(names.topology_file(topology_file)).lab
    if all_labs:
        labs = testbed.labs_present()
    else:
        labs = [lab] if lab else testbed.labs_present()
        if len(labs) > 1:
            raise click.UsageError(
                f"several labs are up ({', '.join(labs)}); choose one with -l NAME or use --all"
            )
    if not labs:
        output.info("no lab to take down")
        return
    for name in labs:
        removed = testbed.down(name)
        output.success(f"lab {name} is down ({len(removed)} namespaces removed)")


def _status_view(snap: dict) -> None:
    from mrc_nic.cli.qp_cmds import lab_sessions, sessions_table

    render_status(snap)
    sessions_table(lab_sessions(snap["lab"]))


@command(view=_status_view)
@pass_app
def status(app: App) -> dict:
    """What is up: hosts, planes, switches, links, their state, faults and counters,
    and the applications' sessions (who holds what of each host's NIC)."""
    from mrc_nic.observe import stats

    # The tables show no NIC section: its maps' code stays unloaded (a short command)
    return stats.snapshot(app.lab(), nic=app.json)


COMMANDS = [up, down, status]
