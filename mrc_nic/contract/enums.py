"""The OCP controller's enums (mrc_ctl.h), with the C API's values.

Names follow mrc_ctl.h (MRC_CTL_EV_MODE_GEN -> EvMode.GEN). The daemon's
profile tables (mrc_nic.transport.profiles) keep them and the controller
operations (mrc_nic.contract.ctlops) carry them by name; the verbs API
re-exports them (mrc_nic.verbs.enums). The NIC's own EV state, with SKIP,
is a different enum: nic.EvState (enum nic_ev_state).
"""

from __future__ import annotations

import enum


class ProfileState(enum.IntEnum):
    """enum mrc_ctl_profile_state."""

    INIT = 0
    OFFLINE = 1
    ONLINE = 2


class EvFmtMode(enum.IntFlag):
    """enum mrc_ctl_ev_fmt_mode."""

    STEV = 1 << 0
    SRV6 = 1 << 1
    UDP = 1 << 2


class EvMode(enum.IntFlag):
    """enum mrc_ctl_ev_mode."""

    AUTO = 1 << 0
    EXP = 1 << 1
    GEN = 1 << 2


class EvState(enum.IntFlag):
    """enum mrc_ctl_ev_state (the API's; the NIC's own is nic.EvState, with SKIP)."""

    GOOD = 1 << 0
    ASSUMED_BAD = 1 << 1
    DENIED = 1 << 2
    UNKNOWN = 1 << 31
