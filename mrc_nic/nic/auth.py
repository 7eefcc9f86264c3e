"""The optional per-packet MAC (bpf/nic_auth.h; docs/nic-program.md, "Per-packet
authentication"): SipHash-2-4 with a QP pair's 16-byte key over five 64-bit words
of header fields, folded to 32 bits and carried in the ICRC slot.

The same words as the BPF side, for the control plane (new keys) and for tests
that build MAC'd packets; `siphash24` is checked against the reference vectors.
"""

from __future__ import annotations

import os
import struct

from mrc_nic.nic import wireconst as wire

KEY_LEN = 16
_M64 = (1 << 64) - 1


def new_key() -> bytes:
    """A fresh connection key (both ends' QPs get the same one)."""
    return os.urandom(KEY_LEN)


def key_words(key: bytes) -> tuple[int, int]:
    """The key as BPF holds it (auth_key[0], auth_key[1]): two little-endian words."""
    if len(key) != KEY_LEN:
        raise ValueError(f"an auth key is {KEY_LEN} bytes, not {len(key)}")
    return struct.unpack("<QQ", key)


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M64


def _round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & _M64
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & _M64
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & _M64
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & _M64
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash24(key: bytes, msg: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein) of msg: a 64-bit integer."""
    k0, k1 = key_words(key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261]
    v.append(k1 ^ 0x7465646279746573)
    tail = len(msg) % 8
    blocks = [int.from_bytes(msg[i : i + 8], "little") for i in range(0, len(msg) - tail, 8)]
    blocks.append(int.from_bytes(msg[len(msg) - tail :], "little") | (len(msg) & 0xFF) << 56)
    for m in blocks:
        v[3] ^= m
        v = list(_round(*_round(*v)))
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(4):
        v = list(_round(*v))
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def _mac(key: bytes, words: list[int]) -> int:
    h = siphash24(key, struct.pack("<5Q", *words))
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def _bth_word(opcode: int, qpn: int, psn: int) -> int:
    return opcode << 56 | (qpn & wire.QPN_MASK) << 24 | (psn & wire.PSN_MASK)


def data_mac(
    key: bytes,
    *,
    opcode: int,
    qpn: int,
    psn: int,
    va: int,
    rkey: int,
    dmalen: int,
    last: bool,
    msn: int,
    msg_off: int,
    imm: int = 0,
) -> int:
    """The MAC of a data packet (bpf/nic_auth.h data_mac): the ICRC slot's value."""
    flags_msn = (wire.DATA_F_LAST if last else 0) | msn
    words = [_bth_word(opcode, qpn, psn), va, rkey << 32 | dmalen, flags_msn << 32 | msg_off, imm]
    return _mac(key, words)


def ack_mac(
    key: bytes,
    *,
    qpn: int,
    psn: int,
    cum_psn: int,
    sack_psn: int,
    sack_bitmap: int,
    syndrome: int,
    reason: int,
    flags: int,
    echo_ev: int,
    port_bitmap: int,
) -> int:
    """The MAC of a SACK or NACK (bpf/nic_auth.h ack_mac): the ICRC slot's value."""
    words = [
        _bth_word(wire.Opcode.ACK, qpn, psn),
        cum_psn << 32 | sack_psn,
        sack_bitmap,
        syndrome << 56 | reason << 48 | flags << 40 | echo_ev << 24,
        port_bitmap,
    ]
    return _mac(key, words)


def probe_mac(
    key: bytes,
    *,
    opcode: int,
    qpn: int,
    psn: int,
    tx_ts: int,
    ev: int,
    flags: int,
    port_bitmap: int,
) -> int:
    """The MAC of a PROBE or PROBE_REPLY (bpf/nic_auth.h probe_mac): the ICRC slot's value."""
    words = [
        _bth_word(opcode, qpn, psn),
        tx_ts,
        (ev & 0xFFFF) << 48 | (flags & 0xFF) << 40 | port_bitmap,
        0,
        0,
    ]
    return _mac(key, words)
