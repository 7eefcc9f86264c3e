"""The host daemon's controller operations: the OCP mrc_ctl.h objects (issue 20).

EV Format profiles, EV profiles, CC profiles, EV events, port admin state:
what a network controller or a NIC driver configures; and its batched,
connectionless EV probes (mrc_ctl_ep_batch_send_wait). Served by
mrc_nic.transport.profileops, evevents and ports; the Python API is mrc_nic.verbs.ctl and the CLI
`mrc-nic ev profile`, `mrc-nic cc profile`, `mrc-nic port admin`. Attribute
names are mrc_ctl.h's (docs/fidelity.md).
"""

from __future__ import annotations

import dataclasses

from mrc_nic.contract.framing import Reply, Request, arg, op, reply


@reply
class CtlDeviceReply(Reply):
    attr: dict = arg("struct mrc_ctl_device_attr: EV and CC limits, formats, modes, options")


@op("ctl_query_device")
class CtlQueryDevice(Request[CtlDeviceReply]):
    """What the NIC's controller interface supports (mrc_ctl_query_device)."""


@reply
class ProfileReply(Reply):
    profile: dict = arg("the profile as query shows it (after the change)")


@reply
class ProfilesReply(Reply):
    profiles: list[dict] = arg("the profiles asked for, by id")


# The modify and query operations of each kind of profile (EV Format, EV, CC) share
# their declaration: a modify takes the profile's id and its attributes by
# mrc_ctl.h name (the attribute mask is which are there), a query one id or all.
@dataclasses.dataclass(kw_only=True)
class ProfileModify(Request[ProfileReply]):
    """Base of the modify operations: create or change one profile; a refused
    call changes nothing."""

    id: int = arg("the profile's id (ev_fmt_profile_id, ev_profile_id, cc_profile_id)")
    attrs: dict = arg(
        "its attributes to set, by mrc_ctl.h name (the operation lists them); a refused call "
        "changes nothing"
    )


@dataclasses.dataclass(kw_only=True)
class ProfileQuery(Request[ProfilesReply]):
    """Base of the query operations: one profile or all of a kind."""

    id: int | None = arg("one profile (null: all)", None)


@op("ev_fmt_profile_modify")
class EvFmtProfileModify(ProfileModify):
    """Create or change an EV Format profile (mrc_ctl_modify_ev_fmt_profile). attrs:
    profile_state (INIT, OFFLINE, ONLINE), ev_fmt_mode (UDP, STEV), fmt_fields
    (widths, MODIFY_FIELDS)."""


@op("ev_fmt_profile_query")
class EvFmtProfileQuery(ProfileQuery):
    """EV Format profiles (mrc_ctl_query_ev_fmt_profile)."""


@op("ev_profile_modify")
class EvProfileModify(ProfileModify):
    """Create or change an EV profile (mrc_ctl_modify_ev_profile). attrs:
    profile_state, ev_mode (AUTO, EXP, GEN), ev_fmt_profile_id, ev_count, ev_min_active,
    ev_event_mask (GOOD, ASSUMED_BAD), fields (MODIFY_FIELDS: width, init_val, min_val,
    max_val, mask), ev_op {op: REPLACE_EV | MODIFY_EV_STATE, entries: [{ev, ev_new,
    state, flags}]} (on an ONLINE profile both reach the live QPs using it), backup
    (replacement EVs) and probe_good (extensions)."""


@op("ev_profile_query")
class EvProfileQuery(ProfileQuery):
    """EV profiles (mrc_ctl_query_ev_profile): attributes, and with evs the
    EV array (QUERY_EV_ARRAY) and each EV's state over the QPs using it (QUERY_EV_STATE)."""

    evs: bool = arg("include the EV array, wire values and states", False)


@op("cc_profile_modify")
class CcProfileModify(ProfileModify):
    """Create or change a CC profile (mrc_ctl_modify_cc_profile; 0..2 are built in).
    attrs: profile_state, algorithm (uet-1.0-nscc, or null: no CC), cc_config
    (struct mrc_ctl_cc_nscc_cfg fields; the rest take NSCC's defaults)."""


