"""The fidelity verdict of a cluster lab: each machine judged on its own
CPU and links, then one verdict over the machines.

A machine's CPU and kernel carry only its own shard, and its links' TBFs
are the ones it holds (a cut link's up direction on one machine, its down
direction on the other), so each machine is judged as a local lab is
(observe.fidelity.judge) between two of its raw samples (cluster.probe,
fidelity.raw_to_json).
The lab's verdict over them (merge_verdicts): `cpu` if any machine's CPU
bound its part (the figures that cross it measure that machine), else
`links` if a link somewhere was at its rate, else `application`. Unlike
fidelity.combine, which needs every part of a run link-bound, one idle
machine beside a machine at line rate does not make the lab's run
application-bound: its part simply carried less.
"""

from __future__ import annotations

from typing import Any

from mrc_nic.lab.topology import Topology
from mrc_nic.observe import fidelity


def judge_machine(
    topo: Topology, before: dict, after: dict, *, judge_veth_drops: bool = True
) -> dict[str, Any]:
    """One machine's fidelity object between two of its encoded samples."""
    (cpu0, links0), (cpu1, links1) = fidelity.raw_from_json(before), fidelity.raw_from_json(after)
    rates = {(d[0], d[1]): d[4] for d in fidelity.link_directions(topo)}
    links = None
    if links0 is not None and links1 is not None and rates:
        links = fidelity.link_figures(rates, links0, links1)
    fid = fidelity.judge(fidelity.cpu_figures(cpu0, cpu1), links, judge_veth_drops=judge_veth_drops)
    fid["load_avg"] = after.get("load_avg", fid["load_avg"])  # that machine's, not this one's
    return fid


def judge_machines(
    topo: Topology, before: dict[int, dict], after: dict[int, dict], **kw: bool
) -> dict[str, Any] | None:
    """The lab's verdict from {machine: encoded sample} before and after (the
    machines sampled both times); None when no machine was."""
    both = sorted(set(before) & set(after))
    if not both:
        return None
    return merge_verdicts({m: judge_machine(topo, before[m], after[m], **kw) for m in both})


def merge_verdicts(per_machine: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One verdict over the machines' (see the module); each machine's object
    is kept under `parts` as "m<i>", which fidelity.summary shows one by one."""
    verdicts = [f["verdict"] for f in per_machine.values()]
    if "cpu" in verdicts:
        verdict = "cpu"
    elif "links" in verdicts:
        verdict = "links"
    else:
        verdict = "application"
    busiest = [f["busiest_link"] for f in per_machine.values() if f.get("busiest_link") is not None]
    parts = {f"m{m}": f for m, f in sorted(per_machine.items())}
    return {
        "verdict": verdict,
        "why": "; ".join(f"{k}: {f['verdict']} ({f['why']})" for k, f in parts.items()),
        "cpu_saturated": any(f.get("cpu_saturated") for f in parts.values()),
        "busiest_link": max(busiest, default=None),
        "links_at_rate": sum(f.get("links_at_rate", 0) for f in parts.values()),
        "kernel_drops": sum(f.get("kernel_drops", 0) for f in parts.values()),
        "parts": parts,
    }
