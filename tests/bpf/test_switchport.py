"""Golden-packet tests of bpf/switch_port.c through BPF_PROG_TEST_RUN.

The program is compiled once for the module (lab ``ztest<pid>``, pins removed
at teardown). BPF_PROG_TEST_RUN cannot set skb->tc_classid, so every test
packet runs as key 0 (port 0, ingress); each test reads counter deltas and
starts with no fault and no queue on that key. The queue stage runs on any
key whose queue is enabled (the lab enables egress keys only), so the queue
tests configure key 0's. The decoding of other keys (classid ->
port_id * 2 + direction) is covered by the netns test at the end, which
attaches the program to a real veth pair.

Keys >= MAX_PORT_KEYS cannot be produced here either: switch_port() returns
TC_ACT_OK before touching any map when key >= MAX_PORT_KEYS (read the C).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import math
import os
import subprocess
import time
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from mrc_nic.fabric import switchport as sp
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import wire
from mrc_nic.observe.port_table import PortCounterTable
from tests.helpers.env import NETNS_DIR
from tests.helpers.header_probe import struct_layout
from tests.helpers.switchprog import (
    MAX_PORTS,
    TC_ACT_OK,
    TC_ACT_SHOT,
    clear_key0,
    loaded_switch_program,
)

LAB = f"ztest{os.getpid()}"


def udp_packet(payload_len: int = 64) -> bytes:
    frame = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=49152, dport=4791)
        / Raw(bytes(range(256)) * (payload_len // 256) + bytes(payload_len % 256))
    )
    return bytes(frame)


UDP_64 = udp_packet(64)
UDP_1500 = udp_packet(1500 - 28)  # 1500-byte IP packet, 1514-byte frame
ETH_ONLY = bytes(14)  # the smallest frame BPF_PROG_TEST_RUN accepts


# ---- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def program():
    with loaded_switch_program(LAB, MAX_PORTS) as prog:
        yield prog


@pytest.fixture(autouse=True)
def no_fault_on_key0(request):
    # Only tests that use the maps (conftest's) need a clean key 0: no fault, no queue.
    if "maps" in request.fixturenames:
        clear_key0(request.getfixturevalue("maps"))
    yield


def run(program, data: bytes, repeat: int = 1) -> bpfsys.TestRunResult:
    return bpfsys.prog_test_run(program.fd, data, repeat=repeat)


def counters0(maps) -> sp.PortCounters:
    return maps.counters(0, sp.INGRESS)


def delta(before: sp.PortCounters, after: sp.PortCounters) -> dict[str, int]:
    return {k: v - before.as_dict()[k] for k, v in after.as_dict().items()}


def verdicts(program, count: int, data: bytes = UDP_64) -> list[bool]:
    """Run count packets one by one; True where the program dropped it."""
    return [run(program, data).retval == TC_ACT_SHOT for _ in range(count)]


# ---- golden packets, table-driven ----------------------------------------------------


def _expired() -> dict[str, Any]:
    return {"mode": sp.FaultMode.BLACKHOLE, "until_ns": time.monotonic_ns() - 1}


def _future() -> dict[str, Any]:
    return {"mode": sp.FaultMode.BLACKHOLE, "until_ns": time.monotonic_ns() + 600 * 10**9}


@dataclasses.dataclass
class Case:
    name: str
    fault: Any  # dict of set_fault kwargs, a callable making one, or None
    packet: bytes
    repeat: int
    retval: int
    counted: dict[str, int]  # expected counter deltas; missing names must stay 0


def passed(n: int, pkt: bytes) -> dict[str, int]:
    size = n * len(pkt)
    return {"pkts": n, "bytes": size, "passed_pkts": n, "passed_bytes": size}


def dropped(n: int, pkt: bytes, reason: str) -> dict[str, int]:
    return {"pkts": n, "bytes": n * len(pkt), reason: n}


BLACKHOLE = {"mode": sp.FaultMode.BLACKHOLE}
CASES = [
    Case("no fault", None, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case("no fault, full-size frame", None, UDP_1500, 1, TC_ACT_OK, passed(1, UDP_1500)),
    Case("no fault, bare Ethernet header", None, ETH_ONLY, 1, TC_ACT_OK, passed(1, ETH_ONLY)),
    Case("mode NONE", {"mode": sp.FaultMode.NONE}, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case("blackhole", BLACKHOLE, UDP_64, 1, TC_ACT_SHOT, dropped(1, UDP_64, "drop_blackhole")),
    Case(
        "blackhole, bare Ethernet header",
        BLACKHOLE,
        ETH_ONLY,
        1,
        TC_ACT_SHOT,
        dropped(1, ETH_ONLY, "drop_blackhole"),
    ),
    Case(
        "blackhole x100",
        BLACKHOLE,
        UDP_64,
        100,
        TC_ACT_SHOT,
        dropped(100, UDP_64, "drop_blackhole"),
    ),
    Case("blackhole, expired", _expired, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case(
        "blackhole, expires later",
        _future,
        UDP_64,
        1,
        TC_ACT_SHOT,
        dropped(1, UDP_64, "drop_blackhole"),
    ),
    Case(
        "loss 0 never drops",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 0.0, "seed": 1},
        UDP_64,
        5000,
        TC_ACT_OK,
        passed(5000, UDP_64),
    ),
    Case(
        "loss 1 always drops",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0, "seed": 1},
        UDP_64,
        5000,
        TC_ACT_SHOT,
        dropped(5000, UDP_64, "drop_loss"),
    ),
    Case(
        "loss 1, bare Ethernet header",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0},
        ETH_ONLY,
        1,
        TC_ACT_SHOT,
        dropped(1, ETH_ONLY, "drop_loss"),
    ),
    Case(
        "loss 1, expired",
        lambda: {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0, "until_ns": time.monotonic_ns() - 1},
        UDP_64,
        10,
        TC_ACT_OK,
        passed(10, UDP_64),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_packet(program, maps, case: Case):
    if case.fault is not None:
        fault = case.fault() if callable(case.fault) else case.fault
        maps.set_fault(0, sp.INGRESS, **fault)
    before = counters0(maps)

    result = run(program, case.packet, repeat=case.repeat)

    assert result.retval == case.retval
    if case.retval == TC_ACT_OK:
        assert result.data_out == case.packet, "the program must not modify packets"
    expected = dict.fromkeys(before.as_dict(), 0) | case.counted
    assert delta(before, counters0(maps)) == expected


def test_counters_add_up(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.5, seed=3)
    run(program, UDP_64, repeat=1000)
    c = counters0(maps)
    assert c.pkts == c.passed_pkts + c.drop_blackhole + c.drop_loss


def test_clear_fault_restores_forwarding(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.BLACKHOLE, fault_id=7)
    assert run(program, UDP_64).retval == TC_ACT_SHOT
    maps.clear_fault(0, sp.INGRESS)
    assert run(program, UDP_64).retval == TC_ACT_OK
    assert maps.fault(0, sp.INGRESS)["mode"] == "NONE"


def test_frame_shorter_than_ethernet_is_refused_by_kernel(program):
    # BPF_PROG_TEST_RUN refuses frames under 14 bytes; bpfsys must say what failed.
    with pytest.raises(OSError, match="BPF_PROG_TEST_RUN") as info:
        run(program, bytes(13))
    assert info.value.errno == errno.EINVAL


# ---- LOSS: rate and reproducibility ---------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF])
def test_loss_rate_matches_within_binomial_tolerance(program, maps, seed):
    # Drops of n packets at rate p are Binomial(n, p) if the hash is unbiased:
    # sd = sqrt(n p (1-p)) = 56.6 packets (0.28%) for n = 20000, p = 0.2. A
    # 5-sd band fails by chance with probability < 1e-6 (and the outcome is
    # deterministic for a given seed, so a pass is stable).
    n, p = 20000, 0.2
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=p, seed=seed)
    before = counters0(maps)

    run(program, UDP_64, repeat=n)

    got = delta(before, counters0(maps))
    tolerance = 5 * math.sqrt(n * p * (1 - p))
    assert abs(got["drop_loss"] - n * p) <= tolerance
    assert got["drop_loss"] + got["passed_pkts"] == n


def test_same_seed_replays_same_drops(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=42)
    first = verdicts(program, 400)
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=42)  # resets n
    second = verdicts(program, 400)

    assert first == second
    assert 0 < sum(first) < 400


def test_different_seeds_give_different_drops(program, maps):
    patterns = {}
    for seed in (42, 43, 1 << 40):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=seed)
        patterns[seed] = verdicts(program, 400)
    assert patterns[42] != patterns[43]
    assert patterns[42] != patterns[1 << 40]
    assert patterns[43] != patterns[1 << 40]


# ---- virtual output queue: golden packets --------------------------------------------
#
# Each case configures key 0's queue, fills its twin to a backlog (set_backlog),
# runs one packet and compares the packet that comes out, byte for byte, with
# what mrc_nic.nic.wire builds, and the counter deltas. The queue drains at 1 Mbit/s
# (125 bytes a ms), so the backlog a case sets is what its packet sees.

Q = sp.QueueSettings(rate_bps=10**6, buffer=200_000, kmin=20_000, kmax=80_000, trim=120_000)
NO_ECN = {"ecn": False}
MARKING, TRIMMING, NEAR_FULL, FULL = 100_000, 150_000, 199_500, 200_000


def mrc(
    payload: int = 1000,
    *,
    ecn: int = wire.Ecn.ECT0,
    dscp: int | None = None,
    dport: int | None = None,
    udp_checksum: bool = False,
    **kwargs,
) -> bytes:
    """An MRC data frame (WRITE; WRITE_IMM with imm=, retransmission with retx=True)."""
    pkt = wire.data_packet(
        ev=4097,
        dqpn=0x10001,
        psn=77,
        va=0x7F0000001000,
        rkey=0x1234,
        payload=bytes(range(256)) * (payload // 256) + bytes(payload % 256),
        ecn=ecn,
        **kwargs,
    )
    if dscp is not None:
        pkt[IP].tos = (dscp << wire.DSCP_SHIFT) | ecn
    if dport is not None:
        pkt[UDP].dport = dport
    if udp_checksum:
        del pkt[UDP].chksum  # scapy computes it: a sender that sets one
    return bytes(pkt)


def marked(frame: bytes) -> bytes:
    """The frame with IP ECN = CE and its IP checksum updated."""
    pkt = Ether(frame)
    pkt[IP].tos |= wire.Ecn.CE
    del pkt[IP].chksum
    return bytes(pkt)


def trimmed(frame: bytes, *, lasthop: bool = False) -> bytes:
    return bytes(wire.trim(frame, lasthop=lasthop))


DATA = mrc()
DATA_ECT1 = mrc(ecn=wire.Ecn.ECT1)
DATA_NOT_ECT = mrc(ecn=wire.Ecn.NOT_ECT)
DATA_CE = mrc(ecn=wire.Ecn.CE)
DATA_IMM = mrc(imm=0xABCD)
DATA_RETX = mrc(retx=True)
DATA_CSUM = mrc(udp_checksum=True)
DATA_SHORT = mrc(payload=4)  # 52 bytes of UDP payload: nothing to cut
DATA_NO_TRIM = mrc(dscp=wire.Dscp.NO_TRIM)
DATA_4792 = mrc(dport=4792)
SACK = bytes(wire.sack_packet(ev=4097, dqpn=1, psn=77, cum_psn=78, echo_ts=5))
ARP_FRAME = bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.2"))


@dataclasses.dataclass
class QCase:
    name: str
    settings: dict  # changes to Q
    backlog: int
    packet: bytes
    out: bytes | None  # what leaves; None: dropped (drop_buffer)
    counted: dict[str, int] = dataclasses.field(default_factory=dict)  # beyond passed/dropped
    fault: dict | None = None


QCASES = [
    QCase("below kmin: untouched", {}, 0, DATA, DATA),
    QCase("above kmax: marked CE", {}, MARKING, DATA, marked(DATA), {"ecn_marked": 1}),
    QCase(
        "above kmax, ECT(1): marked CE",
        {},
        MARKING,
        DATA_ECT1,
        marked(DATA_ECT1),
        {"ecn_marked": 1},
    ),
    QCase("above kmax, Not-ECT: untouched", {}, MARKING, DATA_NOT_ECT, DATA_NOT_ECT),
    QCase("above kmax, already CE: not counted", {}, MARKING, DATA_CE, DATA_CE),
    QCase("above kmax, ECN off: untouched", NO_ECN, MARKING, DATA, DATA),
    QCase("above kmax, not IP: untouched", {}, MARKING, ARP_FRAME, ARP_FRAME),
    QCase(
        "above trim: trimmed and marked",
        {},
        TRIMMING,
        DATA,
        trimmed(marked(DATA)),
        {"ecn_marked": 1, "trimmed": 1},
    ),
    QCase("above trim, ECN off: trimmed", NO_ECN, TRIMMING, DATA, trimmed(DATA), {"trimmed": 1}),
    QCase(
        "above trim, last hop: TRIMMED_LASTHOP",
        {**NO_ECN, "lasthop": True},
        TRIMMING,
        DATA,
        trimmed(DATA, lasthop=True),
        {"trimmed": 1},
    ),
    QCase("above trim, WRITE_IMM", NO_ECN, TRIMMING, DATA_IMM, trimmed(DATA_IMM), {"trimmed": 1}),
    QCase(
        "above trim, retransmission",
        NO_ECN,
        TRIMMING,
        DATA_RETX,
        trimmed(DATA_RETX),
        {"trimmed": 1},
    ),
    QCase(
        "above trim, UDP checksum recomputed",
        NO_ECN,
        TRIMMING,
        DATA_CSUM,
        trimmed(DATA_CSUM),
        {"trimmed": 1},
    ),
    QCase("above trim, control packet: whole", {}, TRIMMING, SACK, SACK),
    QCase(
        "above trim, NO_TRIM data: marked, whole",
        {},
        TRIMMING,
        DATA_NO_TRIM,
        marked(DATA_NO_TRIM),
        {"ecn_marked": 1},
    ),
    QCase("above trim, nothing to cut: whole", NO_ECN, TRIMMING, DATA_SHORT, DATA_SHORT),
    QCase("above trim, not UDP 4791: whole", NO_ECN, TRIMMING, DATA_4792, DATA_4792),
    QCase("above trim, trimming off: whole", {**NO_ECN, "trim": None}, TRIMMING, DATA, DATA),
    QCase(
        "does not fit, trim above buffer: trimmed",
        {**NO_ECN, "trim": 10**6},
        NEAR_FULL,
        DATA,
        trimmed(DATA),
        {"trimmed": 1},
    ),
    QCase("fits, trim above buffer: whole", {**NO_ECN, "trim": 10**6}, TRIMMING, DATA, DATA),
    QCase("does not fit, trimming off: dropped", {"trim": None}, NEAR_FULL, DATA, None),
    QCase("does not fit, not trimmable: dropped", {}, NEAR_FULL, DATA_NO_TRIM, None),
    QCase("small control packet that fits: whole", {}, NEAR_FULL, SACK, SACK),
    QCase("buffer full: even the header is dropped", {}, FULL, DATA, None),
    QCase("buffer full, not IP: dropped", {}, FULL, ARP_FRAME, None),
    QCase(
        "a fault drops first: never enqueued",
        {},
        FULL,
        DATA,
        None,
        {"drop_blackhole": 1, "drop_buffer": -1},
        fault={"mode": sp.FaultMode.BLACKHOLE},
    ),
]


def queue_case_expected(case: QCase, before: sp.PortCounters) -> dict[str, int]:
    counted = {"pkts": 1, "bytes": len(case.packet)}
    if case.out is None:
        counted["drop_buffer"] = 1
    else:
        counted.update(passed_pkts=1, passed_bytes=len(case.out), enqueued=1)
    for name, n in case.counted.items():
        counted[name] = counted.get(name, 0) + n
    expected = dict.fromkeys(before.as_dict(), 0) | counted
    del expected["backlog_hwm"]  # a maximum, not a count: checked on its own
    return expected


@pytest.mark.parametrize("case", QCASES, ids=[c.name for c in QCASES])
def test_queue_golden_packet(program, maps, case: QCase):
    maps.set_queue(0, sp.INGRESS, dataclasses.replace(Q, **case.settings))
    if case.fault:
        maps.set_fault(0, sp.INGRESS, **case.fault)
    if case.backlog:
        maps.set_backlog(0, sp.INGRESS, case.backlog)
    before = counters0(maps)

    result = run(program, case.packet)

    after = counters0(maps)
    got = delta(before, after)
    del got["backlog_hwm"]
    assert got == queue_case_expected(case, before)
    if case.out is None:
        assert result.retval == TC_ACT_SHOT
        return
    assert result.retval == TC_ACT_OK
    assert result.data_out == case.out
    # The packet saw (about) the backlog set: the high-water mark holds it and the packet.
    assert after.backlog_hwm >= case.backlog - 1000 + len(case.out)


@pytest.mark.parametrize(
    ("frame", "lasthop", "dscp"),
    [(DATA, False, wire.Dscp.TRIMMED), (DATA_IMM, True, wire.Dscp.TRIMMED_LASTHOP)],
)
def test_trimmed_packet_has_valid_headers_and_decodes_as_trimmed(
    program, maps, frame, lasthop, dscp
):
    maps.set_queue(0, sp.INGRESS, dataclasses.replace(Q, ecn=False, lasthop=lasthop))
    maps.set_backlog(0, sp.INGRESS, TRIMMING)
    out = Ether(run(program, frame).data_out)
    original = Ether(frame)

    assert len(out) == 14 + 20 + 8 + wire.TRIM_LEN
    assert out[IP].len == 20 + 8 + wire.TRIM_LEN and out[UDP].len == 8 + wire.TRIM_LEN
    assert out[IP].tos >> wire.DSCP_SHIFT == dscp
    assert out[IP].tos >> wire.DSCP_SHIFT in wire.TRIMMED_DSCPS
    assert out[IP].tos & wire.ECN_MASK == wire.Ecn.ECT0  # kept
    rebuilt = out.copy()
    del rebuilt[IP].chksum
    assert Ether(bytes(rebuilt))[IP].chksum == out[IP].chksum  # valid IPv4 checksum
    # Every MRC header is whole, RETH still says how long the payload was.
    assert out[wire.BTH].psn == original[wire.BTH].psn
    assert out[wire.RETH].dmalen == original[wire.RETH].dmalen == 1000
    assert out[wire.MRCData].tx_ts == original[wire.MRCData].tx_ts


def test_trimmed_udp_checksum_verifies(program, maps):
    maps.set_queue(0, sp.INGRESS, dataclasses.replace(Q, ecn=False))
    maps.set_backlog(0, sp.INGRESS, TRIMMING)
    out = Ether(run(program, DATA_CSUM).data_out)
    assert out[UDP].chksum not in (0, Ether(DATA_CSUM)[UDP].chksum)
    rebuilt = out.copy()
    del rebuilt[UDP].chksum
    assert Ether(bytes(rebuilt))[UDP].chksum == out[UDP].chksum


# ---- virtual output queue: marking rate, drain, counters ----------------------------------

BAND_KMIN, BAND = 10_000_000, 100_000_000  # a 100 MB marking band


def marks_at(program, maps, fraction: float, n: int, seed: int) -> int:
    """ECN marks of n fresh ECT packets, one run each, at kmin + fraction of the band."""
    settings = sp.QueueSettings(
        rate_bps=10**6,
        buffer=sp.Q_BYTES_MAX,
        kmin=BAND_KMIN,
        kmax=BAND_KMIN + BAND,
        trim=None,
        seed=seed,
    )
    maps.set_queue(0, sp.INGRESS, settings)  # restarts the draws: a seed replays
    maps.set_backlog(0, sp.INGRESS, max(0, int(BAND_KMIN + fraction * BAND)))
    before = counters0(maps).ecn_marked
    small = mrc(payload=0)
    for _ in range(n):
        run(program, small)
    return counters0(maps).ecn_marked - before


@pytest.mark.parametrize("seed", [1, 0xC0FFEE])
def test_marking_probability_rises_linearly_between_kmin_and_kmax(program, maps, seed):
    # Marks of n packets at probability p are Binomial(n, p): a 5-sd band fails by
    # chance with probability < 1e-6, and for a fixed seed the outcome is fixed.
    # The n packets themselves raise the backlog by n x 90 bytes (0.27% of the
    # band), which may add up to that fraction of n marks.
    n = 3000
    drift = n * len(mrc(payload=0)) / BAND
    got = {}
    for fraction in (-0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.05):
        p = min(max(fraction, 0.0), 1.0)
        got[fraction] = marks_at(program, maps, fraction, n, seed)
        tolerance = 5 * math.sqrt(n * p * (1 - p)) + n * drift + 1
        assert abs(got[fraction] - n * p) <= tolerance, (fraction, got)
    assert got[-0.05] == 0 and got[1.05] == n
    rates = list(got.values())
    assert rates == sorted(rates), got


def test_marking_draws_replay_with_a_seed(program, maps):
    first = marks_at(program, maps, 0.5, 400, seed=42)
    assert marks_at(program, maps, 0.5, 400, seed=42) == first
    assert 100 < first < 300


def test_backlog_drains_at_the_link_rate(program, maps):
    # 1 Gbit/s drains 125 bytes a microsecond: 100 kB are gone after 10 ms of
    # sleep, whatever else the machine does (a sleep only lasts longer).
    maps.set_queue(0, sp.INGRESS, dataclasses.replace(Q, rate_bps=10**9))
    maps.set_backlog(0, sp.INGRESS, MARKING)
    assert 0 < maps.backlog(0, sp.INGRESS) <= MARKING
    time.sleep(0.01)
    assert maps.backlog(0, sp.INGRESS) == 0
    before = counters0(maps)
    assert run(program, DATA).data_out == DATA  # below kmin again: not marked
    assert delta(before, counters0(maps))["ecn_marked"] == 0


def test_backlog_is_what_came_in_minus_burst_and_drain(program, maps):
    burst, n = 5000, 20
    maps.set_queue(
        0,
        sp.INGRESS,
        sp.QueueSettings(
            rate_bps=10**6, buffer=10**6, kmin=10**6, kmax=10**6, trim=None, burst=burst
        ),
    )
    start = time.monotonic_ns()
    for _ in range(n):
        run(program, DATA)
    backlog = maps.backlog(0, sp.INGRESS)
    elapsed_ns = time.monotonic_ns() - start
    came_in = n * len(DATA)
    # At most what the measured time could drain at 1 Mbit/s (+1 byte of rounding a packet).
    drained_at_most = elapsed_ns * 10**6 // (8 * 10**9) + n
    assert came_in - burst - drained_at_most <= backlog <= came_in - burst
    assert counters0(maps).backlog_hwm >= backlog


def test_counters_add_up_under_faults_and_a_full_queue(program, maps):
    # A small buffer, loss, and a mix of packets: every packet is passed or
    # dropped for exactly one reason, and what passed went through the queue.
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.2, seed=5)
    maps.set_queue(
        0,
        sp.INGRESS,
        sp.QueueSettings(rate_bps=10**6, buffer=20_000, kmin=4000, kmax=12_000, trim=8000),
    )
    before = counters0(maps)
    for i in range(300):
        run(program, (DATA, SACK, DATA_NO_TRIM, UDP_64)[i % 4])
    d = delta(before, counters0(maps))
    assert d["pkts"] == 300
    assert d["pkts"] == d["passed_pkts"] + d["drop_blackhole"] + d["drop_loss"] + d["drop_buffer"]
    assert d["enqueued"] == d["passed_pkts"]
    assert d["drop_loss"] > 0 and d["drop_buffer"] > 0
    assert 0 < d["trimmed"] <= d["enqueued"] and 0 < d["ecn_marked"] <= d["enqueued"]


def test_last_hop_from_the_topology_trims_as_last_hop_and_does_not_mark(program, maps):
    from mrc_nic.fabric import queues
    from mrc_nic.lab import topology

    topo = topology.load(NETNS_DIR / "default.toml", lab="zq")
    (last,) = queues.resolve_ports(topo, ("p0.t0a:h0",))
    (uplink,) = queues.resolve_ports(topo, ("p0.t0a:t1a",))
    # The topology's settings, at 1 Mbit/s so that the backlog set is the one seen.
    for ref, out in ((last, DATA), (uplink, marked(DATA))):
        settings = dataclasses.replace(queues.port_settings(topo, ref), rate_bps=10**6)
        maps.set_queue(0, sp.INGRESS, settings)
        maps.set_backlog(0, sp.INGRESS, (settings.kmax + settings.trim) // 2)
        assert run(program, DATA).data_out == out, ref.name
    settings = dataclasses.replace(queues.port_settings(topo, last), rate_bps=10**6)
    maps.set_queue(0, sp.INGRESS, settings)
    maps.set_backlog(0, sp.INGRESS, settings.trim + 10_000)
    assert run(program, DATA).data_out == trimmed(DATA, lasthop=True)


# ---- the map client -----------------------------------------------------------------


def test_fault_reports_configuration(maps):
    until = time.monotonic_ns() + 10**12
    maps.set_fault(
        1, sp.EGRESS, sp.FaultMode.LOSS, loss_rate=0.2, seed=99, until_ns=until, fault_id=12
    )
    try:
        assert maps.fault(1, sp.EGRESS) == {
            "mode": "LOSS",
            "loss_rate": 0.2,
            "seed": 99,
            "until_ns": until,
            "fault_id": 12,
            "expired": False,
        }
        assert maps.fault(1, sp.INGRESS)["mode"] == "NONE"
    finally:
        maps.clear_fault(1, sp.EGRESS)
    assert maps.fault(1, sp.EGRESS)["mode"] == "NONE"


@pytest.mark.parametrize("rate", [-0.01, 1.01, float("nan"), float("inf"), "0.5", None])
def test_set_fault_rejects_bad_loss_rate(maps, rate):
    with pytest.raises(ValueError, match="loss_rate"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=rate)
    assert maps.fault(0, sp.INGRESS)["mode"] == "NONE", "a rejected fault must not be written"


def test_set_fault_rejects_out_of_range_values(maps):
    with pytest.raises(ValueError, match="seed"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, seed=-1)
    with pytest.raises(ValueError, match="fault_id"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.BLACKHOLE, fault_id=1 << 32)
    with pytest.raises(ValueError):
        maps.set_fault(0, sp.INGRESS, 9)
    with pytest.raises(ValueError, match="direction"):
        maps.set_fault(0, 2, sp.FaultMode.BLACKHOLE)
    with pytest.raises(ValueError, match="out of range"):
        maps.set_fault(MAX_PORTS, sp.INGRESS, sp.FaultMode.BLACKHOLE)
    with pytest.raises(ValueError, match="out of range"):
        maps.counters(MAX_PORTS, sp.EGRESS)


def test_open_missing_lab_names_path():
    lab = f"zmissing{os.getpid()}"
    with pytest.raises(FileNotFoundError, match="is the lab up") as info:
        sp.SwitchPortMaps.open(lab)
    assert str(sp.pin_dir(lab)) in str(info.value)


def test_load_refuses_existing_pins(program):
    with pytest.raises(FileExistsError, match="already pinned"):
        sp.SwitchPortProgram.load(LAB, MAX_PORTS)


def test_pinned_maps_have_expected_shape(program):
    expected = {
        sp.FAULTS_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, ctypes.sizeof(sp.FaultConfig)),
        sp.COUNTERS_MAP: (bpfsys.BPF_MAP_TYPE_PERCPU_ARRAY, ctypes.sizeof(sp.CountersLayout)),
        sp.QUEUES_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, ctypes.sizeof(sp.QueueLayout)),
    }
    for name, (map_type, value_size) in expected.items():
        fd = bpfsys.obj_get(sp.pin_dir(LAB) / name)
        try:
            info = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        assert (info.type, info.key_size, info.value_size) == (map_type, 4, value_size)
        assert info.max_entries == MAX_PORTS * 2  # -DMAX_PORT_KEYS reached the program
        assert info.name == name


def test_percpu_values_round_trip(program, maps):
    # Key 7 (port 3 egress) sees no test-run traffic: write distinct values per CPU.
    fd = bpfsys.obj_get(sp.pin_dir(LAB) / sp.COUNTERS_MAP)
    key = sp.port_key(3, sp.EGRESS).to_bytes(4, "little")
    size = ctypes.sizeof(sp.CountersLayout)
    try:
        cpus = bpfsys.possible_cpus()
        values = [bytes(sp.CountersLayout(pkts=cpu + 1, drop_loss=10)) for cpu in range(cpus)]
        bpfsys.map_update_percpu(fd, key, values)
        assert bpfsys.map_lookup_percpu(fd, key, size) == values
        got = maps.counters(3, sp.EGRESS)
        assert (got.pkts, got.drop_loss) == (cpus * (cpus + 1) // 2, 10 * cpus)
        # The high-water mark is the largest CPU's, not their sum, read either way.
        values = [bytes(sp.CountersLayout(backlog_hwm=100 * (cpu + 1))) for cpu in range(cpus)]
        bpfsys.map_update_percpu(fd, key, values)
        assert maps.counters(3, sp.EGRESS).backlog_hwm == 100 * cpus
        with PortCounterTable(LAB) as table:
            assert table.read().as_dict(3, sp.EGRESS)["backlog_hwm"] == 100 * cpus
        bpfsys.map_update_percpu(fd, key, [bytes(size)] * cpus)
        assert maps.counters(3, sp.EGRESS) == sp.PortCounters()
    finally:
        os.close(fd)


def test_obj_get_error_names_path():
    with pytest.raises(FileNotFoundError, match="BPF_OBJ_GET /sys/fs/bpf/zsp-nothing-here"):
        bpfsys.obj_get("/sys/fs/bpf/zsp-nothing-here")


# ---- a fault on one EV of one QP ---------------------------------------------------------


def mrc_packet(sport: int, dqpn: int, payload_len: int = 64) -> bytes:
    """A MRC WRITE-like frame: UDP to 4791 from port `sport`, BTH to QP `dqpn`."""
    bth = bytes([0x0A, 0, 0xFF, 0xFF]) + dqpn.to_bytes(4, "big") + (5).to_bytes(4, "big")
    frame = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=sport, dport=4791)
        / Raw(bth + bytes(payload_len))
    )
    return bytes(frame)


def test_ev_fault_drops_only_its_ev_of_its_qp_and_counts(program, maps):
    n, p = 4000, 0.2
    hit, other_ev, other_qp = (
        mrc_packet(50000, 0x20001),
        mrc_packet(50001, 0x20001),
        mrc_packet(50000, 0x20002),
    )
    maps.set_ev_fault(0, sp.INGRESS, 0x20001, 50000, sp.FaultMode.LOSS, loss_rate=p, seed=3)
    try:
        before = counters0(maps)
        run(program, hit, repeat=n)
        for pkt in (other_ev, other_qp, UDP_64):  # the same port, other EVs, QPs, non-MRC
            assert run(program, pkt, repeat=200).retval == TC_ACT_OK
        got = delta(before, counters0(maps))
        f = maps.ev_fault(0, sp.INGRESS, 0x20001, 50000)
        assert f["pkts"] == n and f["dropped"] == got["drop_loss"]
        assert abs(f["dropped"] - n * p) <= 5 * math.sqrt(n * p * (1 - p))
        assert got["pkts"] == n + 600 and got["passed_pkts"] == n + 600 - f["dropped"]
        # another port key never sees it (a fault is at one point of the path)
        assert maps.ev_fault(1, sp.INGRESS, 0x20001, 50000) is None
        maps.set_ev_fault(0, sp.INGRESS, 0x20001, 50000, sp.FaultMode.BLACKHOLE)
        assert verdicts(program, 20, hit) == [True] * 20
    finally:
        last = maps.clear_ev_fault(0, sp.INGRESS, 0x20001, 50000)
    assert last is not None and last["mode"] == "BLACKHOLE"
    assert verdicts(program, 20, hit) == [False] * 20
    assert maps.clear_ev_fault(0, sp.INGRESS, 0x20001, 50000) is None


# ---- layouts and constants against the header --------------------------------------------


@pytest.mark.parametrize(
    ("map_name", "python_view"),
    [
        (sp.FAULTS_MAP, sp.FaultConfig),
        (sp.COUNTERS_MAP, sp.CountersLayout),
        (sp.QUEUES_MAP, sp.QueueLayout),
        (sp.EV_FAULTS_MAP, sp.EvFaultConfig),
    ],
)
def test_python_layout_matches_compiled_struct(program, map_name, python_view):
    table = program.bpf[map_name.encode()]
    # bcc's per-CPU tables expose an array of per-CPU values as Leaf; sLeaf is one value.
    compiled = getattr(table, "sLeaf", table.Leaf)
    assert ctypes.sizeof(python_view) == ctypes.sizeof(compiled)
    assert struct_layout(python_view) == struct_layout(compiled)


# ---- real ports: classid decoding on a veth pair ----------------------------------------------


@pytest.mark.netns
def test_attach_decodes_port_and_direction(program, maps):
    """Ping across a veth pair whose ends are ports 3 (side a) and 1 (side b).

    Each direction of each port must count on its own key, port 0 and 2 must
    see nothing, and a blackhole on port 3 egress must stop the pings.
    """
    from pyroute2 import IPRoute, netns

    ns_a, ns_b = f"zsp-{os.getpid()}a", f"zsp-{os.getpid()}b"
    port_a, port_b = 3, 1
    made = []
    try:
        for name in (ns_a, ns_b):
            netns.create(name)
            made.append(name)
        with IPRoute(netns=ns_a) as ipa, IPRoute(netns=ns_b) as ipb:
            ipa.link("add", ifname="zspa", kind="veth", peer={"ifname": "zspb", "net_ns_fd": ns_b})
            idx_a = ipa.link_lookup(ifname="zspa")[0]
            idx_b = ipb.link_lookup(ifname="zspb")[0]
            ipa.addr("add", index=idx_a, address="198.18.250.1", prefixlen=24)
            ipb.addr("add", index=idx_b, address="198.18.250.2", prefixlen=24)
            ipa.link("set", index=idx_a, state="up")
            ipb.link("set", index=idx_b, state="up")
            program.attach(ipa, idx_a, port_a)
            program.attach(ipb, idx_b, port_b)
            before = {(p, d): maps.counters(p, d) for p in range(MAX_PORTS) for d in (0, 1)}

            assert _ping(ns_a, "198.18.250.2", count=3) == 0
            after = {k: maps.counters(*k) for k in before}
            seen = {k: after[k].pkts - before[k].pkts for k in before}
            for key in [
                (port_a, sp.EGRESS),
                (port_b, sp.INGRESS),
                (port_b, sp.EGRESS),
                (port_a, sp.INGRESS),
            ]:
                assert seen[key] >= 3, (key, seen)
            for port in (0, 2):
                for direction in (sp.INGRESS, sp.EGRESS):
                    if port == 0 and direction == sp.INGRESS:
                        continue  # key 0 is shared with the test-run tests
                    assert seen[(port, direction)] == 0, (port, direction, seen)

            maps.set_fault(port_a, sp.EGRESS, sp.FaultMode.BLACKHOLE)
            try:
                assert _ping(ns_a, "198.18.250.2", count=2) != 0
                assert maps.counters(port_a, sp.EGRESS).drop_blackhole >= 2
            finally:
                maps.clear_fault(port_a, sp.EGRESS)
    finally:
        for name in made:
            netns.remove(name)


def _ping(ns: str, address: str, count: int) -> int:
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        "ping",
        "-q",
        "-c",
        str(count),
        "-i",
        "0.2",
        "-W",
        "1",
        address,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode
