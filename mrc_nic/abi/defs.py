"""The C ABI of the BPF programs (the wire format here), generated from bpf/*.h: do not edit.

Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails
when a header changed and this file was not regenerated.
"""

import ctypes
import enum
from mrc_nic.abi.switch_defs import *  # noqa: F403 (defs is the whole ABI)
from mrc_nic.abi.nic_const_defs import *  # noqa: F403 (defs is the whole ABI)
from mrc_nic.abi.nic_struct_defs import *  # noqa: F403 (defs is the whole ABI)
from mrc_nic.abi import switch_defs, nic_const_defs, nic_struct_defs  # their TUNABLES

# ---- bpf/mrc_wire.h ------------------------------------------------------------

MRC_WIRE_ALIGN = 2  # tunable: the loader may override it
MRC_MTU = 1500  # tunable: the loader may override it
MRC_TRIM_LEN = 52  # tunable: the loader may override it
MRC_DSCP_NO_TRIM = 24  # tunable: the loader may override it
MRC_DSCP_TRIMMABLE = 26  # tunable: the loader may override it
MRC_DSCP_TRIMMABLE_RETX = 28  # tunable: the loader may override it
MRC_DSCP_TRIMMED = 40  # tunable: the loader may override it
MRC_DSCP_TRIMMED_LASTHOP = 42  # tunable: the loader may override it
MRC_DSCP_CONTROL = 48  # tunable: the loader may override it
MRC_UDP_PORT = 4791
MRC_EV_INVALID = 0
MRC_EV_MAX = 65535
MRC_ECN_MASK = 0x3
MRC_ECN_NOT_ECT = 0
MRC_ECN_ECT1 = 1
MRC_ECN_ECT0 = 2
MRC_ECN_CE = 3
MRC_DSCP_SHIFT = 2
MRC_OP_WRITE = 10
MRC_OP_WRITE_IMM = 11
MRC_OP_ACK = 17
MRC_OP_PROBE = 216
MRC_OP_PROBE_REPLY = 217
MRC_OP_VENDOR_FIRST = 192
MRC_BTH_SE_MASK = 0x80
MRC_BTH_MIG_MASK = 0x40
MRC_BTH_PAD_MASK = 0x30
MRC_BTH_PAD_SHIFT = 4
MRC_BTH_TVER_MASK = 0xf
MRC_BTH_FECN_MASK = 0x80000000
MRC_BTH_BECN_MASK = 0x40000000
MRC_BTH_RESV6_MASK = 0x3f000000
MRC_BTH_QPN_MASK = 0xffffff
MRC_BTH_ACK_MASK = 0x80000000
MRC_BTH_RESV7_MASK = 0x7f000000
MRC_BTH_PSN_MASK = 0xffffff
MRC_PKEY_DEFAULT = 65535
MRC_PSN_BITS = 24
MRC_PSN_MASK = 0xffffff
MRC_AETH_SYN_MASK = 0xff000000
MRC_AETH_SYN_SHIFT = 24
MRC_AETH_MSN_MASK = 0xffffff
MRC_AETH_TYPE_MASK = 0x60
MRC_AETH_TYPE_ACK = 0
MRC_AETH_TYPE_NAK = 96
MRC_AETH_ACK = 31
MRC_AETH_NAK_PSN_SEQ = 96
MRC_AETH_NAK_INV_REQ = 97
MRC_AETH_NAK_REM_ACCESS = 98
MRC_AETH_NAK_REM_OP = 99
MRC_DATA_F_LAST = 0x80000000
MRC_DATA_FLAGS_MASK = 0xff000000
MRC_DATA_FLAGS_SHIFT = 0x18
MRC_DATA_MSN_MASK = 0xffffff
MRC_ACK_MPR_MASK = 0xff000000
MRC_ACK_MPR_SHIFT = 24
MRC_ACK_CUM_PSN_MASK = 0xffffff
MRC_ACK_SACK_RESV_MASK = 0xff000000
MRC_ACK_SACK_PSN_MASK = 0xffffff
MRC_SACK_BITS = 64
MRC_MPR_UNIT = 128
MRC_ACK_F_ECN = 0x1
MRC_ACK_F_TRIMMED = 0x2
MRC_ACK_F_DUP = 0x4
MRC_NACK_NONE = 0
MRC_NACK_TRIMMED = 1
MRC_NACK_TRIMMED_LASTHOP = 2
MRC_NACK_NO_BITMAP = 6
MRC_NACK_NO_PKT_BUFFER = 7
MRC_NACK_NO_RESOURCE = 10
MRC_NACK_PSN_OOR_WINDOW = 11
MRC_NACK_UNEXP_EVENT = 25
MRC_PROBE_F_REVERSE = 0x80
MRC_PROBE_F_SVC = 0x40
MRC_PROBE_F_PORT_STATUS = 0x20
MRC_EP_QPN = 0xffffff
MRC_ICRC_LEN = 4
MRC_ICRC_UNUSED = 0
MRC_IPV4_UDP_LEN = 28
MRC_WRITE_HDRS_LEN = 44
MRC_WRITE_IMM_HDRS_LEN = 48
MRC_ACK_HDRS_LEN = 48
MRC_PROBE_HDRS_LEN = 28
MRC_WRITE_OVERHEAD = 76
MRC_WRITE_IMM_OVERHEAD = 80


