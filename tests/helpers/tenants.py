"""For tests of a lab's [tenants] group: throwaway users and a group (made
with names no one has, deleted by those exact names, whatever the test did)
and a lab that opens its NICs to that group."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.env import NETNS_DIR, unique_lab


@contextlib.contextmanager
def throwaway_group(tag: str, members: int = 1) -> Iterator[tuple[str, list[str]]]:
    """(group, users): a new group `{tag}g<pid>` and `members` new users
    `{tag}u<i><pid>` in it (no home, no login shell); all deleted at the end."""
    suffix = os.getpid() % 100000
    group = f"{tag}g{suffix}"
    users = [f"{tag}u{i}{suffix}" for i in range(members)]
    for name, lookup in ((group, grp.getgrnam), *((u, pwd.getpwnam) for u in users)):
        try:
            lookup(name)
        except KeyError:
            continue
        raise RuntimeError(
            f"{name} exists already: a test never takes over a name that is someone's"
        )
    made: list[list[str]] = []
    try:
        subprocess.run(["groupadd", group], check=True)
        made.append(["groupdel", group])
        for user in users:
            subprocess.run(
                ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-G", group, user], check=True
            )
            made.append(["userdel", user])
        yield group, users
    finally:
        for cmd in reversed(made):
            subprocess.run(cmd, check=False)


@contextlib.contextmanager
def group_lab(group: str, tag: str, directory: Path, base: str = "single-plane.toml"):
    """A lab of netns/<base> with `[tenants] group = group`, named by
    unique_lab(tag) (its topology file written in directory), up until the end."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    path = directory / "tenants.toml"
    path.write_text(f'{(NETNS_DIR / base).read_text()}\n[tenants]\ngroup = "{group}"\n')
    topo = topology.load(path, lab=unique_lab(tag))
    testbed.up(topo)
    try:
        yield topo
    finally:
        testbed.down(topo.lab)
