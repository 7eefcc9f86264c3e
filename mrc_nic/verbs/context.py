"""Opening an emulated host's NIC: the device context (ibv_open_device + mrc_create_context).

A Context finds its lab and host (arguments, then MRC_NIC_LAB / MRC_NIC_HOST,
which `mrc-nic exec` sets, then the network namespace the process runs in)
and keeps one session with the host's daemon for setup. The daemon hands the
session a file descriptor for each NIC resource it makes (its MRs' memory,
QPs' send queues, CQs' rings, the doorbell); nic.driver.views maps them, and
that is all this process reaches of the NIC: no pin, no privilege
(docs/api.md, "Isolation"). Posting and polling never use the session; its
end is the NIC's death (verbs.fatal).

The daemon takes the session only from a process in the host's network
namespace, or from root in the machine's (transport.tenancy), and holds it to
its shares of the host (contract.shares: the lab's [tenants], or what the
program asks for: `shares=`, MRC_NIC_SHARE_<NAME>, `mrc-nic exec --share`).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path
from typing import Any

from mrc_nic.contract import appops, devices, shares
from mrc_nic.contract import session as client
from mrc_nic.kernel import fdwait
from mrc_nic.nic.driver.views import DeviceMaps
from mrc_nic.verbs import fatal
from mrc_nic.verbs.enums import AsyncEventType
from mrc_nic.verbs.errors import VerbsError

ENV_LAB, ENV_HOST = "MRC_NIC_LAB", "MRC_NIC_HOST"
TIMEOUT_UNIT_S = 1.024e-6  # mrc.h: a QP's timeout is 1.024 us * 2^timeout
NETNS_DIR = Path("/run/netns")


@dataclasses.dataclass(frozen=True)
class DeviceAttr:
    """What the NIC offers (ibv_query_device + mrc_query_device)."""

    host: str
    host_index: int
    planes: int  # ports, one per plane
    seg_size: int  # payload of a full data packet
    mr_align: int  # SGE and remote addresses are multiples of it: 1, any byte
    max_mr_bytes: int  # the most one registration can have now (what is free)
    sq_depth: int  # WQEs in the NIC per send queue
    max_qp_wr: int  # work requests per queue the library accepts
    max_mpr: int
    max_wimm: int
    cq_ring_bytes: int
    gids: tuple[str, ...]  # the host's address on each plane
    # mrc-nic's (docs/api.md, "Device attributes"): what the daemon applies when a
    # QP's modify names none, and its limits; the most one MR may ever have.
    max_mr_size: int = 0
    default_timeout: int = 0  # 1.024 us * 2^timeout (TIMEOUT_UNIT_S)
    max_timeout: int = 0
    default_reorder_ns: int = 0
    max_reorder_ns: int = 0

    def timeout_seconds(self, timeout: int) -> float:
        """A QP timeout's length (mrc.h: 1.024 us * 2^timeout)."""
        return TIMEOUT_UNIT_S * 2**timeout


def locate(lab: str | None = None, host: str | None = None) -> tuple[str, str]:
    """(lab, host) of the NIC to open: as given, else from the environment,
    else from the network namespace this process runs in."""
    lab = lab or os.environ.get(ENV_LAB)
    if lab:
        try:  # `clos-8`, the shipped file's name, is the lab clos8
            lab = devices.canonical_lab_name(lab)
        except devices.BadLabName as e:
            raise VerbsError("open_device", errno.EINVAL, str(e)) from None
    host = host or os.environ.get(ENV_HOST)
    if lab and host:
        return lab, host
    here = _netns_inode()
    prefix = devices.NS_PREFIX
    for path in sorted(NETNS_DIR.glob(f"{prefix}*")) if NETNS_DIR.is_dir() else []:
        name = path.name[len(prefix) :]
        ns_lab, _, node = name.partition("-")
        mine = here is not None and _inode(path) == here
        if mine and lab in (None, ns_lab) and host in (None, node):
            return ns_lab, node
    if lab is None:
        up = devices.labs()
        if len(up) == 1:
            lab = up[0]
        elif len(up) > 1 and host:
            raise VerbsError(
                "open_device",
                errno.ENODEV,
                f"labs {', '.join(up)} are up: name one (Context(lab=...), {ENV_LAB}, "
                "or mrc-nic exec -l LAB HOST -- CMD)",
            )
    if not (lab and host):
        raise VerbsError(
            "open_device",
            errno.ENODEV,
            "no NIC to open: run inside a host with `mrc-nic exec HOST -- CMD`, or name it "
            f"(Context(lab=..., host=...), or {ENV_LAB} and {ENV_HOST})",
        )
    return lab, host


