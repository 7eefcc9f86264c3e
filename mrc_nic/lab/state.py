"""A lab's state on disk: the record of what `up` made, and the lab lock.

Layout (all under /run, so a reboot forgets labs along with their namespaces):
  /run/mrc-nic/<lab>.lock        flock held while a command changes the lab
  /run/mrc-nic/<lab>/state.json  what exists and what is in force (faults)
Both are root's; a lab that names a [tenants] group has its directory
searchable, so the group reaches its daemons' sockets (make_lab_dir, lab.access).

`up` writes the state *before* it creates anything, listing every namespace
it is about to make, so that a crash at any point (kill -9) leaves a record
that `down` can follow. The file is replaced atomically (write + rename):
readers never see half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mrc_nic.contract import devices
from mrc_nic.errors import MrcNicError
from mrc_nic.lab.topology import LAB_NAME_RE, Shard, Topology, Tunnel, from_dict

RUN_DIR = devices.RUN_DIR  # where applications look for NICs too (contract.devices)


class LabBusy(MrcNicError, RuntimeError):
    """Another mrc-nic process is changing the same lab."""


class LabNotUp(MrcNicError, LookupError):
    """The lab named is not up (never made, taken down, or half made)."""


class BadLabName(MrcNicError, ValueError):
    """A lab name that is not [a-z0-9]{1,12}; it would make a bad path or netns name."""


def check_lab_name(lab: str) -> str:
    if not isinstance(lab, str) or not LAB_NAME_RE.fullmatch(lab):
        raise BadLabName(f"bad lab name {lab!r}: use 1 to 12 lower-case letters and digits")
    return lab


def lab_dir(lab: str) -> Path:
    return RUN_DIR / check_lab_name(lab)


def make_lab_dir(lab: str, shared: bool) -> Path:
    """The lab's directory. shared (the lab names a [tenants] group, lab.access):
    it and RUN_DIR searchable by anyone (o+x), whatever root's umask, so the
    group reaches the daemons' sockets there, whose own mode (root:GROUP
    0660) is the wall. Not 0750 root:GROUP: a directory others cannot search
    turns every look for labs by a process that is not root
    (labs_on_disk, the CLI's cluster routing) into EACCES."""
    d = lab_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    if shared:
        for path in (RUN_DIR, d):
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o011 != 0o011:
                os.chmod(path, mode | 0o011)  # g+x, o+x: search, not list
    return d


def state_path(lab: str) -> Path:
    return lab_dir(lab) / "state.json"


def lock_path(lab: str) -> Path:
    return RUN_DIR / f"{check_lab_name(lab)}.lock"


def save_json(lab: str, target: Path, data: dict) -> None:
    """Write `data` to `target` in the lab's directory at once: a temporary file
    (.<stem>.<pid>.tmp) renamed over it, so a reader never sees half a file."""
    d = lab_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{target.stem}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, target)


@dataclass
class LabState:
    lab: str
    topology_file: str
    topology: dict  # the parsed TOML, so later commands need not re-read the file
    phase: str = "building"  # building -> up
    created_at: float = field(default_factory=time.time)
    namespaces: list[str] = field(default_factory=list)
    bringup_seconds: float | None = None
    faults: dict[str, dict] = field(default_factory=dict)  # id -> fault record
    next_fault_id: int = 1
    # On a machine of a cluster lab (mrc_nic.cluster): its shard, as
    # cluster.placement.shard_record writes it; None on a lab of one machine.
    cluster: dict | None = None

    def save(self) -> None:
        save_json(self.lab, state_path(self.lab), asdict(self))

    @classmethod
    def load(cls, lab: str) -> LabState | None:
        try:
            data = json.loads(state_path(lab).read_text())
        except FileNotFoundError:
            return None
        return cls(**data)


def labs_on_disk() -> list[str]:
    if not RUN_DIR.is_dir():
        return []
    return sorted(p.name for p in RUN_DIR.iterdir() if p.is_dir() and (p / "state.json").exists())


def forget(lab: str) -> None:
    """Remove the lab's state directory (only the files mrc-nic writes there:
    the state, the background processes' logs, lab.workers.log_path, and the
    daemons' sockets, which a daemon killed by SIGKILL leaves behind)."""
    d = lab_dir(lab)
    if not d.is_dir():
        return
    for f in d.iterdir():
        ours = f.name in ("state.json", devices.REGISTRY) or f.suffix in (".log", ".sock")
        if ours or (f.name.startswith(".state.") and f.name.endswith(".tmp")):
            f.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        d.rmdir()


@contextlib.contextmanager
def locked(lab: str, wait: float = 10.0) -> Iterator[None]:
    """Hold the lab's lock; wait up to `wait` seconds, then raise LabBusy.

    `down` unlinks the lock file while holding it. A process that was waiting
    on the old file then holds a lock nobody else can see, so after taking the
    flock we check that the path still names our file, and start over if not.
    """
    path = lock_path(lab)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _flock_until(fd, deadline, lab)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current != os.fstat(fd).st_ino:
                os.close(fd)
                continue
        except BaseException:
            os.close(fd)
            raise
        break
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the fd releases the flock


def _flock_until(fd: int, deadline: float, lab: str) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                raise LabBusy(
                    f"lab {lab!r} is being changed by another mrc-nic process (pid {holder}); "
                    "wait for it to finish and try again"
                ) from None
            time.sleep(0.05)


def open_lab(lab: str) -> tuple[LabState, Topology]:
    """A running lab's record and topology; LabNotUp when it is not up."""
    record = LabState.load(lab)
    if record is None or record.phase != "up":
        raise LabNotUp(f"lab {lab!r} is not up; start it with: mrc-nic up")
    topo = from_dict(Path(record.topology_file), record.topology, lab)
    if record.cluster is not None:
        topo.shard = shard_from_record(record.cluster)
    return record, topo


def shard_from_record(cluster: dict) -> Shard:
    """The Shard a machine's record keeps (placement.shard_record's dict)."""
    return Shard(
        machine=cluster["machine"],
        nodes=frozenset(cluster["nodes"]),
        tunnels={name: Tunnel(**t) for name, t in cluster["tunnels"].items()},
    )
