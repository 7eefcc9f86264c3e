"""What the NIC controller's commands share (ev profile|events|probe, cc profile, nic-port):
a request to each host's daemon, and the endpoint batches of probes and port status updates.

Each host's NIC has its own profiles (its daemon keeps them); a command goes
to every host of the lab unless --host names one, as a controller configures
every NIC alike. The Python API is mrc_nic.verbs.ctl.
"""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App

host_option = click.option(
    "--host", "hosts", multiple=True, help="Only this host's NIC (default: every host)."
)
STATES = click.Choice(["INIT", "OFFLINE", "ONLINE"], case_sensitive=False)


def call_hosts(app: App, hosts: tuple[str, ...], request) -> dict[str, object]:
    """The request to each host's daemon (every host when none is named); {host: reply}."""
    from mrc_nic.lab import client

    for h in hosts:
        app.check_host(h)
    return {h: client.call(app.lab(), h, request) for h in (hosts or app.topology().host_names())}


def profiles(app: App, hosts, request, *, one: bool = False) -> dict:
    """The list and show commands of EV and CC profiles: the query to each host's
    NIC, as {"hosts": {host: its profiles (one: the profile)}}."""
    replies = call_hosts(app, hosts, request)
    return {"hosts": {h: r.profiles[0] if one else r.profiles for h, r in replies.items()}}


def profile_table(title: str, cols: list[str], row):
    """A view of profiles(): one row per (host, profile), row(profile) after the host."""
    return lambda data: output.table(
        title, cols, [[h, *row(p)] for h, ps in data["hosts"].items() for p in ps]
    )


def ep_targets(app: App, host: str, dsts, timeout: float) -> list[str]:
    """An endpoint batch's destinations (host names or addresses) as dgids, checked."""
    import ipaddress

    app.check_host(host)
    if not 1 <= (timeout * 1e9) <= 10e9:
        raise click.BadParameter("--timeout must be 1us to 10s", param_hint="--timeout")
    topo = app.topology()
    names = topo.host_names()
    dgids = []
    for d in dsts:
        if d in names:
            dgids.append(str(topo.host_address(topo.nodes[d].index, 0)))  # any plane's names it
            continue
        try:
            dgids.append(str(ipaddress.IPv4Address(d)))
        except ValueError:
            raise click.UsageError(
                f"--dst {d!r} is no host of lab {app.lab()!r} (hosts: {', '.join(names)}) "
                "nor an address"
            ) from None
    return dgids


def ep_send(app: App, host: str, op_type: str, reqs, rows, timeout: float, keys) -> dict:
    """Send an endpoint batch and fill each row (by req_id) with its answer:
    answered, its place in the arrival order, the port it came in on and keys
    (None when unanswered), and whether it was sent (not from a DISABLED port).
    The batch's summary: host, timeout_ns, sent, answered."""
    from mrc_nic.contract import ctlops
    from mrc_nic.lab import client

    timeout_ns = max(1000, round(timeout * 1e9))
    request = ctlops.EpBatchSendWait(reqs=reqs, rsp_timeout=timeout_ns, op_type=op_type)
    reply = client.call(app.lab(), host, request, timeout=timeout + 5.0)
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
    return {
        "host": host,
        "timeout_ns": timeout_ns,
        "sent": len(rows) - len(reply.unsent),
        "answered": len(reply.rsps),
    }


def answered(row: dict) -> str:
    return "yes" if row["answered"] else "no" if row["sent"] else "not sent (port DISABLED)"


def rtt_us(row: dict) -> str:
    return "" if row["rtt"] is None else f"{row['rtt'] / 1000:.1f}"
