"""Golden-packet tests of endpoint probes (bpf/nic_answers.h, rx_ep_probe and
rx_ep_probe_reply): a controller's connectionless EV probe, a PROBE to the
endpoint QPN (MRC_EP_QPN) that the NIC answers without a QP, and the reply's
record in nic_ep_probes for the daemon that sent it; a port status update
(MRC_PROBE_F_PORT_STATUS) recorded in the responder's nic_peer_ports; and a
port administratively DISABLED (nic_host_ctl.ports_disabled), which answers
no probe of any kind.

Host 0 probes host 1 on plane 2 (198.18.2.1 -> 198.18.2.2). No QP exists in
this module: that is the point. Expected frames are wire's, from explicit
values; the responder's service time (the reply's ICRC slot) is a clock
reading, so it is checked against bounds and the rest of the frame byte for byte.
"""

from __future__ import annotations

import os
import time

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from mrc_nic.nic import wire as w
from tests.helpers.nicprog import (
    ANSWER,
    DATA,
    PLANE,
    RX_HOST,
    TX_HOST,
    XDP_DROP,
    XDP_TX,
    delta,
    run,
)

LAB = f"zep{os.getpid()}"
PROGRAM_SIZES = dict(mr_elems=16, max_qps=16, max_regions=2, event_pages=1)  # conftest's program
PROBER, RESPONDER = TX_HOST, RX_HOST
PROBE_ENDS, REPLY_ENDS = DATA, ANSWER  # the golden tests' plan (nicprog): plane 2
EV = 0xC123
RESPONDER_PORTS = 0b1011
ICRC = slice(-4, None)  # the ICRC slot: last 4 bytes of a PROBE_REPLY


@pytest.fixture
def maps(maps):
    maps.set_port_bitmap(RESPONDER, RESPONDER_PORTS)
    maps.set_ports_disabled(RESPONDER, 0)
    maps.clear_ep_probes(PROBER)
    return maps


def ep_probe(psn: int = 9, tx_ts: int = 1234, *, ends=PROBE_ENDS, **kw):
    return w.probe(ends, ev=EV, dqpn=w.EP_QPN, psn=psn, tx_ts=tx_ts, **kw)


def test_endpoint_probe_is_answered_in_place_without_a_qp(program, maps):
    before = maps.counters()
    result = run(program, ep_probe())
    assert result.retval == XDP_TX
    expected = bytes(
        w.probe_reply(
            REPLY_ENDS,
            ev=EV,
            dqpn=w.EP_QPN,
            psn=9,
            echo_ts=1234,
            flags=w.PROBE_F_SVC,
            port_bitmap=RESPONDER_PORTS,
        )
    )
    assert len(result.data_out) == len(expected)
    assert result.data_out[:-4] == expected[:-4]
    svc_ns = int.from_bytes(result.data_out[ICRC], "big")
    assert 0 <= svc_ns < 1_000_000  # the responder's own time: well under a ms
    assert delta(before, maps.counters()) == {"probe_reply": 1, "ep_probe": 1}


def test_endpoint_probe_that_saw_congestion_says_so(program, maps):
    result = run(program, ep_probe(ecn=w.Ecn.CE))
    assert result.retval == XDP_TX
    flags = Ether(result.data_out)[w.MRCProbe].flags
    assert flags == w.PROBE_F_SVC | w.AckFlag.ECN


@pytest.mark.parametrize(
    "what, src_ip, dst_ip",
    [
        ("source on another plane", "198.18.1.1", f"198.18.{PLANE}.2"),
        ("source .0 of the plane", f"198.18.{PLANE}.0", f"198.18.{PLANE}.2"),
        ("destination .0 of the plane", f"198.18.{PLANE}.1", f"198.18.{PLANE}.0"),
        ("outside the host network", "10.0.0.1", f"198.18.{PLANE}.2"),
        ("to itself", f"198.18.{PLANE}.2", f"198.18.{PLANE}.2"),
    ],
)
def test_endpoint_probe_from_outside_the_plan_is_dropped(program, maps, what, src_ip, dst_ip):
    ends = w.Endpoints(PROBE_ENDS.src_mac, PROBE_ENDS.dst_mac, src_ip, dst_ip)
    before = maps.counters()
    assert run(program, ep_probe(ends=ends)).retval == XDP_DROP, what
    assert delta(before, maps.counters()) == {"drop_spoofed": 1}


