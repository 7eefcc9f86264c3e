"""The cluster through Ray: connect, list machines, start and reach agents.

A machine is a live Ray node; its underlay address is the address Ray knows
it by (`ray start --node-ip-address`). Each lab has one agent per machine it
uses: a detached, named actor (mrc-nic-<lab>-m<i>, namespace mrc-nic) pinned
to its node by node affinity, with no CPU reserved (it only configures). It
is not restarted by Ray: an agent or machine that dies stays reported dead
(status, events) until the lab is taken down and brought up again.
"""

from __future__ import annotations

import contextlib
import ipaddress
import sys
import threading
from collections.abc import Callable
from typing import Any

from mrc_nic.errors import MrcNicError

NAMESPACE = "mrc-nic"
CALL_TIMEOUT_S = 60.0  # a status, a fault: well under a second when the machine is there
UP_TIMEOUT_S = 600.0  # compiles two BPF programs and builds a shard


class ClusterError(MrcNicError, RuntimeError):
    """The cluster cannot be reached or used; the message says how to fix it."""


def connect(address: str) -> None:
    """Join the Ray cluster at `address` (host:port of the head's GCS on a
    node of the cluster, or ray://host:10001 from elsewhere)."""
    try:
        import ray
    except ImportError:
        raise ClusterError(
            "a cluster lab needs Ray: pip install 'mrc-nic[cluster]' (scripts/setup does)"
        ) from None
    if ray.is_initialized():
        return
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level="WARNING",
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"cannot join the Ray cluster at {address}: {e}") from None


def machines() -> list[dict]:
    """Live Ray nodes, ordered by underlay address: [{address, node_id}]."""
    import ray

    alive = [
        {"address": n["NodeManagerAddress"], "node_id": n["NodeID"]}
        for n in ray.nodes()
        if n.get("Alive")
    ]
    return sorted(alive, key=lambda m: ipaddress.ip_address(m["address"]))


def actor_name(lab: str, machine: int) -> str:
    return f"mrc-nic-{lab}-m{machine}"


def start_agent(lab: str, machine: int, node_id: str) -> Any:
    """The agent of `lab` on machine `machine`, started on Ray node `node_id`
    (an agent already there under that name is killed first: a leftover)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from mrc_nic.cluster.agent import Agent

    kill_agent(lab, machine)
    remote = ray.remote(Agent).options(
        name=actor_name(lab, machine),
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        max_restarts=0,
        max_concurrency=4,  # a status while a long write runs
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )
    return remote.remote(lab)


def agent(lab: str, machine: int) -> Any | None:
    """The running agent's handle, or None (never started, dead, or its machine gone)."""
    import ray

    try:
        return ray.get_actor(actor_name(lab, machine), namespace=NAMESPACE)
    except ValueError:
        return None


def kill_agent(lab: str, machine: int) -> None:
    import ray

    handle = agent(lab, machine)
    if handle is not None:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)


