"""The MRC wire format in Python: constants, scapy layers and packet builders.

bpf/mrc_wire.h is the source of truth; this module mirrors it, and
tests/unit/test_wire.py and tests/bpf/test_wire.py check every constant here
against the compiled header and every layer against the compiled struct layouts. docs/wire-format.md
draws each packet and explains the choices.

The InfiniBand headers come from ``scapy.contrib.roce`` (BTH, AETH); scapy
2.8 has no RETH or ImmDt, so they are defined here in the same style,
followed by MRC's three extension headers (MRCData, MRCAck, MRCProbe).
Importing this module binds them below scapy's BTH and AETH (scapy binds UDP
port 4791 to BTH itself), so ``Ether(raw_bytes)`` decodes a whole MRC packet:

    >>> pkt = Ether(raw)
    >>> pkt[BTH].psn, pkt[MRCData].msn, pkt[MRCAck].cum_psn

Builders return complete frames (Ether / IP / UDP(sport=EV, dport=4791) /
BTH / ...) with a 4-byte ICRC slot set to 0 (``icrc=None`` asks scapy to
compute the real RoCEv2 ICRC instead). The bindings are global to scapy:
after this import, an RDMA WRITE Only packet of any RoCE peer decodes its
first 16 payload bytes as an MRCData header.
"""

from __future__ import annotations

import dataclasses

from scapy.contrib.roce import AETH, BTH
from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    LongField,
    ShortField,
    XIntField,
    XLongField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_bottom_up, bind_layers

# The numbers are part of the format (wire.PSN_MASK, wire.payload_max): re-exported.
from mrc_nic.nic.wireconst import *  # noqa: F403
from mrc_nic.nic.wireconst import (
    DSCP_SHIFT,
    ECN_MASK,
    ICRC_UNUSED,
    PKEY_DEFAULT,
    PSN_BITS,
    RETRYABLE_NACKS,
    SACK_BITS,
    TRIM_LEN,
    TRIM_NACKS,
    TRIMMABLE_DSCPS,
    UDP_PORT,
    AckFlag,
    Dscp,
    Ecn,
    NackReason,
    Opcode,
    Syndrome,
    payload_max,
    psn_diff,
)

__all__ = [
    "AETH",
    "BTH",
    "RETH",
    "AckFlag",
    "Dscp",
    "Ecn",
    "Endpoints",
    "ImmDt",
    "MRCAck",
    "MRCData",
    "MRCProbe",
    "NackReason",
    "Opcode",
    "Syndrome",
    "data_packet",
    "nack_packet",
    "payload_max",
    "probe",
    "probe_reply",
    "psn_diff",
    "sack_packet",
    "trim",
]

# ---- scapy layers -------------------------------------------------------------------

_ACK_FLAG_NAMES = ["ECN", "TRIMMED", "DUP"]  # bit 0 first, as FlagsField wants
# PROBE and PROBE_REPLY: bit 7 (MRC_PROBE_F_REVERSE) marks a probe of a reverse EV.
_PROBE_FLAG_NAMES = [*_ACK_FLAG_NAMES, "", "", "", "", "REVERSE"]
_NACK_NAMES = {r.value: r.name for r in NackReason}


