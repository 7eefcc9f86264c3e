"""The device registry: which emulated NICs this machine has and where their daemons listen.

What an application needs to find and open a NIC, and nothing of how its lab
was made:
- the lab's run directory, RUN_DIR/<lab> (/run/mrc-nic, or MRC_NIC_RUN_DIR),
  with one unix socket per host daemon, <host>.sock (mrc_nic.lab.service);
- each host's network namespace, NS_PREFIX + <lab>-<host>;
- devices.json there: the lab's hosts on this machine and the command that
  brings its daemons back. `mrc-nic up` writes it once the daemons answer
  (mrc_nic.fabric.testbed.start_daemons, publish) and `down` removes it with
  the lab's directory: a lab is open to applications while it is there.

The verbs library (mrc_nic.verbs) opens NICs from this alone, as the native
library does from the same paths (mrc_nic/native/src/session.c, device.c).
"""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import pwd
import re
import stat
from pathlib import Path

from mrc_nic.errors import MrcNicError

RUN_DIR = Path(os.environ.get("MRC_NIC_RUN_DIR", "/run/mrc-nic"))
NS_PREFIX = "mrc-"  # a node's namespace: mrc-<lab>-<node>
# A lab name is part of namespace names (split at the first dash after the
# prefix) and paths: 1 to 12 lower-case letters and digits.
LAB_NAME_RE = re.compile(r"[a-z0-9]{1,12}")
REGISTRY = "devices.json"


class BadLabName(MrcNicError, ValueError):
    """A lab name that is not [a-z0-9]{1,12}, dashes dropped."""


def canonical_lab_name(name: str) -> str:
    """The lab's name in its stored form: dashes dropped (`clos-8` is clos8),
    then 1 to 12 lower-case letters and digits, or BadLabName saying so."""
    canonical = name.replace("-", "") if isinstance(name, str) else name
    if not isinstance(canonical, str) or not LAB_NAME_RE.fullmatch(canonical):
        raise BadLabName(
            f"bad lab name {name!r}: use 1 to 12 lower-case letters and digits "
            "(dashes are dropped: clos-8 is the lab clos8)"
        )
    return canonical


def socket_path(lab: str, host: str) -> Path:
    """Where a host's daemon (or the lab's event log, host "events") listens."""
    return RUN_DIR / lab / f"{host}.sock"


def netns_name(lab: str, host: str) -> str:
    return f"{NS_PREFIX}{lab}-{host}"


@dataclasses.dataclass(frozen=True)
class Devices:
    """One lab's NICs on this machine."""

    lab: str
    hosts: tuple[str, ...]  # its hosts here (a lab over several machines: this one's)
    restart: str  # the command that brings its daemons back, keeping the lab


def publish(devices: Devices) -> None:
    """Open a lab's NICs to applications (up): its registry, written at once
    (a temporary file renamed over it: a reader never sees half of it)."""
    path = RUN_DIR / devices.lab / REGISTRY
    tmp = path.with_name(f".{REGISTRY}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(devices), indent=1))
    tmp.chmod(0o644)  # the lab's group reads it too (docs/api.md, "Running without root")
    os.replace(tmp, path)


def withdraw(lab: str) -> None:
    """The lab's NICs are going (down)."""
    (RUN_DIR / lab / REGISTRY).unlink(missing_ok=True)


def load(lab: str) -> Devices | None:
    """A lab's registry, or None when its NICs are not open (not up)."""
    try:
        data = json.loads((RUN_DIR / lab / REGISTRY).read_text())
        return Devices(lab=data["lab"], hosts=tuple(data["hosts"]), restart=data["restart"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def labs() -> list[str]:
    """The labs whose NICs are open on this machine, by name."""
    try:
        dirs = sorted(p for p in RUN_DIR.iterdir() if p.is_dir())
    except OSError:
        return []
    return [d.name for d in dirs if (d / REGISTRY).is_file()]


def restart_hint(lab: str) -> str:
    """How to bring a lab's dead daemons back (`up --reuse` keeps the lab: its
    links, faults and counters), or to make the lab when it is not up."""
    devices = load(lab)
    if devices is None:
        return f"the lab is not up; start it with: mrc-nic up --name {lab}"
    return f"restart it with: {devices.restart}"


# ---- who may open a lab's NICs (docs/api.md, "Running without root") ----------------
def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def join_hint(group: str, uid: int) -> str:
    """How a user joins a group: what root runs, and that it takes a new login."""
    return f"`usermod -aG {group} {user_name(uid)}` as root, then log in again"


def refusal(path: Path, lab: str) -> str:
    """Why connecting to a lab's socket was refused (EACCES), in one line: the
    lab's NICs are root's alone, or root's and a group's this process is not in."""
    who = f"uid {os.geteuid()} ({user_name(os.geteuid())})"
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not st.st_mode & stat.S_IRWXG:  # its group may not either
        return (
            f"{who} may not open lab {lab}'s NICs: they are root's alone; run it as root, "
            "or name a group that may in the lab's topology file ([tenants] group)"
        )
    group = group_name(st.st_gid)
    return (
        f"{who} may not open lab {lab}'s NICs: only root and group {group!r} may; "
        f"join it ({join_hint(group, os.geteuid())}) or run it as root"
    )
