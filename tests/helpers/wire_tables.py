"""The hand copies of bpf/mrc_wire.h that the header tests check: which scapy
fields make up each C struct's fields, and each constant as (C expression,
Python value). Shared by tests/unit/test_wire.py (no root) and
tests/bpf/test_wire.py (the compiled header)."""

from __future__ import annotations

from scapy.contrib.roce import AETH, BTH
from scapy.packet import Packet

from mrc_nic.nic import wire as w

# Each C struct as the scapy layer that mirrors it: C field -> the scapy
# fields that make it up, in order. Every scapy field (but the BTH's ICRC
# trailer) belongs to exactly one C field.
C_VIEWS = {
    "mrc_bth": (
        BTH,
        [
            ("opcode", ["opcode"]),
            ("flags", ["solicited", "migreq", "padcount", "version"]),
            ("pkey", ["pkey"]),
            ("qpn", ["fecn", "becn", "resv6", "dqpn"]),
            ("apsn", ["ackreq", "resv7", "psn"]),
        ],
    ),
    "mrc_reth": (w.RETH, [("va", ["va"]), ("rkey", ["rkey"]), ("dmalen", ["dmalen"])]),
    "mrc_immdt": (w.ImmDt, [("imm", ["imm"])]),
    "mrc_aeth": (AETH, [("smsn", ["syndrome", "msn"])]),
    "mrc_data_ext": (
        w.MRCData,
        [("flags_msn", ["last", "resv7", "msn"]), ("msg_off", ["msg_off"]), ("tx_ts", ["tx_ts"])],
    ),
    "mrc_ack_ext": (
        w.MRCAck,
        [
            ("mpr_cum", ["mpr", "cum_psn"]),
            ("sack_base", ["resv8", "sack_psn"]),
            ("sack_bitmap", ["sack_bitmap"]),
            ("echo_ts", ["echo_ts"]),
            ("echo_ev", ["echo_ev"]),
            ("flags", ["flags"]),
            ("nack_reason", ["nack_reason"]),
            ("port_bitmap", ["port_bitmap"]),
        ],
    ),
    "mrc_probe_ext": (
        w.MRCProbe,
        [
            ("tx_ts", ["tx_ts"]),
            ("ev", ["ev"]),
            ("flags", ["flags"]),
            ("reserved", ["reserved"]),
            ("port_bitmap", ["port_bitmap"]),
        ],
    ),
}


