"""Fault worker processes: start them, find them, end them.

A worker (python -m mrc_nic.fault_worker LAB ID) runs a timed or flapping
fault. It is identified by its command line, not only by the pid recorded in
the lab state: a pid can be reused, and a `fail` killed between starting the
worker and saving its pid leaves a worker that only /proc knows about.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

WORKER_MODULE = "mrc_nic.fault_worker"


def spawn(lab: str, fault_id: int) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE, lab, str(fault_id)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
    argv = _argv(pid)
    if not argv or WORKER_MODULE.encode() not in argv:
        return False
    i = argv.index(WORKER_MODULE.encode())
    args = argv[i + 1 : i + 3]
    if len(args) < 2 or args[0] != lab.encode():
        return False
    return fault_id is None or args[1] == str(fault_id).encode()


def find(lab: str) -> list[int]:
    """Every live worker of this lab."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and is_worker(int(entry), lab):
            pids.append(int(entry))
    return pids


def stop(pid: int | None, lab: str) -> None:
    """End a worker of this lab: SIGTERM, then SIGKILL after 2 s."""
    if not pid or pid == os.getpid() or not is_worker(pid, lab):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and is_worker(pid, lab):
            time.sleep(0.02)
        if is_worker(pid, lab):
            os.kill(pid, signal.SIGKILL)


def stop_all(lab: str) -> None:
    for pid in find(lab):
        stop(pid, lab)