def call(handle: Any, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
    """One agent call; ClusterError naming why when the agent cannot answer."""
    results = call_many([(handle, method, args)], timeout)
    ok, value = results[0]
    if not ok:
        raise ClusterError(value)
    return value


def call_many(
    calls: list[tuple[Any, str, tuple]], timeout: float = CALL_TIMEOUT_S
) -> list[tuple[bool, Any]]:
    """Several agent calls at once (each machine works in parallel): per call,
    (True, result) or (False, why it failed, one line)."""
    import ray

    refs: list[Any] = []
    for handle, method, args in calls:
        refs.append(None if handle is None else getattr(handle, method).remote(*args))
    out: list[tuple[bool, Any]] = []
    for ref in refs:
        out.append(_get(ray, ref, timeout))
    return out


def _get(ray: Any, ref: Any, timeout: float) -> tuple[bool, Any]:
    if ref is None:
        return False, "no agent (it died, or its machine left the cluster)"
    try:
        return True, ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        return False, f"no answer within {timeout:g} s"
    except ray.exceptions.RayActorError:
        return False, "the agent died (or its machine left the cluster)"
    except ray.exceptions.RayTaskError as e:
        cause = e.cause if isinstance(e.cause, Exception) else e
        if isinstance(cause, MrcNicError):
            return False, str(cause)
        return False, f"{type(cause).__name__}: {str(cause).splitlines()[-1] if str(cause) else ''}"


class Parts:
    """One process per machine, each started by that machine's agent
    (Agent.part_start) and talked to one JSON line at a time: a run whose
    processes span machines and answer one parent (a scenario's flows).
    A read waits on every machine at once (ray.wait over one pending
    part_read per machine)."""

    READ_WAIT_S = 0.5  # a part_read's longest wait for a first line
    KEEPALIVE_S = 5.0  # agent.PART_ORPHAN_S ends a part its parent stops calling

    def __init__(self, handles: dict[int, Any], module: str, args: dict[int, dict]) -> None:
        self.handles = handles
        self.pids: dict[int, int] = {}
        self._ended = threading.Event()
        started = call_many([(h, "part_start", (module, args[m])) for m, h in handles.items()])
        for m, (ok, value) in zip(handles, started, strict=True):
            if ok:
                self.pids[m] = value
        if len(self.pids) < len(handles):
            self.end()
            why = next(v for ok, v in started if not ok)
            raise ClusterError(f"could not start the machines' parts: {why}")
        self.open = set(handles)
        self._reads: dict[Any, int] = {}  # pending part_read -> machine
        # Reads stop while the parent does other work (a fault, an `ev list`):
        # a thread says the parent lives, and dies with it.
        threading.Thread(target=self._keep_alive, daemon=True).start()

    def _keep_alive(self) -> None:
        while not self._ended.wait(self.KEEPALIVE_S):
            try:
                call_many(
                    [(self.handles[m], "part_alive", ([pid],)) for m, pid in self.pids.items()]
                )
            except Exception as e:  # noqa: BLE001 (a missed keep-alive: the next one may pass)
                print(f"mrc-nic: a keep-alive of the machines' parts failed: {e}", file=sys.stderr)

    def tell(self, m: int, message: dict) -> None:
        call(self.handles[m], "part_tell", self.pids[m], message)

    def read(self, timeout: float) -> list[tuple[int, dict]]:
        """(machine, line) of what came from any machine within `timeout`;
        (m, {"ended": True}) once m's part has said all, (m, {"error": ...})
        if its agent could not be asked."""
        import ray

        waiting = set(self._reads.values())
        for m in self.open - waiting:
            ref = self.handles[m].part_read.remote(self.pids[m], self.READ_WAIT_S)
            self._reads[ref] = m
        if not self._reads:
            return []
        refs = list(self._reads)
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:  # and whatever else is in by now
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        out: list[tuple[int, dict]] = []
        for ref in ready:
            m = self._reads.pop(ref)
            ok, value = _get(ray, ref, CALL_TIMEOUT_S)
            if not ok:
                self.open.discard(m)
                out.append((m, {"error": f"m{m}: {value}"}))
                continue
            lines, more = value
            out += [(m, line) for line in lines]
            if not more:
                self.open.discard(m)
                out.append((m, {"ended": True}))
        return out

    def end(self) -> dict[int, str]:
        """End every part still running; {machine: the tail of its stderr}."""
        self._ended.set()
        ms = list(self.pids)
        done = call_many([(self.handles[m], "part_end", (self.pids[m],)) for m in ms])
        return {m: value for m, (ok, value) in zip(ms, done, strict=True) if ok and value}


def each(lab: str, count: int) -> list[Any | None]:
    """The handles of a lab's agents, machine by machine (None: not reachable)."""
    return [agent(lab, m) for m in range(count)]


Runner = Callable[[int, list[str]], tuple[int, str, str]]
