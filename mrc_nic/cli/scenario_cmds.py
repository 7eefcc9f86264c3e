"""scenario incast|permutation|single-ev-loss|plane-failure|allreduce-failure: traffic
patterns through the host daemons (issue 5) and the papers' failure experiments (issue 20)."""

from __future__ import annotations

import os
import types
from collections.abc import Callable

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.cli.common import DURATION, size_option
from mrc_nic.fabric import preflight

EPILOG = """\b
Without --topology it runs on the lab that is up (-l NAME). With --topology
(a file, or a name in netns/: clos-8) it brings up a lab of its own, named
scn<pid>, runs, and takes that lab down, also on error; --rate then sets
every link's rate (clos-8 ships at 10mbit, where the links, not this
machine's CPUs, are the bottleneck: docs/fidelity.md). Every run ends with
its fidelity verdict: which resource bound it."""


# ctx.meta key: the lab a flow scenario runs on when it is not this machine's
# ({"lab", "topo", "runner"}: scenario.run_scenario's), set by cluster_scenario.
SITE = "mrc_nic.scenario_site"


def _common(f):
    for option in reversed(
        [
            click.option(
                "--topology",
                "topology_name",
                default=None,
                metavar="FILE|NAME",
                help="Bring up a lab of its own from this topology (clos-8, or a file).",
            ),
            click.option(
                "--rate", default=None, help="With --topology: every link's rate (10mbit)."
            ),
            click.option(
                "--fabric-rate",
                default=None,
                help="With --topology: the T0-T1 links' rate (default: --rate).",
            ),
            click.option(
                "--mtu",
                type=int,
                default=None,
                help="With --topology: every link's IP MTU (1104..3506; 3152 or more: "
                "3 KiB per packet).",
            ),
            click.option(
                "--base-rtt",
                default=None,
                help="With --topology: [queues] base_rtt (default: the file's, at least 4 "
                "MTUs' time on a link).",
            ),
            click.option(
                "--duration",
                type=DURATION,
                default="4s",
                show_default=True,
                help="Each flow lasts about this long at its fair share.",
            ),
            click.option(
                "--no-cc", is_flag=True, help="A fixed window (CC profile 0: NSCC disabled)."
            ),
            click.option(
                "--cc-profile",
                type=int,
                default=None,
                help="The QPs' CC profile (0 fixed, 1 NSCC: the default, 2 NSCC without QA).",
            ),
            click.option(
                "--cwnd",
                type=click.IntRange(0, 1024),
                default=None,
                help="The fixed window in packets (profile 0; default 128).",
            ),
        ]
    ):
        f = option(f)
    return f


@group(
    epilog="""\b
Examples:
  mrc-nic scenario incast --senders 7 --topology clos-8 --rate 10mbit
  mrc-nic scenario incast --senders 7 --topology clos-8 --rate 10mbit --no-cc
  mrc-nic scenario permutation --topology clos-8 --rate 10mbit --format json
  mrc-nic scenario incast --senders 3 -l mylab      # on a lab that is up"""
)
def scenario() -> None:
    """Traffic scenarios on the emulated NICs: N:1 incast with a bystander, permutation;
    the papers' failure experiments: single-ev-loss, plane-failure, allreduce-failure."""


