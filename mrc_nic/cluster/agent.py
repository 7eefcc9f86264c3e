"""The agent: one per machine and lab, a Ray actor running as root there.

It builds and removes its machine's shard with the same code as a local lab
(fabric.testbed, fabric.builder: same namespaces, veths, TBFs, BPF programs),
and runs the CLI's commands on its machine for the CLI on another one. It
keeps nothing in memory but the processes of a run in progress that another
machine talks to (part_start: a scenario's part), which end with that run
or at EOF when the agent dies: the shard's record is the machine's lab state
(lab.state, with its `cluster` part), so a restarted agent picks up where
the last one was, and `mrc-nic down -l LAB` run on the machine itself works.
Ray wraps this class (machines.agent_class); it imports no Ray itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time

from mrc_nic.errors import MrcNicError

RUN_TIMEOUT_S = 600.0
PROBE_TIMEOUT_S = 120.0
# A part's parent says it is alive every few seconds (machines.Parts); a part
# not heard of for this long lost its parent (a CLI killed with -9) and ends.
PART_ORPHAN_S = 30.0


class ShardError(MrcNicError, RuntimeError):
    """Building or removing this machine's shard failed; the message says why."""


class UnderlayError(MrcNicError, RuntimeError):
    """The machine's underlay cannot carry the lab's cross-machine links."""


class Agent:
    def __init__(self, lab: str) -> None:
        self.lab = lab
        # Parts of a run that spans machines (part_start): they live as long
        # as that run (or until their parent is silent for PART_ORPHAN_S), and
        # end at EOF on stdin when this agent dies.
        self._parts: dict[int, _Part] = {}
        self._parts_lock = threading.Lock()  # the reaper thread ends parts too
        self._reaper: threading.Thread | None = None

    def info(self) -> dict:
        """Who and where: for status, and to check the actor runs where placed."""
        from mrc_nic.kernel import pins
        from mrc_nic.lab import state

        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "netns": os.readlink("/proc/self/ns/net"),
            "run_dir": str(state.RUN_DIR),
            "pin_root": str(pins.PIN_ROOT),
        }

    def up(self, topology_file: str, raw: dict, shard: dict, mtu: int) -> dict:
        """Clear what an earlier run of this lab left on this machine, then
        build this machine's shard (cluster.shard, in a process of its own).
        Returns the bring-up report and what was cleared."""
        request = {"topology_file": topology_file, "raw": raw, "shard": shard, "mtu": mtu}
        return self._shard("up", request)

    def down(self, nodes: list[str]) -> list[str]:
        """Remove this machine's shard: its record's and these nodes' namespaces."""
        return self._shard("clear", {"nodes": nodes})

    def probe(self, stats: bool = True, ev_detail: bool = False, meter: bool = True) -> dict:
        """This machine's stats snapshot and fidelity sample (cluster.probe)."""
        request = {"stats": stats, "ev_detail": ev_detail, "meter": meter}
        return self._module("probe", {"lab": self.lab, **request}, PROBE_TIMEOUT_S)

    def _shard(self, op: str, request: dict) -> object:
        return self._module("shard", {"op": op, "lab": self.lab, **request}, RUN_TIMEOUT_S)

    def _module(self, name: str, request: dict, timeout: float) -> object:
        """`python -m mrc_nic.cluster.NAME` fed `request`: its one JSON line's "ok"."""
        op = request.get("op", name)
        body = json.dumps(request)
        done = subprocess.run(
            [sys.executable, "-m", f"mrc_nic.cluster.{name}"],
            input=body,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise ShardError(f"{op} of the shard failed: {done.stderr.strip()[-500:]}")
        reply = json.loads(lines[-1])
        if "error" in reply:
            raise ShardError(reply["error"])
        return reply["ok"]

    def part_start(self, module: str, args: dict) -> int:
        """Start `python -m MODULE ARGS` (ARGS as JSON) on this machine, to be
        talked to one JSON line at a time (part_tell, part_read); its pid."""
        part = _Part(module, args)
        with self._parts_lock:
            self._parts[part.proc.pid] = part
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap_orphans, daemon=True)
                self._reaper.start()
        return part.proc.pid

    def part_tell(self, pid: int, message: dict) -> None:
        self._part(pid).tell(message)

    def part_read(self, pid: int, wait: float) -> tuple[list[dict], bool]:
        """What the part said, waiting up to `wait` s for a first line; and
        whether it may say more (False: it closed its stdout)."""
        return self._part(pid).read(wait)

    def part_alive(self, pids: list[int]) -> list[int]:
        """The parent still runs: these parts are not orphans. Which of them
        this agent no longer has (ended as orphans, or never started)."""
        with self._parts_lock:
            for pid in pids:
                if pid in self._parts:
                    self._parts[pid].heard()
            return [pid for pid in pids if pid not in self._parts]

    def part_end(self, pid: int) -> str:
        """End the part (by its pid) if it still runs; the tail of its stderr."""
        with self._parts_lock:
            part = self._parts.pop(pid, None)
        return part.end() if part is not None else ""

    def _part(self, pid: int) -> _Part:
        with self._parts_lock:
            part = self._parts.get(pid)
        if part is None:
            raise ShardError(
                f"no part {pid} here: it ended (its parent was silent for "
                f"{PART_ORPHAN_S:.0f} s) or never started"
            )
        part.heard()
        return part

    def _reap_orphans(self, every_s: float = 1.0) -> None:
        """End the parts whose parent has not been heard of for PART_ORPHAN_S."""
        while True:
            time.sleep(every_s)
            with self._parts_lock:
                orphans = [p for pid, p in self._parts.items() if p.silent_s() > PART_ORPHAN_S]
                for part in orphans:
                    del self._parts[part.proc.pid]
            for part in orphans:
                tail = part.end()
                print(
                    f"part {part.proc.pid}: its parent was silent for "
                    f"{PART_ORPHAN_S:.0f} s; ended. {tail}",
                    file=sys.stderr,
                )

    def run(self, argv: list[str], timeout: float = RUN_TIMEOUT_S) -> tuple[int, str, str]:
        """`mrc-nic ARGV` on this machine: (exit status, stdout, stderr)."""
        code = "from mrc_nic.cli import main; main()"
        from mrc_nic.cluster.route import AGENT_ENV

        env = dict(os.environ, COLUMNS="200", NO_COLOR="1", MRC_NIC_LAB=self.lab)
        env[AGENT_ENV] = "1"  # this machine's shard, not the cluster lab again
        env.pop("RAY_ADDRESS", None)  # not a cluster command: this machine's shard
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, *argv],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            return 124, e.stdout or "", f"mrc-nic {' '.join(argv)}: no end after {timeout:g} s"
        return done.returncode, done.stdout, done.stderr


