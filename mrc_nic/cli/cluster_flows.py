"""A scenario's flows on a cluster lab (incast, permutation): run_flows over its machines.

workloads.scenario sizes the flows and makes the report as on a local lab;
this runs them. Each machine with hosts of the run gets one part
(workloads.scenario_part, started by its agent: machines.Parts), which
starts its hosts' processes and relays their lines, samples its own receive
QPs and send windows, and reads its switches', NIC's and CPU's figures
before and after. This parent does what scenario.run_flows does with local
processes: it gathers every host's endpoints, hands each host its peers'
(scenario.connect_orders), gives the flows' time 0 (a wall-clock time each
machine turns into its own clock), takes the flows' starts and ends and
the samples as they come, and adds the machines' figures up. The fidelity
verdict: each machine's meter sample k is of the same moment (k x
scenario.FIDELITY_EVERY_S from time 0); the report's window is judged
between the first and last such moments inside it, each machine on its own
CPU and links (cluster.verdict).
"""

from __future__ import annotations

import contextlib
import time

from mrc_nic.cli import cluster_lab
from mrc_nic.cluster import machines, placement, verdict
from mrc_nic.cluster.record import ClusterRecord
from mrc_nic.lab.topology import Topology
from mrc_nic.workloads import scenario, scenario_part

GO_MARGIN_S = 1.0  # time 0 this long after "go" is sent: every part has it by then (a Ray call)
FINAL_S = 60.0  # the parts' last figures, after "end"
NIC_KEYS = ("nack_trimmed", "nack_trimmed_lasthop", "tx_retx", "timeout_kicks")


class ClusterJudge:
    """scenario.run_scenario's meter for a cluster lab: a sample is
    {machine: its raw sample}, judged machine by machine."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo

    def judge_between(self, a: dict[int, dict], b: dict[int, dict]) -> dict | None:
        return verdict.judge_machines(self.topo, a, b)


def run_flows(
    rec: ClusterRecord,
    topo: Topology,
    lab_name: str,
    flows: list[scenario.Flow],
    *,
    cc_profile: int,
    cc: dict | None = None,
    cwnd: int | None = None,
    timeout: float = 120.0,
) -> dict:
    """scenario.run_flows over the cluster lab's machines (the same result)."""
    where = placement.Placement.from_dict(rec.placement).node_machine
    args = scenario.host_args(rec.lab, topo, flows)
    by_machine: dict[int, list[str]] = {}
    for h in args:
        by_machine.setdefault(where[h], []).append(h)
    _, handles = cluster_lab.agents(rec)
    part_args = {
        m: {"lab": rec.lab, "hosts": {h: args[h] for h in hs}} for m, hs in by_machine.items()
    }
    parts = machines.Parts({m: handles[m] for m in by_machine}, scenario_part.__name__, part_args)
    run = _Run(parts, {f.name: f for f in flows}, by_machine)
    try:
        deadline = time.monotonic() + scenario.START_S
        ready = run.gather("ready", deadline)
        orders = scenario.connect_orders(flows, ready, cc_profile=cc_profile, cc=cc, cwnd=cwnd)
        for m, hs in by_machine.items():
            parts.tell(m, {"tell": {h: orders[h] for h in hs}})
        run.gather("connected", deadline)
        return run.drive(topo, timeout)
    finally:
        for m in list(parts.open):
            with contextlib.suppress(machines.ClusterError):  # its agent is gone
                parts.tell(m, {"end": True})
        parts.end()


