"""The OCP controller objects of one host's NIC (mrc_ctl.h, API v1.0.1): EV Format
profiles, EV profiles, CC profiles, as the host daemon keeps them.

The objects live in transport.ev_profiles (EV Format
and EV profiles; their operations in transport.ev_tables and ev_arrays) and
transport.cc_profiles; the checks they share in
transport.profilebase; the enums are the contract's (mrc_nic.contract.enums). Pure
Python, no maps: the daemon (mrc_nic.transport.daemon) holds one
ProfileTable, serves its operations (mrc_nic.contract.ctlops) and asks it for
a QP's EVs (EvProfile.qp_evs) and NSCC configuration (ProfileTable.nscc_config)
when the QP connects. Names are mrc_ctl.h's; docs/fidelity.md lists them
against the OCP ones.

Lifecycle (every profile kind): INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT.
A profile is created by its first modify (INIT), configured in OFFLINE and
used by QPs only ONLINE; ONLINE -> OFFLINE is EBUSY while a QP uses it.
"""

from __future__ import annotations

from mrc_nic.contract.enums import EvFmtMode, EvMode, EvState, ProfileState  # noqa: F401
from mrc_nic.transport import nscc
from mrc_nic.transport.cc_profiles import (  # noqa: F401 (the table's names, for its users)
    ALGORITHMS,
    CC_MAX_PROFILES,
    NSCC_ALGORITHM,
    CcProfile,
    CcTable,
)
from mrc_nic.transport.ev_profiles import (  # noqa: F401
    AUTO_EV_BASE,
    DEFAULT_EV_PROFILE,
    DEFAULT_PROBE_GOOD,
    EV_MAX_COUNT_PROFILE,
    EV_MAX_FMT_PROFILES,
    EV_MAX_PROFILES,
    EVENT_MASK_ALLOWED,
    SUPPORTED_FMT_MODES,
    UNPOPULATED,
    WIRE_EV_BITS,
    Ev,
    EvField,
    EvFmtField,
    EvFmtProfile,
    EvProfile,
    expand,
)
from mrc_nic.transport.ev_tables import EvTable
from mrc_nic.transport.profilebase import ProfileError  # noqa: F401

# mrc_ctl_attr_opt: what this NIC supports
OPT_EV_EVENT = 1 << 2
OPT_EV_EVENT_PRECISE_DROP_CNT = 1 << 4
OPT_EP_OP_EV_PROBE = 1 << 5


# ---- the table -----------------------------------------------------------------------------
class ProfileTable(EvTable, CcTable):
    """One host NIC's EV Format, EV and CC profiles (mrc_ctl.h)."""

    def __init__(self, planes: int) -> None:
        self.planes = planes
        self.fmt: dict[int, EvFmtProfile] = {}
        self.ev: dict[int, EvProfile] = {
            DEFAULT_EV_PROFILE: EvProfile(
                DEFAULT_EV_PROFILE,
                ProfileState.ONLINE,
                EvMode.AUTO,
                ev_count=128,
                ev_min_active=32,
                ev_event_mask=int(EVENT_MASK_ALLOWED),
            )
        }
        self.cc: dict[int, CcProfile] = {
            p.id: CcProfile(
                p.id,
                ProfileState.ONLINE,
                NSCC_ALGORITHM if p.nscc else None,
                p.nscc,
                builtin=p.name,
            )
            for p in nscc.PROFILES.values()
        }
        # profile id -> QPs using it (EBUSY for ONLINE -> OFFLINE)
        self.ev_users: dict[int, set[int]] = {}
        self.cc_users: dict[int, set[int]] = {}

    # ---- device --------------------------------------------------------------------------
    def device_attr(self) -> dict:
        """struct mrc_ctl_device_attr."""
        used = sum(len(p.evs) for p in self.ev.values())
        max_count = EV_MAX_COUNT_PROFILE * EV_MAX_PROFILES
        return {
            "mrc_ctl_protocol_version": 1,
            "ev": {
                "ev_max_fmt_profiles": EV_MAX_FMT_PROFILES,
                "ev_max_profiles": EV_MAX_PROFILES,
                "ev_max_count": max_count,
                "ev_free_count": max_count - used,
                "ev_max_count_profile": EV_MAX_COUNT_PROFILE,
                "ev_count_align": 1,
                "ev_max_width": WIRE_EV_BITS,
                "ev_fmt_mode_mask": [m.name for m in EvFmtMode if m & SUPPORTED_FMT_MODES],
                "ev_mode_mask": [m.name for m in EvMode],
                "ev_op_max_entries": EV_MAX_COUNT_PROFILE,
            },
            "cc": {"cc_max_profiles": CC_MAX_PROFILES, "algorithms": list(ALGORITHMS)},
            "phy_port_mask": (1 << self.planes) - 1 << 1,
            "opt_attr": ["EV_EVENT", "EV_EVENT_PRECISE_DROP_CNT", "EP_OP_EV_PROBE"],
        }

    # ---- users ---------------------------------------------------------------------------
    def attach(self, qpn: int, ev_profile_id: int | None, cc_profile_id: int | None) -> None:
        if ev_profile_id is not None:
            self.ev_users.setdefault(ev_profile_id, set()).add(qpn)
        if cc_profile_id is not None:
            self.cc_users.setdefault(cc_profile_id, set()).add(qpn)

    def detach(self, qpn: int) -> None:
        for users in (*self.ev_users.values(), *self.cc_users.values()):
            users.discard(qpn)

    def users_of(self, ev_profile_id: int) -> set[int]:
        return set(self.ev_users.get(ev_profile_id, ()))
