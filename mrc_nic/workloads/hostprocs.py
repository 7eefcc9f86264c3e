"""One process per host of a lab, driven line by line: how the workloads run
their ranks and flows, as NCCL and MPI run theirs.

A HostProc is `python -m mrc_nic.workloads.hostprocs NETNS MODULE JSON`: the
child enters the host's network namespace for good (as `mrc-nic exec` does,
so /sys and the lab's pinned maps stay visible; `ip netns exec` would hide
them), sets MRC_NIC_LAB and MRC_NIC_HOST as `mrc-nic exec` does (so
mrc_nic.verbs.Context() opens that host's NIC), and runs MODULE's
host_main(args). The parent talks to it through its stdin (one JSON object
a line) and reads its stdout (the same; a line with "error" ends it).
gather() waits for a line with a key from every process at once, over
epoll, whatever the descriptors' numbers. Every process is ended by its pid
when the parent is done with it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from mrc_nic import resources
from mrc_nic.kernel.fdwait import readable


class HostProc:
    """One host's process, started here and ended here, by pid."""

    def __init__(
        self,
        netns: str,
        module: str,
        args: dict,
        *,
        lab: str | None = None,
        host: str | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        from mrc_nic.verbs.context import ENV_HOST, ENV_LAB

        env = resources.python_path_env()
        if lab and host:
            env.update({ENV_LAB: lab, ENV_HOST: host})
        self.netns = netns
        cmd = [sys.executable, "-m", __name__, netns, module, json.dumps(args)]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            pass_fds=tuple(pass_fds),
        )
        self.buf = b""
        self.lines: list[dict] = []
        self.stderr_tail = ""

    def tell(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise RuntimeError(f"{self.netns}: the host process is gone ({e})") from None

    def feed(self) -> bool:
        """Read what is there; False at end of file."""
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.startswith(b"{"):
                self.lines.append(json.loads(line))
        return True

    def end(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            err = self.proc.stderr.read() if self.proc.poll() is not None else b""
            self.stderr_tail = err.decode(errors="replace").strip()[-500:]
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()


def gather(procs: Sequence[HostProc], key: str, deadline: float, value: Any = None) -> list[dict]:
    """The next line with `key` (and, if given, that key's `value`) from every
    process (in order), by `deadline` (TimeoutError), or RuntimeError when one
    reports an error or ends. Other lines stay for a later gather."""
    got: dict[int, dict] = {}
    while len(got) < len(procs):
        for i, p in enumerate(procs):
            if i in got:
                continue
            for j, line in enumerate(p.lines):  # lines with other keys wait for their gather
                if "error" in line:
                    raise RuntimeError(f"{p.netns}: {line['error']}")
                if key in line and (value is None or line[key] == value):
                    got[i] = p.lines.pop(j)
                    break
        if len(got) == len(procs):
            break
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [procs[i].netns for i in range(len(procs)) if i not in got]
            raise TimeoutError(f"no {key!r} from {len(missing)} host(s) in time")
        fds = {procs[i].proc.stdout.fileno(): procs[i] for i in range(len(procs)) if i not in got}
        for fd in readable(fds, min(left, 1.0)):
            if not fds[fd].feed() and not fds[fd].lines:
                raise RuntimeError(f"{fds[fd].netns}: the host process ended")
    return [got[i] for i in range(len(procs))]


def end_all(procs: Sequence[HostProc]) -> dict[str, str]:
    """End every process (by pid); the stderr tails of those that left one."""
    for p in procs:
        p.end()
    return {p.netns: p.stderr_tail for p in procs if p.stderr_tail}


# ---- the child's side ------------------------------------------------------------------------
def say(message: dict) -> None:
    """One line to the parent."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def hear() -> dict:
    """The parent's next line (EOFError when it closed our stdin)."""
    line = sys.stdin.readline()
    if not line:
        raise EOFError("the parent closed stdin")
    return json.loads(line)


def _main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m mrc_nic.workloads.hostprocs NETNS MODULE JSON (HostProc's)")
        return 2
    netns_name, module, args = argv
    try:
        from mrc_nic.kernel import netns

        netns.enter_for_good(netns_name)
        main: Any = importlib.import_module(module).host_main
        main(json.loads(args))
    except BaseException as e:  # one line for the parent
        say({"error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