class MrcBth(ctypes.Structure):
    """struct mrc_bth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('pkey', 'qpn', 'apsn',)
    _fields_ = [
        ("opcode", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("pkey", ctypes.c_uint16),
        ("qpn", ctypes.c_uint32),
        ("apsn", ctypes.c_uint32),
    ]


class MrcReth(ctypes.Structure):
    """struct mrc_reth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('va', 'rkey', 'dmalen',)
    _fields_ = [
        ("va", ctypes.c_uint64),
        ("rkey", ctypes.c_uint32),
        ("dmalen", ctypes.c_uint32),
    ]


class MrcImmdt(ctypes.Structure):
    """struct mrc_immdt (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('imm',)
    _fields_ = [
        ("imm", ctypes.c_uint32),
    ]


class MrcAeth(ctypes.Structure):
    """struct mrc_aeth (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('smsn',)
    _fields_ = [
        ("smsn", ctypes.c_uint32),
    ]


class MrcDataExt(ctypes.Structure):
    """struct mrc_data_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('flags_msn', 'msg_off', 'tx_ts',)
    _fields_ = [
        ("flags_msn", ctypes.c_uint32),
        ("msg_off", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
    ]


class MrcAckExt(ctypes.Structure):
    """struct mrc_ack_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('mpr_cum', 'sack_base', 'sack_bitmap', 'echo_ts', 'echo_ev', 'port_bitmap',)
    _fields_ = [
        ("mpr_cum", ctypes.c_uint32),
        ("sack_base", ctypes.c_uint32),
        ("sack_bitmap", ctypes.c_uint64),
        ("echo_ts", ctypes.c_uint64),
        ("echo_ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint8),
        ("nack_reason", ctypes.c_uint8),
        ("port_bitmap", ctypes.c_uint32),
    ]


class MrcProbeExt(ctypes.Structure):
    """struct mrc_probe_ext (bpf/mrc_wire.h)."""

    _pack_ = 1
    _align_ = 2  # aligned(2): ctypes honours it from 3.13
    big_endian = ('tx_ts', 'ev', 'port_bitmap',)
    _fields_ = [
        ("tx_ts", ctypes.c_uint64),
        ("ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
        ("port_bitmap", ctypes.c_uint32),
    ]

# ---- enums of #define groups --------------------------------------------------


class Opcode(enum.IntEnum):
    """MRC_OP_* (#define group)."""

    WRITE = 10
    WRITE_IMM = 11
    ACK = 17
    PROBE = 216
    PROBE_REPLY = 217


class Syndrome(enum.IntEnum):
    """MRC_AETH_* (#define group)."""

    ACK = 31
    NAK_PSN_SEQ = 96
    NAK_INV_REQ = 97
    NAK_REM_ACCESS = 98
    NAK_REM_OP = 99


class NackReason(enum.IntEnum):
    """MRC_NACK_* (#define group)."""

    NONE = 0
    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    NO_BITMAP = 6
    NO_PKT_BUFFER = 7
    NO_RESOURCE = 10
    PSN_OOR_WINDOW = 11
    UNEXP_EVENT = 25


class AckFlag(enum.IntFlag):
    """MRC_ACK_F_* (#define group)."""

    ECN = 1
    TRIMMED = 2
    DUP = 4


class Dscp(enum.IntEnum):
    """MRC_DSCP_* (#define group)."""

    NO_TRIM = 24
    TRIMMABLE = 26
    TRIMMABLE_RETX = 28
    TRIMMED = 40
    TRIMMED_LASTHOP = 42
    CONTROL = 48


class Ecn(enum.IntEnum):
    """MRC_ECN_* (#define group)."""

    NOT_ECT = 0
    ECT1 = 1
    ECT0 = 2
    CE = 3


TUNABLES = frozenset(
    {
        "MRC_DSCP_CONTROL",
        "MRC_DSCP_NO_TRIM",
        "MRC_DSCP_TRIMMABLE",
        "MRC_DSCP_TRIMMABLE_RETX",
        "MRC_DSCP_TRIMMED",
        "MRC_DSCP_TRIMMED_LASTHOP",
        "MRC_MTU",
        "MRC_TRIM_LEN",
        "MRC_WIRE_ALIGN",
    }
) | switch_defs.TUNABLES | nic_const_defs.TUNABLES | nic_struct_defs.TUNABLES
