"""ev profile|fmt|events|probe, cc profile, port admin|status|update: the OCP controller objects
(mrc_ctl.h).

Each host's NIC has its own profiles (its daemon keeps them); a command goes
to every host of the lab unless --host names one, as a controller configures
every NIC alike. The Python API is mrc_nic.verbs.ctl.
"""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.common import DURATION, format_option, lab_option, pick_lab

host_option = click.option(
    "--host", "hosts", multiple=True, help="Only this host's NIC (default: every host)."
)
STATES = click.Choice(["INIT", "OFFLINE", "ONLINE"], case_sensitive=False)


def _call_all(lab: str | None, hosts: tuple[str, ...], request) -> dict[str, object]:
    """The request to each host's daemon; {host: reply}."""
    from mrc_nic.lab import client
    from mrc_nic.lab.state import open_lab

    name = pick_lab(lab)
    _, topo = open_lab(name)
    for h in hosts:
        if h not in topo.host_names():
            raise click.UsageError(
                f"no host {h!r} in lab {name!r} (hosts: {', '.join(topo.host_names())})"
            )
    return {h: client.call(name, h, request) for h in (hosts or topo.host_names())}


def _int(text: str) -> int:
    return int(text, 0)


# ---- ev profile ----------------------------------------------------------------------------
@click.group("profile")
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


def _profiles(lab, hosts, fmt, request, render, *, one: bool = False) -> None:
    """The list and show commands of EV and CC profiles: the query to each host's
    NIC, then {"hosts": {host: its profiles (one: the profile)}} as JSON, or
    render(that dict) for people."""
    replies = _call_all(lab, hosts, request)
    data = {h: r.profiles[0] if one else r.profiles for h, r in replies.items()}
    if fmt == "json":
        output.emit_json({"hosts": data})
    else:
        render(data)


def _table(title: str, cols: list[str], row):
    """A render for _profiles: one row per (host, profile), row(profile) after the host."""
    return lambda data: output.table(
        title, cols, [[h, *row(p)] for h, ps in data.items() for p in ps]
    )


@ev_profile.command("list")
@host_option
@lab_option
@format_option
def ev_profile_list(hosts, lab, fmt):
    """Every EV profile of each NIC, with its kind (ev_mode) and state."""
    from mrc_nic.contract import ctlops

    cols = ["host", "#id", "kind", "state", "#fmt", "#ev_count", "#min_active", "events", "#qps"]
    row = lambda p: [  # noqa: E731
        p["id"], p["ev_mode"], p["state"], p["ev_fmt_profile_id"], p["ev_count"],
        p["ev_min_active"], ",".join(p["ev_event_mask"]), len(p["qps"]),
    ]  # fmt: skip
    _profiles(lab, hosts, fmt, ctlops.EvProfileQuery(), _table("EV profiles", cols, row))


@ev_profile.command("show")
@click.argument("profile_id", type=_int)
@host_option
@lab_option
@format_option
def ev_profile_show(profile_id, hosts, lab, fmt):
    """One EV profile: attributes, its EV array (value, port, wire EV) and states."""
    from mrc_nic.contract import ctlops

    def render(data: dict) -> None:
        for h, p in data.items():
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

    request = ctlops.EvProfileQuery(id=profile_id, evs=True)
    _profiles(lab, hosts, fmt, request, render, one=True)


