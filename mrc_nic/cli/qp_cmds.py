"""write, qp list|show, ev list|deny|allow: the transport (write posts through the verbs API)."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.common import format_option, lab_option, pick_lab


def _size(ctx, param, value):
    from mrc_nic.workloads.rdma_write import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(f"bad size: {e}") from None


@click.command(
    epilog="""\b
Examples:
  mrc-nic write h0 h1 --size 1G --verify
  mrc-nic write h0 h1 --size 256M --qps 4 --imm
  mrc-nic write h0 h1 --size 1G --evs 256 --ev-min-active 64"""
)
@click.argument("src")
@click.argument("dst")
@click.option(
    "--size",
    required=True,
    callback=_size,
    help="Bytes: 4096, 64K, 256MiB, 1.5G, 1T (K..T binary, KB..TB decimal; at most 1 TiB).",
)
@click.option("--qps", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--imm", is_flag=True, help="WRITE_WITH_IMM: completions at the receiver, in order.")
@click.option("--verify", is_flag=True, help="Compare every byte that arrived with what was sent.")
@click.option(
    "--auth",
    is_flag=True,
    help="A MAC on every packet, with a fresh key for this connection (mrc-nic extension): "
    "forged packets are dropped and counted as drop_auth.",
)
@click.option(
    "--mpr",
    type=click.IntRange(1, 8),
    default=8,
    show_default=True,
    help="Max PSN range in flight, in units of 128 packets.",
)
@click.option(
    "--cwnd",
    type=click.IntRange(0, 1024),
    default=None,
    help="Most packets in the network (mrc-nic extension, a fixed window until NSCC; "
    "default 128; 0: the whole MPR range).",
)
@click.option(
    "--reorder-window",
    "reorder_us",
    type=click.IntRange(0, 10**6),
    default=None,
    help="Microseconds a packet may trail one sent after it before it counts as lost "
    "(mrc-nic extension; default 250, or 2 design RTTs of a slowed-down lab; 0: wait for the "
    "timeout).",
)
@click.option(
    "--timeout",
    "timeout_exp",
    type=click.IntRange(0, 24),
    default=None,
    help="Retransmission timeout: 1.024 us * 2^T (default 12: 4.2 ms, or at least 8 design "
    "RTTs of a slowed-down lab).",
)
@click.option("--retry-linear", type=click.IntRange(0, 7), default=None)
@click.option("--retry-exp", type=click.IntRange(0, 25), default=None, help="25: forever.")
@click.option(
    "--evs",
    "ev_count",
    type=click.IntRange(1, 256),
    default=None,
    help="EVs per QP, equal per plane: a multiple of the planes (OCP ev_count; default 128).",
)
@click.option(
    "--ev-min-active",
    type=click.IntRange(0, 256),
    default=None,
    help="Floor of active EVs: below it, failed EVs are replaced whatever their plane "
    "(OCP ev_min_active; default a quarter of --evs).",
)
@click.option(
    "--ev-profile",
    type=int,
    default=None,
    help="The QPs' EV profile (OCP ev_profile_id; `mrc-nic ev profile list`). Default 0: "
    "AUTO with --evs EVs.",
)
@click.option(
    "--cc-profile",
    type=int,
    default=None,
    help="The QPs' CC profile (OCP cc_profile_id; `mrc-nic cc profile list`). Default 1: NSCC.",
)
@lab_option
@format_option
def write(
    src,
    dst,
    size,
    qps,
    imm,
    verify,
    auth,
    mpr,
    cwnd,
    reorder_us,
    timeout_exp,
    retry_linear,
    retry_exp,
    ev_count,
    ev_min_active,
    ev_profile,
    cc_profile,
    lab,
    fmt,
):
    """RDMA WRITE SIZE bytes from SRC's memory to DST's, sprayed over every plane."""
    from mrc_nic.workloads import rdma_write

    retry = {}
    if retry_linear is not None:
        retry["linear_cnt"] = retry_linear
    if retry_exp is not None:
        retry["exp_cnt"] = retry_exp
    name = pick_lab(lab)
    try:
        result = rdma_write.write(
            name,
            src,
            dst,
            size,
            qps=qps,
            imm=imm,
            verify=verify,
            mpr=mpr,
            cwnd=cwnd,
            reorder_ns=None if reorder_us is None else reorder_us * 1000,
            timeout=timeout_exp,
            retry=retry or None,
            ev_count=ev_count,
            ev_min_active=ev_min_active,
            auth=auth,
            cc_profile=cc_profile,
            **({} if ev_profile is None else {"ev_profile": ev_profile}),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except KeyboardInterrupt:
        click.echo("write cancelled (its QPs were moved to ERR and released)", err=True)
        raise SystemExit(130) from None
    if fmt == "json":
        output.emit_json(result)
    else:
        from mrc_nic.lab.state import open_lab

        _print_write(result, open_lab(name)[1])
    if not result.get("completed"):
        raise SystemExit(1)


def _print_write(r: dict, topo) -> None:
    shares = " ".join(f"p{p}:{v:.0%}" for p, v in r["per_plane_share"].items())
    line = (
        f"{r['src']} -> {r['dst']}: {r['bytes']:,} of {r['size']:,} bytes in {r['seconds']:.3f} s, "
        f"{r['goodput_bps'] / 1e9:.3f} Gbit/s goodput; {len(r['qps'])} QP(s), "
        f"{r['chunks']} WRITE(s) of up to {r['chunk']:,} B; {r['retransmits']} retransmitted, "
        f"{r['timeouts']} timeouts; per plane {shares}"
    )
    if r.get("completed"):
        verified = "byte-exact (verified)" if r.get("verified") else "not verified"
        if any(q.get("auth") for q in r["qps"]):
            verified += "; every packet MAC'd"
        output.success(f"{line}; {verified}")
    else:
        output.error(f"{line}\n{r['error']}")
    _print_fidelity(r, topo)


def _print_fidelity(r: dict, topo=None) -> None:
    """The links' share and the fidelity verdict: which resource bound the write."""
    from mrc_nic.observe import fidelity

    share = r.get("links_share")
    if share:
        click.echo(
            f"{share['of_payload']:.0%} of the links' payload capacity "
            f"({share['payload_capacity_bps'] / 1e9:.3g} Gbit/s after per-packet headers; "
            f"{share['of_rate']:.0%} of their raw rate)"
        )
    fid = r.get("fidelity")
    if fid:
        click.echo(fidelity.summary(fid))
        output.fidelity_advice(fid, topo)