def check_underlay(address: str, mtu: int) -> None:
    """The device holding this machine's underlay address must carry a full
    lab frame in VXLAN: its MTU at least the lab's plus the 50 bytes of VXLAN
    over IPv4, or every full MRC packet would be fragmented or dropped."""
    from mrc_nic.kernel import netns
    from mrc_nic.lab.topology import VXLAN_OVERHEAD

    with netns.iproute_here() as ipr:
        found = [a["index"] for a in ipr.get_addr(family=socket.AF_INET, address=address)]
        if not found:
            raise UnderlayError(
                f"no interface of this machine holds the underlay address {address} "
                "(the address Ray knows this node by)"
            )
        (link,) = ipr.get_links(found[0])
        have = link.get_attr("IFLA_MTU")
        name = link.get_attr("IFLA_IFNAME")
    if have < mtu + VXLAN_OVERHEAD:
        raise UnderlayError(
            f"underlay {name} ({address}) has MTU {have}: a lab MTU of {mtu} needs at least "
            f"{mtu + VXLAN_OVERHEAD} (VXLAN adds {VXLAN_OVERHEAD} bytes); raise it with "
            f"`ip link set {name} mtu {mtu + VXLAN_OVERHEAD}` or lower [links] mtu"
        )


class _Part:
    """A process of a run that spans machines, its stdout read by a thread
    into a queue (a Ray call must not block on a pipe), its stderr into a
    file (a full pipe would stop it)."""

    def __init__(self, module: str, args: dict) -> None:
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by end(), after the run)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()
        self.closed = False
        self._heard = time.monotonic()
        threading.Thread(target=self._pump, daemon=True).start()

    def heard(self) -> None:
        """Its parent called (a tell, a read, a keep-alive)."""
        self._heard = time.monotonic()

    def silent_s(self) -> float:
        return time.monotonic() - self._heard

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            if raw.startswith(b"{"):
                self.lines.put(json.loads(raw))
        self.lines.put(None)  # end of its output

    def tell(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, wait: float) -> tuple[list[dict], bool]:
        out: list[dict] = []
        try:
            item = self.lines.get(timeout=wait)
            while True:
                if item is None:
                    self.closed = True
                    break
                out.append(item)
                item = self.lines.get_nowait()
        except queue.Empty:
            pass
        return out, not self.closed

    def end(self) -> str:
        """EOF on its stdin first: a part then ends its own children (a
        scenario's host processes); killed if it has not ended 10 s later."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace").strip()[-500:]
        self.err.close()
        return tail
