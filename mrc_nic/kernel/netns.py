"""Network namespaces: create, remove, enter, and talk netlink inside them.

Everything here addresses a namespace by its exact name under /run/netns.
Nothing in this module creates a namespace implicitly: pyroute2's IPRoute
defaults to O_CREAT, which would silently re-create a namespace that a
teardown just removed, so `iproute()` passes flags=0.

pyroute2 is imported where it is used: it costs about 0.1 s, which the
callers that only enter a namespace (the link counters of `status`) skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyroute2 import IPRoute

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def exists(name: str) -> bool:
    return os.path.exists(path(name))


def list_names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def create(name: str) -> None:
    if exists(name):
        raise FileExistsError(errno.EEXIST, f"network namespace {name} already exists")
    from pyroute2 import netns as pr_netns

    pr_netns.create(name)


def remove(name: str) -> bool:
    """Remove a namespace by exact name; False if it was not there."""
    if not exists(name):
        return False
    from pyroute2 import netns as pr_netns

    pr_netns.remove(name)
    return True


def iproute(name: str) -> IPRoute:
    """An RTNL socket inside namespace `name`, which must already exist."""
    if not exists(name):
        raise FileNotFoundError(errno.ENOENT, f"network namespace {name} does not exist")
    from pyroute2 import IPRoute

    return IPRoute(netns=name, flags=0)


def iproute_here() -> IPRoute:
    """An RTNL socket in this process's own namespace (a cluster machine's underlay)."""
    from pyroute2 import IPRoute

    return IPRoute()


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with the calling thread inside namespace `name`.

    setns() moves only the calling thread, and /proc/sys/net resolves to that
    thread's namespace, so sysctls written here land in `name`. Sockets
    created here stay in `name` after the block ends.
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path(name), os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


CAP_SYS_ADMIN = 21


def require_setns() -> None:
    """PermissionError now, in this process, unless it may enter namespaces.

    setns() needs CAP_SYS_ADMIN. A forked child or a preexec_fn that fails
    to enter reports it second-hand (SubprocessError "Exception occurred in
    preexec_fn"); callers that enter in a child ask here first, so the error
    says what is missing.
    """
    with open("/proc/self/status") as f:
        caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    if not int(caps, 16) >> CAP_SYS_ADMIN & 1:
        raise PermissionError(
            errno.EPERM, "entering a network namespace needs CAP_SYS_ADMIN (setns)"
        )


def enter_for_good(name: str) -> None:
    """Move the calling thread into `name` for the rest of its life (child processes)."""
    fd = os.open(path(name), os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)


def write_sysctls(name: str, values: dict[str, str | int]) -> None:
    """Write net.* sysctls inside namespace `name` (keys in dotted form)."""
    with entered(name):
        for key, value in values.items():
            with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
                f.write(str(value))


def run_in(name: str, fn, *args, timeout: float | None = None):
    """Fork, move the child into namespace `name`, run fn(*args) there and
    return its (JSON-able) result. The child's exception is re-raised here."""
    return start_in(name, fn, *args).result(timeout)


class Child:
    """A forked child running a function inside a namespace."""

    def __init__(self, pid: int, read_fd: int):
        self.pid, self._fd = pid, read_fd

    def result(self, timeout: float | None = None):
        import json
        import signal

        from mrc_nic.kernel.fdwait import readable

        if not readable([self._fd], timeout):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self._fd)
            raise TimeoutError(f"child {self.pid} gave no result in {timeout}s")
        chunks = []
        while chunk := os.read(self._fd, 65536):
            chunks.append(chunk)
        os.close(self._fd)
        os.waitpid(self.pid, 0)
        reply = json.loads(b"".join(chunks) or b'{"error": "child died without a result"}')
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]


def start_in(name: str, fn, *args) -> Child:
    import json

    require_setns()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        try:
            enter_for_good(name)
            reply = {"result": fn(*args)}
        except BaseException as e:  # report everything, then leave without cleanup handlers
            reply = {"error": f"{type(e).__name__}: {e}"}
        data = json.dumps(reply).encode()
        while data:
            data = data[os.write(write_fd, data) :]
        os._exit(0)
    os.close(write_fd)
    return Child(pid, read_fd)
