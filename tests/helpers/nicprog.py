"""The NIC program loaded for a test module, and helpers its golden tests share."""

from __future__ import annotations

import contextlib

from scapy.packet import Packet

from mrc_nic import nic
from tests.helpers.env import require_root_and_bcc


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


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in after.items() if v != before[k]}


def patched(pkt: Packet, offset: int, value: bytes) -> bytes:
    raw = bytearray(bytes(pkt))
    raw[offset : offset + len(value)] = value
    return bytes(raw)
