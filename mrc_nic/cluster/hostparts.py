"""Host processes on a cluster lab's machines, driven from one parent.

A run of one process per host (a ring's ranks, a WRITE's two ends) is, on a
local lab, HostProcs of this machine (workloads.hostprocs) that the parent
tells lines to and gathers lines from. RemoteHosts is the same on a cluster
lab: each machine's agent starts one part (workloads.host_part, named by the
caller: this package sits below the workloads) holding that machine's hosts'
processes, and the lines go through the agents (machines.Parts).

Times in the fields named clock_keys travel between machines as wall-clock
nanoseconds (host_part turns its processes' CLOCK_MONOTONIC into them and
back); this side turns them into and out of this process's CLOCK_MONOTONIC,
so that the parent reads and gives times as it does with local processes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mrc_nic.cluster import machines
from mrc_nic.kernel.clocks import mono_to_wall, wall_to_mono


class RemoteHosts:
    """One process per host, on the host's machine: tell() and gather() as
    hostprocs' HostProc and gather(), by host name."""

    def __init__(
        self,
        handles: dict[int, Any],
        part_module: str,
        lab: str,
        module: str,
        host_args: dict[str, dict],
        machine_of: dict[str, int],
        clock_keys: Sequence[str] = (),
    ) -> None:
        self.machine_of = {h: machine_of[h] for h in host_args}
        self.keys = list(clock_keys)
        specs: dict[int, dict] = {}
        for h, args in host_args.items():
            spec = {"lab": lab, "module": module, "hosts": {}, "clock_keys": self.keys}
            specs.setdefault(self.machine_of[h], spec)["hosts"][h] = args
        self.parts = machines.Parts({m: handles[m] for m in specs}, part_module, specs)
        self.lines: dict[str, list[dict]] = {h: [] for h in host_args}
        self.gone: set[str] = set()
        self.failed: dict[int, str] = {}  # machine -> why its part stopped

    def tell(self, host: str, message: dict) -> None:
        tell = mono_to_wall(message, self.keys)
        self.parts.tell(self.machine_of[host], {"host": host, "tell": tell})

    def _pump(self, timeout: float) -> None:
        for m, line in self.parts.read(timeout):
            if "error" in line:
                self.failed[m] = line["error"]
            elif line.get("ended"):
                self.failed.setdefault(m, f"m{m}: its part ended")
            elif line.get("gone"):
                self.gone.add(line["host"])
            elif "line" in line:
                got = wall_to_mono(line["line"], self.keys)
                self.lines[line["host"]].append(got)

    def gather(
        self, hosts: Sequence[str], key: str, deadline: float, value: Any = None
    ) -> list[dict]:
        """The next line with `key` (and, if given, that key's `value`) from
        each host (in order), by `deadline` (time.monotonic(): TimeoutError),
        or RuntimeError when one reports an error or ends, or its machine's
        part fails. Other lines stay for a later gather."""
        got: dict[str, dict] = {}
        while True:
            for h in hosts:
                if h in got:
                    continue
                for j, line in enumerate(self.lines[h]):
                    if "error" in line:
                        raise RuntimeError(f"{h}: {line['error']}")
                    if key in line and (value is None or line[key] == value):
                        got[h] = self.lines[h].pop(j)
                        break
                else:
                    if h in self.gone:
                        raise RuntimeError(f"{h}: the host process ended")
                    if self.machine_of[h] in self.failed:
                        raise RuntimeError(f"{h}: {self.failed[self.machine_of[h]]}")
            if len(got) == len(hosts):
                return [got[h] for h in hosts]
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [h for h in hosts if h not in got]
                raise TimeoutError(f"no {key!r} from {len(missing)} host(s) in time")
            self._pump(min(left, 1.0))

    @property
    def pids(self) -> list[int]:
        """The machines' parts' pids (each on its own machine)."""
        return list(self.parts.pids.values())

    def settle(self, deadline: float) -> None:
        """Wait, until deadline (time.monotonic()), for every process to end."""
        while len(self.gone) < len(self.lines) and time.monotonic() < deadline:
            if set(self.parts.handles) <= set(self.failed):
                return
            self._pump(max(0.0, min(1.0, deadline - time.monotonic())))

    def end(self) -> dict[str, str]:
        """End every machine's part (its processes with it); {m{N}: the tail of its stderr}."""
        return {f"m{m}": tail for m, tail in self.parts.end().items()}
