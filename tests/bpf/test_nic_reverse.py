"""Golden-packet tests of the reverse EV set (bpf/nic_answers.h, route_reverse
and rx_rev_probe_reply): which path a receive QP's SACKs and PROBE_REPLYs take
back, and how the replies to the receiver's reverse EV probes are recorded.

The receive QP, its packets and its expected SACKs are test_nic_rx's
(tests/helpers/receiver.py: data from host 0 to host 1 on plane 2); only the
reverse EV set changes. Expected
frames are wire's, from explicit values, never a model of the choice.
"""

from __future__ import annotations

import os

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from mrc_nic import nic
from mrc_nic.nic import wire as w
from tests.helpers import engine
from tests.helpers.nicprog import (
    ANSWER,
    DATA,
    PLANE,
    QP_RX,
    RX_HOST,
    TX_HOST,
    XDP_DROP,
    XDP_REDIRECT,
    XDP_TX,
    delta,
    probe_mac,
    run,
)
from tests.helpers.receiver import (
    EV,
    PORTS,
    REGION,
    REGION_ELEMS,
    REGION_FIRST_ELEM,
    RKEY,
    START,
    assert_answer,
    data,
    sack,
    setup_qp,
)

LAB = f"zrev{os.getpid()}"
PROGRAM_SIZES = dict(mr_elems=64, max_qps=64, max_regions=4, event_pages=1)  # conftest's program
GOOD, BAD, UNTRIED = nic.RevState.GOOD, nic.RevState.ASSUMED_BAD, nic.RevState.UNTRIED
REV_SAME, REV_SAME2, REV_OTHER = 41000, 41001, 41002  # plane 2, plane 2, plane 0
OTHER = 0  # the other plane
UP = PORTS | 1 << PLANE  # the receiving host's ports that are up: planes 0, 1, 2, 3


def sack_up(psn: int, cum: int):
    """The SACK of data PSN psn, back in place (test_nic_rx's, with these ports up)."""
    return sack(psn, cum, port_bitmap=UP)


PORT_MAC, NH_MAC = "02:00:00:00:01:10", "02:00:00:00:00:10"  # host 1's port of plane 0


@pytest.fixture
def qp(maps):
    maps.set_region(
        REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY, base_va=0x7F00 << 32
    )
    maps.set_port_bitmap(RX_HOST, UP)
    maps.set_port(RX_HOST, OTHER, ifindex=1, mac=PORT_MAC, nh_mac=NH_MAC)
    setup_qp(maps)
    maps.clear_rev_evs(QP_RX)  # no set, no replies: each test writes its own
    return QP_RX


def rev_set(maps, *states: tuple[int, int, int]) -> None:
    maps.set_rev_evs(QP_RX, [nic.RevEv(ev, plane, st) for ev, plane, st in states])


def with_sport(pkt, sport: int) -> bytes:
    """pkt with another UDP source port (UDP checksum 0: nothing else changes)."""
    eth = Ether(bytes(pkt))
    eth[UDP].sport = sport
    return bytes(eth)


def other_plane_sack(psn: int, sport: int) -> bytes:
    """The SACK of data PSN psn sent out of host 1's plane-0 port on reverse EV sport."""
    ends = w.Endpoints(
        src_mac=PORT_MAC,
        dst_mac=NH_MAC,
        src_ip=f"198.18.{OTHER}.{RX_HOST + 1}",
        dst_ip=f"198.18.{OTHER}.{TX_HOST + 1}",
    )
    expected = sack_up(psn, cum=psn + 1)
    eth = Ether(bytes(expected))
    eth.src, eth.dst = ends.src_mac, ends.dst_mac
    eth[IP].src, eth[IP].dst = ends.src_ip, ends.dst_ip
    del eth[IP].chksum
    eth[UDP].sport = sport
    return bytes(Ether(bytes(eth)))


def test_without_a_set_the_sack_goes_back_in_place(program, maps, qp):
    assert_answer(run(program, data(START, elem=0)), sack_up(START, cum=START + 1))


def test_sack_takes_a_good_reverse_ev_of_its_plane(program, maps, qp):
    rev_set(maps, (REV_OTHER, OTHER, GOOD), (REV_SAME, PLANE, GOOD))
    result = run(program, data(START, elem=0))
    assert result.retval == XDP_TX
    # Only the source port changes: the EV echoed for the sender is still the data's.
    assert result.data_out == with_sport(sack_up(START, cum=START + 1), REV_SAME)
    assert Ether(result.data_out)[w.MRCAck].echo_ev == EV