@scenario.command(epilog=EPILOG)
@click.option("--senders", type=click.IntRange(1, 252), default=7, show_default=True)
@click.option("--receiver", default=None, help="The incast's receiver (default: the first host).")
@click.option(
    "--bystander",
    default=None,
    metavar="SRC:DST",
    help="The bystander flow (default: to the receiver's T0 neighbour, from another T0).",
)
@click.option("--no-bystander", is_flag=True, help="Only the incast.")
@_common
@pass_app
def incast(app: App, senders, receiver, bystander, no_bystander, **kw):
    """SENDERS hosts WRITE to one receiver at once, beside a bystander flow
    that shares the spines' downlinks but not the receiver: per-flow goodput,
    the bystander's against its fair share, QPs in ERR, what the switches
    marked and trimmed."""
    by: tuple[str, str] | bool = not no_bystander
    if bystander:
        if no_bystander:
            raise click.UsageError("--bystander and --no-bystander exclude each other")
        src, sep, dst = bystander.partition(":")
        if not sep or not src or not dst:
            raise click.BadParameter("use SRC:DST, e.g. h2:h1", param_hint="--bystander")
        by = (src, dst)

    def run(lab: str, **opts) -> dict:
        from mrc_nic.workloads import scenario as sc

        return sc.incast(lab, senders=senders, receiver=receiver, bystander=by, **opts)

    _run(app, run, **kw)


@scenario.command(epilog=EPILOG)
@click.option(
    "--seed", type=int, default=None, help="A random derangement (default: host i to i + a T0)."
)
@_common
@pass_app
def permutation(app: App, seed, **kw):
    """Every host WRITEs to another at once (a derangement): per-flow goodput
    against the link rate."""

    def run(lab: str, **opts) -> dict:
        from mrc_nic.workloads import scenario as sc

        return sc.permutation(lab, seed=seed, **opts)

    _run(app, run, **kw)


def _run(
    app: App,
    run,
    *,
    topology_name,
    rate,
    fabric_rate,
    mtu,
    base_rtt,
    duration,
    no_cc,
    cc_profile,
    cwnd,
):
    from mrc_nic.lab.topology import TopologyError
    from mrc_nic.workloads import scenario as sc

    if (rate or fabric_rate or base_rtt or mtu) and not topology_name:
        raise click.UsageError(
            "--rate, --fabric-rate, --mtu and --base-rtt need --topology (a lab of its own)"
        )
    if no_cc and cc_profile not in (None, 0):
        raise click.UsageError("--no-cc is CC profile 0")
    preflight.require_root()  # an operator command: before any lab work
    opts = dict(duration=duration, no_cc=no_cc, cc_profile=cc_profile, cwnd=cwnd)
    site = click.get_current_context().meta.get(SITE)
    try:
        if site is not None:  # a cluster lab's (cluster_scenario): its topology and runner
            report = run(site["lab"], topo=site["topo"], runner=site["runner"], **opts)
        elif topology_name:
            topo = sc.scenario_topology(
                topology_name,
                app.given_lab() or sc.unique_lab_name(),
                rate=rate,
                base_rtt=base_rtt,
                fabric_rate=fabric_rate,
                mtu=mtu,
            )
            if not app.json:
                output.info(
                    f"bringing up lab [bold]{topo.lab}[/] from {topo.path.name}: "
                    f"{topo.hosts} hosts, {topo.planes} planes, links "
                    f"{_mbit(topo.rate_bps)}, MTU {topo.mtu}, "
                    f"base RTT {topo.queues.base_rtt_ns / 1e3:g} us"
                )
            with sc.with_lab(topo):
                report = run(topo.lab, **opts)
        else:
            report = run(app.lab(), **opts)
    except (ValueError, TopologyError) as e:
        raise click.UsageError(str(e)) from None
    app.show(report, _print)
    if report.get("qps_in_err") or any(f.get("error") for f in report["flows"]):
        raise SystemExit(1)


def _mbit(bps) -> str:
    return "uncapped" if not bps else f"{bps / 1e6:.1f} Mbit/s"


