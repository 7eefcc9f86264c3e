"""The attributes an application gives its QP, checked: what modify_qp may take.

Pure functions of the request's attributes and what they are checked against
(the lab's planes, the host's profiles); each takes (pops) the attributes it
knows from the dict, so that what is left over is refused. Used by
transport.qplife.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from mrc_nic import nic
from mrc_nic.contract.framing import RequestError
from mrc_nic.lab.topology import Topology
from mrc_nic.transport import nscc
from mrc_nic.transport.host import host_with_address
from mrc_nic.transport.profiles import ProfileTable
from mrc_nic.transport.qp import DEFAULT_CWND, DEFAULT_REORDER_NS, EV_COUNT, REORDER_NS_MAX
from mrc_nic.transport.sessions import einval

ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE = 1, 2
ACCESS_KNOWN = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE
MAX_WR = 4096  # work requests outstanding per queue: the NIC's SQ_DEPTH, the rest in the library
MAX_SGE = 16
PATH_MTUS = (256, 512, 1024, 2048, 4096)


@dataclasses.dataclass
class SendSetup:
    """A send QP's mrc-nic extension attributes (RTS), checked."""

    cwnd: int
    reorder_ns: int
    ev_count: int
    ev_min_active: int | None
    auth_key: bytes | None = None
    nscc: nscc.NsccConfig | None = None


def auth_key(attrs: dict) -> bytes | None:
    """The connection's per-packet authentication key (mrc-nic extension,
    nic.auth), from 32 hex digits; None: packets carry no MAC."""
    key = attrs.pop("auth_key", None)
    if key is None:
        return None
    try:
        raw = bytes.fromhex(key) if isinstance(key, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise einval(
            "auth_key must be 32 hex digits: a 16-byte key that both ends of the connection "
            "share (secrets.token_hex(16))"
        )
    return raw


def psn(attrs: dict, name: str) -> int:
    value = attrs.pop(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFFFF:
        raise einval(f"{name} must be a 24-bit PSN (0..{0xFFFFFF}), not {value!r}")
    return value


def dynamic_mpr(attrs: dict, now: bool) -> bool:
    """The QP's MRC_QP_CAP bits (mrc.h enum mrc_qp_cap): DYNAMIC_MPR is honoured;
    the two responder opt-outs are accepted and change nothing here (the
    NIC always trims and has no service time to report). `now`: the QP's."""
    cap = attrs.pop("cap", None)
    if cap is None:
        return now
    if not isinstance(cap, int) or isinstance(cap, bool) or cap & ~0b111:
        raise einval(
            f"cap must be MRC_QP_CAP bits (1 TRIM_NACK_DEST_UNSUPPORTED, 2 DYNAMIC_MPR, "
            f"4 SVC_TIME_DEST_UNSUPPORTED), not {cap!r}"
        )
    return bool(cap & 0b10)


def access_flags(attrs: dict) -> int:
    access = attrs.pop("qp_access_flags", ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    if not isinstance(access, int) or access & ~ACCESS_KNOWN:
        raise einval(f"qp_access_flags must be a mask of LOCAL_WRITE/REMOTE_WRITE, not {access!r}")
    return access


def path_mtu(attrs: dict) -> int:
    mtu = attrs.pop("path_mtu", 4096)
    if mtu not in PATH_MTUS:
        raise einval(f"path_mtu must be one of {PATH_MTUS}, not {mtu!r}")
    return mtu


def dest_host(topo: Topology, gid: Any) -> int:
    """A peer host from its GID: an address of it on any plane, or its name."""
    if isinstance(gid, str) and gid in topo.nodes and topo.nodes[gid].kind == "host":
        return topo.nodes[gid].index
    try:
        addr = ipaddress.ip_address(gid)
    except (TypeError, ValueError):
        raise einval(f"dest_gid must be a host's address or name, not {gid!r}") from None
    index = host_with_address(topo, addr)
    if index is None:
        raise einval(f"dest_gid {gid} is no host's address in lab {topo.lab!r}")
    return index


def send_extensions(attrs: dict, planes: int, table: ProfileTable, cc_profile_id: int) -> SendSetup:
    """The mrc-nic extension attributes of RTS (docs/api.md), checked:
    window, reorder window, NSCC overrides, the EV count and floor."""
    setup = SendSetup(
        cwnd=attrs.pop("cwnd", DEFAULT_CWND),
        reorder_ns=attrs.pop("reorder_ns", DEFAULT_REORDER_NS),
        ev_count=attrs.pop("ev_count", EV_COUNT),
        ev_min_active=attrs.pop("ev_min_active", None),
        auth_key=auth_key(attrs),
    )
    cc = attrs.pop("cc", None)
    _check_window(setup, planes)
    if cc is not None and not isinstance(cc, dict):
        raise einval("cc must be an object of NSCC fields (struct mrc_ctl_cc_nscc_cfg names)")
    try:  # the host's CC profiles (transport.profiles); checked at INIT, may change since
        config = table.nscc_config(cc_profile_id)
    except (ValueError, RequestError) as e:
        raise einval(str(e)) from None
    if config is None and cc:
        raise einval(f"CC profile {cc_profile_id} has no NSCC to tune (cc)")
    try:
        setup.nscc = config.with_overrides(cc) if config is not None else None
    except ValueError as e:
        raise einval(str(e)) from None
    return setup


def _check_window(setup: SendSetup, planes: int) -> None:
    for name in ("cwnd", "reorder_ns", "ev_count"):
        if not isinstance(getattr(setup, name), int):
            raise einval(f"{name} must be an integer, not {getattr(setup, name)!r}")
    if not 0 <= setup.cwnd <= nic.BITMAP_BITS:
        raise einval(f"cwnd must be 0 (the MPR range) .. {nic.BITMAP_BITS}, not {setup.cwnd}")
    if not 0 <= setup.reorder_ns <= REORDER_NS_MAX:
        raise einval(f"reorder_ns must be 0 (off) .. {REORDER_NS_MAX}, not {setup.reorder_ns}")
    if not 1 <= setup.ev_count <= nic.MAX_QP_EVS or setup.ev_count % planes:
        raise einval(
            f"ev_count must be 1..{nic.MAX_QP_EVS} and a multiple of the lab's {planes} "
            f"planes (EVs are equal per plane), not {setup.ev_count}"
        )
    # None: the EV profile's floor (a quarter of ev_count on the default profile)
    if setup.ev_min_active is not None and (
        not isinstance(setup.ev_min_active, int) or not 0 <= setup.ev_min_active <= setup.ev_count
    ):
        raise einval(
            f"ev_min_active must be 0..ev_count ({setup.ev_count}), not {setup.ev_min_active!r}"
        )
