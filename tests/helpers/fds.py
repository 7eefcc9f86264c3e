"""A process holding more than 1,024 descriptors (select()'s FD_SETSIZE).

Inside many_fds() the lowest 1,100 free descriptor numbers are taken (by
/dev/null), so every descriptor the body opens is numbered above 1,024: a
loop that still waits with select.select fails there with "filedescriptor
out of range in select()". RLIMIT_NOFILE is raised for it when needed and
restored after.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator

import pytest

FD_SETSIZE = 1024
HELD = 1100
ROOM = 2048  # descriptors the body may still open


@contextlib.contextmanager
def many_fds() -> Iterator[list[int]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = HELD + ROOM
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below the {need} this needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    held: list[int] = []
    try:
        while len(held) < HELD:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield held
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def above_setsize(fd: int) -> int:
    """fd, checked to be one select() cannot take (so the test means something)."""
    assert fd >= FD_SETSIZE, f"descriptor {fd} is below {FD_SETSIZE}: the test proves nothing"
    return fd