@ev_profile.command(
    "set",
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
@click.argument("profile_id", type=_int)
@click.option("--state", type=STATES, default=None, help="profile_state to move to.")
@click.option("--mode", type=click.Choice(["AUTO", "EXP", "GEN"], case_sensitive=False))
@click.option("--fmt", "fmt_id", type=_int, default=None, help="ev_fmt_profile_id.")
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
@lab_option
@format_option
def ev_profile_set(profile_id, state, mode, fmt_id, count, min_active, event_mask, probe_good,
                   fields, replaces, denies, allows, backups, hosts, lab, fmt):  # fmt: off
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
    # Configuration first, then the state change, then each EV operation (one per call).
    calls = []
    if attrs:
        calls.append(attrs)
    calls += [{"ev_op": op} for op in ops]
    if state is not None:
        calls.append({"profile_state": state.upper()})
    if not calls:
        raise click.UsageError("nothing to change: give --state, --mode, --field, --deny, ...")
    # INIT -> OFFLINE needs the configuration in the same call.
    if state is not None and state.upper() == "OFFLINE" and attrs:
        calls = [{**attrs, "profile_state": "OFFLINE"}] + [{"ev_op": op} for op in ops]
    last = {}
    for attrs_call in calls:
        last = _call_all(lab, hosts, ctlops.EvProfileModify(id=profile_id, attrs=attrs_call))
    data = {h: r.profile for h, r in last.items()}
    if fmt == "json":
        output.emit_json({"hosts": data})
    else:
        for h, p in data.items():
            output.success(f"{h}: EV profile {p['id']}: {p['ev_mode']} {p['state']}")


@ev_profile.command("fmt")
@click.argument("profile_id", type=_int)
@click.option("--state", type=STATES, default=None)
@click.option("--mode", type=click.Choice(["UDP", "STEV", "SRV6"], case_sensitive=False))
@click.option("--fields", default=None, help="Field widths, e.g. 8,8 (at most 16 bits in all).")
@host_option
@lab_option
@format_option
def ev_profile_fmt(profile_id, state, mode, fields, hosts, lab, fmt):
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
    if attrs:
        replies = _call_all(lab, hosts, ctlops.EvFmtProfileModify(id=profile_id, attrs=attrs))
        data = {h: r.profile for h, r in replies.items()}
    else:
        replies = _call_all(lab, hosts, ctlops.EvFmtProfileQuery(id=profile_id))
        data = {h: r.profiles[0] for h, r in replies.items()}
    if fmt == "json":
        output.emit_json({"hosts": data})
    else:
        for h, p in data.items():
            output.info(
                f"{h}: EV Format profile {p['id']} {p['ev_fmt_mode']} {p['state']} "
                f"fields {p['fmt_fields']}"
            )


@click.command("events")
@click.option("--profile", "profile_id", type=_int, default=None, help="Only this profile's.")
@click.option("--max", "num", type=click.IntRange(1, 4096), default=64, show_default=True)
@host_option
@lab_option
@format_option
def ev_events(profile_id, num, hosts, lab, fmt):
    """Take EV events off each NIC's EV event queue (mrc_ctl_poll_ev_event):
    {profile_id, ev, drop_count, state} for each change in a profile's
    ev_event_mask, as the NIC made it (with its cause), however soon the next
    followed. `mrc-nic events` is the lab's whole log."""
    from mrc_nic.contract import ctlops

    replies = _call_all(lab, hosts, ctlops.EvEventPoll(num_entries=num, profile_id=profile_id))
    data = {h: r.events for h, r in replies.items()}
    if fmt == "json":
        output.emit_json({"hosts": data})
        return
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
        for h, events in data.items()
        for e in events
    ]
    cols = ["host", "#profile", "ev", "#port", "state", "cause", "#dropped", "qp"]
    output.table("EV events", cols, rows)


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