def _print(r: dict) -> None:
    rows = [
        [
            f["name"],
            f["role"],
            _mbit(f["goodput_bps"]) if f["goodput_bps"] is not None else "-",
            _mbit(f["fair_bps"]),
            f"{f['ratio']:.2f}" if f["ratio"] is not None else "-",
            f["retransmits"],
            f["timeouts"],
            f["cwnd_mean"] if f["cwnd_mean"] is not None else "-",
            f["error"] or ",".join(sorted(set(f["qp_states"]))) or "-",
        ]
        for f in r["flows"]
    ]
    against = "fair" if r["scenario"] == "incast" else "link"
    output.table(
        f"{r['scenario']} on {r['lab']}, CC profile {r['cc_profile']} ({r['cc']}), "
        f"window {r['window_s'][0]:.2f}-{r['window_s'][1]:.2f} s",
        ["flow", "role", "#goodput", f"#{against}", "#ratio", "#retx", "#timeouts", "#cwnd", "qp"],
        rows,
    )
    if r["scenario"] == "incast":
        i = r["incast"]
        output.info(
            f"incast {i['senders']}:1 to {i['receiver']}: {_mbit(i['aggregate_bps'])} of "
            f"{_mbit(i['receiver_link_bps'])} ({i['utilization']:.0%}; payload fills at most "
            f"{i['ceiling']:.0%}), Jain fairness {i['jain_fairness']}"
        )
        b = r.get("bystander")
        if b:
            ratio = "-" if b["ratio"] is None else f"{b['ratio']:.0%}"
            output.info(
                f"bystander {b['name']}: {_mbit(b['goodput_bps'])}, {ratio} of its fair "
                f"share {_mbit(b['fair_bps'])}, during the incast "
                f"({b['window_s'][0]:.2f}-{b['window_s'][1]:.2f} s, senders running "
                f"{b['senders_running'][0]} then {b['senders_running'][1]})"
            )
    else:
        output.info(
            f"per flow: min {r['min_ratio']}, mean {r['mean_ratio']} of the link rate "
            f"{_mbit(r['link_bps'])}; payload fills at most {r['ceiling']} of a link that "
            f"also carries SACKs (min {r['min_of_ceiling']} of that); "
            f"Jain fairness {r['jain_fairness']}"
        )
    s = r["switch"]
    output.info(
        "switches: "
        + "; ".join(
            f"{tier} marked {s[tier]['ecn_marked']}, trimmed {s[tier]['trimmed']}, "
            f"dropped {s[tier]['drop_buffer']}"
            for tier in ("up", "down", "lasthop")
        )
    )
    output.info(
        f"QPs in ERR: {r['qps_in_err']}; CPUs busy: {r['cpu_busy_cores']} of {os.cpu_count()}"
    )
    _fidelity(r)


def _fidelity(r: dict) -> None:
    """The run's fidelity verdict, and what to change when the CPU bound it."""
    from mrc_nic.lab.state import open_lab
    from mrc_nic.observe import fidelity

    fid = r.get("fidelity")
    output.plain(fidelity.summary(fid))
    shape = r.get("topology")
    if shape is not None:  # a scenario's own lab is down by now: its shape is in the report
        topo = types.SimpleNamespace(hosts=shape["hosts"], planes=shape["planes"])
    else:
        _, topo = open_lab(r["lab"])
    output.fidelity_advice(fid, topo)


# ---- the papers' failure experiments (workloads.experiments) --------------------------------
def _size_option(default: str):
    return size_option("--size", default=default, show_default=True)


ROUNDS = click.option(
    "--rounds",
    type=click.IntRange(1, 50),
    default=1,
    show_default=True,
    help="Runs, each healthy then faulty: the median and spread of the ratio, and every run.",
)


def show_report(r: dict, app: App, lines: Callable[[dict], list[str]]) -> None:
    """One run's result, or experiments.repeated's of several (lines: one run's text);
    exit 1 when it did not complete."""
    app.show(r, lambda r: _rounds_view(r, lines))
    if not r.get("completed"):
        raise SystemExit(1)


