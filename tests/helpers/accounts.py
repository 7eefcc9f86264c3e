"""Throwaway users and a group for tests of a lab's [tenants] group: made
with names no one has, deleted by those exact names, whatever the test did."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import subprocess
from collections.abc import Iterator


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
