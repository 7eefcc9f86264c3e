"""The CLI on a cluster lab (mrc_nic.cluster): each command reaches the agents owning its target.

`up --cluster` places and builds; `down` removes what it can reach and says
what it could not; `fail`/`heal` go to the machines owning the target's
links, each applying its own ends, with one cluster id over the machines'
ids; `events` merges the machines' logs with the cluster's own events; `exec
HOST` runs on the host's machine; `write SRC DST` runs there when both hosts
share a machine, else as two processes, one per machine (WriteEnds).
`status` and `stats` (merged snapshots): cluster_observe.py; `chaos`:
cluster_chaos.py; `scenario`: cluster_scenario.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from mrc_nic.cli import output
from mrc_nic.cluster import machines, placement
from mrc_nic.cluster.record import ClusterRecord
from mrc_nic.errors import MrcNicError
from mrc_nic.lab import topology

ROUTED = (
    "status",
    "stats",
    "events",
    "fail",
    "heal",
    "write",
    "exec",
    "chaos",
    "scenario",
    "down",
)


class ClusterLabError(MrcNicError, RuntimeError):
    """A command cannot run on this cluster lab as asked."""


# ---- up / down ---------------------------------------------------------------------
def up(topo: topology.Topology, address: str, fmt: str, reuse: bool = False) -> None:
    from mrc_nic.fabric import preflight

    preflight.require_root()
    old = ClusterRecord.load(topo.lab)
    if reuse and old is not None and old.phase == "up" and old.topology == topo.raw:
        _restart_agents(old)
        return
    if old is not None and old.phase == "up":
        raise ClusterLabError(
            f"lab {topo.lab!r} is already up on the cluster at {old.address}; "
            f"take it down first with: mrc-nic down -l {topo.lab}"
        )
    machines.connect(address)
    nodes = machines.machines()
    plan = placement.place(topo, [m["address"] for m in nodes])
    rec = ClusterRecord(
        lab=topo.lab,
        address=address,
        topology_file=str(topo.path.resolve()),
        topology=topo.raw,
        placement=plan.as_dict(),
    )
    rec.save()  # before anything exists: down finds the agents from it
    if fmt == "table":
        output.info(
            f"bringing up lab [bold]{topo.lab}[/] over {len(plan.machines)} machines "
            f"({len(topo.nodes)} namespaces, {len(topo.links)} links, "
            f"{len(plan.vnis)} of them VXLAN, MTU {topo.mtu} + 50 on the underlay):"
        )
        for line in placement.describe(topo, plan):
            output.plain(f"  {line}")
    started = time.monotonic()
    handles = [
        machines.start_agent(topo.lab, m, nodes[m]["node_id"]) for m in range(len(plan.machines))
    ]
    calls = [
        (h, "up", (rec.topology_file, topo.raw, plan.shard_record(topo, m), topo.mtu))
        for m, h in enumerate(handles)
    ]
    results = machines.call_many(calls, timeout=machines.UP_TIMEOUT_S)
    failed = [(m, why) for m, (ok, why) in enumerate(results) if not ok]
    if failed:
        _, missed = _down(rec, quiet=True)
        if not missed:  # else kept: a later down finds the machines it could not reach
            rec.forget()
        m, why = failed[0]
        raise ClusterLabError(f"lab {topo.lab}: machine m{m} ({plan.machines[m]}): {why}")
    rec.phase = "up"
    rec.bringup_seconds = round(time.monotonic() - started, 3)
    rec.save()
    cleared = sum(len(r["cleared"]) for _, r in results)
    report = {
        "lab": topo.lab,
        "seconds": rec.bringup_seconds,
        "namespaces": len(topo.nodes),
        "links": len(topo.links),
        "vxlan_links": len(plan.vnis),
        "machines": plan.machines,
        "placement": plan.node_machine,
        "leftovers_cleared": cleared,
    }
    if fmt == "json":
        output.emit_json(report)
        return
    if cleared:
        output.info(f"cleared {cleared} leftover namespaces of an earlier run")
    output.success(
        f"lab {topo.lab} is up in {rec.bringup_seconds:.2f}s over {len(plan.machines)} machines "
        f"({len(topo.nodes)} namespaces, {len(topo.links)} links, {len(plan.vnis)} VXLAN)"
    )


def _restart_agents(rec: ClusterRecord) -> None:
    """--reuse on a cluster lab that is up: a new agent for each machine
    whose agent died while its Ray node lives (an agent keeps nothing in
    memory: the new one takes over its machine's shard from its lab state)."""
    machines.connect(rec.address)
    plan = placement.Placement.from_dict(rec.placement)
    nodes = {m["address"]: m["node_id"] for m in machines.machines()}
    restarted, missing = [], []
    for m, handle in enumerate(machines.each(rec.lab, len(plan.machines))):
        if handle is not None and machines.call_many([(handle, "info", ())], 20.0)[0][0]:
            continue
        address = plan.machines[m]
        if address not in nodes:
            missing.append(f"m{m} ({address})")
            continue
        machines.start_agent(rec.lab, m, nodes[address])
        restarted.append(f"m{m}")
        rec.note("agent-restarted", m, f"m{m} ({address}): a new agent took over")
    rec.save()
    output.info(f"lab {rec.lab} is already up on the cluster at {rec.address}; reusing it")
    if restarted:
        output.info(f"restarted the agent of {', '.join(restarted)}")
    if missing:
        raise ClusterLabError(
            f"no Ray node at {', '.join(missing)}: start it again (ray start --address ...) "
            "and repeat, or take the lab down"
        )


def _down(rec: ClusterRecord, quiet: bool = False) -> tuple[int, list[str]]:
    """Down on every machine of the lab; (namespaces removed, machines not reached)."""
    plan = placement.Placement.from_dict(rec.placement)
    handles = machines.each(rec.lab, len(plan.machines))
    calls = [(h, "down", (plan.nodes_of(m),)) for m, h in enumerate(handles)]
    removed, missed = 0, []
    for m, (ok, value) in enumerate(machines.call_many(calls)):
        if ok:
            removed += len(value)
            machines.kill_agent(rec.lab, m)
        else:
            missed.append(f"m{m} ({plan.machines[m]}): {value}")
    if missed and not quiet:
        for line in missed:
            rec.note("down-incomplete", None, line)
    return removed, missed


def down(lab: str) -> None:
    rec = load(lab)
    machines.connect(rec.address)
    removed, missed = _down(rec)
    if missed:
        rec.phase = "down-incomplete"
        rec.save()
        raise ClusterLabError(
            f"lab {lab}: removed {removed} namespaces, but could not reach "
            f"{'; '.join(missed)}; run `mrc-nic down -l {lab}` on that machine, "
            "or bring the lab up again once it is back (up clears leftovers)"
        )
    rec.forget()
    output.success(f"lab {lab} is down ({removed} namespaces removed on every machine)")


# ---- routing -----------------------------------------------------------------------
def load(lab: str) -> ClusterRecord:
    rec = ClusterRecord.load(lab)
    if rec is None:
        raise ClusterLabError(f"lab {lab!r} is not a cluster lab known here")
    return rec


def topo_of(rec: ClusterRecord) -> topology.Topology:
    return topology.from_dict(Path(rec.topology_file), rec.topology, rec.lab)


def run(lab: str, argv: list[str]) -> int:
    """Run the command argv (its name first, -l taken out) on cluster lab `lab`."""
    cmd, args = argv[0], argv[1:]
    if cmd not in ROUTED:
        raise ClusterLabError(
            f"`mrc-nic {cmd}` does not run on a cluster lab yet (these do: "
            f"{', '.join(ROUTED)}); run it on one machine's part with "
            f"`mrc-nic exec HOST -- mrc-nic {cmd} ...`"
        )
    rec = load(lab)
    if cmd == "down":
        down(lab)
        return 0
    machines.connect(rec.address)
    from mrc_nic.cli import cluster_chaos, cluster_observe, cluster_scenario

    return {
        "chaos": cluster_chaos.chaos,
        "scenario": cluster_scenario.scenario,
        "status": cluster_observe.status,
        "stats": cluster_observe.stats,
        "events": _events,
        "fail": _fail,
        "heal": _heal,
        "write": _write,
        "exec": _exec,
    }[cmd](rec, args)


def agents(rec: ClusterRecord) -> tuple[placement.Placement, list]:
    plan = placement.Placement.from_dict(rec.placement)
    return plan, machines.each(rec.lab, len(plan.machines))


def run_on(
    rec: ClusterRecord, targets: list[int], argv: list[str], timeout: float = 600.0
) -> dict[int, tuple[bool, object]]:
    """mrc-nic ARGV on these machines at once: {machine: (reached, (rc, out, err) | why)}."""
    return run_each(rec, {m: argv for m in targets}, timeout)


def run_each(
    rec: ClusterRecord, jobs: dict[int, list[str]], timeout: float = 600.0
) -> dict[int, tuple[bool, object]]:
    """Each machine's own `mrc-nic ARGV`, all at once; an agent that does not
    answer is noted as a cluster event."""
    _, handles = agents(rec)
    calls = [(handles[m], "run", (argv, timeout)) for m, argv in jobs.items()]
    results = machines.call_many(calls, timeout=timeout + 30)
    out = dict(zip(jobs, results, strict=True))
    note_lost(rec, {m: why for m, (ok, why) in out.items() if not ok})
    return out


def note_lost(rec: ClusterRecord, lost: dict[int, object]) -> None:
    """A cluster event for each machine whose agent did not answer ({machine: why})."""
    if not lost:
        return
    plan = placement.Placement.from_dict(rec.placement)
    rec = load(rec.lab)
    for m, why in lost.items():
        rec.note("agent-lost", m, f"m{m} ({plan.machines[m]}): {why}")
    rec.save()


def machine_of_host(rec: ClusterRecord, host: str) -> int:
    plan = placement.Placement.from_dict(rec.placement)
    if host not in plan.node_machine or host.startswith("p"):
        hosts = sorted(n for n in plan.node_machine if not n.startswith("p"))
        raise click.UsageError(
            f"{host!r} is not a host of lab {rec.lab} (hosts: {', '.join(hosts)})"
        )
    return plan.node_machine[host]


def relay_on(rec: ClusterRecord, m: int, argv: list[str]) -> int:
    """`mrc-nic ARGV` on machine m, its output printed here; its exit status."""
    return _relay(run_on(rec, [m], argv)[m], m)


def _relay(result: tuple[bool, object], machine: int, tag: bool = False) -> int:
    """Print what a machine's command printed (tag: each line after its machine)."""
    ok, value = result
    if not ok:
        output.error(f"m{machine}: {value}")
        return 1
    rc, out, err = value
    if tag:
        out = "".join(f"m{machine}: {line}" for line in out.splitlines(keepends=True))
    click.echo(out, nl=False)
    if err:
        click.echo(err, nl=False, err=True)
    return rc


def format_of(args: list[str]) -> str:
    for i, a in enumerate(args):
        if a == "--format" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--format="):
            return a.split("=", 1)[1]
    return "table"


# ---- events ------------------------------------------------------------------------
def _events(rec: ClusterRecord, args: list[str]) -> int:
    """Each machine's events (as its `events` prints them), then the cluster's."""
    plan, _ = agents(rec)
    results = run_on(rec, list(range(len(plan.machines))), ["events", *args], 120)
    code = 0
    for m, result in results.items():
        if result[0]:
            output.plain(f"== m{m} ({plan.machines[m]})")
        code = max(code, _relay(result, m))
    rec = load(rec.lab)  # with what this call noted
    output.plain(f"== cluster ({len(rec.events)} events)")
    for ev in rec.events:
        when = time.strftime("%H:%M:%S", time.localtime(ev["time"]))
        output.plain(f"{when} {ev['type']} {ev['text']}")
    return code


# ---- faults --------------------------------------------------------------------------
def _split_target(args: list[str]) -> tuple[list[str], list[str]]:
    words = []
    for i, a in enumerate(args):
        if a.startswith("-"):
            return words, args[i:]
        words.append(a)
    return words, []


def _owners(rec: ClusterRecord, words: list[str]) -> list[int]:
    """The machines a fault on this target goes to: those owning an end of its
    links; for one EV of a send QP (qp QPN ev EV), the QP's host's machine,
    where that host's uplinks are enforced (faults.resolve_ev_target)."""
    from mrc_nic.fabric import faults

    topo = topo_of(rec)
    if words and words[0] == "qp":
        try:
            host = topo.host_of_qpn(int(words[1], 0)) if len(words) > 1 else None
        except ValueError:
            host = None
        if host is None:  # the machines say what is wrong with it
            raise ClusterLabError(
                f"cannot place fault target {' '.join(words)!r}: give 'qp QPN ev EV' with a "
                "QPN of one of the lab's hosts (mrc-nic qp list)"
            )
        return [machine_of_host(rec, host)]
    plan = placement.Placement.from_dict(rec.placement)
    _, links = faults.resolve_target(topo, tuple(words))
    return sorted({m for lk in links for m in plan.machines_of_link(topo, lk.name)})


def apply_fault(
    rec: ClusterRecord, words: list[str], opts: list[str]
) -> tuple[str | None, dict[int, tuple[bool, object]]]:
    """`fail WORDS OPTS` on every machine owning an end of the target's links:
    (the cluster's fault id if any machine applied it, each machine's result)."""
    results = run_on(rec, _owners(rec, words), ["fail", *words, *opts, "--format", "json"])
    parts = {
        str(m): json.loads(value[1])["id"]
        for m, (ok, value) in results.items()
        if ok and value[0] == 0
    }
    if not parts:
        return None, results
    rec = load(rec.lab)
    gid = str(rec.next_fault_id)
    rec.next_fault_id += 1
    rec.faults[gid] = {"target": " ".join(words), "args": opts, "parts": parts}
    rec.save()
    return gid, results


def heal_fault(
    rec: ClusterRecord, gid: str, extra: tuple[str, ...] = ()
) -> dict[int, tuple[bool, object]]:
    """Heal cluster fault `gid` on each machine it has a part on, at once
    (extra: more of `heal`'s options, e.g. --format json)."""
    rec = load(rec.lab)  # as saved: a fault applied since `rec` was read is in it
    fault = rec.faults.get(gid)
    if fault is None:
        raise ClusterLabError(f"no fault #{gid} in force on lab {rec.lab} (see mrc-nic status)")
    results = run_each(rec, {int(m): ["heal", str(i), *extra] for m, i in fault["parts"].items()})
    rec = load(rec.lab)
    rec.faults.pop(gid, None)
    rec.save()
    return results


def _fail(rec: ClusterRecord, args: list[str]) -> int:
    words, opts = _split_target(args)
    gid, results = apply_fault(rec, words, opts)
    code = 0
    for m, result in results.items():
        if not (result[0] and result[1][0] == 0):
            code = max(code, _relay(result, m) or 1)
    if gid is not None:
        parts = load(rec.lab).faults[gid]["parts"]
        where = ", ".join(f"#{i} on m{m}" for m, i in parts.items())
        output.success(f"fault #{gid} on {' '.join(words)} ({where})")
    return code


def _heal(rec: ClusterRecord, args: list[str]) -> int:
    plan = placement.Placement.from_dict(rec.placement)
    words, opts = _split_target(args)
    jobs: dict[int, list[str]] = {}
    healed_ids = []
    if "--all" in opts:
        jobs = {m: ["heal", "--all"] for m in range(len(plan.machines))}
        healed_ids = list(rec.faults)
    elif len(words) == 1 and words[0].lstrip("#").isdigit():
        results = heal_fault(rec, words[0].lstrip("#"))
        return max(_relay(result, m, tag=True) for m, result in results.items())
    else:
        jobs = {m: ["heal", *words] for m in _owners(rec, words)}
        healed_ids = [g for g, f in rec.faults.items() if f["target"] == " ".join(words)]
    code = 0
    for m, argv in jobs.items():
        code = max(code, _relay(run_on(rec, [m], argv)[m], m, tag=True))
    rec = load(rec.lab)
    for gid in healed_ids:
        rec.faults.pop(gid, None)
    rec.save()
    return code


# ---- hosts ---------------------------------------------------------------------------
def _exec(rec: ClusterRecord, args: list[str]) -> int:
    if not args:
        raise click.UsageError("exec needs HOST -- COMMAND")
    return relay_on(rec, machine_of_host(rec, args[0]), ["exec", *args])


def _write(rec: ClusterRecord, args: list[str]) -> int:
    words, opts = _split_target(args)
    if len(words) != 2:
        raise click.UsageError("write needs SRC DST (hosts), e.g. mrc-nic write h0 h1 --size 1G")
    src, dst = words
    ms, md = machine_of_host(rec, src), machine_of_host(rec, dst)
    if ms == md:
        return relay_on(rec, ms, ["write", *args])
    return _split_write(rec, topo_of(rec), src, dst, ms, md, opts)


def _split_write(
    rec: ClusterRecord,
    topo: topology.Topology,
    src: str,
    dst: str,
    ms: int,
    md: int,
    opts: list[str],
) -> int:
    """Both ends at once, through the agents of machines ms (src) and md (dst)."""
    from mrc_nic.workloads.rdma_write import parse_size

    size, verify, fmt, plane = 2**30, False, "table", 0
    it = iter(opts)
    for a in it:
        if a == "--size":
            size = parse_size(next(it, ""))
        elif a == "--verify":
            verify = True
        elif a == "--format":
            fmt = next(it, "table")
        elif a == "--cm-plane":
            plane = int(next(it, "0"))
        else:
            raise click.UsageError(
                f"write between machines takes --size, --verify, --format, --cm-plane; not {a!r}"
            )
    try:
        result = split_write(rec, topo, (src, ms), (dst, md), size, verify, plane)
    except ClusterLabError as e:
        raise click.ClickException(str(e)) from None
    if fmt == "json":
        output.emit_json(result)
    else:
        checked = f", {result['verified_bytes']} bytes verified" if verify else ""
        output.success(
            f"wrote {size} bytes {src} (m{ms}) -> {dst} (m{md}) in {result['seconds']:.3f} s: "
            f"{result['gbps']:.3f} Gbit/s{checked}, {result['errors']} wrong"
        )
    return 1 if result["errors"] else 0


def split_write(
    rec: ClusterRecord,
    topo: topology.Topology,
    src: tuple[str, int],
    dst: tuple[str, int],
    size: int,
    verify: bool,
    plane: int = 0,
) -> dict:
    """A WRITE of `size` bytes between hosts of two machines ((host, machine)
    each): the sender's result; ClusterLabError naming the end that failed."""
    with WriteEnds(rec, topo, src, dst, size, verify=verify, plane=plane) as ends:
        result = ends.write(0)
        ends.close()
    return {"src": src[0], "dst": dst[0], "machines": [src[1], dst[1]], **result, "verify": verify}


class WriteEnds:
    """A WRITE's two ends, one process in each host on its own machine
    (workloads.splitwrite.host_main, run and relayed by each machine's
    workloads.host_part; hostparts.RemoteHosts), connected over TCP on
    `plane`'s addresses and kept open over the transfers asked of them, one
    QP all along. Leaving the block (an error, Ctrl-C) ends both processes."""

    START_S = 90.0  # an end's start: its NIC context, QP and connection
    WRITE_S = 900.0  # one transfer at most

    def __init__(
        self,
        rec: ClusterRecord,
        topo: topology.Topology,
        src: tuple[str, int],
        dst: tuple[str, int],
        size: int,
        *,
        verify: bool = False,
        plane: int = 0,
        ev_count: int | None = None,
    ) -> None:
        from mrc_nic.cluster.hostparts import RemoteHosts
        from mrc_nic.workloads import host_part, splitwrite

        (self.src, ms), (self.dst, md) = src, dst
        end = {"size": size, "port": splitwrite.CM_PORT, "timeout": 60.0, "verify": verify}
        server = str(topo.host_address(topo.nodes[self.dst].index, plane))
        args = {
            self.dst: {**end, "role": "recv"},
            self.src: {**end, "role": "send", "server": server, "ev_count": ev_count},
        }
        _, handles = agents(rec)
        self.ends = RemoteHosts(
            handles, host_part.__name__, rec.lab, splitwrite.__name__, args,
            {self.src: ms, self.dst: md},
        )  # fmt: skip
        try:
            self.qpn: int = self._expect(self.src, "connected", self.START_S)["connected"]
        except BaseException:
            self.ends.end()
            raise

    def _expect(self, host: str, key: str, timeout: float) -> dict:
        try:
            return self.ends.gather([host], key, time.monotonic() + timeout)[0]
        except (TimeoutError, RuntimeError) as e:
            tails = self.ends.end()  # why an end stopped, in its own words
            said = "; ".join(f"{m}: {t.splitlines()[-1]}" for m, t in tails.items() if t)
            why = f"{e} ({said})" if said else str(e)
            raise ClusterLabError(f"write {self.src} -> {self.dst}: {why}") from None

    def write(self, k: int) -> dict:
        """Transfer k: the sender's figures (splitwrite.transfer's)."""
        self.ends.tell(self.src, {"go": k})
        return self._expect(self.src, "written", self.WRITE_S)

    def close(self) -> dict:
        """No more transfers: the receiver's totals (checked_bytes, errors)."""
        self.ends.tell(self.src, {"end": True})
        return self._expect(self.dst, "received", self.START_S)["received"]

    def __enter__(self) -> WriteEnds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ends.end()
