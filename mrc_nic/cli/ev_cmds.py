"""ev list|deny|allow, ev profile list|show|set|fmt, ev events, ev probe: entropy values,
of one send QP (from its host's daemon and NIC) and as the OCP controller's objects (mrc_ctl.h)."""

from __future__ import annotations

import click

from mrc_nic.cli import nicctl, output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.cli.common import DURATION, parse_int
from mrc_nic.cli.nicctl import STATES, host_option


@group()
def ev() -> None:
    """Entropy values (paths): a send QP's, and the NICs' EV profiles, events and probes."""


# ---- one QP's EVs --------------------------------------------------------------------------
def _ev_row(record: dict) -> dict:
    """The columns of `ev list`, from qpstats' EV record."""
    c = record["counters"]
    return {
        "ev": record["ev"],
        "plane": record["plane"],
        "state": record["state"],
        **{k: c[k] for k in ("tx_pkts", "acks", "lost_pkts", "retx_pkts", "probe_replies")},
        "rtt_us": round(record["srtt_ns"] / 1e3, 1),
    }


def _ev_list_view(data: dict) -> None:
    qpn, reverse = data["qpn"], data["reverse_ev_set"]
    keys = ("ev", "plane", "state", "tx_pkts", "acks", "lost_pkts", "retx_pkts")
    rows = [[e[k] for k in (*keys, "probe_replies", "rtt_us")] for e in data["evs"]]
    output.table(
        f"EVs of QP {qpn:#x}",
        ["#ev", "#plane", "state", "#tx", "#acks", "#lost", "#retx", "#probe replies", "#srtt us"],
        rows,
    )
    if reverse:  # the paths its ACKs take back, kept by the receiver (issue 19)
        output.table(
            f"reverse EV set of QP {qpn:#x}: its ACKs' paths (receive QP "
            f"{reverse[0]['receive_qpn']:#x})",
            ["#ev", "#plane", "state", "#probe replies", "#rtt us"],
            [[r["ev"], r["plane"], r["state"], r["probe_replies"], r["rtt_us"]] for r in reverse],
        )


@ev.command("list", view=_ev_list_view)
@click.argument("qpn", type=parse_int)
@pass_app
def ev_list(app: App, qpn: int) -> dict:
    """State and counters of each EV of send QP QPN, and the reverse EV set its
    ACKs come back over (kept by the receiver)."""
    from mrc_nic import nic
    from mrc_nic.observe import qpstats

    with nic.NicMaps.open(app.lab()) as maps:
        try:
            evs = [_ev_row(record) for record in qpstats.ev_records(maps, qpn)]
            reverse = qpstats.reverse_ev_records(maps, qpn)
        except KeyError:
            raise click.UsageError(
                f"no send QP {qpn:#x} in lab {app.lab()!r} (see mrc-nic qp list)"
            ) from None
    return {"qpn": qpn, "evs": evs, "reverse_ev_set": reverse}


def _ev_set(app: App, qpn: int, value: int, state: str) -> None:
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client

    client.call(app.lab(), app.host_of_qp(qpn), ops.EvSet(qpn=qpn, ev=value, state=state))
    output.success(f"EV {value} of QP {qpn:#x}: {state}")


@ev.command("deny", formats=())
@click.argument("qpn", type=parse_int)
@click.argument("value", type=int)
@pass_app
def ev_deny(app: App, qpn: int, value: int) -> None:
    """Take an EV out of use (DENIED) until `ev allow`."""
    _ev_set(app, qpn, value, "DENIED")


@ev.command("allow", formats=())
@click.argument("qpn", type=parse_int)
@click.argument("value", type=int)
@pass_app
def ev_allow(app: App, qpn: int, value: int) -> None:
    """Put an EV back in use (GOOD)."""
    _ev_set(app, qpn, value, "GOOD")