def scapy_layout(layer: type[Packet], groups) -> list[tuple[str, int, int]]:
    """(C field, byte offset, byte size) of each group of scapy fields."""
    fields = [f for f in layer.fields_desc if f.name != "icrc"]
    assert [name for _, names in groups for name in names] == [f.name for f in fields]
    widths = {f.name: round(f.sz * 8) for f in fields}
    layout, bit = [], 0
    for c_name, names in groups:
        size = sum(widths[n] for n in names)
        assert bit % 8 == 0 and size % 8 == 0, (layer.__name__, c_name)
        layout.append((c_name, bit // 8, size // 8))
        bit += size
    return layout


# Every constant Python copies from mrc_wire.h, as (C expression, Python value).
HEADER_CONSTANTS = [
    ("MRC_WIRE_ALIGN", 2),
    ("MRC_MTU", w.MTU),
    ("MRC_TRIM_LEN", w.TRIM_LEN),
    ("MRC_DSCP_NO_TRIM", w.Dscp.NO_TRIM),
    ("MRC_DSCP_TRIMMABLE", w.Dscp.TRIMMABLE),
    ("MRC_DSCP_TRIMMABLE_RETX", w.Dscp.TRIMMABLE_RETX),
    ("MRC_DSCP_TRIMMED", w.Dscp.TRIMMED),
    ("MRC_DSCP_TRIMMED_LASTHOP", w.Dscp.TRIMMED_LASTHOP),
    ("MRC_DSCP_CONTROL", w.Dscp.CONTROL),
    ("MRC_UDP_PORT", w.UDP_PORT),
    ("MRC_EV_INVALID", w.EV_INVALID),
    ("MRC_EV_MAX", w.EV_MAX),
    ("MRC_ECN_MASK", w.ECN_MASK),
    ("MRC_ECN_NOT_ECT", w.Ecn.NOT_ECT),
    ("MRC_ECN_ECT1", w.Ecn.ECT1),
    ("MRC_ECN_ECT0", w.Ecn.ECT0),
    ("MRC_ECN_CE", w.Ecn.CE),
    ("MRC_DSCP_SHIFT", w.DSCP_SHIFT),
    ("MRC_OP_WRITE", w.Opcode.WRITE),
    ("MRC_OP_WRITE_IMM", w.Opcode.WRITE_IMM),
    ("MRC_OP_ACK", w.Opcode.ACK),
    ("MRC_OP_PROBE", w.Opcode.PROBE),
    ("MRC_OP_PROBE_REPLY", w.Opcode.PROBE_REPLY),
    ("MRC_OP_VENDOR_FIRST", w.OP_VENDOR_FIRST),
    ("MRC_BTH_SE_MASK", w.BTH_SE_MASK),
    ("MRC_BTH_MIG_MASK", w.BTH_MIG_MASK),
    ("MRC_BTH_PAD_MASK", w.BTH_PAD_MASK),
    ("MRC_BTH_PAD_SHIFT", w.BTH_PAD_SHIFT),
    ("MRC_BTH_TVER_MASK", w.BTH_TVER_MASK),
    ("MRC_BTH_FECN_MASK", w.BTH_FECN_MASK),
    ("MRC_BTH_BECN_MASK", w.BTH_BECN_MASK),
    ("MRC_BTH_RESV6_MASK", w.BTH_RESV6_MASK),
    ("MRC_BTH_QPN_MASK", w.BTH_QPN_MASK),
    ("MRC_BTH_ACK_MASK", w.BTH_ACK_MASK),
    ("MRC_BTH_RESV7_MASK", w.BTH_RESV7_MASK),
    ("MRC_BTH_PSN_MASK", w.BTH_PSN_MASK),
    ("MRC_PKEY_DEFAULT", w.PKEY_DEFAULT),
    ("MRC_PSN_BITS", w.PSN_BITS),
    ("MRC_PSN_MASK", w.PSN_MASK),
    ("MRC_AETH_SYN_MASK", w.AETH_SYN_MASK),
    ("MRC_AETH_SYN_SHIFT", w.AETH_SYN_SHIFT),
    ("MRC_AETH_MSN_MASK", w.AETH_MSN_MASK),
    ("MRC_AETH_TYPE_MASK", w.AETH_TYPE_MASK),
    ("MRC_AETH_TYPE_ACK", w.AETH_TYPE_ACK),
    ("MRC_AETH_TYPE_NAK", w.AETH_TYPE_NAK),
    ("MRC_AETH_ACK", w.Syndrome.ACK),
    ("MRC_AETH_NAK_PSN_SEQ", w.Syndrome.NAK_PSN_SEQ),
    ("MRC_AETH_NAK_INV_REQ", w.Syndrome.NAK_INV_REQ),
    ("MRC_AETH_NAK_REM_ACCESS", w.Syndrome.NAK_REM_ACCESS),
    ("MRC_AETH_NAK_REM_OP", w.Syndrome.NAK_REM_OP),
    ("MRC_DATA_F_LAST", w.DATA_F_LAST),
    ("MRC_DATA_FLAGS_MASK", w.DATA_FLAGS_MASK),
    ("MRC_DATA_FLAGS_SHIFT", w.DATA_FLAGS_SHIFT),
    ("MRC_DATA_MSN_MASK", w.DATA_MSN_MASK),
    ("MRC_ACK_MPR_MASK", w.ACK_MPR_MASK),
    ("MRC_ACK_MPR_SHIFT", w.ACK_MPR_SHIFT),
    ("MRC_ACK_CUM_PSN_MASK", w.ACK_CUM_PSN_MASK),
    ("MRC_ACK_SACK_RESV_MASK", w.ACK_SACK_RESV_MASK),
    ("MRC_ACK_SACK_PSN_MASK", w.ACK_SACK_PSN_MASK),
    ("MRC_SACK_BITS", w.SACK_BITS),
    ("MRC_MPR_UNIT", w.MPR_UNIT),
    ("MRC_ACK_F_ECN", w.AckFlag.ECN),
    ("MRC_ACK_F_TRIMMED", w.AckFlag.TRIMMED),
    ("MRC_ACK_F_DUP", w.AckFlag.DUP),
    *[(f"MRC_NACK_{r.name}", r) for r in w.NackReason],
    ("MRC_ICRC_LEN", w.ICRC_LEN),
    ("MRC_ICRC_UNUSED", w.ICRC_UNUSED),
    ("MRC_IPV4_UDP_LEN", w.IPV4_UDP_LEN),
    ("MRC_WRITE_HDRS_LEN", w.WRITE_HDRS_LEN),
    ("MRC_WRITE_IMM_HDRS_LEN", w.WRITE_IMM_HDRS_LEN),
    ("MRC_ACK_HDRS_LEN", w.ACK_HDRS_LEN),
    ("MRC_PROBE_HDRS_LEN", w.PROBE_HDRS_LEN),
    ("MRC_WRITE_OVERHEAD", w.WRITE_OVERHEAD),
    ("MRC_WRITE_IMM_OVERHEAD", w.WRITE_IMM_OVERHEAD),
    # Expressions: sizes, function-like macros.
    ("sizeof(struct mrc_bth)", w.BTH_LEN),
    ("sizeof(struct mrc_reth)", w.RETH_LEN),
    ("sizeof(struct mrc_immdt)", w.IMMDT_LEN),
    ("sizeof(struct mrc_aeth)", w.AETH_LEN),
    ("sizeof(struct mrc_data_ext)", w.DATA_EXT_LEN),
    ("sizeof(struct mrc_ack_ext)", w.ACK_EXT_LEN),
    ("sizeof(struct mrc_probe_ext)", w.PROBE_EXT_LEN),
    ("MRC_PAYLOAD_MAX(1500)", w.payload_max(1500)),
    ("MRC_PAYLOAD_MAX(4200)", w.payload_max(4200)),
    ("MRC_PAYLOAD_MAX(MRC_MTU)", w.payload_max()),
    *[
        (f"MRC_PSN_DIFF({a:#x}, {b:#x})", w.psn_diff(a, b))
        for a, b in [(5, 3), (3, 5), (1, 0xFFFFFF), (0xFFFFFF, 1), (0x7FFFFF, 0), (0x800000, 0)]
    ],
]