@op("cc_profile_query")
class CcProfileQuery(ProfileQuery):
    """CC profiles (mrc_ctl_query_cc_profile)."""


@reply
class EvEventsReply(Reply):
    events: list[dict] = arg(
        "struct mrc_ctl_ev_event records, oldest first: profile_id, ev {val, port}, "
        "drop_count (precise), state; and qpn, wire, time (extensions)"
    )


@op("ev_event_poll")
class EvEventPoll(Request[EvEventsReply]):
    """Take EV events off the host's EV event queue (mrc_ctl_poll_ev_event)."""

    num_entries: int = arg("at most this many (1..4096)", 64)
    profile_id: int | None = arg("only this profile's (null: all)", None)


@reply
class PortsReply(Reply):
    ports: list[dict] = arg(
        "per port (1-based): port_admin_state, carrier, state (ACTIVE: in nic_port_up), its plane"
    )
    peers: list[dict] = arg(
        "the peers' port status as their last PORT_STATUS_UPDATE told this host: host, "
        "port_status (bit n: port n), ports [{port, state UP or DOWN}], updates, age_s, "
        "via_port (an extension: mrc_ctl_query_port has no peers)",
        factory=list,
    )


@op("port_query")
class PortQuery(Request[PortsReply]):
    """Ports' administrative state and status (mrc_ctl_query_port)."""

    port: int | None = arg("one port, 1-based (null: all)", None)


@op("port_modify")
class PortModify(Request[PortsReply]):
    """Enable or disable a port (mrc_ctl_modify_port): a DISABLED port leaves the
    NIC's port bitmap (peers learn it from every ACK) whatever its carrier."""

    port: int = arg("the port, 1-based (plane + 1)")
    port_admin_state: str = arg("ENABLED or DISABLED")


@reply
class EpBatchReply(Reply):
    rsps: list[dict] = arg(
        "struct mrc_ctl_ep_rsp per answered request, in arrival order: req_id, port "
        "(1-based, where the answer came in), rtt (ns, less the responder's service time), "
        "adj_svc_time (1: it was); and ev, dgid, rtt_raw, svc_time, ecn, peer_port_status "
        "(PORT_STATUS_UPDATE: the responder's, bit n: port n) (extensions)"
    )
    unsent: list[int] = arg(
        "req_ids not sent: their port is administratively DISABLED (an extension)", factory=list
    )


@op("ep_batch_send_wait")
class EpBatchSendWait(Request[EpBatchReply]):
    """Send a batch of endpoint operations and wait for the answers
    (mrc_ctl_ep_batch_send_wait): connectionless EV probes, or port status
    updates, no QP at either end; the reply comes when every request is
    answered or rsp_timeout has passed."""

    reqs: list[dict] = arg(
        "struct mrc_ctl_ep_req: req_id (0..65535, unique in the batch), dgid (the "
        "destination's address on any plane), sgid (optional: one of this host's), "
        "ev_fmt_mode (UDP or STEV), req_ev {val: the UDP source port, port: 1-based, "
        "0 for the port EV profile 0 gives an AUTO EV}; PORT_STATUS_UPDATE: op "
        "{port_status_update: {port_status: bit n for port n up}} (left out: this host's own)"
    )
    rsp_timeout: int = arg("how long to wait for the answers, ns (1 us .. 10 s)")
    op_type: str = arg("EV_PROBE or PORT_STATUS_UPDATE", "EV_PROBE")
    req_tc: int = arg("the probes' DSCP (0: the usual class of probes)", 0)


CTL_OPS = [
    CtlQueryDevice,
    EvFmtProfileModify,
    EvFmtProfileQuery,
    EvProfileModify,
    EvProfileQuery,
    CcProfileModify,
    CcProfileQuery,
    EvEventPoll,
    PortQuery,
    PortModify,
    EpBatchSendWait,
]