@click.group()
def qp() -> None:
    """Queue pairs of the lab's hosts (from their daemons)."""


@qp.command("list")
@lab_option
@format_option
def qp_list(lab, fmt):
    """Every QP of every host: state, role, peer, attributes."""
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client
    from mrc_nic.lab.state import open_lab

    name = pick_lab(lab)
    _, topo = open_lab(name)
    rows, qps, sessions = [], [], []
    for host in topo.host_names():
        reply = client.call(name, host, ops.QpList())
        sessions += reply.sessions
        for q in reply.qps:
            qps.append(q)
            rows.append(
                [
                    f"{q['qpn']:#x}",
                    host,
                    q["role"],
                    q["state"],
                    q["dest_host"],
                    f"{q['dest_qpn']:#x}" if q["dest_qpn"] is not None else "-",
                    q["mpr"],
                    q["err_reason"] or "",
                ]
            )
    if fmt == "json":
        output.emit_json({"qps": qps, "sessions": sessions})
        return
    output.table(
        "queue pairs", ["qpn", "host", "role", "state", "#peer", "peer qpn", "#mpr", "error"], rows
    )
    sessions_table(sessions)


def lab_sessions(lab_name: str) -> list[dict]:
    """Every application session of the lab's hosts (daemons that do not answer: none)."""
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client
    from mrc_nic.lab.state import open_lab

    sessions = []
    for host in open_lab(lab_name)[1].host_names():
        try:
            sessions += client.call(lab_name, host, ops.QpList(), timeout=2.0).sessions
        except (client.DaemonError, OSError):
            continue  # status says what is up; a dead daemon holds nothing
    return sessions


def sessions_table(sessions: list[dict]) -> None:
    """Who holds what of each host's NIC: each held count over its share."""

    def of(s: dict, name: str, fmt=str) -> str:
        limit = s["shares"].get(name)
        return f"{fmt(s[name])}/{fmt(limit)}" if limit is not None else fmt(s[name])

    if not sessions:
        return
    rows = [
        [
            s["host"],
            s["pid"],
            of(s, "memory", output.human_bytes),
            of(s, "qps"),
            of(s, "cqs"),
            of(s, "pds"),
            s["command"],
        ]
        for s in sessions
    ]
    output.table(
        "sessions (held/share)", ["host", "pid", "memory", "qps", "cqs", "pds", "command"], rows
    )