@click.command(
    "probe",
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
@lab_option
@format_option
def ev_probe(host, dsts, evs, port, timeout, tc, lab, fmt):
    """Probe EVs towards other hosts, without a QP (mrc_ctl_ep_batch_send_wait):
    per probe, answered or not, its RTT and whether the responder's service time
    was taken off it (adj_svc_time)."""
    from mrc_nic.transport.profiles import AUTO_EV_BASE

    pairs = parse_probe_evs(evs)
    name, topo, dgids = _ep_targets(lab, host, dsts, timeout)
    reqs, rows = [], []
    for dst, dgid in zip(dsts, dgids, strict=True):
        for ev, ev_port in pairs:
            p = ev_port or port
            if not p and ev >= AUTO_EV_BASE:
                p = (ev - AUTO_EV_BASE) % topo.planes + 1
            if not p:
                raise click.BadParameter(
                    f"EV {ev} is not an AUTO EV (from {AUTO_EV_BASE}): give its port, "
                    f"--port N or {ev}@PORT",
                    param_hint="--ev",
                )
            req_id = len(reqs)
            reqs.append({"req_id": req_id, "dgid": dgid, "req_ev": {"val": ev, "port": p}})
            rows.append({"req_id": req_id, "dst": dst, "ev": ev, "port": p})
    keys = ("rtt", "adj_svc_time", "rtt_raw", "svc_time", "ecn")
    reply, summary = _ep_send(name, host, "EV_PROBE", reqs, rows, timeout, keys)
    if fmt == "json":
        output.emit_json(summary | {"probes": rows})
        return
    table_rows = [
        [
            r["req_id"],
            r["dst"],
            r["ev"],
            r["port"],
            _answered(r),
            "" if r["rtt"] is None else f"{r['rtt'] / 1000:.1f}",
            "" if r["svc_time"] is None else r["svc_time"],
            "" if r["adj_svc_time"] is None else r["adj_svc_time"],
        ]
        for r in rows
    ]
    cols = ["#req_id", "dst", "#ev", "#port", "answered", "#rtt_us", "#svc_ns", "#adj_svc_time"]
    output.table(
        f"EV probes from {host}: {len(reply.rsps)} of {len(rows)} answered within "
        f"{timeout * 1e3:g} ms",
        cols,
        table_rows,
    )


def _ep_targets(lab, host: str, dsts, timeout: float):
    """An endpoint batch's lab, topology and destinations (host names or
    addresses) as dgids, checked."""
    import ipaddress

    from mrc_nic.lab.state import open_lab

    name = pick_lab(lab)
    _, topo = open_lab(name)
    names = topo.host_names()
    if host not in names:
        raise click.UsageError(f"no host {host!r} in lab {name!r} (hosts: {', '.join(names)})")
    if not 1 <= (timeout * 1e9) <= 10e9:
        raise click.BadParameter("--timeout must be 1us to 10s", param_hint="--timeout")
    dgids = []
    for d in dsts:
        if d in names:
            dgids.append(str(topo.host_address(topo.nodes[d].index, 0)))  # any plane's names it
            continue
        try:
            dgids.append(str(ipaddress.IPv4Address(d)))
        except ValueError:
            raise click.UsageError(
                f"--dst {d!r} is no host of lab {name!r} (hosts: {', '.join(names)}) nor an address"
            ) from None
    return name, topo, dgids


def _ep_send(name: str, host: str, op_type: str, reqs, rows, timeout: float, keys):
    """Send an endpoint batch and fill each row (by req_id) with its answer:
    answered, its place in the arrival order, the port it came in on and keys
    (None when unanswered), and whether it was sent (not from a DISABLED port).
    The reply, and a summary for --format json."""
    from mrc_nic.contract import ctlops
    from mrc_nic.lab import client

    timeout_ns = max(1000, round(timeout * 1e9))
    request = ctlops.EpBatchSendWait(reqs=reqs, rsp_timeout=timeout_ns, op_type=op_type)
    reply = client.call(name, host, request, timeout=timeout + 5.0)
    by_id = {r["req_id"]: (i, r) for i, r in enumerate(reply.rsps)}
    unsent = set(reply.unsent)
    for row in rows:
        i, r = by_id.get(row["req_id"], (None, None))
        row["sent"] = row["req_id"] not in unsent
        row["answered"] = r is not None
        row["arrival"] = i  # its place in the arrival order
        for k in keys:
            row[k] = None if r is None else r[k]
        if r is not None:
            row["port"] = r["port"]
    summary = {
        "host": host,
        "timeout_ns": timeout_ns,
        "sent": len(rows) - len(reply.unsent),
        "answered": len(reply.rsps),
    }
    return reply, summary


def _answered(row: dict) -> str:
    return "yes" if row["answered"] else "no" if row["sent"] else "not sent (port DISABLED)"


# ---- cc profile ----------------------------------------------------------------------------
@click.group()
def cc() -> None:
    """Congestion control (OCP CC profiles)."""


@cc.group("profile")
def cc_profile() -> None:
    """CC profiles (mrc_ctl_cc_profile): what a QP's cc_profile_id names."""


@cc_profile.command("list")
@host_option
@lab_option
@format_option
def cc_profile_list(hosts, lab, fmt):
    """Every CC profile of each NIC: algorithm (uet-1.0-nscc, or none) and state."""
    from mrc_nic.contract import ctlops

    cols = ["host", "#id", "name", "algorithm", "state", "#qps"]
    row = lambda p: [  # noqa: E731
        p["id"], p["name"] or "", p["algorithm"] or "none", p["state"], len(p["qps"]),
    ]  # fmt: skip
    _profiles(lab, hosts, fmt, ctlops.CcProfileQuery(), _table("CC profiles", cols, row))


@cc_profile.command(
    "set",
    epilog="""\b
Examples:
  mrc-nic cc profile set 7 --state OFFLINE --algorithm uet-1.0-nscc
  mrc-nic cc profile set 7 --state ONLINE --cfg max_cwnd=65536 --cfg gamma=0.5
  mrc-nic write h0 h1 --size 64M --cc-profile 7""",
)
@click.argument("profile_id", type=_int)
@click.option("--state", type=STATES, default=None)
@click.option("--algorithm", default=None, help="uet-1.0-nscc, or 'none' (no CC: fixed window).")
@click.option("--cfg", "cfgs", multiple=True, help="NAME=VALUE of mrc_ctl_cc_nscc_cfg.")
@host_option
@lab_option
@format_option
def cc_profile_set(profile_id, state, algorithm, cfgs, hosts, lab, fmt):
    """Create or change a CC profile (mrc_ctl_modify_cc_profile)."""
    from mrc_nic.contract import ctlops

    attrs: dict = {}
    if algorithm is not None:
        attrs["algorithm"] = None if algorithm.lower() == "none" else algorithm
    if cfgs or (state and state.upper() == "ONLINE"):
        config = {}
        for c in cfgs:
            key, sep, value = c.partition("=")
            if not sep:
                raise click.BadParameter(f"--cfg is NAME=VALUE (e.g. max_cwnd=65536), not {c!r}")
            try:
                config[key] = int(value, 0)
            except ValueError:
                try:
                    config[key] = float(value)
                except ValueError:
                    config[key] = value.lower() in ("1", "true", "yes")
        attrs["cc_config"] = config
    if state:
        attrs["profile_state"] = state.upper()
    if not attrs:
        raise click.UsageError("nothing to change: give --state, --algorithm or --cfg")
    replies = _call_all(lab, hosts, ctlops.CcProfileModify(id=profile_id, attrs=attrs))
    data = {h: r.profile for h, r in replies.items()}
    if fmt == "json":
        output.emit_json({"hosts": data})
    else:
        for h, p in data.items():
            output.success(f"{h}: CC profile {p['id']}: {p['algorithm'] or 'none'} {p['state']}")


@cc_profile.command("show")
@click.argument("profile_id", type=_int)
@host_option
@lab_option
@format_option
def cc_profile_show(profile_id, hosts, lab, fmt):
    """One CC profile with its NSCC configuration."""
    from mrc_nic.contract import ctlops

    def render(data: dict) -> None:
        for h, p in data.items():
            output.info(f"{h}: CC profile {p['id']} {p['algorithm'] or 'none'} {p['state']}")
            for k, v in (p["cc_config"] or {}).items():
                output.info(f"  {k} = {v}")

    _profiles(lab, hosts, fmt, ctlops.CcProfileQuery(id=profile_id), render, one=True)


# ---- ports (NIC side) ----------------------------------------------------------------------
@click.command("admin")
@click.argument("host")
@click.argument("port_num", type=int)
@click.argument("state", type=click.Choice(["enabled", "disabled"], case_sensitive=False))
@lab_option
@format_option
def port_admin(host, port_num, state, lab, fmt):
    """Enable or disable port PORT_NUM (1-based: plane + 1) of HOST's NIC
    (mrc_ctl_modify_port). A disabled port is down to the NIC and to its
    peers (the port bitmap in every ACK), its carrier untouched."""
    from mrc_nic.contract import ctlops

    replies = _call_all(
        lab, (host,), ctlops.PortModify(port=port_num, port_admin_state=state.upper())
    )
    p = replies[host].ports[0]
    if fmt == "json":
        output.emit_json(p)
    else:
        output.success(f"{host} port {p['port']}: {p['port_admin_state']} ({p['state']})")


@click.command("status")
@click.argument("host")
@lab_option
@format_option
def port_status(host, lab, fmt):
    """Administrative state, carrier and NIC state of each of HOST's ports
    (mrc_ctl_query_port), and its peers' ports as their last port status
    update (`mrc-nic port update`) told HOST."""
    from mrc_nic.contract import ctlops

    reply = _call_all(lab, (host,), ctlops.PortQuery()).get(host)
    if fmt == "json":
        output.emit_json({"host": host, "ports": reply.ports, "peers": reply.peers})
        return
    rows = [
        [p["port"], p["plane"], p["port_admin_state"], p["carrier"], p["state"]]
        for p in reply.ports
    ]
    output.table(f"ports of {host}", ["#port", "#plane", "admin", "carrier", "state"], rows)
    rows = [
        [
            peer["host"],
            " ".join(f"{q['port']}:{q['state']}" for q in peer["ports"]),
            peer["updates"],
            f"{peer['age_s']:.3f}",
            peer["via_port"],
        ]
        for peer in reply.peers
    ]
    if rows:
        cols = ["peer", "its ports (as it told us)", "#updates", "#age_s", "#via_port"]
        output.table(f"peers' port status at {host}", cols, rows)


def _parse_ports_up(text: str, planes: int) -> int:
    """'1,2,4' (ports up, 1-based) or 'none' -> port_status (bit n: port n)."""
    if text.strip().lower() in ("", "none"):
        return 0
    mask = 0
    for part in text.split(","):
        try:
            n = int(part, 0)
        except ValueError:
            n = 0
        if not 1 <= n <= planes:
            raise click.BadParameter(
                f"ports are 1..{planes}, comma-separated (e.g. 1,2), or 'none'; not {part!r}",
                param_hint="--status",
            )
        mask |= 1 << n
    return mask


@click.command(
    "update",
    epilog="""\b
Examples:
  mrc-nic port update h0 --dst h1                 # h0's own port status, from every port
  mrc-nic port update h0 --dst h1 --dst h2 --status 1,3 --port 1
  mrc-nic port status h1 --format json            # h1's view of h0's ports: peers""",
)
@click.argument("host")
@click.option(
    "--dst", "dsts", multiple=True, required=True, help="A peer host (or address) to tell."
)
@click.option(
    "--status",
    "status_text",
    default=None,
    help="The ports to report up, 1-based (e.g. 1,2,4; 'none': all down). Default: "
    "HOST's own (its NIC's port bitmap).",
)
@click.option(
    "--port",
    "from_ports",
    multiple=True,
    type=int,
    help="Send from this port, 1-based (repeat). Default: every port of HOST.",
)
@click.option("--timeout", type=DURATION, default="10ms", show_default=True)
@lab_option
@format_option
def port_update(host, dsts, status_text, from_ports, timeout, lab, fmt):
    """Tell peers HOST's port status, without a QP (mrc_ctl_ep_batch_send_wait,
    PORT_STATUS_UPDATE): one update per destination and port, on that port's
    plane; each peer's NIC records it and answers with its own status."""
    from mrc_nic.transport.profiles import AUTO_EV_BASE

    name, topo, dgids = _ep_targets(lab, host, dsts, timeout)
    for n in from_ports:
        if not 1 <= n <= topo.planes:
            raise click.BadParameter(f"ports are 1..{topo.planes}, not {n}", param_hint="--port")
    status = None if status_text is None else _parse_ports_up(status_text, topo.planes)
    op = None if status is None else {"port_status_update": {"port_status": status}}
    reqs, rows = [], []
    for dst, dgid in zip(dsts, dgids, strict=True):
        for n in from_ports or range(1, topo.planes + 1):
            ev = AUTO_EV_BASE + n - 1  # the AUTO EV of port n's plane (EV profile 0)
            req = {"req_id": len(reqs), "dgid": dgid, "req_ev": {"val": ev, "port": n}}
            reqs.append(req | ({"op": op} if op is not None else {}))
            rows.append({"req_id": req["req_id"], "dst": dst, "ev": ev, "port": n})
    keys = ("rtt", "peer_port_status")
    reply, summary = _ep_send(name, host, "PORT_STATUS_UPDATE", reqs, rows, timeout, keys)
    if fmt == "json":
        output.emit_json(summary | {"port_status": status, "updates": rows})
        return
    table_rows = [
        [
            r["dst"],
            r["port"],
            _answered(r),
            "" if r["rtt"] is None else f"{r['rtt'] / 1000:.1f}",
            "" if r["peer_port_status"] is None else _ports_text(r["peer_port_status"]),
        ]
        for r in rows
    ]
    what = "its own" if status is None else _ports_text(status)
    output.table(
        f"port status updates from {host} ({what}): {len(reply.rsps)} of {len(rows)} answered",
        ["dst", "#port", "answered", "#rtt_us", "dst's ports up"],
        table_rows,
    )


def _ports_text(mask: int) -> str:
    """A port status (bit n: port n) as the ports that are up."""
    up = [str(n) for n in range(1, 33) if mask >> n & 1]
    return ",".join(up) or "none"


# `ev profile` and `port admin|status` join the `ev` and `port` groups
# (qp_cmds, port_cmds) where those are defined; `cc` is this module's own.
COMMANDS = [cc]