class RETH(Packet):
    """RDMA Extended Transport Header (IBTA Vol. 1, ch. 9): struct mrc_reth."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dmalen", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        # What follows a RETH depends on the BTH opcode, not on a RETH field.
        bth = self.underlayer
        if isinstance(bth, BTH):
            if bth.opcode == Opcode.WRITE_IMM:
                return ImmDt
            if bth.opcode == Opcode.WRITE:
                return MRCData
        return super().guess_payload_class(payload)


class ImmDt(Packet):
    """Immediate Data Extended Transport Header (IBTA Vol. 1, ch. 9): struct mrc_immdt."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRCData(Packet):
    """MRC data extension, after RETH (and ImmDt): struct mrc_data_ext."""

    name = "MRC data extension"
    fields_desc = [
        BitField("last", 0, 1),
        BitField("resv7", 0, 7),
        BitField("msn", 0, 24),
        IntField("msg_off", 0),
        LongField("tx_ts", 0),
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRC_DATA msn=%msn% off=%msg_off% last=%last%")


class MRCAck(Packet):
    """MRC acknowledgement extension, after AETH in SACK and NACK: struct mrc_ack_ext."""

    name = "MRC ack extension"
    fields_desc = [
        BitField("mpr", 0, 8),
        BitField("cum_psn", 0, 24),
        BitField("resv8", 0, 8),
        BitField("sack_psn", 0, 24),
        XLongField("sack_bitmap", 0),
        LongField("echo_ts", 0),
        ShortField("echo_ev", 0),
        FlagsField("flags", 0, 8, _ACK_FLAG_NAMES),
        ByteEnumField("nack_reason", 0, _NACK_NAMES),
        XIntField("port_bitmap", 0),
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRC_ACK cum=%cum_psn% reason=%nack_reason% ev=%echo_ev%")


class MRCProbe(Packet):
    """MRC probe extension, in PROBE and PROBE_REPLY: struct mrc_probe_ext."""

    name = "MRC probe extension"
    fields_desc = [
        LongField("tx_ts", 0),
        ShortField("ev", 0),
        FlagsField("flags", 0, 8, _PROBE_FLAG_NAMES),
        ByteField("reserved", 0),
        XIntField("port_bitmap", 0),
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRC_PROBE ev=%ev%")


# bind_layers also sets the field when building (BTH()/RETH() gets opcode
# 0x0A); bind_bottom_up only teaches dissection, for the other values.
bind_layers(BTH, RETH, opcode=Opcode.WRITE)
bind_bottom_up(BTH, RETH, opcode=Opcode.WRITE_IMM)
bind_layers(ImmDt, MRCData)
bind_layers(AETH, MRCAck, syndrome=Syndrome.ACK)
for _syndrome in (s for s in Syndrome if s != Syndrome.ACK):
    bind_bottom_up(AETH, MRCAck, syndrome=_syndrome)
bind_layers(BTH, MRCProbe, opcode=Opcode.PROBE)
bind_bottom_up(BTH, MRCProbe, opcode=Opcode.PROBE_REPLY)
# ---- builders ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Endpoints:
    """Ethernet and IPv4 addresses of one direction of a packet."""

    src_mac: str = "02:00:00:00:00:01"
    dst_mac: str = "02:00:00:00:00:02"
    src_ip: str = "10.0.0.1"
    dst_ip: str = "10.0.0.2"

    def reversed(self) -> Endpoints:
        """The addresses of the answer to a packet sent with these."""
        return Endpoints(self.dst_mac, self.src_mac, self.dst_ip, self.src_ip)


DEFAULT_ENDPOINTS = Endpoints()


def _check(name: str, value: int, bits: int, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or not minimum <= value < 1 << bits:
        raise ValueError(f"{name} must be an integer in [{minimum}, 2^{bits}), not {value!r}")
    return value


def _frame(ends: Endpoints, ev: int, dscp: int, ecn: int) -> Packet:
    # UDP checksum 0 (allowed for IPv4 and usual for RoCEv2): the EV can be
    # rewritten and the packet trimmed without touching it.
    _check("ev", ev, 16, minimum=1)
    return (
        Ether(src=ends.src_mac, dst=ends.dst_mac)
        / IP(
            src=ends.src_ip,
            dst=ends.dst_ip,
            tos=(_check("dscp", dscp, 6) << DSCP_SHIFT) | _check("ecn", ecn, 2),
            id=0,
            flags="DF",
            ttl=64,
        )
        / UDP(sport=ev, dport=UDP_PORT, chksum=0)
    )


def _bth(opcode: int, dqpn: int, psn: int, ackreq: bool, icrc: int | None) -> BTH:
    return BTH(
        opcode=opcode,
        pkey=PKEY_DEFAULT,
        dqpn=_check("dqpn", dqpn, 24),
        ackreq=int(ackreq),
        psn=_check("psn", psn, PSN_BITS),
        icrc=icrc,
    )


def data_packet(
    ends: Endpoints = DEFAULT_ENDPOINTS,
    *,
    ev: int,
    dqpn: int,
    psn: int,
    va: int,
    rkey: int,
    payload: bytes = b"",
    msn: int = 0,
    msg_off: int = 0,
    tx_ts: int = 0,
    last: bool = True,
    imm: int | None = None,
    retx: bool = False,
    ackreq: bool = True,
    ecn: int = Ecn.ECT0,
    dmalen: int | None = None,
    icrc: int | None = ICRC_UNUSED,
) -> Packet:
    """One RDMA WRITE packet: opcode WRITE, or WRITE_IMM when imm is given.

    va is the address of this packet's payload (message base + msg_off);
    dmalen defaults to len(payload). imm is only allowed on a last packet.
    """
    if imm is not None and not last:
        raise ValueError("immediate data rides only on the last packet of a message")
    opcode = Opcode.WRITE if imm is None else Opcode.WRITE_IMM
    dscp = Dscp.TRIMMABLE_RETX if retx else Dscp.TRIMMABLE
    pkt = _frame(ends, ev, dscp, ecn) / _bth(opcode, dqpn, psn, ackreq, icrc)
    pkt /= RETH(
        va=_check("va", va, 64),
        rkey=_check("rkey", rkey, 32),
        dmalen=_check("dmalen", len(payload) if dmalen is None else dmalen, 32),
    )
    if imm is not None:
        pkt /= ImmDt(imm=_check("imm", imm, 32))
    pkt /= MRCData(
        last=int(last),
        msn=_check("msn", msn, 24),
        msg_off=_check("msg_off", msg_off, 32),
        tx_ts=_check("tx_ts", tx_ts, 64),
    )
    return pkt / Raw(payload) if payload else pkt


def _ack(
    ends: Endpoints,
    *,
    syndrome: int,
    reason: int,
    ev: int,
    dqpn: int,
    psn: int,
    cum_psn: int,
    echo_ts: int,
    sack_psn: int | None,
    sack_bitmap: int,
    flags: int,
    port_bitmap: int,
    msn: int,
    mpr: int,
    icrc: int | None,
) -> Packet:
    # Answers leave with the EV they answer as source port (see docs).
    return (
        _frame(ends, ev, Dscp.CONTROL, Ecn.NOT_ECT)
        / _bth(Opcode.ACK, dqpn, psn, False, icrc)
        / AETH(syndrome=syndrome, msn=_check("msn", msn, 24))
        / MRCAck(
            mpr=_check("mpr", mpr, 8),
            cum_psn=_check("cum_psn", cum_psn, PSN_BITS),
            sack_psn=_check("sack_psn", cum_psn if sack_psn is None else sack_psn, PSN_BITS),
            sack_bitmap=_check("sack_bitmap", sack_bitmap, SACK_BITS),
            echo_ts=_check("echo_ts", echo_ts, 64),
            echo_ev=ev,
            flags=_check("flags", int(flags), 8),
            nack_reason=reason,
            port_bitmap=_check("port_bitmap", port_bitmap, 32),
        )
    )


def sack_packet(
    ends: Endpoints = DEFAULT_ENDPOINTS,
    *,
    ev: int,
    dqpn: int,
    psn: int,
    cum_psn: int,
    echo_ts: int,
    sack_psn: int | None = None,
    sack_bitmap: int = 0,
    flags: int = 0,
    port_bitmap: int = 0,
    msn: int = 0,
    mpr: int = 0,
    icrc: int | None = ICRC_UNUSED,
) -> Packet:
    """A SACK answering the data packet psn that came on EV ev with tx_ts echo_ts.

    ends are the SACK's own addresses (the data packet's, reversed); dqpn is
    the data sender's QP. The bitmap starts at sack_psn (default: cum_psn).
    """
    return _ack(
        ends,
        syndrome=Syndrome.ACK,
        reason=NackReason.NONE,
        ev=ev,
        dqpn=dqpn,
        psn=psn,
        cum_psn=cum_psn,
        echo_ts=echo_ts,
        sack_psn=sack_psn,
        sack_bitmap=sack_bitmap,
        flags=flags,
        port_bitmap=port_bitmap,
        msn=msn,
        mpr=mpr,
        icrc=icrc,
    )


def nack_packet(
    ends: Endpoints = DEFAULT_ENDPOINTS,
    *,
    reason: NackReason,
    ev: int,
    dqpn: int,
    psn: int,
    cum_psn: int,
    echo_ts: int,
    syndrome: int | None = None,
    sack_psn: int | None = None,
    sack_bitmap: int = 0,
    flags: int | None = None,
    port_bitmap: int = 0,
    msn: int = 0,
    mpr: int = 0,
    icrc: int | None = ICRC_UNUSED,
) -> Packet:
    """A NACK of the data packet psn (the PSN to resend) for a reason.

    The syndrome defaults to NAK_PSN_SEQ for retryable reasons and NAK_REM_OP
    for UNEXP_EVENT; flags default to TRIMMED for the two trim reasons.
    """
    reason = NackReason(reason)
    if reason == NackReason.NONE:
        raise ValueError("a NACK needs a reason (NackReason.NONE is a SACK)")
    if syndrome is None:
        retryable = reason in RETRYABLE_NACKS
        syndrome = Syndrome.NAK_PSN_SEQ if retryable else Syndrome.NAK_REM_OP
    if Syndrome(syndrome) == Syndrome.ACK:
        raise ValueError("a NACK needs a NAK syndrome")
    if flags is None:
        flags = AckFlag.TRIMMED if reason in TRIM_NACKS else 0
    return _ack(
        ends,
        syndrome=syndrome,
        reason=reason,
        ev=ev,
        dqpn=dqpn,
        psn=psn,
        cum_psn=cum_psn,
        echo_ts=echo_ts,
        sack_psn=sack_psn,
        sack_bitmap=sack_bitmap,
        flags=flags,
        port_bitmap=port_bitmap,
        msn=msn,
        mpr=mpr,
        icrc=icrc,
    )


def probe(
    ends: Endpoints = DEFAULT_ENDPOINTS,
    *,
    ev: int,
    dqpn: int,
    psn: int,
    tx_ts: int,
    port_bitmap: int = 0,
    ecn: int = Ecn.ECT0,
    icrc: int | None = ICRC_UNUSED,
    flags: int = 0,
) -> Packet:
    """A PROBE of EV ev (its source port) to the peer's QP dqpn; psn is the probe
    number. flags PROBE_F_REVERSE: a receiver's probe of a reverse EV, to the
    peer's send QP."""
    return (
        _frame(ends, ev, Dscp.TRIMMABLE, ecn)
        / _bth(Opcode.PROBE, dqpn, psn, True, icrc)
        / MRCProbe(
            tx_ts=_check("tx_ts", tx_ts, 64),
            ev=ev,
            flags=_check("flags", flags, 8),
            port_bitmap=_check("port_bitmap", port_bitmap, 32),
        )
    )


def probe_reply(
    ends: Endpoints = DEFAULT_ENDPOINTS,
    *,
    ev: int,
    dqpn: int,
    psn: int,
    echo_ts: int,
    flags: int = 0,
    port_bitmap: int = 0,
    icrc: int | None = ICRC_UNUSED,
) -> Packet:
    """The PROBE_REPLY to a probe of EV ev numbered psn, sent to the prober's QP dqpn."""
    return (
        _frame(ends, ev, Dscp.CONTROL, Ecn.NOT_ECT)
        / _bth(Opcode.PROBE_REPLY, dqpn, psn, False, icrc)
        / MRCProbe(
            tx_ts=_check("echo_ts", echo_ts, 64),
            ev=ev,
            flags=_check("flags", int(flags), 8),
            port_bitmap=_check("port_bitmap", port_bitmap, 32),
        )
    )


def trim(pkt: Packet | bytes, *, lasthop: bool = False) -> Packet:
    """What a trimming switch makes of a data packet (see docs/wire-format.md).

    Keeps the first TRIM_LEN bytes of UDP payload, fixes the IPv4 and UDP
    lengths and the IPv4 checksum (and the UDP checksum, if the packet has
    one: MRC sends 0), and rewrites the DSCP to TRIMMED (or TRIMMED_LASTHOP),
    keeping ECN. Refuses packets a switch would not trim.
    """
    eth = Ether(bytes(pkt))
    if IP not in eth or UDP not in eth or eth[UDP].dport != UDP_PORT:
        raise ValueError("not an MRC packet over IPv4/UDP 4791")
    ip, udp = eth[IP], eth[UDP]
    if ip.tos >> DSCP_SHIFT not in TRIMMABLE_DSCPS:
        raise ValueError(f"DSCP {ip.tos >> DSCP_SHIFT} is not trimmable")
    body = bytes(udp.payload)
    if len(body) <= TRIM_LEN:
        raise ValueError(f"UDP payload of {len(body)} bytes is not longer than {TRIM_LEN}")
    dscp = Dscp.TRIMMED_LASTHOP if lasthop else Dscp.TRIMMED
    ip.tos = (dscp << DSCP_SHIFT) | (ip.tos & ECN_MASK)
    del ip.len, ip.chksum, udp.len
    if udp.chksum:
        del udp.chksum  # recomputed over what is kept
    udp.remove_payload()
    udp.add_payload(Raw(body[:TRIM_LEN]))
    return Ether(bytes(eth))
