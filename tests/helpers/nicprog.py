"""The NIC program loaded for a test module, and helpers its golden tests share.

The golden tests' plan (test_nic_rx, test_nic_tx, test_nic_reverse,
test_nic_ep_probe): host h on plane p is 198.18.p.(h+1); data goes from host 0
(QP 0x000007) to host 1 (QP 0x010005) on plane 2, and its answers come back
the same way reversed.
"""

from __future__ import annotations

import contextlib

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from mrc_nic import nic
from mrc_nic.kernel import bpfsys
from mrc_nic.nic import auth
from mrc_nic.nic import wire as w
from tests.helpers.env import require_root_and_bcc

# XDP verdicts (enum xdp_action).
XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = 1, 2, 3, 4

TX_HOST, RX_HOST, PLANE = 0, 1, 2
QP_TX = TX_HOST << 16 | 7  # the data sender's QP: dest QP of every answer
QP_RX = RX_HOST << 16 | 5  # the receiving QP: dest QP of every data packet
DATA = w.Endpoints(  # the data direction: sender -> receiver (PROBEs go this way)
    src_mac="02:00:00:00:00:01",
    dst_mac="02:00:00:00:01:01",
    src_ip=f"198.18.{PLANE}.{TX_HOST + 1}",
    dst_ip=f"198.18.{PLANE}.{RX_HOST + 1}",
)
ANSWER = DATA.reversed()  # receiver -> sender: SACK, NACK, PROBE_REPLY


@contextlib.contextmanager
def loaded_nic_program(lab: str, **sizes):
    """The NIC XDP program compiled for a test lab name (maps pinned), removed after."""

    require_root_and_bcc()
    prog = nic.NicProgram.load(lab, **sizes)
    try:
        yield prog
    finally:
        prog.close()
        nic.unpin(lab)


def run(program, frame: Packet | bytes) -> bpfsys.TestRunResult:
    """One frame through the program (BPF_PROG_TEST_RUN)."""
    return bpfsys.prog_test_run(program.fd, bytes(frame))


def probe_mac(
    key: bytes, opcode: int, qpn: int, psn: int, ev: int, tx_ts: int, ports: int, flags: int = 0
) -> int:
    """The MAC (nic.auth) of a PROBE or PROBE_REPLY with these fields."""
    return auth.probe_mac(
        key, opcode=opcode, qpn=qpn, psn=psn, tx_ts=tx_ts, ev=ev, flags=flags, port_bitmap=ports
    )


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in after.items() if v != before[k]}


def patched(pkt: Packet, offset: int, value: bytes) -> bytes:
    raw = bytearray(bytes(pkt))
    raw[offset : offset + len(value)] = value
    return bytes(raw)


def with_udp_payload(pkt: Packet, udp_payload: bytes) -> bytes:
    """pkt's framing around another UDP payload, with consistent IPv4/UDP lengths."""
    eth = Ether(bytes(pkt))
    ip, udp = eth[IP], eth[UDP]
    del ip.len, ip.chksum, udp.len
    udp.remove_payload()
    udp.add_payload(Raw(udp_payload))
    return bytes(eth)