def test_sacks_spread_over_the_good_evs_of_the_plane_only(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, GOOD), (REV_OTHER, OTHER, GOOD), (REV_SAME2, PLANE, GOOD))
    ports = {
        Ether(run(program, data(p, elem=p - START)).data_out)[UDP].sport
        for p in range(START, START + 4)
    }
    assert ports == {REV_SAME, REV_SAME2}


def test_bad_and_untried_evs_carry_no_sack(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, BAD), (REV_SAME2, PLANE, UNTRIED), (REV_OTHER, OTHER, GOOD))
    before = maps.counters()
    result = run(program, data(START, elem=0))
    # Its plane has no usable reverse EV: the SACK leaves from plane 0's port.
    assert result.retval == XDP_REDIRECT
    assert result.data_out == other_plane_sack(START, REV_OTHER)
    changed = delta(before, maps.counters())
    assert changed["answer_rerouted"] == 1 and changed["sack"] == 1


def test_no_usable_reverse_ev_at_all_answers_in_place(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, BAD), (REV_OTHER, OTHER, UNTRIED))
    assert_answer(run(program, data(START, elem=0)), sack_up(START, cum=START + 1))


def test_a_plane_that_is_down_here_is_not_taken(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, BAD), (REV_OTHER, OTHER, GOOD))
    maps.set_port_bitmap(RX_HOST, UP & ~(1 << OTHER))
    result = run(program, data(START, elem=0))
    assert result.retval == XDP_TX and Ether(result.data_out)[UDP].sport == EV


def test_a_set_of_another_qp_is_not_used(program, maps, qp):
    other_qpn = QP_RX + 64  # the same slot (max_qps 64), another QP
    maps.set_rev_evs(other_qpn, [nic.RevEv(REV_SAME, PLANE, GOOD)])
    assert_answer(run(program, data(START, elem=0)), sack_up(START, cum=START + 1))


def test_data_ev_probe_is_answered_over_the_reverse_set(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, BAD), (REV_OTHER, OTHER, GOOD))
    probe = w.probe(DATA, ev=EV, dqpn=QP_RX, psn=9, tx_ts=1234)
    result = run(program, probe)
    assert result.retval == XDP_REDIRECT
    reply = Ether(result.data_out)
    assert (reply[IP].src, reply[IP].dst) == (f"198.18.{OTHER}.2", f"198.18.{OTHER}.1")
    assert reply[UDP].sport == REV_OTHER and reply[w.MRCProbe].ev == EV  # the probed EV echoed
    assert not reply[w.MRCProbe].flags & w.PROBE_F_REVERSE


def test_reverse_probe_reply_is_recorded(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, GOOD), (REV_OTHER, OTHER, BAD))
    before = maps.counters()
    reply = w.probe_reply(
        ANSWER.reversed(), ev=REV_OTHER, dqpn=QP_RX, psn=77, echo_ts=1, flags=w.PROBE_F_REVERSE
    )
    result = run(program, reply)
    assert result.retval == XDP_DROP
    rec = maps.rev_probes(QP_RX)
    assert (rec[1].ev, rec[1].replies, rec[1].last_psn) == (REV_OTHER, 1, 77)
    assert rec[0].replies == 0
    changed = delta(before, maps.counters())
    assert changed == {"probe_reply_consumed": 1, "rev_probe_reply": 1}
    # The NIC records; the state is the daemon's to change.
    assert maps.rev_evs(QP_RX)[1].state == BAD


def test_reverse_probe_reply_for_an_ev_not_in_the_set(program, maps, qp):
    rev_set(maps, (REV_SAME, PLANE, GOOD))
    before = maps.counters()
    reply = w.probe_reply(
        ANSWER.reversed(), ev=REV_OTHER, dqpn=QP_RX, psn=1, echo_ts=1, flags=w.PROBE_F_REVERSE
    )
    assert run(program, reply).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"probe_reply_consumed": 1, "unknown_ev": 1}
    assert all(r.replies == 0 for r in maps.rev_probes(QP_RX))


