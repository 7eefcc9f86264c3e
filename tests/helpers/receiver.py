"""The receive QP of the NIC golden tests and its packets, shared by
tests/bpf/test_nic_rx.py and test_nic_reverse.py (see the former's docstring
for the plan; the hosts, plane and QPs are nicprog's): its region and window,
the data packets it is sent and the SACKs and NACKs it must answer with."""

from __future__ import annotations

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire as w
from tests.helpers.nicprog import ANSWER, DATA, QP_RX, QP_TX, RX_HOST, TX_HOST, XDP_TX

EV = 0xC123
TS = 0x0000_0102_0304_0000
RKEY = 0x1234
REGION = 1
REGION_FIRST_ELEM = 16
REGION_ELEMS = 8
BASE_VA = 0x7F00_0000_0000
PORTS = 0b1011  # the receiving host's ports that are up (copied into answers)
START = 100  # cum_psn of the freshly set-up QP
MPR = 1
WINDOW = MPR * w.MPR_UNIT


def payload_for(psn: int, size: int = 1024) -> bytes:
    """Distinct, recognisable bytes per PSN."""
    seed = bytes([psn & 0xFF, (psn >> 8) & 0xFF, 0xA5, 0x5A])
    return (seed * (size // 4 + 1))[:size]


def data(
    psn: int,
    *,
    elem: int | None = None,
    payload: bytes | None = None,
    ends: w.Endpoints = DATA,
    dqpn: int = QP_RX,
    **kw,
) -> Packet:
    """A data packet for PSN psn, placed in region element elem (default: psn - START)."""
    elem = psn - START if elem is None else elem
    kw.setdefault("last", False)
    kw.setdefault("tx_ts", TS + psn)
    kw.setdefault("rkey", RKEY)
    return w.data_packet(
        ends,
        ev=kw.pop("ev", EV),
        dqpn=dqpn,
        psn=psn,
        va=kw.pop("va", BASE_VA + elem * nic.MR_ELEM_SIZE),
        payload=payload_for(psn) if payload is None else payload,
        **kw,
    )


def _answer_fields(psn: int, cum: int, bitmap: int, kw: dict) -> dict:
    """What the SACK and the NACK of data PSN psn share; ev, echo_ts,
    port_bitmap and mpr are taken out of kw when given there."""
    return dict(
        ev=kw.pop("ev", EV),
        dqpn=QP_TX,
        psn=psn,
        cum_psn=cum,
        echo_ts=kw.pop("echo_ts", TS + psn),
        sack_bitmap=bitmap,
        port_bitmap=kw.pop("port_bitmap", PORTS),
        mpr=kw.pop("mpr", MPR),
    )


def sack(psn: int, cum: int, bitmap: int = 0, *, flags: int = 0, msn: int = 0, **kw) -> Packet:
    """The SACK the receiver must send for data PSN psn (its ports: PORTS unless given)."""
    fields = _answer_fields(psn, cum, bitmap, kw)
    return w.sack_packet(ANSWER, flags=flags, msn=msn, **fields, **kw)


def nack(psn: int, reason: w.NackReason, cum: int, bitmap: int = 0, **kw) -> Packet:
    """The NACK the receiver must send for data PSN psn."""
    fields = _answer_fields(psn, cum, bitmap, kw)
    return w.nack_packet(ANSWER, reason=reason, **fields, **kw)


def setup_qp(maps, **kw) -> None:
    """The receive QP QP_RX, fresh: cum_psn START, window MPR, region REGION."""
    args = dict(
        local_host=RX_HOST, peer_host=TX_HOST, peer_qpn=QP_TX, region=REGION, mpr=MPR, psn=START
    )
    maps.setup_rq(QP_RX, **(args | kw))


def fresh_qp(maps, mr_elems: int, **kw) -> None:
    """Region REGION set up and zeroed (the module's mr_elems), the receiver's ports
    up, and the receive QP fresh (setup_qp with kw)."""
    maps.set_region(
        REGION, first_elem=REGION_FIRST_ELEM, n_elems=REGION_ELEMS, rkey=RKEY, base_va=BASE_VA
    )
    maps.set_port_bitmap(RX_HOST, PORTS)
    maps.memory()[:] = bytes(mr_elems * nic.MR_ELEM_SIZE)
    setup_qp(maps, **kw)


def assert_answer(result: bpfsys.TestRunResult, expected: Packet) -> None:
    """The run answered with XDP_TX and exactly the expected frame (else the fields that differ)."""
    assert result.retval == XDP_TX, f"verdict {result.retval}"
    got, want = result.data_out, bytes(expected)
    if got != want:
        diffs = {
            (layer.__name__, f): (getattr(Ether(got)[layer], f), getattr(Ether(want)[layer], f))
            for layer in (Ether, IP, UDP, BTH, AETH, w.MRCAck)
            for f in (fd.name for fd in layer.fields_desc)
            if layer in Ether(got)
            and getattr(Ether(got)[layer], f) != getattr(Ether(want)[layer], f)
        }
        pytest.fail(f"answer differs (got, expected): {diffs}\n{got.hex()}\n{want.hex()}")
