"""Attach and detach XDP programs by netlink (pyroute2).

The program fd travels in the netlink message, so a caller in the root
namespace can attach to an interface of any lab namespace through
IPRoute(netns=...) (bcc's own attach works only in the caller's namespace).
"""

from __future__ import annotations

from typing import Any

# XDP attach flags (include/uapi/linux/if_link.h).
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
MODES = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE, "auto": 0}


def flags(mode: str) -> int:
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"XDP mode must be one of {sorted(MODES)}, not {mode!r}") from None


def attach(ipr: Any, ifindex: int, fd: int, mode: str = "native") -> None:
    """Attach program fd at XDP of an interface, replacing one attached in that mode."""
    ipr.link(
        "set", index=ifindex, xdp={"attrs": [("IFLA_XDP_FD", fd), ("IFLA_XDP_FLAGS", flags(mode))]}
    )


def detach(ipr: Any, ifindex: int, mode: str = "native") -> None:
    """Remove whatever XDP program is attached to an interface in that mode."""
    attach(ipr, ifindex, -1, mode)