def sender_side(maps, **kw) -> w.Endpoints:
    """engine's send QP QP_TX on host 0 (peer: host 1), ports 0 and 1 up; the
    addresses of a reverse probe to it on plane 1, from its peer."""
    maps.set_port_bitmap(engine.TX_HOST, 0b11)
    engine.setup_sq(maps, **kw)
    return w.Endpoints(
        src_mac="02:00:00:00:01:01",
        dst_mac="02:00:00:00:00:01",
        src_ip=f"198.18.1.{engine.RX_HOST + 1}",
        dst_ip=f"198.18.1.{engine.TX_HOST + 1}",
    )


def reverse_probe(ends: w.Endpoints, icrc: int = w.ICRC_UNUSED):
    """The receiver's probe number 5 of reverse EV REV_SAME, to the send QP."""
    return w.probe(
        ends, ev=REV_SAME, dqpn=engine.QP_TX, psn=5, tx_ts=99, flags=w.PROBE_F_REVERSE, icrc=icrc
    )


def reverse_probe_reply(ends: w.Endpoints, icrc: int = w.ICRC_UNUSED):
    """The sender's answer to reverse_probe, in place, with its ports 0 and 1 up."""
    return w.probe_reply(
        ends.reversed(),
        ev=REV_SAME,
        dqpn=engine.QP_RX,
        psn=5,
        echo_ts=99,
        flags=w.PROBE_F_REVERSE,
        port_bitmap=0b11,
        icrc=icrc,
    )


def test_reverse_probe_to_a_send_qp_is_answered_in_place(program, maps, qp):
    """At the sender: a reverse probe names its send QP (peer: the receiver)."""
    ends = sender_side(maps)
    result = run(program, reverse_probe(ends))
    assert result.retval == XDP_TX
    assert result.data_out == bytes(reverse_probe_reply(ends))


# ---- MAC'd reverse probes (a connection with a key) ---------------------------------------------

KEY = bytes(range(16, 32))


def rev_mac(opcode: int, qpn: int, psn: int, ev: int, tx_ts: int, ports: int) -> int:
    return probe_mac(KEY, opcode, qpn, psn, ev, tx_ts, ports, flags=w.PROBE_F_REVERSE)


def test_a_receive_qp_with_a_key_records_only_reverse_probe_replies_with_its_mac(maps, program):
    """A forged reply must not make a failed reverse path look alive."""
    maps.set_region(
        REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY, base_va=0x7F00 << 32
    )
    maps.set_port_bitmap(RX_HOST, UP)
    setup_qp(maps, auth_key=KEY)
    rev_set(maps, (REV_SAME, PLANE, GOOD), (REV_OTHER, OTHER, BAD))
    mac = rev_mac(w.Opcode.PROBE_REPLY, QP_RX, 77, REV_OTHER, 1, 0)

    def reply(icrc: int):
        return w.probe_reply(
            ANSWER.reversed(),
            ev=REV_OTHER,
            dqpn=QP_RX,
            psn=77,
            echo_ts=1,
            flags=w.PROBE_F_REVERSE,
            icrc=icrc,
        )

    for icrc in (w.ICRC_UNUSED, mac ^ 4):
        before = maps.counters()
        assert run(program, reply(icrc)).retval == XDP_DROP
        assert delta(before, maps.counters()) == {"drop_auth": 1}
    assert maps.rev_probes(QP_RX)[1].replies == 0

    before = maps.counters()
    assert run(program, reply(mac)).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"probe_reply_consumed": 1, "rev_probe_reply": 1}
    assert maps.rev_probes(QP_RX)[1].replies == 1


def test_a_send_qp_with_a_key_answers_only_reverse_probes_with_its_mac(program, maps):
    ends = sender_side(maps, auth_key=KEY)
    mac = rev_mac(w.Opcode.PROBE, engine.QP_TX, 5, REV_SAME, 99, 0)

    before = maps.counters()
    assert run(program, reverse_probe(ends, mac ^ 1)).retval == XDP_DROP
    assert delta(before, maps.counters()) == {"drop_auth": 1}

    result = run(program, reverse_probe(ends, mac))
    reply_mac = rev_mac(w.Opcode.PROBE_REPLY, engine.QP_RX, 5, REV_SAME, 99, 0b11)
    assert result.retval == XDP_TX
    assert result.data_out == bytes(reverse_probe_reply(ends, reply_mac))
