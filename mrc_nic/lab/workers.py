"""A lab's background processes: start them, find them, end them.

Two kinds, both detached from the command that starts them:
- a fault worker (python -m mrc_nic.fabric.fault_worker LAB ID) runs a timed or
  flapping fault;
- a host daemon (python -m mrc_nic.transport.daemon LAB HOST) runs a host's queue
  pairs (mrc_nic/transport/daemon.py);
- the event log (python -m mrc_nic.observe.eventlog LAB events), one per lab.
Each is identified by its command line, not only by a pid recorded in the
lab state: a pid can be reused, and a command killed between starting a
process and saving its pid leaves one that only /proc knows about.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mrc_nic.lab import client, state

WORKER_MODULE = "mrc_nic.fabric.fault_worker"
DAEMON_MODULE = "mrc_nic.transport.daemon"
EVENTLOG_MODULE = "mrc_nic.observe.eventlog"
EVENTLOG_ARG = client.EVENTS_SERVICE  # its name, as its control socket's
MODULES = (WORKER_MODULE, DAEMON_MODULE, EVENTLOG_MODULE)
RUN_DIR_ENV = "MRC_NIC_RUN_DIR"  # state.RUN_DIR's


def spawn(lab: str, fault_id: int) -> int:
    return _spawn(WORKER_MODULE, lab, str(fault_id))


def service_module(name: str) -> str:
    """The module of a lab's long-lived process: the event log (named
    EVENTLOG_ARG, as its control socket) or a host's daemon (named as its host)."""
    return EVENTLOG_MODULE if name == EVENTLOG_ARG else DAEMON_MODULE


def spawn_service(lab: str, name: str) -> int:
    return _spawn(service_module(name), lab, name)


def log_path(lab: str, arg: str) -> Path:
    """Where a background process's stderr goes (a traceback, if it dies)."""
    return state.lab_dir(lab) / f"{arg}.log"


def _spawn(module: str, lab: str, arg: str) -> int:
    path = log_path(lab, arg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, lab, arg],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # outlives the CLI call; ended by heal/down
        )
    return proc.pid


def _argv(pid: int) -> list[bytes] | None:
    """The command line of a live (not zombie) process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except (OSError, IndexError):
        return None


def is_worker(pid: int, lab: str, fault_id: int | None = None) -> bool:
    """A fault worker of this lab (of this fault, if given)."""
    return _is(pid, WORKER_MODULE, lab, None if fault_id is None else str(fault_id))


def is_service(pid: int, lab: str, name: str) -> bool:
    """The event log (name EVENTLOG_ARG) or the daemon of host `name` of this lab."""
    return _is(pid, service_module(name), lab, name)


def _is(pid: int, module: str, lab: str, arg: str | None) -> bool:
    argv = _argv(pid)
    if not argv or module.encode() not in argv:
        return False
    i = argv.index(module.encode())
    args = argv[i + 1 : i + 3]
    if len(args) < 2 or args[0] != lab.encode():
        return False
    return arg is None or args[1] == arg.encode()


def _is_any(pid: int, lab: str) -> bool:
    return any(_is(pid, m, lab, None) for m in MODULES)


def find(lab: str) -> list[int]:
    """Every live worker and daemon of this lab, of this machine's state
    directory (state.RUN_DIR: machines of a cluster lab on one box each have
    their own, docs/cluster.md)."""
    pids = []
    for entry in os.listdir("/proc"):
        pid = int(entry) if entry.isdigit() else 0
        if pid and pid != os.getpid() and _is_any(pid, lab) and _same_run_dir(pid):
            pids.append(pid)
    return pids


def _same_run_dir(pid: int) -> bool:
    """Whether the process was started with this process's MRC_NIC_RUN_DIR (or none)."""
    mine = os.environ.get(RUN_DIR_ENV, "").encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return False
    key = RUN_DIR_ENV.encode() + b"="
    theirs = next((e[len(key) :] for e in env if e.startswith(key)), b"")
    return theirs == mine


def stop(pid: int | None, lab: str) -> None:
    """End a worker or daemon of this lab: SIGTERM, then SIGKILL after 2 s."""
    if not pid or pid == os.getpid() or not _is_any(pid, lab):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _is_any(pid, lab):
            time.sleep(0.02)
        if _is_any(pid, lab):
            os.kill(pid, signal.SIGKILL)


def stop_all(lab: str) -> None:
    for pid in find(lab):
        stop(pid, lab)
