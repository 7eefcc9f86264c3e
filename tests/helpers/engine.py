"""The send engine's test setup, shared by tests/bpf/test_nic_engine.py and
test_nic_mtu.py (see the former's docstring for the plan of addresses, QPs
and EVs). The fixtures that use it (sq, live_pair) are in tests/bpf/conftest.py."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from mrc_nic import nic
from mrc_nic.nic import wire as w
from tests.helpers.nicprog import delta

LAB = f"zeng{os.getpid()}"

# The program's sizes in this module.
MR_ELEMS = 4096
MAX_QPS = 16
MAX_REGIONS = 4
MAX_EVS = 128
TX_RINGS = 4
EVENT_PAGES = 4
# ... as NicProgram.load's keyword arguments.
SIZES = dict(
    mr_elems=MR_ELEMS,
    max_qps=MAX_QPS,
    max_regions=MAX_REGIONS,
    event_pages=EVENT_PAGES,
    max_evs=MAX_EVS,
    tx_rings=TX_RINGS,
)

TX_HOST, RX_HOST = 0, 1
QP_TX = TX_HOST << 16 | 7
QP_RX = RX_HOST << 16 | 5
EV_A, EV_B, EV_C, EV_D = 0xC001, 0xC002, 0xC003, 0xC004
EVS = {EV_A: 0, EV_B: 1, EV_C: 0, EV_D: 1}  # the profile, in round-robin order: {EV: plane}
RING = 1
START = 100
MPR = 1
WINDOW = MPR * w.MPR_UNIT
SRC_REGION = 0
SRC_ELEMS = 64
REMOTE_VA = 0x7F00_0000_0000
RKEY = 0x1234
PLANES = 0b11
CE = nic.MR_ELEM_SIZE  # one packet's payload


def mac(host: int, plane: int) -> str:
    """The MAC of host port `plane` of `host`."""
    return f"02:00:00:00:{host:02x}:{plane:02x}"


def nh_mac(host: int, plane: int) -> str:
    """The MAC of the T0 port facing it (the next hop)."""
    return f"02:00:00:01:{host:02x}:{plane:02x}"


def data_ends(plane: int) -> w.Endpoints:
    """Addresses of a data packet of the sender on `plane`."""
    return w.Endpoints(
        src_mac=mac(TX_HOST, plane),
        dst_mac=nh_mac(TX_HOST, plane),
        src_ip=f"198.18.{plane}.{TX_HOST + 1}",
        dst_ip=f"198.18.{plane}.{RX_HOST + 1}",
    )


def src_bytes(offset: int, size: int) -> bytes:
    """The source region's content (distinct bytes per element and position)."""
    out = bytearray()
    for elem in range(offset // CE, (offset + size + CE - 1) // CE):
        seed = bytes([elem & 0xFF, 0x5A, (elem * 7) & 0xFF, 0xC3])
        out += (seed * (CE // 4))[:CE]
    start = offset % CE
    return bytes(out[start : start + size])


# Frame offset of MRC_DATA.tx_ts: after RETH (70) + ImmDt (4, WRITE_IMM) + flags_msn, msg_off.
TX_TS_AT = {w.Opcode.WRITE: 78, w.Opcode.WRITE_IMM: 82}


def expected_data(
    psn: int, ev: int, msg_off: int, size: int, *, last: bool, msn: int = 0, **kw
) -> Packet:
    """The data packet the engine must send: WQE at REMOTE_VA, source from offset 0.
    AckReq only on a message's last packet unless given (the engine also sets it on
    a retransmission and on the packet that fills the window: ackreq=True)."""
    kw.setdefault("ackreq", last or kw.get("retx", False))
    return w.data_packet(
        data_ends(EVS[ev] if "plane" not in kw else kw.pop("plane")),
        ev=ev,
        dqpn=QP_RX,
        psn=psn,
        va=kw.pop("va", REMOTE_VA) + msg_off,
        rkey=RKEY,
        payload=kw.pop("payload", None) or src_bytes(kw.pop("src", 0) + msg_off, size),
        msn=msn,
        msg_off=msg_off,
        last=last,
        **kw,
    )


def assert_data(got: bytes, expected: Packet, t0: int, t1: int) -> int:
    """got is expected, its tx_ts taken between t0 and t1; returns tx_ts."""
    want = bytearray(bytes(expected))
    at = TX_TS_AT[want[42]]
    tx_ts = int.from_bytes(got[at : at + 8], "big") if len(got) >= at + 8 else -1
    assert t0 <= tx_ts <= t1, f"tx_ts {tx_ts} not in [{t0}, {t1}]"
    want[at : at + 8] = tx_ts.to_bytes(8, "big")
    if got != bytes(want):
        diffs = {
            (layer.__name__, f): (getattr(Ether(got)[layer], f), getattr(Ether(want)[layer], f))
            for layer in (Ether, IP, UDP, BTH, w.RETH, w.MRCData)
            for f in (fd.name for fd in layer.fields_desc)
            if layer in Ether(got)
            and layer in Ether(bytes(want))
            and getattr(Ether(got)[layer], f) != getattr(Ether(bytes(want))[layer], f)
        }
        pytest.fail(
            f"data packet differs (got, expected): {diffs} lengths {len(got)} {len(want)}\n"
            f"{got[:96].hex()}\n{bytes(want)[:96].hex()}"
        )
    return tx_ts


def setup_sq(maps, **kw) -> None:
    args = dict(
        local_host=TX_HOST,
        peer_host=RX_HOST,
        peer_qpn=QP_RX,
        ring=RING,
        evs=EVS,
        mpr=MPR,
        psn=START,
        engine=True,
    )
    maps.setup_sq(QP_TX, **(args | kw))


def post(maps, length: int, **kw) -> int:
    args = dict(length=length, src_region=SRC_REGION, remote_va=REMOTE_VA, rkey=RKEY)
    return maps.post_write(QP_TX, **(args | kw))


@dataclasses.dataclass
class Run:
    verdict: int
    frame: bytes
    t0: int
    t1: int
    counters: dict[str, int]


def kick(program, maps, packets: int = 1) -> Run:
    """A non-live kick (packets runs on one buffer): the last frame, the counters moved."""
    before = maps.counters()
    t0 = time.monotonic_ns()
    result = program.kick(QP_TX, packets, live=False)
    t1 = time.monotonic_ns()
    return Run(result.retval, result.data_out, t0, t1, delta(before, maps.counters()))


LIVE_EVS = {0xE000 + i: i % 2 for i in range(16)}  # 8 EVs per plane, alternating
LIVE_SRC, LIVE_DST = 2, 3
LIVE_ELEMS = 1024  # 1 MiB each
LIVE_MPR = 2


def live_setup(maps, ends, *, length: int, wqes: int = 1) -> bytes:
    for p in (0, 1):
        ns, index, address = ends[f"zeng-a{p}"]
        maps.set_port(
            TX_HOST, p, ifindex=index, mac=address, nh_mac=ends[f"zeng-b{p}"][2], netns=ns
        )
    maps.set_port_bitmap(TX_HOST, PLANES)
    maps.set_port_bitmap(RX_HOST, PLANES)
    maps.set_region(LIVE_SRC, first_elem=1024, n_elems=LIVE_ELEMS, rkey=0x1111)
    maps.set_region(LIVE_DST, first_elem=2048, n_elems=LIVE_ELEMS, rkey=RKEY, base_va=REMOTE_VA)
    data = os.urandom(LIVE_ELEMS * CE)
    maps.write_region(LIVE_SRC, 0, data)
    maps.write_region(LIVE_DST, 0, bytes(LIVE_ELEMS * CE))
    maps.setup_rq(
        QP_RX,
        local_host=RX_HOST,
        peer_host=TX_HOST,
        peer_qpn=QP_TX,
        region=LIVE_DST,
        mpr=LIVE_MPR,
        psn=START,
    )
    setup_sq(maps, evs=LIVE_EVS, mpr=LIVE_MPR)
    for _ in range(wqes):
        maps.post_write(QP_TX, length=length, src_region=LIVE_SRC, remote_va=REMOTE_VA, rkey=RKEY)
    return data


def live_transfer(maps, *, wqes: int, deadline_s: float) -> dict:
    """Kick a window, let the ACK clock carry the rest; a top-up kick (the daemon's
    job) only if the QP stalls with room in its window. Returns the figures."""
    window = LIVE_MPR * w.MPR_UNIT
    before = maps.counters()
    t0 = time.monotonic()
    maps.kick(QP_TX, window, batch_size=window)  # one batch: the whole window leaves at once
    top_ups, last_una, last_move = 0, START, t0
    while True:
        s = maps.sq(QP_TX)
        now = time.monotonic()
        if s.wqe_done == wqes or now - t0 > deadline_s:
            break
        if s.snd_una != last_una:
            last_una, last_move = s.snd_una, now
        elif now - last_move > 0.02 and s.window_free:
            maps.kick(QP_TX, s.window_free)
            top_ups += 1
            last_move = now
        time.sleep(0.0005)
    elapsed = time.monotonic() - t0
    moved = delta(before, maps.counters())
    return dict(sq=maps.sq(QP_TX), elapsed=elapsed, top_ups=top_ups, counters=moved)
