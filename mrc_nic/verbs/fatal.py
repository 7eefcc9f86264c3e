"""The NIC's death, heard by every program that has it open (IBV_EVENT_DEVICE_FATAL).

A host's NIC is its daemon's (transport.daemon): when the daemon dies (a
crash, kill -9, `mrc-nic down`) nobody keeps its QPs' timeouts, and a new
daemon (`mrc-nic up --reuse`) starts with none of them. The library learns it
from its session socket, which the kernel closes with the daemon: the socket
reports POLLRDHUP and nothing else ever does (replies come only while a
setup call waits for them). Two listeners, neither on the fast path:
- a watcher thread blocked in poll() on the socket sets the context's flag
  at once, so a program that busy-polls, or only posts, finds it at its next
  post_send or poll (one attribute read per call, none per WR);
- each CQ's fd (epoll) and cq.wait() include the socket, so a program that
  sleeps on its CQs wakes.
Then (verbs.Context.device_lost) every QP goes to ERR with its outstanding
WRs and receives flushed (WR_FLUSH_ERR), its NIC mappings become private
pages of the process (MRs keep their bytes), and every post and, once the
flushes are taken, every poll raises EIO, saying to reopen after
`mrc-nic up --reuse`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
from collections.abc import Callable

from mrc_nic.contract import devices
from mrc_nic.verbs.errors import VerbsError

HUP = select.POLLRDHUP | select.POLLHUP | select.POLLERR


class DaemonWatch:
    """A thread that waits for the session socket's end and calls `died` once."""

    def __init__(self, sock_fd: int, died: Callable[[], None]) -> None:
        self._stop = os.eventfd(0, os.EFD_CLOEXEC)
        self._poller = select.poll()
        self._poller.register(sock_fd, select.POLLRDHUP)
        self._poller.register(self._stop, select.POLLIN)
        self._sock_fd, self._died = sock_fd, died
        self._thread = threading.Thread(target=self._run, name="mrc-nic-daemon-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            for fd, events in self._poller.poll():
                if fd == self._stop:
                    return
                if fd == self._sock_fd and events & HUP:
                    self._died()
                    return

    def stop(self) -> None:
        """End the thread (before the socket closes: it must not poll a reused fd)."""
        os.eventfd_write(self._stop, 1)
        self._thread.join()
        os.close(self._stop)


def error(verb: str, lab: str, host: str) -> VerbsError:
    """The one error every verb raises once the NIC is gone."""
    try:
        hint = devices.restart_hint(lab)
    except Exception:  # noqa: BLE001 (the lab's record may be gone with it: say the rest)
        hint = "restart it with: mrc-nic up --reuse"
    return VerbsError(
        verb,
        errno.EIO,
        f"the NIC of {host} in lab {lab!r} is gone: its daemon died (IBV_EVENT_DEVICE_FATAL), "
        f"its QPs are in error; {hint}, then close this context and open a new one",
    )


def hung_up(sock_fd: int) -> bool:
    """The session socket's peer is gone (a non-blocking look)."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLRDHUP)
    with contextlib.suppress(OSError):
        return any(ev & HUP for _, ev in poller.poll(0))
    return True
