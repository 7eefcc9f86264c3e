"""The MRC wire format: bpf/mrc_wire.h, mrc_nic/nic/wire.py and real decoders agree.

(a) the header's Python copies: the scapy views cover every header length
    and every MRC_* name of the header has a copy (the compiled header is
    checked against them in tests/bpf/test_wire.py, root + bcc);
(b) golden packets: each packet type built by mrc_nic.nic.wire equals a
    hand-checked hex string, and bytes -> scapy -> bytes is the identity;
(c) tshark's InfiniBand dissector decodes opcode, dest QP and PSN (and RETH,
    ImmDt, AETH where present) of every packet type;
(d) scapy.contrib.roce.BTH parses our bytes.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import wrpcap

from mrc_nic import resources
from mrc_nic.abi import defs, generate
from mrc_nic.nic import wire as w
from tests.helpers.wire_tables import C_VIEWS
from tests.helpers.wire_tables import scapy_layout as _scapy_layout

BPF_DIR = resources.BPF_DIR

ENDS = w.Endpoints()  # 02:00:00:00:00:01 / 10.0.0.1 -> 02:00:00:00:00:02 / 10.0.0.2
BACK = ENDS.reversed()
EV = 0xC123
TS = 0x0000000102030405
VA = 0x00007F0000001000
RKEY = 0x1234
QP_RX, QP_TX = 0x123, 0x456  # the receiver's QP (data goes there), the sender's


# ---- the packets ------------------------------------------------------------------------


def _data(psn: int, payload: bytes = b"mrc-nic!", **kw) -> Packet:
    """A data packet of the golden frames: the last of message 5, at 0x2000 into it."""
    return w.data_packet(
        ENDS,
        ev=EV,
        dqpn=QP_RX,
        psn=psn,
        va=VA,
        rkey=RKEY,
        payload=payload,
        msn=5,
        msg_off=0x2000,
        tx_ts=TS,
        **kw,
    )


def write() -> Packet:
    return _data(0x10)


def write_imm() -> Packet:
    return _data(0x11, imm=0xDEADBEEF)


def write_trimmed() -> Packet:
    return w.trim(_data(0x12, bytes(range(64))), lasthop=True)


def sack() -> Packet:
    return w.sack_packet(
        BACK,
        ev=EV,
        dqpn=QP_TX,
        psn=0x10,
        cum_psn=0x0E,
        sack_bitmap=0x14,
        echo_ts=TS,
        flags=w.AckFlag.ECN,
        port_bitmap=0xF,
        msn=3,
        mpr=2,
    )


def nack() -> Packet:
    return w.nack_packet(
        BACK,
        reason=w.NackReason.TRIMMED_LASTHOP,
        ev=EV,
        dqpn=QP_TX,
        psn=0x11,
        cum_psn=0x0E,
        sack_bitmap=0x14,
        echo_ts=TS,
        port_bitmap=0xF,
        msn=3,
    )


def probe() -> Packet:
    return w.probe(ENDS, ev=0xC124, dqpn=QP_RX, psn=7, tx_ts=TS, port_bitmap=0xF)


def probe_reply() -> Packet:
    return w.probe_reply(
        BACK, ev=0xC124, dqpn=QP_TX, psn=7, echo_ts=TS, flags=w.AckFlag.ECN, port_bitmap=0xF
    )


# Hand-checked frames: every field written out, in wire order. IPv4 checksums
# were summed by hand (e.g. WRITE: 456a+0054+4000+4011+0a00+0001+0a00+0002 =
# d9d2, complement 262d).
ETH_FWD = "020000000002 020000000001 0800"
ETH_BACK = "020000000001 020000000002 0800"
IP_FWD = "0a000001 0a000002"
IP_BACK = "0a000002 0a000001"

GOLDEN = {
    "write": [
        ETH_FWD,
        "45 6a 0054 0000 4000 40 11 262d " + IP_FWD,  # tos: DSCP 26, ECT(0); len 84; DF
        "c123 12b7 0040 0000",  # UDP: sport = EV, dport 4791, len 64, checksum 0
        "0a 00 ffff 00000123 80000010",  # BTH: WRITE, pkey, QP 0x123, A | PSN 0x10
        "00007f0000001000 00001234 00000008",  # RETH: va, rkey, dmalen 8
        "80000005 00002000 0000000102030405",  # MRC_DATA: LAST | MSN 5, offset, tx_ts
        "6d72632d6e696321",  # payload "mrc-nic!"
        "00000000",  # ICRC slot
    ],
    "write_imm": [
        ETH_FWD,
        "45 6a 0058 0000 4000 40 11 2629 " + IP_FWD,  # len 88
        "c123 12b7 0044 0000",
        "0b 00 ffff 00000123 80000011",  # BTH: WRITE_IMM, PSN 0x11
        "00007f0000001000 00001234 00000008",
        "deadbeef",  # ImmDt
        "80000005 00002000 0000000102030405",
        "6d72632d6e696321",
        "00000000",
    ],
    "write_trimmed": [
        ETH_FWD,
        "45 aa 0050 0000 4000 40 11 25f1 " + IP_FWD,  # DSCP 42 TRIMMED_LASTHOP, ECT(0)
        "c123 12b7 003c 0000",  # UDP len: 8 + MRC_TRIM_LEN
        "0a 00 ffff 00000123 80000012",
        "00007f0000001000 00001234 00000040",  # dmalen: the length before trimming
        "80000005 00002000 0000000102030405",
        "00010203 04050607",  # what is left of the payload; the last 4 fill the ICRC slot
    ],
    "sack": [
        ETH_BACK,
        "45 c0 0050 0000 4000 40 11 25db " + IP_BACK,  # DSCP 48, Not-ECT
        "c123 12b7 003c 0000",  # sport = the echoed EV
        "11 00 ffff 00000456 00000010",  # BTH: ACK to QP 0x456, PSN = the trigger's
        "1f 000003",  # AETH: ACK (credit count 31), MSN 3
        "02 00000e 00 00000e",  # MRC_ACK: MPR 2 | cum PSN 0xe, bitmap base 0xe
        "0000000000000014",  # bitmap: PSN 0x10 and 0x12 received
        "0000000102030405 c123 01 00 0000000f",  # echo ts, echo EV, ECN, no reason, ports
        "00000000",
    ],
    "nack": [
        ETH_BACK,
        "45 c0 0050 0000 4000 40 11 25db " + IP_BACK,
        "c123 12b7 003c 0000",
        "11 00 ffff 00000456 00000011",  # PSN = the one to resend
        "60 000003",  # AETH: NAK, PSN sequence error
        "00 00000e 00 00000e 0000000000000014",
        "0000000102030405 c123 02 02 0000000f",  # flags TRIMMED, reason TRIMMED_LASTHOP
        "00000000",
    ],
    "probe": [
        ETH_FWD,
        "45 6a 003c 0000 4000 40 11 2645 " + IP_FWD,
        "c124 12b7 0028 0000",  # sport = the EV probed
        "d8 00 ffff 00000123 80000007",  # PROBE, A, probe number 7
        "0000000102030405 c124 00 00 0000000f",
        "00000000",
    ],
    "probe_reply": [
        ETH_BACK,
        "45 c0 003c 0000 4000 40 11 25ef " + IP_BACK,
        "c124 12b7 0028 0000",
        "d9 00 ffff 00000456 00000007",
        "0000000102030405 c124 01 00 0000000f",  # echoes; ECN seen by the probe
        "00000000",
    ],
}
BUILDERS = {
    "write": write,
    "write_imm": write_imm,
    "write_trimmed": write_trimmed,
    "sack": sack,
    "nack": nack,
    "probe": probe,
    "probe_reply": probe_reply,
}


def golden(name: str) -> bytes:
    return bytes.fromhex("".join(GOLDEN[name]).replace(" ", ""))


# What a decoder must find in each packet: {layer: {field: value}}.
FIELDS = {
    "write": {
        BTH: {"opcode": 0x0A, "dqpn": QP_RX, "psn": 0x10, "ackreq": 1, "icrc": 0},
        w.RETH: {"va": VA, "rkey": RKEY, "dmalen": 8},
        w.MRCData: {"last": 1, "msn": 5, "msg_off": 0x2000, "tx_ts": TS},
        Raw: {"load": b"mrc-nic!"},
    },
    "write_imm": {
        BTH: {"opcode": 0x0B, "dqpn": QP_RX, "psn": 0x11},
        w.ImmDt: {"imm": 0xDEADBEEF},
        w.MRCData: {"last": 1, "msn": 5, "msg_off": 0x2000, "tx_ts": TS},
        Raw: {"load": b"mrc-nic!"},
    },
    "write_trimmed": {
        IP: {"tos": w.Dscp.TRIMMED_LASTHOP << 2 | w.Ecn.ECT0},
        BTH: {"opcode": 0x0A, "psn": 0x12, "icrc": 0x04050607},
        w.RETH: {"dmalen": 64},
        w.MRCData: {"msn": 5, "tx_ts": TS},
        Raw: {"load": bytes(range(4))},
    },
    "sack": {
        UDP: {"sport": EV, "dport": 4791},
        BTH: {"opcode": 0x11, "dqpn": QP_TX, "psn": 0x10, "ackreq": 0},
        AETH: {"syndrome": 0x1F, "msn": 3},
        w.MRCAck: {
            "mpr": 2,
            "cum_psn": 0x0E,
            "sack_psn": 0x0E,
            "sack_bitmap": 0x14,
            "echo_ts": TS,
            "echo_ev": EV,
            "flags": w.AckFlag.ECN,
            "nack_reason": 0,
            "port_bitmap": 0xF,
        },
    },
    "nack": {
        BTH: {"opcode": 0x11, "dqpn": QP_TX, "psn": 0x11},
        AETH: {"syndrome": 0x60},
        w.MRCAck: {"nack_reason": w.NackReason.TRIMMED_LASTHOP, "flags": w.AckFlag.TRIMMED},
    },
    "probe": {
        BTH: {"opcode": 0xD8, "dqpn": QP_RX, "psn": 7, "ackreq": 1},
        w.MRCProbe: {"tx_ts": TS, "ev": 0xC124, "flags": 0, "port_bitmap": 0xF},
    },
    "probe_reply": {
        BTH: {"opcode": 0xD9, "dqpn": QP_TX, "psn": 7, "ackreq": 0},
        w.MRCProbe: {"tx_ts": TS, "ev": 0xC124, "flags": w.AckFlag.ECN},
    },
}


# ---- (b) golden packets and round trips ---------------------------------------------------


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_bytes(name):
    assert bytes(BUILDERS[name]()).hex() == golden(name).hex()


@pytest.mark.parametrize("name", GOLDEN)
def test_round_trip(name):
    raw = golden(name)
    pkt = Ether(raw)
    assert bytes(pkt) == raw
    for layer, fields in FIELDS[name].items():
        assert layer in pkt, (name, layer.__name__, pkt.summary())
        for field, value in fields.items():
            assert getattr(pkt[layer], field) == value, (name, layer.__name__, field)


def test_layer_stacks():
    stacks = {
        "write": [Ether, IP, UDP, BTH, w.RETH, w.MRCData, Raw],
        "write_imm": [Ether, IP, UDP, BTH, w.RETH, w.ImmDt, w.MRCData, Raw],
        "write_trimmed": [Ether, IP, UDP, BTH, w.RETH, w.MRCData, Raw],
        "sack": [Ether, IP, UDP, BTH, AETH, w.MRCAck],
        "nack": [Ether, IP, UDP, BTH, AETH, w.MRCAck],
        "probe": [Ether, IP, UDP, BTH, w.MRCProbe],
        "probe_reply": [Ether, IP, UDP, BTH, w.MRCProbe],
    }
    for name, expected in stacks.items():
        pkt = Ether(golden(name))
        assert [type(layer) for layer in pkt.iterpayloads()] == expected, name


@pytest.mark.parametrize(
    ("name", "header_bytes"),
    [
        ("write", w.WRITE_HDRS_LEN),
        ("write_imm", w.WRITE_IMM_HDRS_LEN),
        ("sack", w.ACK_HDRS_LEN),
        ("nack", w.ACK_HDRS_LEN),
        ("probe", w.PROBE_HDRS_LEN),
        ("probe_reply", w.PROBE_HDRS_LEN),
    ],
)
def test_header_stack_lengths(name, header_bytes):
    pkt = Ether(golden(name))
    payload = len(pkt[Raw].load) if Raw in pkt else 0
    assert pkt[UDP].len == 8 + header_bytes + payload + w.ICRC_LEN


def test_max_payload_fits_the_mtu():
    assert (w.payload_max(1500), w.payload_max(4200)) == (1420, 4120)
    for mtu in (1500, 4200):
        n = w.payload_max(mtu)
        data = dict(ev=1, dqpn=1, psn=0, va=0, rkey=0, payload=bytes(n))
        # The WRITE_IMM packet fills the MTU exactly; a plain WRITE has 4 bytes to spare.
        assert len(w.data_packet(**data, imm=1)[IP]) == mtu
        assert len(w.data_packet(**data)[IP]) == mtu - w.IMMDT_LEN == n + w.WRITE_OVERHEAD


def test_computed_icrc_is_optional():
    # icrc=None asks scapy.contrib.roce to compute the RoCEv2 ICRC; only the
    # last 4 bytes change.
    zero = bytes(write())
    real = bytes(
        w.data_packet(
            ENDS,
            ev=EV,
            dqpn=QP_RX,
            psn=0x10,
            va=VA,
            rkey=RKEY,
            payload=b"mrc-nic!",
            msn=5,
            msg_off=0x2000,
            tx_ts=TS,
            icrc=None,
        )
    )
    assert real[:-4] == zero[:-4] and real[-4:] != bytes(4)


def test_builders_refuse_bad_values():
    base = dict(ev=EV, dqpn=1, psn=0, va=0, rkey=0)
    with pytest.raises(ValueError, match="last packet"):
        w.data_packet(**base, imm=1, last=False)
    with pytest.raises(ValueError, match="ev"):
        w.data_packet(**{**base, "ev": w.EV_INVALID})
    with pytest.raises(ValueError, match="psn"):
        w.data_packet(**{**base, "psn": 1 << 24})
    with pytest.raises(ValueError, match="dqpn"):
        w.data_packet(**{**base, "dqpn": -1})
    ack = dict(ev=EV, dqpn=1, psn=0, cum_psn=0, echo_ts=0)
    with pytest.raises(ValueError, match="reason"):
        w.nack_packet(reason=w.NackReason.NONE, **ack)
    with pytest.raises(ValueError, match="NAK syndrome"):
        w.nack_packet(reason=w.NackReason.TRIMMED, syndrome=w.Syndrome.ACK, **ack)
    with pytest.raises(ValueError, match="sack_bitmap"):
        w.sack_packet(sack_bitmap=1 << 64, **ack)


def test_nack_defaults():
    ack = dict(ev=EV, dqpn=1, psn=3, cum_psn=0, echo_ts=0)
    fatal = w.nack_packet(reason=w.NackReason.UNEXP_EVENT, **ack)
    assert fatal[AETH].syndrome == w.Syndrome.NAK_REM_OP and fatal[w.MRCAck].flags == 0
    access = w.nack_packet(
        reason=w.NackReason.UNEXP_EVENT, syndrome=w.Syndrome.NAK_REM_ACCESS, **ack
    )
    assert Ether(bytes(access))[AETH].syndrome == 0x62
    oor = w.nack_packet(reason=w.NackReason.PSN_OOR_WINDOW, **ack)
    assert oor[AETH].syndrome == w.Syndrome.NAK_PSN_SEQ and oor[w.MRCAck].flags == 0
    for reason in w.TRIM_NACKS:
        assert w.nack_packet(reason=reason, **ack)[w.MRCAck].flags == w.AckFlag.TRIMMED


def test_trim():
    data = dict(ev=EV, dqpn=1, psn=0, va=0, rkey=0)
    retx = w.trim(w.data_packet(**data, payload=bytes(100), retx=True, ecn=w.Ecn.CE))
    assert retx[IP].tos == w.Dscp.TRIMMED << 2 | w.Ecn.CE  # ECN kept
    assert len(retx[UDP].payload) == w.TRIM_LEN and retx[IP].len == 28 + w.TRIM_LEN
    assert IP(bytes(retx[IP])).chksum == retx[IP].chksum  # checksum is valid
    # WRITE_IMM's headers are the longest: all of them survive.
    imm = w.trim(w.data_packet(**data, payload=bytes(100), imm=7, msn=9))
    assert imm[w.ImmDt].imm == 7 and imm[w.MRCData].msn == 9
    with pytest.raises(ValueError, match="not longer"):
        w.trim(w.data_packet(**data, payload=bytes(4)))
    with pytest.raises(ValueError, match="not trimmable"):
        w.trim(sack())


def test_psn_diff():
    cases = [(5, 3, 2), (3, 5, -2), (1, 0xFFFFFF, 2), (0xFFFFFF, 1, -2), (0x7FFFFF, 0, 0x7FFFFF)]
    cases.append((0x800000, 0, -0x800000))
    for a, b, d in cases:
        assert w.psn_diff(a, b) == d, (a, b)


# Sub-byte fields: setting the scapy field to all ones must set exactly the
# header's mask in the big-endian word at that offset.
MASKS = [
    (BTH, "solicited", 1, 1, w.BTH_SE_MASK),
    (BTH, "migreq", 1, 1, w.BTH_MIG_MASK),
    (BTH, "padcount", 1, 1, w.BTH_PAD_MASK),
    (BTH, "version", 1, 1, w.BTH_TVER_MASK),
    (BTH, "fecn", 4, 4, w.BTH_FECN_MASK),
    (BTH, "becn", 4, 4, w.BTH_BECN_MASK),
    (BTH, "resv6", 4, 4, w.BTH_RESV6_MASK),
    (BTH, "dqpn", 4, 4, w.BTH_QPN_MASK),
    (BTH, "ackreq", 8, 4, w.BTH_ACK_MASK),
    (BTH, "resv7", 8, 4, w.BTH_RESV7_MASK),
    (BTH, "psn", 8, 4, w.BTH_PSN_MASK),
    (AETH, "syndrome", 0, 4, w.AETH_SYN_MASK),
    (AETH, "msn", 0, 4, w.AETH_MSN_MASK),
    (w.MRCData, "last", 0, 4, w.DATA_F_LAST),
    (w.MRCData, "resv7", 0, 4, w.DATA_FLAGS_MASK & ~w.DATA_F_LAST),
    (w.MRCData, "msn", 0, 4, w.DATA_MSN_MASK),
    (w.MRCAck, "mpr", 0, 4, w.ACK_MPR_MASK),
    (w.MRCAck, "cum_psn", 0, 4, w.ACK_CUM_PSN_MASK),
    (w.MRCAck, "resv8", 4, 4, w.ACK_SACK_RESV_MASK),
    (w.MRCAck, "sack_psn", 4, 4, w.ACK_SACK_PSN_MASK),
]


@pytest.mark.parametrize(("layer", "field", "offset", "size", "mask"), MASKS)
def test_scapy_fields_match_masks(layer, field, offset, size, mask):
    bits = round(next(f for f in layer.fields_desc if f.name == field).sz * 8)
    extra = {"icrc": 0} if layer is BTH else {}
    zeros = {f.name: 0 for f in layer.fields_desc if f.name != "icrc"}
    raw = bytes(layer(**{**zeros, **extra, field: (1 << bits) - 1}))
    assert int.from_bytes(raw[offset : offset + size], "big") == mask
    assert mask >> (mask & -mask).bit_length() - 1 == (1 << bits) - 1  # contiguous, same width


# ---- (d) scapy.contrib.roce.BTH parses our bytes ----------------------------------------------


@pytest.mark.parametrize("name", GOLDEN)
def test_scapy_roce_bth_parses(name):
    raw = golden(name)
    expected = FIELDS[name][BTH]
    # scapy binds UDP dport 4791 to BTH itself (scapy.contrib.roce).
    via_udp = Ether(raw)[UDP].payload
    assert isinstance(via_udp, BTH)
    # And BTH alone, on the UDP payload.
    alone = BTH(raw[14 + 20 + 8 :])
    for bth in (via_udp, alone):
        for field in ("opcode", "dqpn", "psn"):
            if field in expected:
                assert getattr(bth, field) == expected[field], (name, field)
        assert bth.icrc == int.from_bytes(raw[-4:], "big")


# ---- (c) tshark -----------------------------------------------------------------------------

TSHARK_FIELDS = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.dmalen",
    "infiniband.immdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
]


def _tshark(pcap) -> list[dict[str, str]]:
    # No "-d udp.port==4791,infiniband": tshark decodes RoCEv2 on 4791 by default.
    cmd = ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-E", "occurrence=f"]
    for field in TSHARK_FIELDS:
        cmd += ["-e", field]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    return [dict(zip(TSHARK_FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (apt install tshark)")
def test_tshark_decodes_every_packet_type(tmp_path):
    names = list(GOLDEN)
    packets = [Ether(golden(name)) for name in names]
    # Also a data packet whose ICRC scapy computed: the choice of ICRC does not matter.
    names.append("write, computed ICRC")
    packets.append(
        w.data_packet(ENDS, ev=EV, dqpn=QP_RX, psn=0x20, va=VA, rkey=RKEY, payload=b"x", icrc=None)
    )
    pcap = tmp_path / "mrc.pcap"
    wrpcap(str(pcap), packets)
    rows = _tshark(pcap)
    assert len(rows) == len(packets)
    for name, pkt, row in zip(names, packets, rows, strict=True):
        bth = pkt[BTH]
        assert int(row["infiniband.bth.opcode"]) == bth.opcode, (name, row)
        assert int(row["infiniband.bth.destqp"], 16) == bth.dqpn, (name, row)
        assert int(row["infiniband.bth.psn"]) == bth.psn, (name, row)
        if w.RETH in pkt:
            assert int(row["infiniband.reth.va"], 16) == pkt[w.RETH].va, (name, row)
            assert int(row["infiniband.reth.dmalen"]) == pkt[w.RETH].dmalen, (name, row)
        else:
            assert row["infiniband.reth.dmalen"] == "", (name, row)
        if w.ImmDt in pkt:
            assert int(row["infiniband.immdt"], 16) == pkt[w.ImmDt].imm, (name, row)
        if AETH in pkt:
            assert int(row["infiniband.aeth.syndrome"]) == pkt[AETH].syndrome, (name, row)
            assert int(row["infiniband.aeth.msn"]) == pkt[AETH].msn, (name, row)


# ---- (a) the header's Python copies ---------------------------------------------------------


def test_scapy_views_cover_every_header_length():
    sizes = {
        "mrc_bth": w.BTH_LEN,
        "mrc_reth": w.RETH_LEN,
        "mrc_immdt": w.IMMDT_LEN,
        "mrc_aeth": w.AETH_LEN,
        "mrc_data_ext": w.DATA_EXT_LEN,
        "mrc_ack_ext": w.ACK_EXT_LEN,
        "mrc_probe_ext": w.PROBE_EXT_LEN,
    }
    assert set(sizes) == set(C_VIEWS)
    for struct, (layer, groups) in C_VIEWS.items():
        name, offset, size = _scapy_layout(layer, groups)[-1]
        assert offset + size == sizes[struct], struct


def _ctypes_layout(struct) -> list[tuple[str, int, int]]:
    fields = [getattr(struct, name) for name, _ in struct._fields_]
    return [(name, f.offset, f.size) for (name, _), f in zip(struct._fields_, fields, strict=True)]


@pytest.mark.parametrize("struct", list(C_VIEWS))
def test_scapy_layers_match_the_generated_structs(struct):
    layer, groups = C_VIEWS[struct]
    generated = getattr(defs, generate.camel(struct))
    assert _ctypes_layout(generated) == _scapy_layout(layer, groups)
