"""nic-port admin|status|update: the ports of a host's NIC, as the OCP controller sees them
(mrc_ctl_modify_port, mrc_ctl_query_port, PORT_STATUS_UPDATE). The switches' egress
queues are `mrc-nic port` (port_cmds)."""

from __future__ import annotations

import click

from mrc_nic.cli import nicctl, output
from mrc_nic.cli.app import App, group, pass_app
from mrc_nic.cli.common import DURATION


@group(
    "nic-port",
    epilog="""\b
Examples:
  mrc-nic nic-port status h0                      # admin state, carrier, NIC state
  mrc-nic nic-port admin h0 2 disabled            # port 2 (plane 1) down to the NIC
  mrc-nic nic-port update h0 --dst h1             # tell h1 h0's port status""",
)
def nic_port() -> None:
    """A host NIC's ports (1-based: plane + 1): admin state, status, status updates to peers."""


def _admin_view(p: dict, *, host: str) -> None:
    output.success(f"{host} port {p['port']}: {p['port_admin_state']} ({p['state']})")


@nic_port.command("admin", view=_admin_view)
@click.argument("host")
@click.argument("port_num", type=int)
@click.argument("state", type=click.Choice(["enabled", "disabled"], case_sensitive=False))
@pass_app
def nic_port_admin(app: App, host, port_num, state) -> dict:
    """Enable or disable port PORT_NUM (1-based: plane + 1) of HOST's NIC
    (mrc_ctl_modify_port). A disabled port is down to the NIC and to its
    peers (the port bitmap in every ACK), its carrier untouched."""
    from mrc_nic.contract import ctlops

    request = ctlops.PortModify(port=port_num, port_admin_state=state.upper())
    port = nicctl.call_hosts(app, (host,), request)[host].ports[0]
    return port


def _status_view(data: dict) -> None:
    host = data["host"]
    rows = [
        [p["port"], p["plane"], p["port_admin_state"], p["carrier"], p["state"]]
        for p in data["ports"]
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
        for peer in data["peers"]
    ]
    if rows:
        cols = ["peer", "its ports (as it told us)", "#updates", "#age_s", "#via_port"]
        output.table(f"peers' port status at {host}", cols, rows)


@nic_port.command("status", view=_status_view)
@click.argument("host")
@pass_app
def nic_port_status(app: App, host) -> dict:
    """Administrative state, carrier and NIC state of each of HOST's ports
    (mrc_ctl_query_port), and its peers' ports as their last port status
    update (`mrc-nic nic-port update`) told HOST."""
    from mrc_nic.contract import ctlops

    reply = nicctl.call_hosts(app, (host,), ctlops.PortQuery())[host]
    return {"host": host, "ports": reply.ports, "peers": reply.peers}


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


def _ports_text(mask: int) -> str:
    """A port status (bit n: port n) as the ports that are up."""
    up = [str(n) for n in range(1, 33) if mask >> n & 1]
    return ",".join(up) or "none"


def _update_view(data: dict) -> None:
    rows = [
        [
            r["dst"],
            r["port"],
            nicctl.answered(r),
            nicctl.rtt_us(r),
            "" if r["peer_port_status"] is None else _ports_text(r["peer_port_status"]),
        ]
        for r in data["updates"]
    ]
    status = data["port_status"]
    what = "its own" if status is None else _ports_text(status)
    output.table(
        f"port status updates from {data['host']} ({what}): {data['answered']} of "
        f"{len(rows)} answered",
        ["dst", "#port", "answered", "#rtt_us", "dst's ports up"],
        rows,
    )


@nic_port.command(
    "update",
    view=_update_view,
    epilog="""\b
Examples:
  mrc-nic nic-port update h0 --dst h1                 # h0's own port status, from every port
  mrc-nic nic-port update h0 --dst h1 --dst h2 --status 1,3 --port 1
  mrc-nic nic-port status h1 --format json            # h1's view of h0's ports: peers""",
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
@pass_app
def nic_port_update(app: App, host, dsts, status_text, from_ports, timeout) -> dict:
    """Tell peers HOST's port status, without a QP (mrc_ctl_ep_batch_send_wait,
    PORT_STATUS_UPDATE): one update per destination and port, on that port's
    plane; each peer's NIC records it and answers with its own status."""
    from mrc_nic.transport.profiles import AUTO_EV_BASE

    dgids = nicctl.ep_targets(app, host, dsts, timeout)
    planes = app.topology().planes
    for n in from_ports:
        if not 1 <= n <= planes:
            raise click.BadParameter(f"ports are 1..{planes}, not {n}", param_hint="--port")
    status = None if status_text is None else _parse_ports_up(status_text, planes)
    op = None if status is None else {"port_status_update": {"port_status": status}}
    reqs, rows = [], []
    for dst, dgid in zip(dsts, dgids, strict=True):
        for n in from_ports or range(1, planes + 1):
            ev = AUTO_EV_BASE + n - 1  # the AUTO EV of port n's plane (EV profile 0)
            req = {"req_id": len(reqs), "dgid": dgid, "req_ev": {"val": ev, "port": n}}
            reqs.append(req | ({"op": op} if op is not None else {}))
            rows.append({"req_id": req["req_id"], "dst": dst, "ev": ev, "port": n})
    keys = ("rtt", "peer_port_status")
    summary = nicctl.ep_send(app, host, "PORT_STATUS_UPDATE", reqs, rows, timeout, keys)
    return summary | {"port_status": status, "updates": rows}


COMMANDS = [nic_port]