def _rounds_view(r: dict, lines: Callable[[dict], list[str]]) -> None:
    if "runs" not in r:
        for line in lines(r):
            output.info(line)
    else:
        for i, run in enumerate(r["runs"], 1):
            for line in lines(run):
                output.info(f"round {i}: {line}")
        if r["median"] is not None:
            output.info(
                f"{r['key']} over {r['rounds']} rounds: median {r['median']:.2f} "
                f"(min {r['min']:.2f}, max {r['max']:.2f})"
            )
        lb = r["links_bound"]
        if lb["median"] is not None:
            output.info(
                f"{r['key']} over the {lb['rounds']} link-bound round(s): median "
                f"{lb['median']:.2f} (min {lb['min']:.2f}, max {lb['max']:.2f})"
            )
        else:
            output.info(f"no round was link-bound: {r['key']} not judged")
    _fidelity(r)


def run_rounds(experiment: Callable[[], dict], rounds: int, key: str) -> dict:
    """experiments.repeated, its ValueError (a bad argument) a usage error."""
    from mrc_nic.workloads import experiments

    try:
        return experiments.repeated(experiment, rounds, key)
    except ValueError as e:
        raise click.UsageError(str(e)) from None


@scenario.command(
    "single-ev-loss",
    epilog="""\b
On the lab that is up (default: h0 -> h1):
  mrc-nic scenario single-ev-loss --format json
  mrc-nic scenario single-ev-loss --evs 16 --rate 0.2 --size 512M""",
)
@_size_option("256M")
@click.option("--evs", type=click.IntRange(1, 256), default=16, show_default=True)
@click.option("--rate", type=float, default=0.2, show_default=True, help="Loss of the one EV.")
@click.option("--plane", type=int, default=1, show_default=True, help="The lossy EV's plane.")
@click.option("--seed", type=int, default=7, show_default=True)
@ROUNDS
@pass_app
def single_ev_loss(app: App, size, evs, rate, plane, seed, rounds):
    """One EV of a QP's EVs loses RATE of its packets on the wire: goodput
    against the same write healthy, and whether the EV was retired."""
    preflight.require_root()  # an operator command: before any lab work
    from mrc_nic.workloads import experiments

    lab = app.lab()
    r = run_rounds(
        lambda: experiments.single_ev_loss(
            lab, size=size, evs=evs, rate=rate, plane=plane, seed=seed
        ),
        rounds,
        "goodput_ratio",
    )
    show_report(r, app, single_ev_loss_lines)


def single_ev_loss_lines(r: dict) -> list[str]:
    """One single-ev-loss run in words (a local lab's, or a cluster lab's: cluster_scenario)."""
    ratio = "-" if r["goodput_ratio"] is None else f"{r['goodput_ratio']:.2f}"
    return [
        f"healthy {_mbit(r['healthy_goodput_bps'])}, with EV {r['lossy_ev']} of {r['evs']} "
        f"losing {r['loss_rate']:.0%}: {_mbit(r['lossy_goodput_bps'])} (ratio {ratio})",
        f"the lossy EV: {r['lossy_ev_final_state']}"
        + (f" (replaced by {r['replaced_by']})" if r["replaced_by"] else "")
        + f"; the fault dropped {r['fault_dropped']} of {r['fault_pkts']} packets",
    ]


@scenario.command(
    "plane-failure",
    epilog="""\b
  mrc-nic scenario plane-failure --plane 1 --format json""",
)
@_size_option("512M")
@click.option("--plane", type=int, default=1, show_default=True)
@click.option("--after", type=float, default=0.3, show_default=True, help="Seconds into the write.")
@click.option("--mode", type=click.Choice(["blackhole", "down"]), default="blackhole")
@ROUNDS
@pass_app
def plane_failure(app: App, size, plane, after, mode, rounds):
    """A whole plane fails during a WRITE: goodput against the same write healthy."""
    preflight.require_root()  # an operator command: before any lab work
    from mrc_nic.workloads import experiments

    lab = app.lab()
    r = run_rounds(
        lambda: experiments.plane_failure(lab, size=size, plane=plane, after=after, mode=mode),
        rounds,
        "goodput_ratio",
    )
    show_report(r, app, plane_failure_lines)


