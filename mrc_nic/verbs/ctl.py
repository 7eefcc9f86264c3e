"""The controller API of the emulated NIC, shaped after OCP mrc_ctl.h (v1.0.1).

What a network controller or NIC driver uses: EV Format profiles, EV profiles
(AUTO, EXP, GEN), CC profiles, EV events, port admin state. Each call names
its OCP counterpart; attributes are dicts with mrc_ctl.h's field names (the
attribute mask is which keys are there), and refusals raise VerbsError with
the errno mrc_ctl.h documents.

    from mrc_nic.verbs import ctl

    with ctl.CtlContext(lab="default", host="h0") as c:     # or a verbs.Context
        ctl.modify_ev_fmt_profile(c, 1, {"profile_state": "OFFLINE",
                                         "ev_fmt_mode": "UDP", "fmt_fields": [8, 8]})
        ctl.modify_ev_fmt_profile(c, 1, {"profile_state": "ONLINE"})
        ctl.modify_ev_profile(c, 5, {"profile_state": "OFFLINE", "ev_mode": "GEN",
                                     "ev_fmt_profile_id": 1, "ev_count": 16,
                                     "fields": [{"width": 8, "init_val": 0x40, "min_val": 0,
                                                 "max_val": 255, "mask": 0xff},
                                                {"width": 8, "min_val": 0, "max_val": 255,
                                                 "mask": 0xff}]})
        ctl.modify_ev_profile(c, 5, {"profile_state": "ONLINE"})
        # a QP takes it: qp.modify(..., MrcQPAttr(ev_profile_id=5), MrcAttrMask.EV_PROFILE_ID)
        cq = ctl.create_ev_event_cq(c)
        for event in cq.poll(16): ...

A CtlContext needs only the host's daemon (no NIC maps); a verbs.Context
serves as well. Profiles live in each host's NIC: configure every host a
QP may run on.
"""

from __future__ import annotations

import errno

from mrc_nic.lab import ctl as _ctl
from mrc_nic.transport import ctlops
from mrc_nic.transport.profiles import (  # noqa: F401 (the API's names)
    EvFmtMode,
    EvMode,
    EvState,
    ProfileState,
)
from mrc_nic.verbs.context import Context, locate
from mrc_nic.verbs.errors import VerbsError

NSCC = "uet-1.0-nscc"  # the OCP name of UET's NSCC (mrc_ctl_device_attr.cc.algorithms)
UNPOPULATED = {"val": 0, "port": 0}  # MRC_CTL_EV_UNPOPULATED
EV_OP_F_ALL_COPIES = 1


class CtlContext:
    """An MRC context for a controller (mrc_create_context on a device): a
    session with one host's daemon."""

    def __init__(self, lab: str | None = None, host: str | None = None) -> None:
        self.lab, self.host = locate(lab, host)
        try:
            self.session = _ctl.Session(self.lab, self.host)
        except _ctl.DaemonError as e:
            raise VerbsError("open_device", errno.ENODEV, str(e)) from None
        self._closed = False

    call = Context.call  # the same session call and errors as a verbs Context

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.session.close()

    def __enter__(self) -> CtlContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query_device(c) -> dict:
    """mrc_ctl_query_device: struct mrc_ctl_device_attr."""
    return c.call("mrc_ctl_query_device", ctlops.CtlQueryDevice()).attr


def modify_ev_fmt_profile(c, ev_fmt_profile_id: int, attr: dict) -> dict:
    """mrc_ctl_modify_ev_fmt_profile: profile_state, ev_fmt_mode, fmt_fields."""
    req = ctlops.EvFmtProfileModify(id=ev_fmt_profile_id, attrs=attr)
    return c.call("mrc_ctl_modify_ev_fmt_profile", req).profile


def query_ev_fmt_profile(c, ev_fmt_profile_id: int) -> dict:
    """mrc_ctl_query_ev_fmt_profile."""
    req = ctlops.EvFmtProfileQuery(id=ev_fmt_profile_id)
    return c.call("mrc_ctl_query_ev_fmt_profile", req).profiles[0]


def modify_ev_profile(c, ev_profile_id: int, attr: dict) -> dict:
    """mrc_ctl_modify_ev_profile: profile_state, ev_mode, ev_fmt_profile_id,
    ev_count, ev_min_active, ev_event_mask, fields (EV_FIELDS_OP
    MODIFY_FIELDS), ev_op {op: REPLACE_EV | MODIFY_EV_STATE, entries}, backup."""
    req = ctlops.EvProfileModify(id=ev_profile_id, attrs=attr)
    return c.call("mrc_ctl_modify_ev_profile", req).profile


def query_ev_profile(c, ev_profile_id: int, *, evs: bool = True) -> dict:
    """mrc_ctl_query_ev_profile; with evs, QUERY_EV_ARRAY and QUERY_EV_STATE."""
    req = ctlops.EvProfileQuery(id=ev_profile_id, evs=evs)
    return c.call("mrc_ctl_query_ev_profile", req).profiles[0]


def modify_cc_profile(c, cc_profile_id: int, attr: dict) -> dict:
    """mrc_ctl_modify_cc_profile: profile_state, algorithm (NSCC or None),
    cc_config (struct mrc_ctl_cc_nscc_cfg fields)."""
    req = ctlops.CcProfileModify(id=cc_profile_id, attrs=attr)
    return c.call("mrc_ctl_modify_cc_profile", req).profile


def query_cc_profile(c, cc_profile_id: int) -> dict:
    """mrc_ctl_query_cc_profile."""
    return c.call("mrc_ctl_query_cc_profile", ctlops.CcProfileQuery(id=cc_profile_id)).profiles[0]


def query_port(c, port_num: int) -> dict:
    """mrc_ctl_query_port: port_admin_state (and the port's carrier and state)."""
    return c.call("mrc_ctl_query_port", ctlops.PortQuery(port=port_num)).ports[0]


def modify_port(c, port_num: int, attr: dict) -> dict:
    """mrc_ctl_modify_port: {"port_admin_state": "ENABLED" | "DISABLED"}."""
    req = ctlops.PortModify(port=port_num, port_admin_state=attr["port_admin_state"])
    return c.call("mrc_ctl_modify_port", req).ports[0]


class EvEventCQ:
    """mrc_ctl_create_ev_event_cq: the host's EV event queue (one per NIC here;
    profile_id narrows what a poll takes)."""

    def __init__(self, c, profile_id: int | None = None) -> None:
        self.c, self.profile_id = c, profile_id

    def poll(self, num_entries: int) -> list[dict]:
        """mrc_ctl_poll_ev_event: {profile_id, ev {val, port}, drop_count, state}."""
        req = ctlops.EvEventPoll(num_entries=num_entries, profile_id=self.profile_id)
        return self.c.call("mrc_ctl_poll_ev_event", req).events


def create_ev_event_cq(c, profile_id: int | None = None) -> EvEventCQ:
    return EvEventCQ(c, profile_id)