# ---- ev profile ----------------------------------------------------------------------------
@ev.group("profile")
def ev_profile() -> None:
    """EV profiles (OCP mrc_ctl_ev_profile): the EV sets QPs take by ev_profile_id."""


def _parse_field(text: str) -> dict:
    parts = text.split(":")
    if len(parts) != 5:
        raise click.BadParameter(
            f"a field is WIDTH:INIT:MIN:MAX:MASK (e.g. 8:0:0:255:0xff), not {text!r}"
        )
    try:
        w, init, lo, hi, mask = (int(p, 0) for p in parts)
    except ValueError:
        raise click.BadParameter(f"field {text!r}: numbers only (0x.. for hex)") from None
    return {"width": w, "init_val": init, "min_val": lo, "max_val": hi, "mask": mask}


def _parse_ev(text: str) -> dict:
    val, _, port_text = text.partition("@")
    try:
        return {"val": int(val, 0), "port": int(port_text or "0", 0)}
    except ValueError:
        raise click.BadParameter(f"an EV is VALUE@PORT (e.g. 0x1234@1), not {text!r}") from None


_EV_PROFILE_COLS = ["host", "#id", "kind", "state", "#fmt", "#ev_count", "#min_active", "events"]


def _ev_profile_row(p: dict) -> list:
    return [
        p["id"], p["ev_mode"], p["state"], p["ev_fmt_profile_id"], p["ev_count"],
        p["ev_min_active"], ",".join(p["ev_event_mask"]), len(p["qps"]),
    ]  # fmt: skip


@ev_profile.command(
    "list", view=nicctl.profile_table("EV profiles", [*_EV_PROFILE_COLS, "#qps"], _ev_profile_row)
)
@host_option
@pass_app
def ev_profile_list(app: App, hosts) -> dict:
    """Every EV profile of each NIC, with its kind (ev_mode) and state."""
    from mrc_nic.contract import ctlops

    return nicctl.profiles(app, hosts, ctlops.EvProfileQuery())


def _ev_profile_view(data: dict) -> None:
    for h, p in data["hosts"].items():
        output.info(
            f"{h}: EV profile {p['id']} {p['ev_mode']} {p['state']}, {p['ev_count']} EVs, "
            f"ev_min_active {p['ev_min_active']}, backup {p['backup']}, QPs {p['qps']}"
        )
        states = p.get("ev_states", {})
        rows = [
            [e["val"], e["port"], e.get("wire", ""), states.get(str(e.get("wire")), "")]
            for e in p.get("evs", [])
        ]
        if rows:
            output.table(None, ["#val", "#port", "#wire (UDP sport)", "state"], rows)


@ev_profile.command("show", view=_ev_profile_view)
@click.argument("profile_id", type=parse_int)
@host_option
@pass_app
def ev_profile_show(app: App, profile_id: int, hosts) -> dict:
    """One EV profile: attributes, its EV array (value, port, wire EV) and states."""
    from mrc_nic.contract import ctlops

    return nicctl.profiles(app, hosts, ctlops.EvProfileQuery(id=profile_id, evs=True), one=True)


def _set_view(what: str, mode: str):
    """The view of a profile change: one line per host."""

    def view(data: dict) -> None:
        for h, p in data["hosts"].items():
            output.success(f"{h}: {what} {p['id']}: {p[mode] or 'none'} {p['state']}")

    return view