def plane_failure_lines(r: dict) -> list[str]:
    """One plane-failure run in words (a local lab's, or a cluster lab's: cluster_scenario)."""
    ratio = "-" if r["goodput_ratio"] is None else f"{r['goodput_ratio']:.2f}"
    lines = [
        f"healthy {_mbit(r['healthy_goodput_bps'])}, plane {r['plane']} {r['mode']} after "
        f"{r['fail_after_s']}s: {_mbit(r['failed_goodput_bps'])} (ratio {ratio}), "
        f"{r['retransmits']} resent, {r['timeouts']} timeouts"
    ]
    fault = r.get("fault")
    if fault:  # a cluster lab's: where the fault was, and what it did
        drops = "uncounted" if fault["drops"] is None else fault["drops"]
        lines.append(
            f"fault #{fault['id']} on {', '.join(f'm{m}' for m in fault['machines'])}: "
            f"applied {fault['asked_into_transfer_s']:+.2f}..{fault['into_transfer_s']:+.2f} s "
            f"into the transfer, dropped {drops} packets, "
            f"{'healed' if fault['healed'] else 'NOT healed'}; "
            f"WRITEs of {r['bytes']['healthy']} and {r['bytes']['failed']} bytes completed"
        )
    return lines


@scenario.command(
    "allreduce-failure",
    epilog="""\b
On the lab that is up (a ring over its hosts, in order):
  mrc-nic scenario allreduce-failure --format json
  mrc-nic scenario allreduce-failure --size 256M --fault "plane 0" --mode down --at 0.5
  mrc-nic scenario allreduce-failure --fault p1.t1a-t0a     # one link blackholed""",
)
@_size_option("64M")
@click.option(
    "--fault",
    "fault_target",
    default="plane 1",
    show_default=True,
    help="What fails: a plane (plane N), a link (p1.t1a-t0a), a host port (h0.eth1).",
)
@click.option("--mode", type=click.Choice(["blackhole", "down"]), default="blackhole")
@click.option(
    "--at",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.4,
    show_default=True,
    help="When: this fraction of the job's steps (timed by the healthy run).",
)
@click.option("--limit", type=DURATION, default="120s", show_default=True, help="Per job.")
@ROUNDS
@pass_app
def allreduce_failure(app: App, size, fault_target, mode, at, limit, rounds):
    """A ring all-reduce over the lab's hosts, healthy and then with a fault
    put in force mid-job: job time healthy against failed, every step's bytes
    verified."""
    preflight.require_root()  # an operator command: before any lab work
    from mrc_nic.workloads import experiments

    target = tuple(fault_target.split())
    lab = app.lab()
    r = run_rounds(
        lambda: experiments.allreduce_failure(
            lab, size=size, fault=target, mode=mode, at=at, limit_s=limit
        ),
        rounds,
        "slowdown",
    )
    show_report(r, app, allreduce_failure_lines)


def allreduce_failure_lines(r: dict) -> list[str]:
    """One allreduce-failure run in words (a local lab's, or a cluster lab's)."""
    return [
        f"ring all-reduce of {r['size']} bytes over {len(r['hosts'])} hosts, "
        f"{r['steps']} steps: healthy {_secs(r['healthy_job_s'])}, with "
        f"{r['fault']['target']} {r['fault']['mode']} at step {r['fault']['step']} "
        f"(+{r['fault']['into_step_s']:.3f} s): "
        f"{_secs(r['failed_job_s'])}"
        + (f" (slowdown {r['slowdown']:.2f})" if r["slowdown"] else ""),
        f"every step verified: {r['verified']}; resent {r['retransmits']['failed']} "
        f"(healthy {r['retransmits']['healthy']}), timeouts {r['timeouts']['failed']}"
        + "".join(f"; {k}: {v}" for k, v in r["errors"].items() if v),
    ]


def _secs(s) -> str:
    return "did not finish" if s is None else f"{s:.3f} s"


COMMANDS = [scenario]
