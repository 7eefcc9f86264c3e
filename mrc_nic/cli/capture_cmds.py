"""capture: a pcap of one link, taken inside the namespace of one of its ends."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, command, pass_app
from mrc_nic.cli.common import DURATION

DEFAULT_DURATION = 10.0


@command(
    epilog="""\b
Examples:
  mrc-nic capture p0.t0a-h0 -w h0-up.pcap --count 1000
  mrc-nic capture h0:eth1 -w eth1.pcap --duration 5s     # the host link of h0's eth1
  mrc-nic capture p1.t1a-t0a -w spine.pcap --end lower   # at the T0 end
  tshark -r h0-up.pcap -Y infiniband                     # RoCE BTH on udp/4791
\b
The upper (switch) end sees the NIC's XDP-sent packets; a host port's own
end does not (XDP sends them below the stack)."""
)
@click.argument("link")
@click.option(
    "-w", "--write", "path", required=True, metavar="FILE", help="pcap to write ('-': stdout)."
)
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N packets.")
@click.option(
    "--duration",
    type=DURATION,
    default=DEFAULT_DURATION,
    show_default=True,
    help="Stop after this long (at most 1h), whatever --count says.",
)
@click.option(
    "--end",
    type=click.Choice(["upper", "lower"]),
    default="upper",
    show_default=True,
    help="Which end of the link: upper (nearer the spines) or lower.",
)
@pass_app
def capture(app: App, link, path, count, duration, end) -> None:
    """Capture the packets of one link (or host port) into a pcap file."""
    from mrc_nic.observe import capture as capture_mod

    spot = capture_mod.resolve(app.topology(), link, end)
    capture_mod.check_bounds(count, duration)
    from mrc_nic.fabric import preflight

    preflight.require_root()  # before it makes the file or says it is capturing
    say = output.err_console.print if path == "-" else output.console.print
    with capture_mod.open_output(path) as out:
        if not app.json:
            say(f"capturing on {spot.port} ({spot.end} end of {spot.link}) for up to {duration:g}s")
        result = capture_mod.capture(spot, out, count=count, duration=duration)
    result["file"] = path
    if app.json:
        output.emit_json(result)
        return
    say(
        f"[green]{result['packets']} packets ({output.human_bytes(result['bytes'])}) in "
        f"{result['seconds']:.2f}s -> {path}[/] (stopped by {result['stopped_by']}; "
        f"kernel dropped {result['kernel_drops']})",
        soft_wrap=True,
    )


COMMANDS = [capture]
