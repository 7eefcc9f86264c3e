"""traffic, ping: test traffic between hosts of a lab."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, Outcome, command, pass_app
from mrc_nic.cli.common import DURATION


def _traffic_view(result: dict, *, src: str, dst: str, size: int) -> None:
    per_plane: dict[int, list[int]] = {}
    for f in result["flows"]:
        acc = per_plane.setdefault(f["plane"], [0, 0, 0])
        acc[0] += f["sent"]
        acc[1] += f["received"]
        acc[2] += f["bytes"]
    rows = [
        [
            p,
            output.human_count(s),
            output.human_count(r),
            f"{100 * (1 - r / s) if s else 0:.1f}%",
            f"{8 * b / result['seconds'] / 1e6:.0f}",
        ]
        for p, (s, r, b) in sorted(per_plane.items())
    ]
    output.table(
        f"UDP {src} -> {dst}, {result['seconds']:.1f}s, {size} B payload",
        ["plane", "#sent", "#received", "#loss", "#Mbit/s"],
        rows,
    )
    output.info(
        f"total: {result['received']}/{result['sent']} packets, "
        f"{result['goodput_bps'] / 1e6:.0f} Mbit/s"
    )


@command(
    view=_traffic_view,
    epilog="""\b
Examples:
  mrc-nic traffic h0 h1 --duration 10          # every plane, 4 source ports each
  mrc-nic traffic h0 h1 --plane 1 --ports 16   # one plane, 16 ECMP entropies""",
)
@click.argument("src")
@click.argument("dst")
@click.option("--plane", "planes", type=int, multiple=True, help="Only this plane (repeatable).")
@click.option(
    "--ports",
    "source_ports",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="UDP source ports (entropies) per plane.",
)
@click.option("--duration", type=DURATION, default=5.0, show_default=True)
@click.option(
    "--size",
    type=click.IntRange(16, 1472),
    default=1000,
    show_default=True,
    help="UDP payload bytes.",
)
@click.option("--pps", type=click.IntRange(0), default=0, help="Packet rate cap (0: none).")
@pass_app
def traffic(app: App, src, dst, planes, source_ports, duration, size, pps) -> dict:
    """Send bounded UDP test traffic from SRC to DST across planes and source ports."""
    from mrc_nic.workloads import traffic as traffic_mod

    if duration > 600:
        raise click.BadParameter("at most 600s", param_hint="--duration")
    result = traffic_mod.udp(
        app.topology(),
        src,
        dst,
        planes=list(planes) or None,
        source_ports=source_ports,
        seconds=duration,
        size=size,
        pps=pps,
    )
    return result


def _ping_view(results: list[dict], *, src: str, dst: str) -> None:
    output.table(
        f"ping {src} -> {dst}",
        ["plane", "address", "#sent", "#received", "#rtt ms"],
        [[r["plane"], r["address"], r["sent"], r["received"], r["rtt_avg_ms"]] for r in results],
    )


@command(view=_ping_view)
@click.argument("src")
@click.argument("dst")
@click.option("--plane", "planes", type=int, multiple=True, help="Only this plane (repeatable).")
@click.option("--count", type=click.IntRange(1, 100), default=3, show_default=True)
@pass_app
def ping(app: App, src, dst, planes, count) -> Outcome:
    """ICMP echo from SRC to DST on each plane's addresses."""
    from mrc_nic.workloads import traffic as traffic_mod

    topo = app.topology()
    results = [traffic_mod.ping(topo, src, dst, p, count) for p in (planes or range(topo.planes))]
    return Outcome(results, 1 if any(r["received"] == 0 for r in results) else 0)


COMMANDS = [traffic, ping]
