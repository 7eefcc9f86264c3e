"""Waiting for descriptors to become readable, whatever their numbers.

select.select takes only descriptors below FD_SETSIZE (1,024): a process
holding more fails with "filedescriptor out of range in select()" as soon as
it waits on one above it. A verbs context opens a dozen descriptors (the
NIC's pinned maps, its CQs' rings, eventfds and epolls), so a process with a
few dozen of them crosses that line. Every event loop of mrc-nic waits
through epoll instead (selectors.DefaultSelector is epoll on Linux), which
has no such limit.

Waiter is for a loop that waits on the same descriptors many times (one
epoll set, registered once); readable() is a single wait.
"""

from __future__ import annotations

import selectors
from collections.abc import Iterable
from typing import Any, TypeVar

Waitable = TypeVar("Waitable")  # an int fd, or anything with fileno()


class Waiter:
    """An epoll set of descriptors (ints or objects with fileno()); wait()
    returns those that are readable, as they were added."""

    def __init__(self, fds: Iterable[Any] = ()) -> None:
        self._sel = selectors.DefaultSelector()
        try:
            for fd in fds:
                self.add(fd)
        except BaseException:
            self._sel.close()
            raise

    def add(self, fd: Any) -> None:
        self._sel.register(fd, selectors.EVENT_READ)

    def remove(self, fd: Any) -> None:
        """Stop watching fd (at its end of file it would be readable for ever)."""
        self._sel.unregister(fd)

    def wait(self, timeout: float | None) -> list[Any]:
        """The watched descriptors readable now or within `timeout` seconds
        (None: until one is; 0 or less: no wait)."""
        if timeout is not None:
            timeout = max(0.0, timeout)
        return [key.fileobj for key, _ in self._sel.select(timeout)]

    def close(self) -> None:
        self._sel.close()

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def readable(fds: Iterable[Waitable], timeout: float | None) -> list[Waitable]:
    """Which of `fds` are readable within `timeout` seconds (select.select's
    first list, without its limit on descriptor numbers)."""
    with Waiter(fds) as waiter:
        return waiter.wait(timeout)
