"""chaos: a seeded fault schedule, with verified traffic, inside the lab."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, Outcome, command, pass_app
from mrc_nic.cli.common import DURATION, size_option

# workloads.chaos.DEFAULT_KINDS, written out so that --help imports nothing
# more (a unit test checks they agree).
DEFAULT_KINDS = "link-down,blackhole-up,blackhole-down,loss,switch-down,plane-down"


def _kinds(ctx, param, value):
    return tuple(k.strip() for k in value.split(",") if k.strip())


@command(
    view=lambda r: print_report(r),
    epilog="""\b
Kinds: link-down, blackhole, blackhole-up, blackhole-down, loss, flap,
switch-down, plane-down (default: all but blackhole and flap).
\b
Examples:
  mrc-nic chaos --duration 60s                        # a fault every 500ms, 1 plane at a time
  mrc-nic chaos --duration 10s --every 200ms --hold 300ms --max-planes 2 --seed 7
  mrc-nic chaos --duration 30s --kinds blackhole-down,loss --loss-rate 0.2
  mrc-nic chaos --duration 5s --no-traffic --format json""",
)
@click.option("--duration", type=DURATION, required=True, help="How long the run lasts.")
@click.option(
    "--every", type=DURATION, default=0.5, show_default=True, help="A new fault this often."
)
@click.option(
    "--hold", type=DURATION, default=None, help="How long each fault stays (default: 2 x every)."
)
@click.option(
    "--max-planes",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="At most this many planes faulty at once (fewer than the lab's planes).",
)
@click.option(
    "--kinds",
    default=DEFAULT_KINDS,
    show_default=True,
    callback=_kinds,
    help="Fault kinds, comma-separated.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="The schedule's seed.")
@click.option(
    "--loss-rate", type=float, default=0.05, show_default=True, help="loss: drop probability."
)
@click.option("--traffic/--no-traffic", default=True, help="Run verified WRITEs meanwhile.")
@click.option("--src", default=None, help="Traffic's sender (default: the first host).")
@click.option("--dst", default=None, help="Traffic's receiver (default: the next host).")
@size_option("--write-size", default="32M", show_default=True, help_text="Bytes per WRITE.")
@pass_app
def chaos(
    app: App,
    duration,
    every,
    hold,
    max_planes,
    kinds,
    seed,
    loss_rate,
    traffic,
    src,
    dst,
    write_size,
) -> Outcome:
    """Random faults on a schedule, healed at the end, with verified traffic."""
    from mrc_nic.workloads import chaos as chaos_mod

    spec = spec_of(
        duration, every, hold, max_planes, kinds, seed, loss_rate, traffic, src, dst, write_size
    )
    report = chaos_mod.run(app.lab(), spec, on_fault=None if app.json else log_fault)
    return outcome(report)


def spec_of(
    duration, every, hold, max_planes, kinds, seed, loss_rate, traffic, src, dst, write_size
):
    """The run's ChaosSpec from the command's options (also a cluster lab's: cli.cluster_chaos)."""
    from mrc_nic.workloads import chaos as chaos_mod

    return chaos_mod.ChaosSpec(
        duration=duration,
        every=every,
        hold=2 * every if hold is None else hold,
        max_planes=max_planes,
        kinds=kinds,
        seed=seed,
        loss_rate=loss_rate,
        traffic=traffic,
        src=src,
        dst=dst,
        write_size=write_size,
    )


def log_fault(entry: dict) -> None:
    """The live log: a line per fault applied."""
    output.plain(
        f"{entry['at_s']:7.2f}s  fault #{entry['id']}: {entry['kind']} on {entry['target']}"
    )


def outcome(report: dict) -> Outcome:
    """The report and its exit status: 1 if a QP went to ERR, a fault was
    left, or a WRITE failed; 130 if interrupted."""
    if report["interrupted"]:
        return Outcome(report, 130)
    bad = report["qps_in_err"] or report["faults_left"]
    if report["traffic"] and report["traffic"]["writes_failed"]:
        bad = True
    return Outcome(report, 1 if bad else 0)


def print_report(r: dict, topo=None) -> None:
    """The run in words; topo: the lab's topology (default: the lab's state here)."""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(r["faults_by_kind"].items())) or "none"
    healed = f"NOT healed: {r['faults_left']}" if r["faults_left"] else "every one healed"
    output.plain(
        f"chaos on {r['lab']} (seed {r['seed']}): {r['seconds']:.1f} s"
        f"{' (interrupted)' if r['interrupted'] else ''}, {r['faults_applied']} faults "
        f"applied ({kinds}), {healed}; {r['faults_skipped']} draws skipped (no room)"
    )
    t = r["traffic"]
    if t:
        line = (
            f"traffic {t['src']} -> {t['dst']}: {t['writes']} verified WRITE(s) of "
            f"{t['write_size']:,} B, {t['bytes_written']:,} bytes written, "
            f"{t['bytes_verified']:,} verified, {t['writes_failed']} failed"
        )
        (output.error if t["writes_failed"] else output.success)(line)
        for err in t["errors"]:
            output.error(f"  {err}")
    if r["qps_in_err"]:
        output.error(f"QPs in ERR: {r['qps_in_err']}")
    else:
        output.success("QPs in ERR: none")
    if r.get("fidelity"):
        from mrc_nic.lab.state import open_lab
        from mrc_nic.observe import fidelity

        output.plain(fidelity.summary(r["fidelity"]))
        output.fidelity_advice(r["fidelity"], topo or open_lab(r["lab"])[1])


COMMANDS = [chaos]
