"""stats: counters as tables, a live view, JSON, a JSON stream, or Prometheus text."""

from __future__ import annotations

import os
import signal
import sys
import time

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, command, pass_app
from mrc_nic.cli.common import DURATION

WATCH_INTERVAL = 0.5  # 2 frames a second
STREAM_INTERVAL = 1.0
LISTEN_DURATION = 60.0
VIEWS = ("plane", "path", "ev", "qp", "link", "port")


@command(
    formats=("table", "json", "jsonl", "prom"),
    format_help="table: one frame for people; json: one snapshot; jsonl: a snapshot per "
    "line every --interval; prom: Prometheus text.",
    epilog="""\b
Examples:
  mrc-nic stats                                  # per plane, rates over 0.5 s
  mrc-nic stats --watch                          # live; keys 1-5 switch the view
  mrc-nic stats --watch --by path --host h0 --plane 2
  mrc-nic stats --format json                    # one snapshot, every counter
  mrc-nic stats --format jsonl --interval 0.1 --duration 10 > run.jsonl
  mrc-nic stats --format prom                    # Prometheus text exposition
  mrc-nic stats --format prom --listen 127.0.0.1:9464 --duration 10m
\b
Schema of json/jsonl: docs/stats-schema.md.""",
)
@click.option("--watch", is_flag=True, help="Live view, redrawn every --interval.")
@click.option(
    "--by",
    "view",
    type=click.Choice(VIEWS),
    default="plane",
    show_default=True,
    help="What the table shows (port: the switch ports' raw counters). "
    "json/jsonl/prom: `ev` adds per-EV records.",
)
@click.option("--host", default=None, help="Only what this host touches (e.g. h0).")
@click.option("--plane", type=click.IntRange(0), default=None, help="Only this plane.")
@click.option(
    "--interval",
    type=DURATION,
    default=None,
    help=f"Between snapshots (--watch: {WATCH_INTERVAL}s, jsonl: {STREAM_INTERVAL}s).",
)
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N snapshots.")
@click.option("--duration", type=DURATION, default=None, help="Stop after this long.")
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help=f"With --format prom: serve /metrics on a loopback address for --duration "
    f"(default {LISTEN_DURATION:.0f}s).",
)
@pass_app
def stats(app: App, watch, view, host, plane, interval, count, duration, listen) -> None:
    """Per-plane, per-path, per-link and per-QP counters and rates."""
    from mrc_nic.observe import stats as stats_mod

    def open_sampler(**kw):
        return stats_mod.Sampler(app.lab(), **kw)

    show(app.format, open_sampler, watch, view, host, plane, interval, count, duration, listen)


