"""The MRC wire format's numbers: constants, header sizes, PSN arithmetic.

bpf/mrc_wire.h is the source of truth; these are its Python copies (checked
by tests/unit/test_wire.py). They live apart from the scapy layers of
mrc_nic.nic.wire, which re-exports them, because importing scapy costs about
0.3 s: the NIC's map clients and every short CLI call need only the numbers.
"""

from __future__ import annotations

import ctypes

from mrc_nic.abi import defs

UDP_PORT = defs.MRC_UDP_PORT
EV_INVALID = defs.MRC_EV_INVALID
EV_MAX = defs.MRC_EV_MAX
PKEY_DEFAULT = defs.MRC_PKEY_DEFAULT

MTU = defs.MRC_MTU  # , the header's default
TRIM_LEN = defs.MRC_TRIM_LEN  # UDP payload bytes a trimming switch keeps
ICRC_UNUSED = defs.MRC_ICRC_UNUSED

PSN_BITS = defs.MRC_PSN_BITS
PSN_MASK = defs.MRC_PSN_MASK
MSN_MASK = defs.MRC_DATA_MSN_MASK
QPN_MASK = defs.MRC_BTH_QPN_MASK
SACK_BITS = defs.MRC_SACK_BITS
MPR_UNIT = defs.MRC_MPR_UNIT

# BTH masks (flags byte; qpn and apsn words in host order)
BTH_SE_MASK = defs.MRC_BTH_SE_MASK
BTH_MIG_MASK = defs.MRC_BTH_MIG_MASK
BTH_PAD_MASK = defs.MRC_BTH_PAD_MASK
BTH_PAD_SHIFT = defs.MRC_BTH_PAD_SHIFT
BTH_TVER_MASK = defs.MRC_BTH_TVER_MASK
BTH_FECN_MASK = defs.MRC_BTH_FECN_MASK
BTH_BECN_MASK = defs.MRC_BTH_BECN_MASK
BTH_RESV6_MASK = defs.MRC_BTH_RESV6_MASK
BTH_QPN_MASK = defs.MRC_BTH_QPN_MASK
BTH_ACK_MASK = defs.MRC_BTH_ACK_MASK
BTH_RESV7_MASK = defs.MRC_BTH_RESV7_MASK
BTH_PSN_MASK = defs.MRC_BTH_PSN_MASK

# AETH word
AETH_SYN_MASK = defs.MRC_AETH_SYN_MASK
AETH_SYN_SHIFT = defs.MRC_AETH_SYN_SHIFT
AETH_MSN_MASK = defs.MRC_AETH_MSN_MASK
AETH_TYPE_MASK = defs.MRC_AETH_TYPE_MASK
AETH_TYPE_ACK = defs.MRC_AETH_TYPE_ACK
AETH_TYPE_NAK = defs.MRC_AETH_TYPE_NAK

# MRC_DATA flags_msn word
DATA_F_LAST = defs.MRC_DATA_F_LAST
PROBE_F_REVERSE = defs.MRC_PROBE_F_REVERSE  # a receiver's probe of a reverse EV
PROBE_F_SVC = defs.MRC_PROBE_F_SVC  # an endpoint PROBE_REPLY: ICRC slot = service time, ns
PROBE_F_PORT_STATUS = defs.MRC_PROBE_F_PORT_STATUS  # an endpoint PROBE: a port status update
EP_QPN = defs.MRC_EP_QPN  # a controller's connectionless EV probes (no QP)
DATA_FLAGS_MASK = defs.MRC_DATA_FLAGS_MASK
DATA_FLAGS_SHIFT = defs.MRC_DATA_FLAGS_SHIFT
DATA_MSN_MASK = defs.MRC_DATA_MSN_MASK

# MRC_ACK words
ACK_MPR_MASK = defs.MRC_ACK_MPR_MASK
ACK_MPR_SHIFT = defs.MRC_ACK_MPR_SHIFT
ACK_CUM_PSN_MASK = defs.MRC_ACK_CUM_PSN_MASK
ACK_SACK_RESV_MASK = defs.MRC_ACK_SACK_RESV_MASK
ACK_SACK_PSN_MASK = defs.MRC_ACK_SACK_PSN_MASK

ECN_MASK = defs.MRC_ECN_MASK
DSCP_SHIFT = defs.MRC_DSCP_SHIFT

# Header sizes (bytes)
BTH_LEN = ctypes.sizeof(defs.MrcBth)
RETH_LEN = ctypes.sizeof(defs.MrcReth)
IMMDT_LEN = ctypes.sizeof(defs.MrcImmdt)
AETH_LEN = ctypes.sizeof(defs.MrcAeth)
DATA_EXT_LEN = ctypes.sizeof(defs.MrcDataExt)
ACK_EXT_LEN = ctypes.sizeof(defs.MrcAckExt)
PROBE_EXT_LEN = ctypes.sizeof(defs.MrcProbeExt)
ICRC_LEN = defs.MRC_ICRC_LEN
IPV4_UDP_LEN = defs.MRC_IPV4_UDP_LEN
WRITE_HDRS_LEN = BTH_LEN + RETH_LEN + DATA_EXT_LEN  # 44
WRITE_IMM_HDRS_LEN = BTH_LEN + RETH_LEN + IMMDT_LEN + DATA_EXT_LEN  # 48
ACK_HDRS_LEN = BTH_LEN + AETH_LEN + ACK_EXT_LEN  # 48
PROBE_HDRS_LEN = BTH_LEN + PROBE_EXT_LEN  # 28
WRITE_OVERHEAD = IPV4_UDP_LEN + WRITE_HDRS_LEN + ICRC_LEN  # 76
WRITE_IMM_OVERHEAD = IPV4_UDP_LEN + WRITE_IMM_HDRS_LEN + ICRC_LEN  # 80
Opcode = defs.Opcode
OP_VENDOR_FIRST = defs.MRC_OP_VENDOR_FIRST
DATA_OPCODES = frozenset({Opcode.WRITE, Opcode.WRITE_IMM})
Syndrome = defs.Syndrome
NackReason = defs.NackReason
RETRYABLE_NACKS = frozenset(set(NackReason) - {NackReason.NONE, NackReason.UNEXP_EVENT})
TRIM_NACKS = frozenset({NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP})
AckFlag = defs.AckFlag
Dscp = defs.Dscp
TRIMMABLE_DSCPS = frozenset({Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX})
TRIMMED_DSCPS = frozenset({Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP})
Ecn = defs.Ecn


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial arithmetic, in [-2^23, 2^23) (MRC_PSN_DIFF)."""
    d = (a - b) & PSN_MASK
    return d - (1 << PSN_BITS) if d >= 1 << (PSN_BITS - 1) else d


def payload_max(mtu: int = MTU) -> int:
    """Payload bytes per data packet that fit an IP MTU whatever the opcode (MRC_PAYLOAD_MAX)."""
    return mtu - WRITE_IMM_OVERHEAD