def test_endpoint_probe_reply_is_recorded_for_the_prober(program, maps):
    before = maps.counters()
    reply = w.probe_reply(
        REPLY_ENDS,
        ev=EV,
        dqpn=w.EP_QPN,
        psn=0x000105,  # slot 5
        echo_ts=777_000,
        flags=w.PROBE_F_SVC,
        port_bitmap=RESPONDER_PORTS,
        icrc=321,
    )
    t0 = time.monotonic_ns()
    assert run(program, reply).retval == XDP_DROP
    t1 = time.monotonic_ns()
    slots = maps.ep_probes(PROBER)
    e = slots[0x105 % len(slots)]
    assert (e.psn, e.tx_ts, e.svc_ns, e.ev, e.plane) == (0x105, 777_000, 321, EV, PLANE)
    assert e.port_bitmap == RESPONDER_PORTS and e.flags == w.PROBE_F_SVC
    assert e.src_ip == int.from_bytes(bytes(map(int, REPLY_ENDS.src_ip.split("."))), "little")
    assert t0 <= e.rx_ns <= t1  # bpf_ktime_get_ns: CLOCK_MONOTONIC
    assert sum(1 for s in slots if s.rx_ns) == 1
    assert delta(before, maps.counters()) == {"probe_reply_consumed": 1, "ep_probe_reply": 1}


def test_endpoint_probe_reply_without_service_time(program, maps):
    reply = w.probe_reply(REPLY_ENDS, ev=EV, dqpn=w.EP_QPN, psn=7, echo_ts=1, icrc=999)
    assert run(program, reply).retval == XDP_DROP
    e = maps.ep_probes(PROBER)[7]
    assert (e.psn, e.svc_ns, e.flags) == (7, 0, 0)  # the ICRC slot is only read with the flag


def test_endpoint_probe_round_trip_through_the_nic(program, maps):
    """The probe, its reply as the responder's NIC made it, and that reply
    taken by the prober's NIC (here the same program): an RTT from the
    echoed tx_ts, less the responder's service time."""
    tx_ts = time.monotonic_ns()
    answered = run(program, ep_probe(psn=42, tx_ts=tx_ts))
    assert answered.retval == XDP_TX
    assert run(program, answered.data_out).retval == XDP_DROP
    e = maps.ep_probes(PROBER)[42]
    assert (e.psn, e.tx_ts, e.ev) == (42, tx_ts, EV)
    assert e.svc_ns == int.from_bytes(answered.data_out[ICRC], "big")
    assert 0 < e.rx_ns - tx_ts - e.svc_ns < 1_000_000_000


def test_spoofed_endpoint_probe_reply_is_not_recorded(program, maps):
    ends = w.Endpoints(REPLY_ENDS.src_mac, REPLY_ENDS.dst_mac, "198.18.3.2", REPLY_ENDS.dst_ip)
    reply = w.probe_reply(ends, ev=EV, dqpn=w.EP_QPN, psn=3, echo_ts=1)
    before = maps.counters()
    assert run(program, reply).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_spoofed": 1}
    assert not any(s.rx_ns for s in maps.ep_probes(PROBER))


def test_a_probe_to_a_qp_number_is_not_an_endpoint_probe(program, maps):
    """Without the endpoint QPN a PROBE needs its receive QP, as before."""
    before = maps.counters()
    probe = w.probe(PROBE_ENDS, ev=EV, dqpn=RESPONDER << 16 | 5, psn=1, tx_ts=1)
    assert run(program, probe).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_unknown_qp": 1}
    assert Ether(bytes(probe))[IP].dst == PROBE_ENDS.dst_ip


# ---- port status updates ---------------------------------------------------------------