def show(fmt, open_sampler, watch, view, host, plane, interval, count, duration, listen) -> None:
    """stats with the sampler open_sampler(kernel_every=, ev_detail=) opens: a
    lab's (observe.stats.Sampler), or a cluster lab's (its machines' merged)."""
    from mrc_nic.observe import stats as stats_mod
    from mrc_nic.observe import stats_filter, stream

    _check_options(fmt, watch, view, listen, interval, count, duration)
    if interval is None:
        interval = WATCH_INTERVAL if watch or fmt == "table" else STREAM_INTERVAL
    try:
        stream.check_bounds(interval, count, duration)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    with open_sampler(
        kernel_every=stats_mod.kernel_every(interval), ev_detail=view == "ev"
    ) as sampler:
        try:
            stats_filter.check(sampler.topo, host, plane)
        except stats_filter.FilterError as e:
            raise click.BadParameter(str(e), param_hint="--host/--plane") from None

        def take() -> dict:
            return stats_filter.select(sampler.snapshot(), host=host, plane=plane)

        def frames(sleep=time.sleep):
            return stream.snapshots(take, interval, count=count, duration=duration, sleep=sleep)

        try:
            if watch:
                _watch(frames, view, sampler)
            elif fmt == "jsonl":
                from mrc_nic.observe.jsonenc import Encoder

                # json.dumps(snap, separators=(",", ":")), reusing the text of what
                # did not change since the line before. Keys come in a fixed order
                # from the code that builds them.
                encode = Encoder().encode
                for snap in frames():
                    _whole_line(encode(snap, "\n"))
            elif fmt == "json":
                output.emit_json(take())
            elif fmt == "prom":
                _prom(take, listen, duration)
            elif view == "port":
                _port_table(take())
            else:
                _one_frame(frames, view, interval)
        except KeyboardInterrupt:
            pass  # Ctrl-C ends a stream or a watch: not an error
        except BrokenPipeError:
            # The reader left (| head): stop quietly, and keep Python's exit flush quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _check_options(fmt, watch, view, listen, interval, count, duration) -> None:
    if watch and fmt != "table":
        raise click.UsageError("--watch draws tables; for a stream use --format jsonl")
    if view == "port" and (watch or fmt != "table"):
        raise click.UsageError("--by port is a table of the raw switch port counters only")
    if listen and fmt != "prom":
        raise click.UsageError("--listen goes with --format prom")
    streaming = watch or fmt == "jsonl"
    if count is not None and not streaming:
        raise click.UsageError("--count bounds --watch and jsonl")
    if duration is not None and not (streaming or listen):
        raise click.UsageError("--duration bounds --watch, jsonl and --listen")
    if interval is not None and fmt in ("json", "prom"):
        raise click.UsageError("--interval paces --watch and jsonl; json and prom are one snapshot")


def _whole_line(line: str) -> None:
    """Write one line (newline included), flushed; Ctrl-C waits until it is out,
    so that a reader never gets half a snapshot as the last line."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        sys.stdout.write(line)
        sys.stdout.flush()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _watch(frames, view: str, sampler) -> None:
    from mrc_nic.observe import fidelity, live

    def on_view(new_view: str) -> None:
        sampler.ev_detail = new_view == "ev"

    if not getattr(sampler, "judges_fidelity", True):
        # A cluster lab: its snapshots carry the verdict of every machine's CPU and links.
        live.run(frames, view, output.console, on_view=on_view)
        return

    def judged(sleep=time.sleep):
        """Each frame with the fidelity verdict since the frame before (live)."""
        with fidelity.Meter(topo=sampler.topo) as meter:
            meter.tick()
            for snap in frames(sleep):
                yield {**snap, "fidelity": meter.tick()}

    live.run(judged, view, output.console, on_view=on_view)


def _one_frame(frames, view: str, interval: float) -> None:
    """Two snapshots `interval` apart, so that the table shows rates."""
    from mrc_nic.observe import watch
    from mrc_nic.observe.sparkline import History

    history = History()
    for snap in frames():
        history.add(snap)
        if snap["interval_s"] is not None:
            break
    output.console.print(watch.render(snap, history, view, output.console.width, None))


def _prom(take, listen: str | None, duration: float | None) -> None:
    from mrc_nic.observe import prom

    if listen is None:
        sys.stdout.write(prom.render(take()))
        return
    try:
        host, port = prom.parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None
    try:
        prom.serve(host, port, take, duration or LISTEN_DURATION)
    except OSError as e:
        raise click.ClickException(f"cannot listen on {listen}: {e.strerror}") from None


def _port_table(snap: dict) -> None:
    rows = [
        [
            f"{p['node']}:{p['ifname']}",
            p["port_id"],
            *output.counter_cells(p["ingress"], p["egress"]),
            output.human_count(p["egress"]["ecn_marked"]),
            output.human_count(p["egress"]["trimmed"]),
            output.human_bytes(p["egress"]["backlog_hwm"]),
        ]
        for p in snap["ports"]
    ]
    output.table(
        "switch ports (BPF counters; marked, trimmed, hwm: the egress queue)",
        [
            "port",
            "#id",
            "#rx pkts",
            "#rx bytes",
            "#tx pkts",
            "#tx bytes",
            "#drops",
            "#marked",
            "#trimmed",
            "#hwm",
        ],
        rows,
    )


COMMANDS = [stats]
