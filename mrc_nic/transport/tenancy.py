"""Who may open a host's NIC: the process at the other end of a session.

The daemons' sockets are files (/run/mrc-nic/<lab>/<host>.sock, root's, mode
0600), so any root process in any network namespace can connect to any of
them. As a real host's NIC is reachable from that host only, a daemon takes
an application's session (app_hello) only from
- a process in its own network namespace (its host: what `mrc-nic exec`
  runs programs in), or
- a root process in the machine's own namespace: mrc-nic's tools (`write`,
  benchmarks, the tests), which name lab and host explicitly. The machine's
  namespace is the one the daemon was started from (`mrc-nic up`), taken
  before it entered its host's (remember_home): /proc/1/ns/net cannot always
  be read, not even by root (a VM's init, a container's).
Anything else (a program in another host, another lab's host, a switch) is
refused with EPERM and what to do. The peer is the kernel's word
(SO_PEERCRED: pid and uid at connect), its namespace /proc/PID/ns/net.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket
import struct
from pathlib import Path

from mrc_nic.lab.topology import NS_PREFIX
from mrc_nic.transport.qp import QpError

NETNS_DIR = Path("/run/netns")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_home: tuple[int, int] | None = None  # the machine's network namespace (remember_home)


@dataclasses.dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    netns: tuple[int, int] | None  # (st_dev, st_ino) of its network namespace
    command: str  # its command line, shortened (qp list shows it)


def _ns(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def remember_home() -> None:
    """Take this process's network namespace as the machine's (the daemon,
    before it enters its host's)."""
    global _home
    _home = _ns("/proc/self/ns/net")


def home() -> tuple[int, int] | None:
    return _home or _ns("/proc/1/ns/net")


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    return " ".join(" ".join(words).split())[:120] or "?"  # one line: newlines of `-c` code go


def peer_of(sock: socket.socket) -> Peer:
    pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return Peer(pid, uid, _ns(f"/proc/{pid}/ns/net"), _command(pid))


def where(ns: tuple[int, int] | None) -> str:
    """A namespace in words: a lab's host or switch, the machine's, or another."""
    if ns is None:
        return "a process that is gone (or whose namespace cannot be read)"
    if ns == home():
        return "the machine's own network namespace"
    for path in sorted(NETNS_DIR.glob(f"{NS_PREFIX}*")) if NETNS_DIR.is_dir() else []:
        if _ns(path) == ns:
            lab, _, node = path.name[len(NS_PREFIX) :].partition("-")
            return f"{node} of lab {lab!r}"
    return "another network namespace"


def check(peer: Peer, lab: str, host: str) -> None:
    """Refuse (EPERM) a peer that may not open host's NIC (see the module's doc)."""
    if peer.netns is not None and peer.netns == _ns("/proc/self/ns/net"):
        return  # a program of this host
    if peer.netns is not None and peer.netns == home():
        if peer.uid == 0:
            return  # mrc-nic's own tools, as root, naming lab and host
        raise QpError(
            errno.EPERM,
            f"pid {peer.pid} (uid {peer.uid}) in the machine's namespace may not open "
            f"{host}'s NIC: only root may name a lab and host from there; run the program in "
            f"the host with `mrc-nic exec -l {lab} {host} -- CMD`",
        )
    raise QpError(
        errno.EPERM,
        f"pid {peer.pid} runs in {where(peer.netns)}, not in host {host} of lab {lab!r}: "
        "a host's NIC opens only from that host; open the NIC of the host it runs in "
        f"(verbs.Context() with no names), or run it with `mrc-nic exec -l {lab} {host} -- CMD`",
    )
