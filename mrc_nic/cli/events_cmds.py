"""events: what happened in a lab, from its event log (mrc_nic.observe.eventlog)."""

from __future__ import annotations

import json
import sys
import time

import click

from mrc_nic.abi.defs import QpError
from mrc_nic.cli.app import App, command, pass_app
from mrc_nic.cli.common import DURATION, SINCE
from mrc_nic.observe import eventsummary

# What `events` shows unless told otherwise: state changes, not the per-packet
# and per-message records (loss, send_done, recv_imm), which --all adds.
STATE_TYPES = (
    "ev_state",
    "ev_replaced",
    "reverse_ev_state",
    "reverse_ev_replaced",
    "qp_err",
    "qp_error",
    "fault",
    "heal",
)
ALL_TYPES = (*STATE_TYPES, "loss", "send_done", "recv_imm")
POLL_WAIT_S = 1.0


def _qp_error(code: int) -> str:
    try:
        return QpError(code).name.lower().replace("_", " ")
    except ValueError:
        return f"error {code}"


def describe(e: dict) -> str:
    """One event as one line of text (after its time and type)."""
    qp = f"QP {e['qpn']:#x}" if "qpn" in e else ""
    kind = e["type"]
    if kind == "ev_state":
        change = f"{e['old_state']} -> {e['new_state']}"
        plane = "?" if e.get("plane") is None else e["plane"]
        return f"{qp} EV {e['ev']} (plane {plane}): {change} ({e['cause']}, PSN {e['psn']})"
    if kind == "ev_replaced":
        return f"{qp} EV {e['old_ev']} replaced by EV {e['new_ev']} (plane {e['plane']})"
    if kind == "reverse_ev_state":  # the receive QP's: the path of its SACKs to the sender
        return (
            f"{qp} reverse EV {e['ev']} (plane {e['plane']}, ACKs to QP {e['peer_qpn']:#x}): "
            f"{e['old']} -> {e['new']} ({e['cause']})"
        )
    if kind == "reverse_ev_replaced":
        return (
            f"{qp} reverse EV {e['old_ev']} replaced by {e['new_ev']} (plane {e['plane']}, "
            f"ACKs to QP {e['peer_qpn']:#x})"
        )
    if kind == "loss":
        return f"{qp} PSN {e['psn']} lost on EV {e['ev']} (seen from the SACK of {e['ack_psn']})"
    if kind == "qp_err":
        if e.get("error"):  # a local error (struct nic_qp_err_event.error): no NACK
            return f"{qp} ERR: {_qp_error(e['error'])}, PSN {e['psn']}"
        return f"{qp} ERR: fatal NACK, syndrome {e['syndrome']}, reason {e['reason']}"
    if kind == "qp_error":
        qps = ", ".join(f"{q:#x}" for q in e.get("qpns", []))
        return f"QP {qps} in ERR: {e.get('message')}"
    if kind == "fault":
        extra = "".join(
            f" {k} {e[k]}" for k in ("direction", "rate", "period", "duration") if k in e
        )
        return f"fault {e['id']} on {e['target']}: {e['mode']}{extra}"
    if kind == "heal":
        note = f": {e['note']}" if e.get("note") else ""
        return f"fault {e['id']} on {e['target']} ({e['mode']}) healed{note}"
    if kind in ("send_done", "recv_imm"):
        return f"{qp} message MSN {e['msn']}, {e['len']} bytes"
    return json.dumps(e)


def _line(e: dict) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(e["time"]))
    ms = int(e["time"] * 1000) % 1000
    host = e.get("host") or "-"
    return f"{clock}.{ms:03d}  {e['seq']:>6}  {e['type']:<9} {host:<4} {describe(e)}"


