"""Losing only the ACK direction of one plane (issue 19, item 1): the receiver's
reverse EV set takes the SACKs off the broken path, the sender keeps its rate,
and `ev list` and `events` show the failing reverse path."""

from __future__ import annotations

import json

from mrc_nic.fabric import faults
from mrc_nic.workloads import rdma_write
from tests.helpers.env import run_cli
from tests.helpers.writes import send_qp

MIB = 2**20
SIZE = 192 * MIB  # about a second of the default lab on this machine


def test_ack_blackhole_of_a_host_link_moves_the_acks_to_other_paths(make_lab):
    lab = make_lab("rev").lab
    healthy = rdma_write.write(lab, "h0", "h1", SIZE, verify=True)
    assert healthy["completed"], healthy

    # SACKs from h1 to h0 are lost on plane 1; data still arrives there.
    faults.apply(lab, ("p1.t0a-h0",), faults.FaultSpec("blackhole", direction="down"))
    # On a connection of its own: its QPs stay open after the write, for `ev list`.
    with rdma_write.Connection(lab, "h0", "h1", size_hint=SIZE) as conn:
        result = conn.write(SIZE, verify=True)
        qpn = send_qp(lab)
        listed = json.loads(run_cli("ev", "list", hex(qpn), "-l", lab, "--format", "json").stdout)

    assert result["completed"] and result["verified"], result
    assert result["bytes"] == SIZE and not result["error"]
    # Data EVs are not blamed for their lost ACKs: nothing timed out.
    assert result["timeouts"] == 0, result
    states = {(r["plane"], r["state"]) for r in listed["reverse_ev_set"]}
    assert {s for p, s in states if p == 1} == {"ASSUMED_BAD"}, listed["reverse_ev_set"]
    assert {s for p, s in states if p != 1} == {"GOOD"}, listed["reverse_ev_set"]
    events = json.loads(
        run_cli("events", "--type", "reverse_ev_state", "-l", lab, "--format", "json").stdout
    )["events"]
    bad = [e["plane"] for e in events if e["new"] == "ASSUMED_BAD"]
    # Plane 1's reverse EVs went bad (another plane's may, for a moment, on a
    # loaded machine: its probe answered late; the list above shows it GOOD again).
    assert bad.count(1) >= 2 and bad.count(1) > len(bad) / 2, events
    # Loose: without the reverse set the lost SACKs starved the ACK clock
    # (0.47-0.55 of healthy); with it, about what a healthy write gets.
    ratio = result["goodput_bps"] / healthy["goodput_bps"]
    assert ratio > 0.6, (ratio, healthy["goodput_bps"], result["goodput_bps"])