def _ev_profile_calls(state, attrs: dict, replaces, denies, allows) -> list[dict]:
    """The modify calls of `ev profile set`, in order: configuration first, then
    each EV operation (one per call), then the state change."""
    ops = []
    if replaces:
        entries = []
        for r in replaces:
            old, sep, new = r.partition("=")
            if not sep:
                raise click.BadParameter(f"--replace is OLD=NEW (VALUE@PORT each), not {r!r}")
            entries.append({"ev": _parse_ev(old), "ev_new": _parse_ev(new)})
        ops.append({"op": "REPLACE_EV", "entries": entries})
    state_entries = [{"ev": _parse_ev(d), "state": "DENIED"} for d in denies]
    state_entries += [{"ev": _parse_ev(a), "state": "GOOD"} for a in allows]
    if state_entries:
        ops.append({"op": "MODIFY_EV_STATE", "entries": state_entries})
    # INIT -> OFFLINE needs the configuration in the same call.
    if state is not None and state.upper() == "OFFLINE" and attrs:
        return [{**attrs, "profile_state": "OFFLINE"}] + [{"ev_op": op} for op in ops]
    calls = [attrs] if attrs else []
    calls += [{"ev_op": op} for op in ops]
    if state is not None:
        calls.append({"profile_state": state.upper()})
    if not calls:
        raise click.UsageError("nothing to change: give --state, --mode, --field, --deny, ...")
    return calls


@ev_profile.command(
    "set",
    view=_set_view("EV profile", "ev_mode"),
    epilog="""\b
Examples (a generated profile of 16 EVs on format 1):
  mrc-nic ev profile fmt 1 --state OFFLINE --mode UDP --fields 8,8
  mrc-nic ev profile fmt 1 --state ONLINE
  mrc-nic ev profile set 5 --state OFFLINE --mode GEN --fmt 1 --count 16 \\
      --field 8:0x40:0:255:0xff --field 8:0:0:255:0xff
  mrc-nic ev profile set 5 --state ONLINE
  mrc-nic write h0 h1 --size 64M --ev-profile 5
  mrc-nic ev profile set 5 --deny 0x4a17@2          # MODIFY_EV_STATE DENIED""",
)
@click.argument("profile_id", type=parse_int)
@click.option("--state", type=STATES, default=None, help="profile_state to move to.")
@click.option("--mode", type=click.Choice(["AUTO", "EXP", "GEN"], case_sensitive=False))
@click.option("--fmt", "fmt_id", type=parse_int, default=None, help="ev_fmt_profile_id.")
@click.option("--count", type=int, default=None, help="ev_count.")
@click.option("--min-active", type=int, default=None, help="ev_min_active.")
@click.option("--event-mask", default=None, help="GOOD,ASSUMED_BAD (or '' for none).")
@click.option(
    "--probe-good",
    type=int,
    default=None,
    help="good probes an ASSUMED_BAD EV needs to be GOOD again (mrc-nic extension; default 3).",
)
@click.option("--field", "fields", multiple=True, help="WIDTH:INIT:MIN:MAX:MASK, in order.")
@click.option(
    "--replace",
    "replaces",
    multiple=True,
    help="REPLACE_EV: OLD=NEW, each VALUE@PORT (OLD 0@0: an unpopulated slot).",
)
@click.option("--deny", "denies", multiple=True, help="MODIFY_EV_STATE DENIED: VALUE@PORT.")
@click.option("--allow", "allows", multiple=True, help="MODIFY_EV_STATE GOOD: VALUE@PORT.")
@click.option("--backup", "backups", multiple=True, help="replacement EVs, VALUE@PORT.")
@host_option
@pass_app
def ev_profile_set(app: App, profile_id, state, mode, fmt_id, count, min_active, event_mask,
                   probe_good, fields, replaces, denies, allows, backups, hosts):  # fmt: off
    """Create or change an EV profile (mrc_ctl_modify_ev_profile)."""
    from mrc_nic.contract import ctlops

    attrs: dict = {}
    for key, value in (
        ("ev_mode", mode),
        ("ev_fmt_profile_id", fmt_id),
        ("ev_count", count),
        ("ev_min_active", min_active),
        ("probe_good", probe_good),
    ):
        if value is not None:
            attrs[key] = value.upper() if isinstance(value, str) else value
    if event_mask is not None:
        attrs["ev_event_mask"] = [s.strip().upper() for s in event_mask.split(",") if s.strip()]
    if fields:
        attrs["fields"] = [_parse_field(f) for f in fields]
    if backups:
        attrs["backup"] = [_parse_ev(b) for b in backups]
    last = {}
    for call in _ev_profile_calls(state, attrs, replaces, denies, allows):
        last = nicctl.call_hosts(app, hosts, ctlops.EvProfileModify(id=profile_id, attrs=call))
    return {"hosts": {h: r.profile for h, r in last.items()}}