def test_port_status_update_is_recorded_for_its_peer_and_answered(program, maps):
    before_view = maps.peer_ports(RESPONDER)[PROBER]
    before = maps.counters()
    t0 = time.monotonic_ns()
    result = run(program, ep_probe(psn=11, flags=w.PROBE_F_PORT_STATUS, port_bitmap=0b0110))
    t1 = time.monotonic_ns()
    assert result.retval == XDP_TX
    # The answer: the responder's own ports (a query of its status), the flag echoed.
    reply = Ether(result.data_out)[w.MRCProbe]
    assert reply.flags == w.PROBE_F_SVC | w.PROBE_F_PORT_STATUS
    assert reply.port_bitmap == RESPONDER_PORTS and reply.tx_ts == 1234
    view = maps.peer_ports(RESPONDER)
    e = view[PROBER]
    assert (e.ports, e.plane, e.updates) == (0b0110, PLANE, before_view.updates + 1)
    assert t0 <= e.rx_ns <= t1
    assert not any(v.rx_ns for i, v in enumerate(view) if i != PROBER)
    assert not any(v.rx_ns for v in maps.peer_ports(PROBER))  # the prober's view is its own
    assert delta(before, maps.counters()) == {"probe_reply": 1, "port_status_update": 1}

    # The next update replaces it; its reply reaches the prober's slot like a probe's.
    answered = run(program, ep_probe(psn=12, flags=w.PROBE_F_PORT_STATUS, port_bitmap=0b1000))
    assert maps.peer_ports(RESPONDER)[PROBER].ports == 0b1000
    assert run(program, answered.data_out).retval == XDP_DROP
    slot = maps.ep_probes(PROBER)[12]
    assert slot.port_bitmap == RESPONDER_PORTS and slot.flags & w.PROBE_F_PORT_STATUS


def test_a_plain_endpoint_probe_records_no_port_status(program, maps):
    before = maps.peer_ports(RESPONDER)[PROBER].updates
    assert run(program, ep_probe(port_bitmap=0b1)).retval == XDP_TX
    assert maps.peer_ports(RESPONDER)[PROBER].updates == before


# ---- a DISABLED port answers no probe ----------------------------------------------------


def test_a_disabled_port_answers_no_endpoint_probe_nor_port_status_update(program, maps):
    maps.set_ports_disabled(RESPONDER, 1 << PLANE)
    updates = maps.peer_ports(RESPONDER)[PROBER].updates
    before = maps.counters()
    assert run(program, ep_probe()).retval == XDP_DROP
    assert run(program, ep_probe(flags=w.PROBE_F_PORT_STATUS, port_bitmap=1)).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_port_disabled": 2}
    assert maps.peer_ports(RESPONDER)[PROBER].updates == updates


def test_a_disabled_port_answers_no_qp_probe(program, maps):
    """Before any QP lookup: the same drop for a data EV's probe and a reverse one."""
    maps.set_ports_disabled(RESPONDER, 1 << PLANE)
    before = maps.counters()
    for flags in (0, w.PROBE_F_REVERSE):
        probe = w.probe(PROBE_ENDS, ev=EV, dqpn=RESPONDER << 16 | 5, psn=1, tx_ts=1, flags=flags)
        assert run(program, probe).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_port_disabled": 2}


def test_only_the_disabled_port_is_silent(program, maps):
    """Another plane of the same host, and the same plane of another host, answer."""
    maps.set_ports_disabled(RESPONDER, 1 << PLANE)
    other_plane = w.Endpoints(
        PROBE_ENDS.src_mac, PROBE_ENDS.dst_mac, f"198.18.{PLANE + 1}.1", f"198.18.{PLANE + 1}.2"
    )
    assert run(program, ep_probe(ends=other_plane)).retval == XDP_TX
    maps.set_port_bitmap(PROBER, RESPONDER_PORTS)
    assert run(program, ep_probe(ends=PROBE_ENDS.reversed())).retval == XDP_TX  # to the prober
    maps.set_ports_disabled(RESPONDER, 0)
    assert run(program, ep_probe()).retval == XDP_TX  # ENABLED again: answered


def test_a_disabled_port_takes_no_data_nor_ack(program, maps):
    """Out of service as a down port: a WRITE and a SACK to it are dropped before any
    QP is looked up (none exists here), and counted as the port's."""
    maps.set_ports_disabled(RESPONDER, 1 << PLANE)
    qpn = RESPONDER << 16 | 5
    write = w.data_packet(PROBE_ENDS, ev=EV, dqpn=qpn, psn=1, va=0, rkey=1, payload=bytes(64))
    sack = w.sack_packet(PROBE_ENDS, ev=EV, dqpn=qpn, psn=1, cum_psn=1, echo_ts=0)
    before = maps.counters()
    for pkt in (write, sack):
        assert run(program, pkt).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_port_disabled": 2}
    maps.set_ports_disabled(RESPONDER, 0)
    before = maps.counters()
    run(program, write)  # ENABLED: it goes on to the QP lookup (and finds none)
    assert "drop_port_disabled" not in delta(before, maps.counters())