@command(
    formats=("table", "json", "jsonl"),
    format_help="json: one array; jsonl: one object per line (with --follow too).",
    epilog="""\b
Examples:
  mrc-nic events                          # the state changes so far
  mrc-nic events --follow                 # new ones as they come, from now (Ctrl-C ends)
  mrc-nic events --follow --since 5m      # the last five minutes, then new ones
  mrc-nic events --since 22:11:40         # since a time today (or 2026-11-27T22:11:40)
  mrc-nic events --since 403              # after sequence number 403
  mrc-nic events --summary --follow       # per plane and second: EVs bad, replaced, back
  mrc-nic events --all --host h0          # every record of h0's QPs, losses included
  mrc-nic events --type fault,heal --format jsonl
\b
A fault's record comes before the EV changes it causes: it is logged just
before it is applied (its heal too).
Missed events are counted exactly: "evicted" ones left the log (it keeps the
last 65536) before they were read; "lost in the NIC" ones never reached it
(the ring buffer was full).""",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events, from now.")
@click.option("--all", "all_types", is_flag=True, help="Losses and completions too.")
@click.option("--type", "types", default=None, help=f"Comma list of: {', '.join(ALL_TYPES)}.")
@click.option("--host", default=None, help="Only events of this host's QPs (and lab-wide ones).")
@click.option(
    "--since",
    type=SINCE,
    default=None,
    help="History from here: a sequence number (403), a time (22:11:40, ISO "
    "2026-11-27T22:11:40) or an age (30s, 5m ago). Default: all so far, or now with --follow.",
)
@click.option(
    "--summary",
    is_flag=True,
    help="One line per plane and second: EVs that went bad, were replaced, came back; "
    "faults and heals.",
)
@click.option("--duration", type=DURATION, default=None, help="With --follow: stop after this.")
@pass_app
def events(app: App, follow, all_types, types, host, since, summary, duration):
    """EV state changes, faults applied and healed, QPs in error: with times."""
    from mrc_nic.contract import eventops
    from mrc_nic.lab import client

    name, fmt = app.lab(), app.format  # it streams: it prints as it goes
    wanted = _types(types, all_types)
    collected: list[dict] = []
    after_time = None
    if since is None:
        next_seq = _last_seq(name) if follow else 0
    elif since.seq is not None:
        next_seq = since.seq
    else:
        next_seq, after_time = 0, since.time
    evicted, lost = 0, 0
    tally = eventsummary.Summary() if summary else None
    if tally is not None and fmt == "table":
        click.echo(eventsummary.HEADER)
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while True:
            wait = POLL_WAIT_S if follow else 0
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            request = eventops.Read(since=next_seq, types=list(wanted), wait=wait)
            try:
                reply = client.call(name, client.EVENTS_SERVICE, request, timeout=wait + 10)
            except client.DaemonError as e:
                raise click.ClickException(_not_running(name, e)) from None
            batch = [
                e
                for e in reply.events
                if (host is None or e.get("host") in (None, host))
                and (after_time is None or e["time"] >= after_time)
            ]
            _missed(reply.evicted, "evicted from the log before they were read", fmt)
            _missed(reply.nic_lost - lost, "lost in the NIC (its ring buffer was full)", fmt)
            evicted += reply.evicted
            lost = reply.nic_lost
            next_seq = reply.next
            if tally is not None:
                rows = tally.add(batch, now=time.time() if follow else None)
                if not follow and not reply.events:
                    rows += tally.flush()
                _print_rows(rows, fmt, collected)
            elif fmt == "json":
                collected += batch
            else:
                for e in batch:
                    click.echo(json.dumps(e) if fmt == "jsonl" else _line(e))
                sys.stdout.flush()
            if deadline is not None and time.monotonic() >= deadline:
                break
            if not follow and not reply.events:  # without --follow: until all is read
                break
    except KeyboardInterrupt:
        pass
    if tally is not None and (follow or deadline is not None):
        _print_rows(tally.flush(), fmt, collected)
    if fmt == "json":
        key = "summary" if tally is not None else "events"
        click.echo(
            json.dumps(
                {key: collected, "next": next_seq, "evicted": evicted, "nic_lost": lost},
                indent=1,
            )
        )


def _not_running(name: str, e: Exception) -> str:
    return (
        f"the event log of lab {name} is not running ({e}); "
        f"`mrc-nic up --reuse -l {name}` restarts it"
    )


def _last_seq(name: str) -> int:
    """The log's last sequence number: --follow starts after it."""
    from mrc_nic.contract import eventops
    from mrc_nic.lab import client

    try:
        return client.call(name, client.EVENTS_SERVICE, eventops.Ping(), timeout=10).seq
    except client.DaemonError as e:
        raise click.ClickException(_not_running(name, e)) from None


def _print_rows(rows: list[dict], fmt: str, collected: list[dict]) -> None:
    if fmt == "json":
        collected += rows
        return
    for row in rows:
        click.echo(json.dumps(row) if fmt == "jsonl" else eventsummary.line(row))
    sys.stdout.flush()


def _types(types: str | None, all_types: bool) -> tuple[str, ...]:
    if types is None:
        return ALL_TYPES if all_types else STATE_TYPES
    chosen = tuple(t.strip() for t in types.split(",") if t.strip())
    unknown = [t for t in chosen if t not in ALL_TYPES]
    if unknown:
        raise click.BadParameter(
            f"unknown event type {unknown[0]!r}; choose from {', '.join(ALL_TYPES)}",
            param_hint="--type",
        )
    return chosen


def _missed(n: int, what: str, fmt: str) -> None:
    if n > 0 and fmt != "json":
        click.echo(f"[{n} events {what}]", err=True)


COMMANDS = [events]