def _netns_inode() -> int | None:
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _shares_from_env() -> dict[str, str]:
    return shares.from_env(dict(os.environ))


def _no_daemon(lab: str, host: str, error: Exception) -> str:
    """Why a host's daemon does not answer: no such host, or the daemon's own reason."""
    record = devices.load(lab)
    if record is None:  # the lab's registry says nothing more
        return str(error)
    hosts = record.hosts
    if host not in hosts:
        return f"lab {lab!r} has no host {host!r} (hosts: {', '.join(hosts)})"
    return str(error)


class Context:
    """An open NIC of one host. Close it (or use `with`) to release everything
    made through it; a process that dies releases the same, through the daemon."""

    def __init__(
        self, lab: str | None = None, host: str | None = None, *, shares: dict | None = None
    ) -> None:
        """shares: this session's limits on the host instead of the lab's
        ({"memory": "25%", "qps": 8, ...}; contract.shares), over those of
        MRC_NIC_SHARE_<NAME>."""
        self.lab, self.host = locate(lab, host)
        try:
            self.session = client.Session(self.lab, self.host)
        except client.DaemonError as e:
            raise VerbsError(
                "open_device", errno.ENODEV, _no_daemon(self.lab, self.host, e)
            ) from None
        except PermissionError as e:  # root's, or root's and a group's (docs/api.md)
            path = Path(e.filename or devices.socket_path(self.lab, self.host))
            message = devices.refusal(path, self.lab)
            raise VerbsError("open_device", errno.EPERM, message) from None
        try:
            asked = {**_shares_from_env(), **(shares or {})}
            hello = self.session.call(appops.Hello(pid=os.getpid(), shares=asked or None))
            # What this process reaches of the NIC (driver.views): the descriptors
            # its session is handed, starting with the doorbell's.
            ns = devices.netns_name(self.lab, self.host)
            self._nic = DeviceMaps(
                self.lab,
                kick_fd=hello.kick_fd,
                cq_lost_fd=hello.cq_lost_fd,
                netns_name=ns if (NETNS_DIR / ns).exists() else None,
            )
        except client.DaemonError as e:
            self.session.close()
            if e.errno_name in ("EPERM", "EINVAL"):  # refused: not this host's, bad shares
                message = str(e).split(": ", 1)[-1]
                raise VerbsError("open_device", getattr(errno, e.errno_name), message) from None
            raise VerbsError(
                "open_device", errno.ENODEV, _no_daemon(self.lab, self.host, e)
            ) from None
        except (OSError, ValueError) as e:
            self.session.close()
            raise VerbsError(
                "open_device", getattr(e, "errno", None) or errno.EIO, str(e)
            ) from None
        self.attr = DeviceAttr(
            host=hello.host,
            host_index=hello.index,
            planes=hello.planes,
            seg_size=hello.seg_size,
            mr_align=hello.mr_align,
            max_mr_bytes=hello.max_mr_bytes,
            sq_depth=hello.sq_depth,
            max_qp_wr=hello.max_qp_wr,
            max_mpr=hello.max_mpr,
            max_wimm=hello.max_wimm,
            cq_ring_bytes=hello.cq_ring_bytes,
            gids=tuple(hello.host_addrs),
            max_mr_size=hello.max_mr_size,
            default_timeout=hello.default_timeout,
            max_timeout=hello.max_timeout,
            default_reorder_ns=hello.default_reorder_ns,
            max_reorder_ns=hello.max_reorder_ns,
        )
        self.shares = dict(hello.shares)  # this session's limits on the host
        self.pds: list[Any] = []  # verbs.PD and CQ made here: close releases them
        self.cqs: list[Any] = []
        self._closed = False
        self._fatal = False  # the daemon died (set by the watcher thread, or a CQ's wait)
        self._lost = False  # ... and this context has failed everything (device_lost)
        self._watch = fatal.DaemonWatch(self.session.sock.fileno(), self._daemon_died)

    def query_device(self) -> DeviceAttr:
        return self.attr

    def gid(self, plane: int = 0) -> str:
        """The host's address on a plane: what a peer names as dest_gid."""
        return self.attr.gids[plane]

    def fileno(self) -> int:
        """The async event fd (ibv_get_async_event's): readable when the
        device failed, which here is one event, its daemon's end."""
        return self.session.sock.fileno()

    def device_fatal(self) -> bool:
        """IBV_EVENT_DEVICE_FATAL: the daemon of this NIC ended (its session
        closed); the QPs are in error and nothing made here works any more."""
        if not self._fatal and fatal.hung_up(self.session.sock.fileno()):
            self._fatal = True
        return self._fatal

    def get_async_event(self, timeout: float | None = None) -> AsyncEventType | None:
        """ibv_get_async_event: the context's event (DEVICE_FATAL, the one it
        has), waiting up to timeout seconds (None: for ever); None if none came."""
        if not self._fatal:
            fdwait.readable([self], timeout)  # epoll: any descriptor number
        return AsyncEventType.DEVICE_FATAL if self.device_fatal() else None

    def _daemon_died(self) -> None:
        """The watcher thread's word: only a flag here; the program's own
        thread fails the QPs at its next verb (device_lost)."""
        self._fatal = True

    def device_lost(self) -> None:
        """The NIC is gone: every QP to ERR with its WRs flushed to its CQs,
        this process's NIC mappings private (MRs keep their bytes, and nothing
        written from here reaches memory a new daemon gives another session)."""
        if self._lost or self._closed:
            return
        self._lost = self._fatal = True
        for pd in self.pds:
            for qp in list(pd.qps.values()):
                qp._device_lost()
            for mr in pd.mrs.values():
                mr.privatize()
        self._nic.close()  # the send queues' pages become private ones

    def fatal_error(self, verb: str) -> VerbsError:
        self.device_lost()
        return fatal.error(verb, self.lab, self.host)

    def call(self, verb: str, request, *, timeout: float | None = None):
        """A setup request to the daemon; its refusal as a VerbsError."""
        if self._closed:
            raise VerbsError(verb, errno.EBADF, "the context is closed")
        if self._fatal:
            raise self.fatal_error(verb)
        try:
            return self.session.call(request, timeout=timeout)
        except client.DaemonError as e:
            if self.device_fatal():
                raise self.fatal_error(verb) from None
            code = getattr(errno, e.errno_name or "", errno.EIO)
            raise VerbsError(verb, code, str(e).split(": ", 1)[-1]) from None
        except OSError:  # the daemon went while we wrote to it
            self._fatal = True
            raise self.fatal_error(verb) from None

    def close(self) -> None:
        """Release every MR, CQ and QP of this context (the daemon does, as
        the session ends) and this process's maps."""
        if self._closed:
            return
        self._closed = True  # from here no call reaches the daemon
        self._watch.stop()
        try:
            # This process's side first: once the session ends, the daemon may
            # give its memory and send queues to another session at once.
            for pd in self.pds:
                for mr in pd.mrs.values():
                    mr.invalidate()
            for cq in list(self.cqs):
                cq.close()
            if not self._lost:
                self._nic.close()  # pages that views still reach become private ones
        finally:
            self.session.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
