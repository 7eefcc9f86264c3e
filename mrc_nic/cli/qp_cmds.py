"""qp list|show: the queue pairs of a lab's hosts, from their daemons and NICs."""

from __future__ import annotations

import click

from mrc_nic.abi.nic_const_defs import NIC_QPN_HOST_SHIFT
from mrc_nic.cli import output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.cli.common import parse_int


@group()
def qp() -> None:
    """Queue pairs of the lab's hosts (from their daemons)."""


def _qp_list_view(data: dict) -> None:
    rows = [
        [
            f"{q['qpn']:#x}",
            f"h{q['qpn'] >> NIC_QPN_HOST_SHIFT}",  # hosts are named by their index
            q["role"],
            q["state"],
            q["dest_host"],
            f"{q['dest_qpn']:#x}" if q["dest_qpn"] is not None else "-",
            q["mpr"],
            q["err_reason"] or "",
        ]
        for q in data["qps"]
    ]
    output.table(
        "queue pairs", ["qpn", "host", "role", "state", "#peer", "peer qpn", "#mpr", "error"], rows
    )
    sessions_table(data["sessions"])


@qp.command("list", view=_qp_list_view)
@pass_app
def qp_list(app: App) -> dict:
    """Every QP of every host: state, role, peer, attributes."""
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client

    qps, sessions = [], []
    for host in app.topology().host_names():
        reply = client.call(app.lab(), host, ops.QpList())
        sessions += reply.sessions
        qps += reply.qps
    return {"qps": qps, "sessions": sessions}


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


def _qp_show_view(data: dict) -> None:
    qpn, host, record, state = data["qpn"], data["host"], data["daemon"], data["nic"]
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


@qp.command("show", view=_qp_show_view)
@click.argument("qpn", type=parse_int)
@pass_app
def qp_show(app: App, qpn: int) -> dict:
    """One QP in full: its daemon's record (state, OCP attributes, error) and
    its NIC state (window, PSNs, counters, RTT, EVs by plane and state)."""
    from mrc_nic import nic
    from mrc_nic.contract import daemonops as ops
    from mrc_nic.lab import client
    from mrc_nic.observe import qpstats

    name, host = app.lab(), app.host_of_qp(qpn)
    record = next((q for q in client.call(name, host, ops.QpList()).qps if q["qpn"] == qpn), None)
    with nic.NicMaps.open(name) as maps:
        state = next((r for r in qpstats.read(maps) if r["qpn"] == qpn), None)
    if record is None and state is None:
        raise click.UsageError(f"no QP {qpn:#x} at {host} (see mrc-nic qp list)")
    return {"qpn": qpn, "host": host, "daemon": record, "nic": state}


def _cell(value) -> str:
    return "-" if value is None else str(value)


def _us(ns) -> str:
    return "-" if not ns else f"{ns / 1e3:.1f}"


COMMANDS = [qp]
