"""stats (a snapshot; the live view comes with its own issue)."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.common import lab_option, pick_lab


@click.command()
@lab_option
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def stats(lab: str | None, fmt: str) -> None:
    """Per-link and per-switch-port packet, byte and drop counters."""
    from mrc_nic import stats as stats_mod

    snap = stats_mod.snapshot(pick_lab(lab))
    if fmt == "json":
        output.emit_json(snap)
        return
    rows = []
    for p in snap["ports"]:
        i, e = p["ingress"], p["egress"]
        drops = i["drop_blackhole"] + i["drop_loss"] + e["drop_blackhole"] + e["drop_loss"]
        rows.append(
            [
                f"{p['node']}:{p['ifname']}",
                p["port_id"],
                output.human_count(i["pkts"]),
                output.human_bytes(i["bytes"]),
                output.human_count(e["pkts"]),
                output.human_bytes(e["bytes"]),
                output.human_count(drops),
            ]
        )
    output.table(
        "switch ports (BPF counters)",
        ["port", "#id", "#rx pkts", "#rx bytes", "#tx pkts", "#tx bytes", "#drops"],
        rows,
    )


COMMANDS = [stats]
