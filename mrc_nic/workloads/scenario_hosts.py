"""A scenario's hosts: one process per host in its namespace, holding its own
ends of the flows (rdma_ends), as the all-reduce's ranks do (collective_ranks).

A host's process opens its host's NIC, makes a SendEnd for every flow it
sends and a RecvEnd for every flow it receives, says their endpoints, connects
them to the peers' that the parent hands back, then on "go" starts each of its
flows at its time (CLOCK_MONOTONIC, which every namespace shares) and reports
each one as it ends, with its result (rdma_write's names). The parent
(scenario.run_flows) samples the receive QPs' counters meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

from mrc_nic import verbs
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab.state import open_lab
from mrc_nic.workloads import hostprocs, rdma_ends, rdma_write


def host_main(args: dict) -> None:
    lab, host = args["lab"], args["host"]
    _, topo = open_lab(lab)
    with verbs.Context(lab, host) as ctx:
        pd = verbs.PD(ctx)
        sends = {f["name"]: rdma_ends.SendEnd(ctx, pd, f["chunk"]) for f in args["sends"]}
        recvs = {f["name"]: rdma_ends.RecvEnd(ctx, pd, f["chunk"]) for f in args["recvs"]}
        hostprocs.say(
            {
                "ready": {
                    "sends": {name: e.endpoint() for name, e in sends.items()},
                    "recvs": {name: e.endpoint() for name, e in recvs.items()},
                }
            }
        )
        order = hostprocs.hear()["connect"]
        opts = rdma_write.QpOptions(**order["opts"])
        for name, end in recvs.items():
            end.connect(order["peers"][name], opts)
        for name, end in sends.items():
            end.connect(order["peers"][name], topo, opts)
        hostprocs.say({"connected": True})
        go = hostprocs.hear()
        if "go" in go:
            _run(ctx, sends, {f["name"]: f for f in args["sends"]}, go)
        hostprocs.hear()  # {"end": true}: every flow of every host is over


def _run(
    ctx: verbs.Context, sends: dict[str, rdma_ends.SendEnd], flows: dict[str, dict], go: dict
) -> None:
    """Start every flow at its time; report each as it ends or at the deadline."""
    deadline = go["deadline_ns"] / 1e9
    waiting = sorted(sends, key=lambda name: go["starts_ns"][name])
    running: dict[str, rdma_ends.SendEnd] = {}
    fds = [ctx.fileno(), *(fd for e in sends.values() for fd in e.fds())]
    with Waiter(fds) as waiter:
        while waiting or running:
            now_ns = time.monotonic_ns()
            while waiting and go["starts_ns"][waiting[0]] <= now_ns:
                name = waiting.pop(0)
                running[name] = end = sends[name]
                end.start(flows[name]["size"], seed=1, imm=False, fill=True)
                hostprocs.say({"started": name, "at_ns": now_ns})
            busy = sum(e.progress() for e in running.values())
            for name in [n for n, e in running.items() if e.finished]:
                _report(running.pop(name), name)
            if busy:
                continue
            now = time.monotonic()
            if now > deadline:
                for name, end in running.items():
                    end.cancel(f"not done after {go['wait']:g} s (wait)")
                    _report(end, name)
                for name in waiting:
                    hostprocs.say({"done": name, "result": None, "error": "never started"})
                return
            ready = waiter.wait(min(0.05, _next_start(waiting, go) - now, deadline - now))
            if ctx.fileno() in ready and ctx.device_fatal():
                why = f"the daemon of {ctx.attr.host} ended during the scenario"
                for name, end in running.items():
                    end.error = end.error or why
                    _report(end, name)
                return


def _next_start(waiting: list[str], go: dict) -> float:
    return go["starts_ns"][waiting[0]] / 1e9 if waiting else float("inf")


def _report(end: rdma_ends.SendEnd, name: str) -> None:
    result: dict[str, Any] = end.result()
    hostprocs.say({"done": name, "result": result, "error": result["error"], "at_ns": _ended(end)})


def _ended(end: rdma_ends.SendEnd) -> int:
    return int((end.ended or time.monotonic()) * 1e9)
