"""The controller API of the emulated NIC, shaped after OCP mrc_ctl.h (v1.0.1).

What a network controller or NIC driver uses: EV Format profiles, EV profiles
(AUTO, EXP, GEN), CC profiles, EV events, port admin state, EV probes. Each call names
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
        # EV probes: no QP; two EVs towards h1 (198.18.0.2), 2 ms to answer
        reqs = [ctl.EpReq(req_id=i, dgid="198.18.0.2", req_ev=ctl.Ev(ev)) for i, ev in
                enumerate((49152, 49153))]
        for rsp in ctl.ep_batch_send_wait(c, ctl.EP_OP_EV_PROBE, reqs, 2_000_000):
            print(rsp.req_id, rsp.port, rsp.rtt, rsp.adj_svc_time)
        # Port status update: tell h1, over port 1, that our ports 1 and 3 are up
        upd = [ctl.EpReq(req_id=0, dgid="198.18.0.2", req_ev=ctl.Ev(49152, 1),
                         port_status=0b1010)]
        ctl.ep_batch_send_wait(c, ctl.EP_OP_PORT_STATUS_UPDATE, upd, 2_000_000)

A CtlContext needs only the host's daemon (no NIC maps); a verbs.Context
serves as well. Profiles live in each host's NIC: configure every host a
QP may run on.
"""

from __future__ import annotations

import dataclasses
import errno

from mrc_nic.contract import ctlops
from mrc_nic.contract import session as _ctl
from mrc_nic.verbs import fatal
from mrc_nic.verbs.context import Context, locate
from mrc_nic.verbs.enums import (  # noqa: F401 (the API's names)
    EvFmtMode,
    EvMode,
    EvState,
    ProfileState,
)
from mrc_nic.verbs.errors import VerbsError

NSCC = "uet-1.0-nscc"  # the OCP name of UET's NSCC (mrc_ctl_device_attr.cc.algorithms)
UNPOPULATED = {"val": 0, "port": 0}  # MRC_CTL_EV_UNPOPULATED
EV_OP_F_ALL_COPIES = 1
EP_OP_EV_PROBE = "EV_PROBE"  # enum mrc_ctl_ep_op_type
EP_OP_PORT_STATUS_UPDATE = "PORT_STATUS_UPDATE"


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
    device_fatal = Context.device_fatal
    _fatal = False

    def fatal_error(self, verb: str) -> VerbsError:
        return fatal.error(verb, self.lab, self.host)

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


# ---- endpoint requests: EV probes ----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Ev:
    """struct mrc_ctl_ev: an EV value (here the UDP source port) and its port,
    1-based (0: the port EV profile 0 gives this AUTO EV)."""

    val: int
    port: int = 0


@dataclasses.dataclass(frozen=True)
class EpReq:
    """struct mrc_ctl_ep_req: dgid is the destination's address on any plane
    (a host's GID), sgid optionally this host's. port_status is
    op.port_status_update.port_status of a PORT_STATUS_UPDATE (bit n: port n
    up; None: this host's own)."""

    req_id: int
    dgid: str
    req_ev: Ev
    sgid: str | None = None
    ev_fmt_mode: str = "UDP"
    port_status: int | None = None

    def as_dict(self) -> dict:
        d = {
            "req_id": self.req_id,
            "dgid": self.dgid,
            "ev_fmt_mode": self.ev_fmt_mode,
            "req_ev": {"val": self.req_ev.val, "port": self.req_ev.port},
        }
        if self.sgid is not None:
            d["sgid"] = self.sgid
        if self.port_status is not None:
            d["op"] = {"port_status_update": {"port_status": self.port_status}}
        return d


@dataclasses.dataclass(frozen=True)
class EpRsp:
    """struct mrc_ctl_ep_rsp (req_id, port, rtt in ns, adj_svc_time) and
    mrc-nic's extensions: the EV, the dgid asked, the RTT before the
    responder's service time was taken off (rtt_raw), that time, ECN, and
    for a PORT_STATUS_UPDATE the responder's own port status (bit n: port n)."""

    req_id: int
    port: int
    rtt: int
    adj_svc_time: int
    ev: int = 0
    dgid: str = ""
    rtt_raw: int = 0
    svc_time: int = 0
    ecn: bool = False
    peer_port_status: int | None = None


def ep_batch_send_wait(
    c, op_type: str, reqs: list[EpReq], rsp_timeout: int, *, req_tc: int = 0
) -> list[EpRsp]:
    """mrc_ctl_ep_batch_send_wait: send the batch (EP_OP_EV_PROBE or
    EP_OP_PORT_STATUS_UPDATE), wait up to rsp_timeout ns, and return the
    responses in arrival order (fewer than the requests when some went
    unanswered, or were not sent because their port is DISABLED: match them
    by req_id)."""
    req = ctlops.EpBatchSendWait(
        reqs=[r.as_dict() for r in reqs], rsp_timeout=rsp_timeout, op_type=op_type, req_tc=req_tc
    )
    wait = rsp_timeout / 1e9 + 5.0  # the daemon answers when the timeout has passed
    reply = c.call("mrc_ctl_ep_batch_send_wait", req, timeout=wait)
    names = {f.name for f in dataclasses.fields(EpRsp)}
    return [EpRsp(**{k: v for k, v in r.items() if k in names}) for r in reply.rsps]
