"""One machine's host processes of a run that spans machines, relayed to its parent.

A run whose processes are one per host (a ring's ranks:
workloads.collective_ranks; a WRITE's two ends: workloads.splitwrite), on a
cluster lab, has each machine's agent start this part (`python -m
mrc_nic.workloads.host_part JSON`, Agent.part_start), JSON being {"lab",
"module", "hosts": {HOST: args}, "clock_keys": [...]}. It starts each of its
hosts' processes (hostprocs.HostProc: MODULE's host_main(args) in the host's
namespace, with its NIC) and relays, one JSON object a line:

- to the parent (stdout, read by the agent): {"host": H, "line": {...}} for
  each line a process says, {"host": H, "gone": true} when it ends;
- from the parent (stdin): {"host": H, "tell": {...}}, to that process.

Times: the fields named in clock_keys are CLOCK_MONOTONIC nanoseconds in a
host process (a WRITE's completion time, a step's deadline), which means
nothing on another machine; this part turns them into wall-clock
nanoseconds on the way out and back on the way in (every machine's wall
clock synchronised, as a cluster's are; one box shares one).

The parent closing stdin ends every process; so does the end of them all.
The processes' stderr tails go to this part's stderr.
"""

from __future__ import annotations

import json
import os
import sys

from mrc_nic.kernel.clocks import mono_to_wall, wall_to_mono
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab.state import open_lab
from mrc_nic.workloads.hostprocs import HostProc, say


class HostPart:
    def __init__(self, spec: dict) -> None:
        lab, self.module = spec["lab"], spec["module"]
        self.keys = list(spec.get("clock_keys", ()))
        _, topo = open_lab(lab)
        self.procs: dict[str, HostProc] = {}
        try:
            for host, args in spec["hosts"].items():
                self.procs[host] = HostProc(topo.netns(host), self.module, args, lab=lab, host=host)
        except BaseException:
            self.end()
            raise
        self.by_fd = {p.proc.stdout.fileno(): h for h, p in self.procs.items()}
        self.stdin = b""

    def relay(self) -> None:
        """Relay lines both ways until the parent or every process is done."""
        with Waiter([0, *self.by_fd]) as waiter:
            while self.by_fd:
                for fd in waiter.wait(None):
                    if fd == 0:
                        if not self._from_parent():
                            return
                    elif fd in self.by_fd and not self._from_host(fd):
                        waiter.remove(fd)

    def _from_parent(self) -> bool:
        chunk = os.read(0, 65536)
        if not chunk:
            return False
        self.stdin += chunk
        while b"\n" in self.stdin:
            raw, self.stdin = self.stdin.split(b"\n", 1)
            if raw.strip():
                msg = json.loads(raw)
                tell = wall_to_mono(msg["tell"], self.keys)
                try:
                    self.procs[msg["host"]].tell(tell)
                except RuntimeError as e:  # it ended: its "gone" is on its way
                    say({"host": msg["host"], "line": {"error": str(e)}})
        return True

    def _from_host(self, fd: int) -> bool:
        """Relay what the host said; False once its process has ended."""
        host = self.by_fd[fd]
        proc = self.procs[host]
        alive = proc.feed()
        for line in proc.lines:
            say({"host": host, "line": mono_to_wall(line, self.keys)})
        proc.lines.clear()
        if not alive:
            del self.by_fd[fd]
            say({"host": host, "gone": True})
        return alive

    def end(self) -> None:
        for host, proc in self.procs.items():
            proc.end()
            if proc.stderr_tail:
                print(f"{host}: {proc.stderr_tail}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mrc_nic.workloads.host_part JSON (Agent.part_start's)")
        return 2
    spec = json.loads(argv[0])
    try:
        part = HostPart(spec)
    except Exception as e:  # noqa: BLE001 (one line for the parent)
        say({"error": f"{type(e).__name__}: {e}"})
        return 1
    try:
        part.relay()
    finally:
        part.end()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