class _Run:
    def __init__(self, parts: machines.Parts, flows: dict, by_machine: dict[int, list[str]]):
        self.parts, self.flows, self.by_machine = parts, flows, by_machine
        self.pending = set(flows)
        self.meters: dict[int, dict[int, tuple[float, dict]]] = {}  # k -> machine -> (t, raw)
        self.finals: dict[int, dict] = {}

    def gather(self, key: str, deadline: float) -> dict[str, dict]:
        """Every host's next line with `key`: {host: line}."""
        hosts = {h for hs in self.by_machine.values() for h in hs}
        got: dict[str, dict] = {}
        while len(got) < len(hosts):
            if time.monotonic() > deadline:
                missing = sorted(hosts - set(got))
                raise cluster_lab.ClusterLabError(f"no {key!r} from {', '.join(missing)} in time")
            for m, msg in self.parts.read(1.0):
                line = msg.get("line", {})
                if "error" in line:
                    raise cluster_lab.ClusterLabError(f"{msg['host']} (m{m}): {line['error']}")
                if key in line:
                    got[msg["host"]] = line
                elif "gone" in msg:
                    raise cluster_lab.ClusterLabError(
                        f"{msg['host']} (m{m}): the host process ended"
                    )
                elif "error" in msg or "ended" in msg:
                    raise cluster_lab.ClusterLabError(f"m{m}: {msg.get('error', 'its part ended')}")
        return got

    def drive(self, topo: Topology, timeout: float) -> dict:
        every = scenario.SAMPLE_S * max(1.0, len(self.flows) / scenario.SAMPLE_FLOWS)
        t0 = time.time() + GO_MARGIN_S
        for m, hs in self.by_machine.items():
            starts = {h: {f.name: f.start for f in self.flows.values() if f.src == h} for h in hs}
            go = {"t0_wall": t0, "starts": starts, "deadline_s": timeout, "wait": timeout}
            self.parts.tell(m, {"go": {**go, "every": every}})
        end_by = t0 + timeout + scenario.REPORT_GRACE_S
        while self.pending and time.time() < end_by and self.parts.open:
            self.take(self.parts.read(0.5), t0)
        for m in list(self.parts.open):
            self.parts.tell(m, {"end": True})
        final_by = time.monotonic() + FINAL_S
        while len(self.finals) < len(self.by_machine) and time.monotonic() < final_by:
            if not self.parts.open:
                break
            self.take(self.parts.read(1.0), t0)
        for f in self.flows.values():
            if f.done_at is None:
                f.error = f.error or f"did not end within {timeout:g} s"
        return self.result(topo, time.time() - t0)

    def take(self, got: list[tuple[int, dict]], t0: float) -> None:
        for m, msg in got:
            if "line" in msg:  # its times are seconds from time 0 already
                scenario.take_line(msg["line"], self.flows, self.pending, 0.0, msg["host"])
            elif "gone" in msg:
                for f in self.flows.values():
                    if f.src == msg["host"] and f.name in self.pending:
                        f.error = f"the process of {f.src} ended"
                        f.done_at = time.time() - t0
                        self.pending.discard(f.name)
            elif "samples" in msg:
                for name, t, placed in msg["samples"]:
                    f = self.flows[name]
                    if not f.samples or t > f.samples[-1][0]:
                        f.samples.append((t, placed))
            elif "cwnd" in msg:
                for name, n in msg["cwnd"]:
                    self.flows[name].cwnds.append(n)
            elif "meter" in msg:
                k, t, raw = msg["meter"]
                self.meters.setdefault(k, {})[m] = (t, raw)
            elif "final" in msg:
                self.finals[m] = msg["final"]
            elif "error" in msg:
                for name in list(self.pending):
                    self.flows[name].error = msg["error"]
                    self.pending.discard(name)

    def result(self, topo: Topology, seconds: float) -> dict:
        n = len(self.by_machine)
        # The moments every machine sampled, in order: (the latest of their times, samples).
        judged = [
            (max(t for t, _ in per.values()), {m: raw for m, (_, raw) in per.items()})
            for _, per in sorted(self.meters.items())
            if len(per) == n
        ]
        judge = ClusterJudge(topo)
        fid = judge.judge_between(judged[0][1], judged[-1][1]) if len(judged) >= 2 else None
        finals = self.finals.values()
        switch = {
            tier: {k: sum(f["switch"][tier][k] for f in finals) for k in row}
            for tier, row in next(iter(finals), {"switch": {}})["switch"].items()
        }
        return {
            "seconds": round(seconds, 3),
            # the busiest machine's (machines of one kind: of os.cpu_count() each)
            "cpu_busy_cores": max((f["cpu_busy_cores"] for f in finals), default=None),
            "fidelity": fid,
            "_fidelity": (judge, judged),
            "host_processes": sum(len(hs) for hs in self.by_machine.values()),
            "switch": switch,
            "nic": {k: sum(f["nic"].get(k, 0) for f in finals) for k in NIC_KEYS},
            "machines": {
                f"m{m}": {
                    "hosts": self.by_machine[m],
                    **{k: f[k] for k in ("cpu_busy_cores", "load_avg")},
                }
                for m, f in sorted(self.finals.items())
            },
        }
