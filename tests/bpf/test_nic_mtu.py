"""Data packets larger than one region element: a lab whose IP MTU fits 3 KiB.

The NIC program compiled for an IP MTU of 3200 (nic.seg_size: 3072 bytes of
payload per full packet, three 1 KiB elements). The send engine segments
WRITEs in 3 KiB, copying each element of the source in turn; the receiver
places a packet's payload over consecutive elements, and refuses one whose
last element lies beyond the region. The golden tests reuse the engine's
helpers (tests/helpers/engine.py) with this module's program (lab ``zmtu<pid>``); the
live test sends a 1 MiB WRITE between two namespaces over veths of MTU 3200.
"""

from __future__ import annotations

import os

import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire as w
from tests.helpers.engine import (
    CE,
    EV_A,
    EV_B,
    LIVE_DST,
    LIVE_ELEMS,
    QP_TX,
    REMOTE_VA,
    SIZES,
    START,
    assert_data,
    expected_data,
    kick,
    live_setup,
    live_transfer,
    post,
)
from tests.helpers.nicprog import XDP_REDIRECT

LAB = f"zmtu{os.getpid()}"
MTU = 3200
SEG = nic.seg_size(MTU)
PROGRAM_SIZES = SIZES | dict(mtu=MTU)  # conftest's program fixture: the engine's sizes


def test_engine_sends_three_elements_per_packet(program, maps, sq):
    post(maps, 2 * SEG + CE)  # two full packets and a 1 KiB last one
    sizes = []
    for psn, ev, off, size in ((START, EV_A, 0, SEG), (START + 1, EV_B, SEG, SEG)):
        r = kick(program, maps)
        assert r.verdict == XDP_REDIRECT
        assert_data(r.frame, expected_data(psn, ev, off, size, last=False), r.t0, r.t1)
        sizes.append(len(Ether(r.frame)[UDP].payload))
    r = kick(program, maps)
    frame = Ether(r.frame)
    assert frame[w.RETH].dmalen == CE and frame[w.MRCData].msg_off == 2 * SEG
    assert sizes == [w.WRITE_HDRS_LEN + SEG + w.ICRC_LEN] * 2
    s = maps.sq(QP_TX)
    assert (s.snd_nxt, s.tx_stats["data_bytes"]) == (START + 3, 2 * SEG + CE)


@pytest.mark.netns
def test_live_1mib_write_in_3k_packets(program, maps, live_pair, event_reader):
    length = LIVE_ELEMS * CE
    data = live_setup(maps, live_pair, length=length)
    got = live_transfer(maps, wqes=1, deadline_s=10)
    s = got["sq"]
    packets = -(-length // SEG)
    assert s.wqe_done == 1, f"not complete in 10 s: {got['counters']}"
    assert s.snd_una == START + packets, "3 KiB per PSN"
    assert maps.read_region(LIVE_DST, 0, length) == data


# ---- the receiver ---------------------------------------------------------------------

RX_REGION, RX_FIRST, RX_ELEMS = 1, 100, 6  # six elements: two full 3 KiB packets


def _rx_packet(psn: int, elem: int, payload: bytes):
    ends = w.Endpoints(src_ip="198.18.0.1", dst_ip="198.18.0.2")  # host 0 to host 1, plane 0
    return w.data_packet(
        ends,
        ev=0xC123,
        dqpn=1 << 16 | 5,
        psn=psn,
        va=REMOTE_VA + elem * CE,
        rkey=0x77,
        payload=payload,
        last=False,
    )


@pytest.fixture
def rq(maps):
    maps.set_region(RX_REGION, first_elem=RX_FIRST, n_elems=RX_ELEMS, rkey=0x77, base_va=REMOTE_VA)
    maps.write_region(RX_REGION, 0, bytes(RX_ELEMS * CE))
    maps.set_port_bitmap(1, 0b1)
    maps.setup_rq(
        1 << 16 | 5, local_host=1, peer_host=0, peer_qpn=QP_TX, region=RX_REGION, mpr=1, psn=START
    )
    return 1 << 16 | 5


def test_receiver_places_a_3k_payload_over_three_elements(program, maps, rq):
    payload = os.urandom(SEG)
    r = bpfsys.prog_test_run(program.fd, bytes(_rx_packet(START, 3, payload)))
    assert r.retval == 3  # XDP_TX: the SACK
    assert maps.read_region(RX_REGION, 3 * CE, SEG) == payload
    assert maps.read_region(RX_REGION, 0, 3 * CE) == bytes(3 * CE), "nothing before it"
    st = maps.rq(rq).stats
    assert (st["placed_pkts"], st["placed_bytes"]) == (1, SEG)


@pytest.mark.parametrize("at", [1, CE - 1, 2 * CE + 517])
def test_receiver_places_a_3k_payload_at_any_byte_over_four_elements(program, maps, rq, at):
    """Byte-granular placement of the largest payload: it starts inside an
    element and spans four; the bytes around it stay as they were."""
    payload = os.urandom(SEG)
    packet = _rx_packet(START, 0, payload)
    packet[w.RETH].va = REMOTE_VA + at
    r = bpfsys.prog_test_run(program.fd, bytes(packet))
    assert r.retval == 3  # XDP_TX: the SACK
    region = maps.read_region(RX_REGION, 0, RX_ELEMS * CE)
    assert region == bytes(at) + payload + bytes(RX_ELEMS * CE - at - SEG)


def test_receiver_refuses_a_payload_that_ends_beyond_the_region(program, maps, rq):
    r = bpfsys.prog_test_run(program.fd, bytes(_rx_packet(START, 4, os.urandom(SEG))))
    answer = Ether(r.data_out)
    assert answer[w.MRCAck].nack_reason == w.NackReason.UNEXP_EVENT  # remote access: fatal
    assert maps.read_region(RX_REGION, 0, RX_ELEMS * CE) == bytes(RX_ELEMS * CE)
    assert maps.rq(rq).stats["placed_pkts"] == 0