def _ev_fmt_view(data: dict) -> None:
    for h, p in data["hosts"].items():
        output.info(
            f"{h}: EV Format profile {p['id']} {p['ev_fmt_mode']} {p['state']} "
            f"fields {p['fmt_fields']}"
        )


@ev_profile.command("fmt", view=_ev_fmt_view)
@click.argument("profile_id", type=parse_int)
@click.option("--state", type=STATES, default=None)
@click.option("--mode", type=click.Choice(["UDP", "STEV", "SRV6"], case_sensitive=False))
@click.option("--fields", default=None, help="Field widths, e.g. 8,8 (at most 16 bits in all).")
@host_option
@pass_app
def ev_profile_fmt(app: App, profile_id, state, mode, fields, hosts) -> dict:
    """Create, change or show an EV Format profile (mrc_ctl_modify_ev_fmt_profile)."""
    from mrc_nic.contract import ctlops

    attrs: dict = {}
    if mode:
        attrs["ev_fmt_mode"] = mode.upper()
    if fields:
        try:
            attrs["fmt_fields"] = [int(w) for w in fields.split(",")]
        except ValueError:
            raise click.BadParameter(f"--fields are widths, e.g. 8,8, not {fields!r}") from None
    if state:
        attrs["profile_state"] = state.upper()
    if not attrs:
        return nicctl.profiles(app, hosts, ctlops.EvFmtProfileQuery(id=profile_id), one=True)
    replies = nicctl.call_hosts(app, hosts, ctlops.EvFmtProfileModify(id=profile_id, attrs=attrs))
    return {"hosts": {h: r.profile for h, r in replies.items()}}


# ---- ev events -----------------------------------------------------------------------------
def _ev_events_view(data: dict) -> None:
    rows = [
        [
            h,
            e["profile_id"],
            hex(e["ev"]["val"]),
            e["ev"]["port"],
            e["state"],
            e.get("cause", ""),
            e["drop_count"],
            hex(e["qpn"]),
        ]  # fmt: skip
        for h, events in data["hosts"].items()
        for e in events
    ]
    cols = ["host", "#profile", "ev", "#port", "state", "cause", "#dropped", "qp"]
    output.table("EV events", cols, rows)


@ev.command("events", view=_ev_events_view)
@click.option("--profile", "profile_id", type=parse_int, default=None, help="Only this profile's.")
@click.option("--max", "num", type=click.IntRange(1, 4096), default=64, show_default=True)
@host_option
@pass_app
def ev_events(app: App, profile_id, num, hosts) -> dict:
    """Take EV events off each NIC's EV event queue (mrc_ctl_poll_ev_event):
    {profile_id, ev, drop_count, state} for each change in a profile's
    ev_event_mask, as the NIC made it (with its cause), however soon the next
    followed. `mrc-nic events` is the lab's whole log."""
    from mrc_nic.contract import ctlops

    request = ctlops.EvEventPoll(num_entries=num, profile_id=profile_id)
    replies = nicctl.call_hosts(app, hosts, request)
    return {"hosts": {h: r.events for h, r in replies.items()}}