@qp.command("show")
@click.argument("qpn", type=lambda s: int(s, 0))
@lab_option
@format_option
def qp_show(qpn, lab, fmt):
    """One QP in full: its daemon's record (state, OCP attributes, error) and
    its NIC state (window, PSNs, counters, RTT, EVs by plane and state)."""
    from mrc_nic import nic
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client
    from mrc_nic.observe import qpstats

    name = pick_lab(lab)
    host = _host_of(qpn, name)
    record = next((q for q in client.call(name, host, ops.QpList()).qps if q["qpn"] == qpn), None)
    with nic.NicMaps.open(name) as maps:
        state = next((r for r in qpstats.read(maps) if r["qpn"] == qpn), None)
    if record is None and state is None:
        raise click.UsageError(f"no QP {qpn:#x} at {host} (see mrc-nic qp list)")
    if fmt == "json":
        output.emit_json({"qpn": qpn, "host": host, "daemon": record, "nic": state})
        return
    rows = [[k, _cell(v)] for k, v in (record or {}).items()]
    output.table(f"QP {qpn:#x} at {host}: the daemon's record", ["attribute", "value"], rows)
    if state and state["send"]:
        s = state["send"]
        rows = [[k, _cell(s[k])] for k in ("state", "mpr", "dynamic_mpr", "peer_mpr", "window")]
        rows += [[k, _cell(s[k])] for k in ("max_wimm", "wimm_out", "cwnd", "in_flight")]
        rows += [[k, _cell(s[k])] for k in ("snd_una", "snd_nxt", "retx_queue", "wqes_done")]
        rows += [[k, v] for k, v in s["counters"].items() if v]
        rows += [[f"rtt {k} (us)", _us(v)] for k, v in s["rtt_ns"].items()]
        output.table("send side (NIC)", ["", "value"], rows)
        states = list(s["evs"]["by_state"])
        planes = [
            [p["plane"], *[p["evs_by_state"][st] for st in states], _us(p["srtt_ns"])]
            for p in s["planes"]
        ]
        output.table("EVs by plane", ["#plane", *states, "srtt us"], planes)
    if state and state["recv"]:
        r = state["recv"]
        rows = [[k, _cell(r[k])] for k in ("state", "mpr", "dynamic_mpr", "window")]
        rows += [[k, _cell(r[k])] for k in ("max_wimm_dest", "wimm_held", "cum_psn", "msn")]
        rows += [[k, v] for k, v in r["counters"].items() if v]
        output.table("receive side (NIC)", ["", "value"], rows)


def _cell(value) -> str:
    return "-" if value is None else str(value)


def _us(ns) -> str:
    return "-" if not ns else f"{ns / 1e3:.1f}"


def _host_of(qpn: int, lab_name: str) -> str:
    """The host a QP number belongs to (QPN = host index << 16 | index)."""
    from mrc_nic.lab.state import open_lab

    _, topo = open_lab(lab_name)
    host = next((h for h in topo.host_names() if topo.nodes[h].index == qpn >> 16), None)
    if host is None:
        raise click.UsageError(f"QP {qpn:#x} belongs to no host of lab {lab_name!r}")
    return host


@click.group()
def ev() -> None:
    """Entropy values (paths) of a send QP."""


@ev.command("list")
@click.argument("qpn", type=lambda s: int(s, 0))
@lab_option
@format_option
def ev_list(qpn, lab, fmt):
    """State and counters of each EV of send QP QPN, and the reverse EV set its
    ACKs come back over (kept by the receiver)."""
    from mrc_nic import nic
    from mrc_nic.observe import qpstats

    name = pick_lab(lab)
    with nic.NicMaps.open(name) as maps:
        try:
            evs = [_ev_row(record) for record in qpstats.ev_records(maps, qpn)]
            reverse = qpstats.reverse_ev_records(maps, qpn)
        except KeyError:
            raise click.UsageError(
                f"no send QP {qpn:#x} in lab {name!r} (see mrc-nic qp list)"
            ) from None
    if fmt == "json":
        output.emit_json({"qpn": qpn, "evs": evs, "reverse_ev_set": reverse})
        return
    rows = [
        [
            e["ev"],
            e["plane"],
            e["state"],
            e["tx_pkts"],
            e["acks"],
            e["lost_pkts"],
            e["retx_pkts"],
            e["probe_replies"],
            e["rtt_us"],
        ]
        for e in evs
    ]
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


def _ev_set(qpn: int, value: int, state: str, lab: str | None) -> None:
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client

    name = pick_lab(lab)
    host = _host_of(qpn, name)
    client.call(name, host, ops.EvSet(qpn=qpn, ev=value, state=state))
    output.success(f"EV {value} of QP {qpn:#x}: {state}")


@ev.command("deny")
@click.argument("qpn", type=lambda s: int(s, 0))
@click.argument("value", type=int)
@lab_option
def ev_deny(qpn, value, lab):
    """Take an EV out of use (DENIED) until `ev allow`."""
    _ev_set(qpn, value, "DENIED", lab)


@ev.command("allow")
@click.argument("qpn", type=lambda s: int(s, 0))
@click.argument("value", type=int)
@lab_option
def ev_allow(qpn, value, lab):
    """Put an EV back in use (GOOD)."""
    _ev_set(qpn, value, "GOOD", lab)


def _controller_commands() -> None:
    from mrc_nic.cli.ctl_cmds import ev_events, ev_probe, ev_profile  # the OCP objects (mrc_ctl.h)

    ev.add_command(ev_profile)
    ev.add_command(ev_events)
    ev.add_command(ev_probe)


_controller_commands()
COMMANDS = [write, qp, ev]
