"""stats (a snapshot; the live view comes with its own issue)."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.common import format_option, lab_option, snapshot_for


@click.command()
@lab_option
@format_option
def stats(lab: str | None, fmt: str) -> None:
    """Per-link and per-switch-port packet, byte and drop counters."""
    snap = snapshot_for(lab, fmt)
    if snap is None:
        return
    rows = []
    for p in snap["ports"]:
        rows.append(
            [
                f"{p['node']}:{p['ifname']}",
                p["port_id"],
                *output.counter_cells(p["ingress"], p["egress"]),
            ]
        )
    output.table(
        "switch ports (BPF counters)",
        ["port", "#id", "#rx pkts", "#rx bytes", "#tx pkts", "#tx bytes", "#drops"],
        rows,
    )


COMMANDS = [stats]
