"""The per-packet MAC's reference (mrc_nic.nic.auth): SipHash-2-4 against the
vectors of the SipHash paper and reference code (key 00..0f, message 00..n-1)."""

from __future__ import annotations

import pytest

from mrc_nic.nic import auth

KEY = bytes(range(16))


@pytest.mark.parametrize(
    "n, expected",
    [(0, 0x726FDB47DD0E0E31), (15, 0xA129CA6149BE45E5)],
    ids=["empty", "15 bytes (the paper's example)"],
)
def test_siphash24_reference_vectors(n, expected):
    assert auth.siphash24(KEY, bytes(range(n))) == expected


def test_a_key_is_16_bytes():
    assert len(auth.new_key()) == 16 and auth.new_key() != auth.new_key()
    with pytest.raises(ValueError, match="16 bytes"):
        auth.key_words(bytes(8))


def test_every_field_the_receiver_acts_on_changes_the_mac():
    base = dict(opcode=0x0A, qpn=5, psn=7, va=1 << 20, rkey=9, dmalen=1024, last=True)
    base |= dict(msn=3, msg_off=0, imm=0)
    mac = auth.data_mac(KEY, **base)
    for field in base:
        changed = base | {field: not base[field] if field == "last" else base[field] + 1}
        assert auth.data_mac(KEY, **changed) != mac, field
    assert auth.data_mac(bytes(16), **base) != mac


def test_every_field_of_a_probe_changes_its_mac():
    base = dict(opcode=0xD8, qpn=5, psn=7, tx_ts=1 << 40, ev=0xC001, flags=0x80, port_bitmap=0b1011)
    mac = auth.probe_mac(KEY, **base)
    for field in base:
        assert auth.probe_mac(KEY, **(base | {field: base[field] + 1})) != mac, field
    assert auth.probe_mac(bytes(16), **base) != mac
