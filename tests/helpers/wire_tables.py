"""What the wire tests hold against bpf/mrc_wire.h beyond the generated ABI:
which scapy fields make up each C struct's fields, and the Python versions
of the header's function-like macros. Shared by tests/unit/test_wire.py (no
root) and tests/bpf/test_wire.py (the compiled header)."""

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


# The function-like macros of the header and the Python functions that do the
# same, as (C expression, Python value): the generator reads only constants.
FUNCTION_MACROS = [
    ("MRC_PAYLOAD_MAX(1500)", w.payload_max(1500)),
    ("MRC_PAYLOAD_MAX(4200)", w.payload_max(4200)),
    ("MRC_PAYLOAD_MAX(MRC_MTU)", w.payload_max()),
    *[
        (f"MRC_PSN_DIFF({a:#x}, {b:#x})", w.psn_diff(a, b))
        for a, b in [(5, 3), (3, 5), (1, 0xFFFFFF), (0xFFFFFF, 1), (0x7FFFFF, 0), (0x800000, 0)]
    ],
]
