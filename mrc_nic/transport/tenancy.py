"""Who may open a host's NIC: the process at the other end of a session.

Who: root, or a member of the lab's [tenants] group (lab.access: as the rdma
group opens /dev/infiniband). The socket's mode (root:GROUP 0660, or root's
0600) keeps others from connecting; the daemon asks again at app_hello, on
the kernel's word (SO_PEERCRED's uid and gid at connect, and the peer's
supplementary groups from /proc/PID/status), and refuses anyone else with
EPERM naming the group and how to join it (check_member). Operator
operations stay root's on the same socket (open_to_tenants: lab.service
refuses them to a peer that is not root).

Where: the daemons' sockets are files (/run/mrc-nic/<lab>/<host>.sock),
so a process in any network namespace that may open the file can connect.
As a real host's NIC is reachable from that host only, a daemon takes
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
from pathlib import Path

from mrc_nic.contract import appops
from mrc_nic.lab import access
from mrc_nic.lab.service import LineService, is_operator, peer_cred
from mrc_nic.lab.topology import NS_PREFIX, Topology
from mrc_nic.transport.qp import QpError

NETNS_DIR = Path("/run/netns")
_home: tuple[int, int] | None = None  # the machine's network namespace (remember_home)


@dataclasses.dataclass(frozen=True)
class Group:
    """The lab's [tenants] group: its members may open the lab's NICs."""

    name: str
    gid: int


_group: Group | None = None  # this daemon's lab's (open_to_tenants); None: root only


@dataclasses.dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    netns: tuple[int, int] | None  # (st_dev, st_ino) of its network namespace
    command: str  # its command line, shortened (qp list shows it)
    gid: int = -1  # its group at connect (SO_PEERCRED)
    groups: frozenset[int] = frozenset()  # its supplementary groups (/proc/PID/status)


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


def _groups(pid: int) -> frozenset[int]:
    """A process's supplementary groups (none if it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return frozenset()
    for line in status.splitlines():
        if line.startswith("Groups:"):
            return frozenset(int(g) for g in line.split()[1:])
    return frozenset()


def peer_of(sock: socket.socket) -> Peer:
    pid, uid, gid = peer_cred(sock)
    return Peer(pid, uid, _ns(f"/proc/{pid}/ns/net"), _command(pid), gid, _groups(pid))


def open_to_tenants(service: LineService, topo: Topology) -> Group | None:
    """A host daemon's socket and sessions open to root and the lab's [tenants]
    group (none: root only); operator operations stay root's."""
    global _group
    gid = access.group_id(topo)
    _group = None if gid is None else Group(str(topo.tenant_group), gid)
    service.group = gid
    service.open_ops = frozenset(request.OP for request in appops.APP_OPS)
    return _group


def check_member(peer: Peer, lab: str, group: Group | None) -> None:
    """Refuse (EPERM) a peer that is neither root nor in the lab's group."""
    if is_operator(peer.uid):
        return
    if group is not None and (peer.gid == group.gid or group.gid in peer.groups):
        return
    who = f"pid {peer.pid} (uid {peer.uid}, {access.user_name(peer.uid)})"
    if group is None:
        raise QpError(
            errno.EPERM,
            f"{who} may not open lab {lab}'s NICs: they are root's alone; run it as root, "
            "or name a group that may in the lab's topology file ([tenants] group)",
        )
    raise QpError(
        errno.EPERM,
        f"{who} may not open lab {lab}'s NICs: only root and group {group.name!r} may; "
        f"join the group ({access.join_hint(group.name, peer.uid)}) or run it as root",
    )


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
    check_member(peer, lab, _group)
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