# ---- ev probe ------------------------------------------------------------------------------
def parse_probe_evs(text: str) -> list[tuple[int, int]]:
    """'49152,49153', '49152-49159', '0x1234@2' -> [(EV, port or 0)]."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        val, _, port_text = part.partition("@")
        try:
            port = int(port_text, 0) if port_text else 0
            lo, dash, hi = val.partition("-")
            first, last = int(lo, 0), int(hi, 0) if dash else int(lo, 0)
        except ValueError:
            raise click.BadParameter(
                f"EVs are VALUE, FIRST-LAST or VALUE@PORT, comma-separated (e.g. "
                f"49152,49153 or 49152-49159), not {part!r}"
            ) from None
        if last < first or last - first >= 4096:
            raise click.BadParameter(f"EV range {part!r}: FIRST-LAST, FIRST <= LAST, < 4096 EVs")
        out += [(v, port) for v in range(first, last + 1)]
    return out


def _ev_probe_view(data: dict) -> None:
    rows = [
        [
            r["req_id"],
            r["dst"],
            r["ev"],
            r["port"],
            nicctl.answered(r),
            nicctl.rtt_us(r),
            "" if r["svc_time"] is None else r["svc_time"],
            "" if r["adj_svc_time"] is None else r["adj_svc_time"],
        ]  # fmt: skip
        for r in data["probes"]
    ]
    cols = ["#req_id", "dst", "#ev", "#port", "answered", "#rtt_us", "#svc_ns", "#adj_svc_time"]
    output.table(
        f"EV probes from {data['host']}: {data['answered']} of {len(rows)} answered within "
        f"{data['timeout_ns'] / 1e6:g} ms",
        cols,
        rows,
    )


@ev.command(
    "probe",
    view=_ev_probe_view,
    epilog="""\b
Examples:
  mrc-nic ev probe h0 --dst h1 --ev 49152,49153
  mrc-nic ev probe h0 --dst h1 --dst h2 --ev 49152-49167 --timeout 5ms --format json
  mrc-nic ev probe h0 --dst 198.18.1.2 --ev 0x9000@2""",
)
@click.argument("host")
@click.option(
    "--dst", "dsts", multiple=True, required=True, help="A destination host (or address)."
)
@click.option(
    "--ev", "evs", required=True, help="EVs (UDP source ports): 49152,49153, 49152-49159, EV@PORT."
)
@click.option(
    "--port",
    type=int,
    default=0,
    help="Port to probe from, 1-based (default: the port EV profile 0 gives each AUTO EV).",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="10ms",
    show_default=True,
    help="How long to wait for answers.",
)
@click.option("--tc", type=click.IntRange(0, 63), default=0, help="The probes' DSCP (0: usual).")
@pass_app
def ev_probe(app: App, host, dsts, evs, port, timeout, tc) -> dict:
    """Probe EVs towards other hosts, without a QP (mrc_ctl_ep_batch_send_wait):
    per probe, answered or not, its RTT and whether the responder's service time
    was taken off it (adj_svc_time)."""
    from mrc_nic.transport.profiles import AUTO_EV_BASE

    pairs = parse_probe_evs(evs)
    dgids = nicctl.ep_targets(app, host, dsts, timeout)
    planes = app.topology().planes
    reqs, rows = [], []
    for dst, dgid in zip(dsts, dgids, strict=True):
        for ev_val, ev_port in pairs:
            p = ev_port or port
            if not p and ev_val >= AUTO_EV_BASE:
                p = (ev_val - AUTO_EV_BASE) % planes + 1
            if not p:
                raise click.BadParameter(
                    f"EV {ev_val} is not an AUTO EV (from {AUTO_EV_BASE}): give its port, "
                    f"--port N or {ev_val}@PORT",
                    param_hint="--ev",
                )
            req_id = len(reqs)
            reqs.append({"req_id": req_id, "dgid": dgid, "req_ev": {"val": ev_val, "port": p}})
            rows.append({"req_id": req_id, "dst": dst, "ev": ev_val, "port": p})
    keys = ("rtt", "adj_svc_time", "rtt_raw", "svc_time", "ecn")
    summary = nicctl.ep_send(app, host, "EV_PROBE", reqs, rows, timeout, keys)
    return summary | {"probes": rows}


COMMANDS = [ev]
